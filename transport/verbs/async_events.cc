#include "transport/verbs/async_events.h"

#include <fcntl.h>
#include <infiniband/verbs.h>

#include <algorithm>

#include "common/log.h"

namespace lt::transport::verbs {

AsyncEvents::AsyncEvents(ibv_context* ctx, std::string device)
    : ctx_(ctx), device_(std::move(device)) {
  const int fl = fcntl(ctx_->async_fd, F_GETFL);
  if (fl < 0 || fcntl(ctx_->async_fd, F_SETFL, fl | O_NONBLOCK) != 0) {
    LT_WARN("rdma: %s: its event fd cannot be made non-blocking; device events go unread",
            device_.c_str());
    ctx_ = nullptr;
  }
}

void AsyncEvents::watch(const void* object, std::atomic<bool>* fired) {
  std::lock_guard<std::mutex> g(mu_);
  watched_.emplace_back(object, fired);
}

void AsyncEvents::unwatch(const void* object) {
  std::lock_guard<std::mutex> g(mu_);
  std::erase_if(watched_, [&](const auto& w) { return w.first == object; });
}

void AsyncEvents::fire(const void* object) {
  for (auto& [o, fired] : watched_) {
    if (o == object) fired->store(true, std::memory_order_release);
  }
}

int AsyncEvents::read() {
  if (ctx_ == nullptr) return 0;
  std::unique_lock<std::mutex> g(mu_, std::try_to_lock);
  if (!g.owns_lock()) return 0;
  int n = 0;
  ibv_async_event e;
  while (ibv_get_async_event(ctx_, &e) == 0) {
    ++n;
    const char* what = ibv_event_type_str(e.event_type);
    switch (e.event_type) {
      case IBV_EVENT_SRQ_LIMIT_REACHED:
        fire(e.element.srq);
        break;
      case IBV_EVENT_PORT_ACTIVE:
        LT_INFO("rdma: %s port %d is active again (%s)", device_.c_str(), e.element.port_num, what);
        break;
      case IBV_EVENT_PORT_ERR:
      case IBV_EVENT_GID_CHANGE:
      case IBV_EVENT_LID_CHANGE:
      case IBV_EVENT_PKEY_CHANGE:
      case IBV_EVENT_SM_CHANGE:
      case IBV_EVENT_CLIENT_REREGISTER:
        LT_WARN("rdma: %s port %d: %s (peers on it fail over or are declared down)",
                device_.c_str(), e.element.port_num, what);
        break;
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_PATH_MIG_ERR:
        LT_WARN(
            "rdma: %s: QP %u: %s (its work requests fail; an rc connection is made again, ud's "
            "QP is reset and its datagrams sent again)",
            device_.c_str(), e.element.qp->qp_num, what);
        fire(e.element.qp);
        break;
      case IBV_EVENT_CQ_ERR:
      case IBV_EVENT_SRQ_ERR:
        LT_ERROR("rdma: %s: %s (a completion or receive queue overran; operations on it fail)",
                 device_.c_str(), what);
        break;
      case IBV_EVENT_DEVICE_FATAL:
        LT_ERROR(
            "rdma: %s: %s: the device failed, and every operation through it fails "
            "(verbs.device picks another; LTIER_TRANSPORTS can leave rdma out)",
            device_.c_str(), what);
        break;
      default:  // communication established, last WQE reached, SQ drained, path migrated
        LT_DEBUG("rdma: %s: %s", device_.c_str(), what);
        break;
    }
    ibv_ack_async_event(&e);
  }
  count_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
  return n;
}

}  // namespace lt::transport::verbs
