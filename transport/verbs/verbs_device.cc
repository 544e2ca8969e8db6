#include "transport/verbs/verbs_device.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>

#include <cerrno>
#include <cstring>

#include "transport/share.h"

namespace lt::transport::verbs {

namespace {

std::string where(const Choice& c) {
  return c.device + " port " + std::to_string(c.port) + " GID index " +
         std::to_string(c.gid.index) + " (" + c.gid.text + ", MTU " + std::to_string(c.mtu) + ")";
}

}  // namespace

Result<std::shared_ptr<VerbsContext>> VerbsContext::open(const std::string& device,
                                                         std::string* why) {
  std::shared_ptr<VerbsContext> c(new VerbsContext());
  c->device_ = device;
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  for (int i = 0; list != nullptr && i < n && c->ctx_ == nullptr; ++i) {
    if (device == ibv_get_device_name(list[i])) c->ctx_ = ibv_open_device(list[i]);
  }
  if (list != nullptr) ibv_free_device_list(list);
  if (c->ctx_ == nullptr) {
    *why = "cannot open " + device + ": " + std::strerror(errno) +
           " (verbs.device, LTIER_VERBS_DEVICE; ltier-info --devices lists them)";
    return Code::kNotFound;
  }
  c->pd_ = ibv_alloc_pd(c->ctx_);
  if (c->pd_ == nullptr) {
    *why = "cannot make a protection domain on " + device + ": " + std::strerror(errno);
    return Code::kNoMemory;
  }
  c->events_ = std::make_unique<AsyncEvents>(c->ctx_, device);
  ibv_device_attr da{};
  if (ibv_query_device(c->ctx_, &da) == 0) {
    c->max_cqe_ = static_cast<uint32_t>(da.max_cqe);
    c->atomics_global_ = da.atomic_cap == IBV_ATOMIC_GLOB;
  }
  return c;
}

Result<std::shared_ptr<VerbsContext>> VerbsContext::take(TransportShare* share,
                                                         const std::string& device,
                                                         std::string* why) {
  if (share == nullptr) return open(device, why);
  std::shared_ptr<VerbsContext>& held = share->held().verbs;
  if (held != nullptr && held->device() == device) return held;
  auto c = open(device, why);
  if (c) held = *c;
  return c;
}

VerbsContext::~VerbsContext() {
  if (pd_ != nullptr) ibv_dealloc_pd(pd_);
  if (ctx_ != nullptr) ibv_close_device(ctx_);
}

Result<std::unique_ptr<VerbsDevice>> VerbsDevice::open(const Choice& choice, uint32_t cq_entries,
                                                       std::string* why, uint32_t srq_depth,
                                                       TransportShare* share) {
  auto ctx = VerbsContext::take(share, choice.device, why);
  if (!ctx) return ctx.status();
  std::unique_ptr<VerbsDevice> d(new VerbsDevice());
  d->choice_ = choice;
  d->ctx_ = std::move(*ctx);
  ibv_context* const cx = d->ctx_->context();
  ibv_gid gid;
  ibv_port_attr pa{};
  if (ibv_query_gid(cx, static_cast<uint8_t>(choice.port), static_cast<int>(choice.gid.index),
                    &gid) != 0 ||
      ibv_query_port(cx, static_cast<uint8_t>(choice.port), &pa) != 0) {
    *why = "cannot query " + where(choice) + ": " + std::strerror(errno) +
           " (verbs.port, verbs.gid_index)";
    return Code::kInvalidArg;
  }
  std::memcpy(d->gid_.data(), gid.raw, 16);
  d->lid_ = pa.lid;
  d->channel_ = ibv_create_comp_channel(cx);
  d->cq_ = d->channel_ != nullptr
               ? ibv_create_cq(cx, static_cast<int>(cq_entries), nullptr, d->channel_, 0)
               : nullptr;
  if (d->cq_ == nullptr) {
    *why = "cannot make a completion channel and a CQ of " + std::to_string(cq_entries) +
           " entries on " + where(choice) + ": " + std::strerror(errno);
    return Code::kNoMemory;
  }
  if (srq_depth > 0) {
    d->recv_cq_ = ibv_create_cq(cx, static_cast<int>(srq_depth), nullptr, d->channel_, 0);
    ibv_srq_init_attr sa{};
    sa.attr.max_wr = srq_depth;
    sa.attr.max_sge = 1;
    d->srq_ = d->recv_cq_ != nullptr ? ibv_create_srq(d->ctx_->pd(), &sa) : nullptr;
    if (d->srq_ == nullptr) {
      *why = "cannot make a shared receive queue of " + std::to_string(srq_depth) + " on " +
             where(choice) + ": " + std::strerror(errno) + " (verbs.recv_buffers)";
      return Code::kNoMemory;
    }
  }
  int fl = fcntl(d->channel_->fd, F_GETFL);
  fcntl(d->channel_->fd, F_SETFL, fl | O_NONBLOCK);
  return d;
}

uint32_t VerbsDevice::cq_entries() const { return static_cast<uint32_t>(cq_->cqe); }

Status VerbsDevice::grow_cq(uint32_t entries, std::string* why) {
  if (entries <= cq_entries()) return Status::ok();
  if (max_cqe() != 0 && entries > max_cqe()) {
    *why = "the send CQ cannot grow to " + std::to_string(entries) + " entries on " +
           where(choice_) + ": the device allows " + std::to_string(max_cqe());
    return Code::kNoMemory;
  }
  if (int rc = ibv_resize_cq(cq_, static_cast<int>(entries)); rc != 0) {
    *why = "ibv_resize_cq to " + std::to_string(entries) + " entries on " + where(choice_) + ": " +
           std::strerror(rc);
    return Code::kUnsupported;
  }
  return Status::ok();
}

VerbsDevice::~VerbsDevice() {
  if (srq_ != nullptr) ibv_destroy_srq(srq_);
  if (recv_cq_ != nullptr) ibv_destroy_cq(recv_cq_);
  if (cq_ != nullptr) ibv_destroy_cq(cq_);
  if (channel_ != nullptr) ibv_destroy_comp_channel(channel_);
}

int VerbsDevice::poll(WorkCompletion* out, int max) {
  ibv_wc wc[16];
  int n = ibv_poll_cq(cq_, std::min(max, 16), wc);
  for (int i = 0; i < n; ++i) {
    out[i].wr_id = wc[i].wr_id;
    out[i].ok = wc[i].status == IBV_WC_SUCCESS;
    out[i].error = out[i].ok ? std::string() : ibv_wc_status_str(wc[i].status);
    out[i].bytes = wc[i].byte_len;
  }
  return n;
}

bool VerbsDevice::arm() {
  bool ok = ibv_req_notify_cq(cq_, 0) == 0;
  if (recv_cq_ != nullptr) ok = ibv_req_notify_cq(recv_cq_, 0) == 0 && ok;
  return ok;
}

bool VerbsDevice::arm_recv() { return ibv_req_notify_cq(recv_cq(), 0) == 0; }

bool VerbsDevice::arm_send() { return ibv_req_notify_cq(cq_, 0) == 0; }

int VerbsDevice::channel_fd() const { return channel_->fd; }

bool VerbsDevice::drain_events(bool* send_fired) {
  bool any = false;
  ibv_cq* cq;
  void* ctx;
  while (ibv_get_cq_event(channel_, &cq, &ctx) == 0) {
    ibv_ack_cq_events(cq, 1);
    if (send_fired != nullptr && cq == cq_) *send_fired = true;
    any = true;
  }
  return any;
}

bool VerbsDevice::block(int timeout_ms) {
  pollfd p{channel_->fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return false;
  return drain_events();
}

Result<std::unique_ptr<Region>> Region::make_with(VerbsDevice& dev, void* addr, size_t len,
                                                  int access, std::string* why) {
  std::unique_ptr<Region> r(new Region());
  r->mr_ = ibv_reg_mr(dev.pd(), addr, len, access);
  if (r->mr_ == nullptr) {
    *why = "ibv_reg_mr of " + std::to_string(len) + " bytes on " + dev.choice().device + ": " +
           std::strerror(errno) + " (locked-memory limit? ulimit -l)";
    return Code::kNoMemory;
  }
  r->addr_ = addr;
  r->len_ = len;
  return r;
}

Result<std::unique_ptr<Region>> Region::make(VerbsDevice& dev, void* addr, size_t len,
                                             std::string* why) {
  return make_with(dev, addr, len,
                   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                       IBV_ACCESS_REMOTE_ATOMIC,
                   why);
}

Result<std::unique_ptr<Region>> Region::make_local(VerbsDevice& dev, void* addr, size_t len,
                                                   std::string* why) {
  return make_with(dev, addr, len, IBV_ACCESS_LOCAL_WRITE, why);
}

Region::~Region() {
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
}

uint32_t Region::lkey() const { return mr_->lkey; }
uint32_t Region::rkey() const { return mr_->rkey; }

}  // namespace lt::transport::verbs
