#include "transport/verbs/onesided_cq.h"

#include <infiniband/verbs.h>

#include <cerrno>
#include <cstring>

#include "transport/verbs/verbs_device.h"

namespace lt::transport::verbs {

// Posts count themselves under their own channel's lock, not one lock for
// the CQ, so several may pass room() at once; each posts two requests at
// most, and half the CQ is kept for them.
Result<std::unique_ptr<OneSidedCq>> OneSidedCq::create(VerbsDevice& dev, uint32_t entries,
                                                       std::string* why) {
  std::unique_ptr<OneSidedCq> q(new OneSidedCq());
  q->cq_ = ibv_create_cq(dev.context(), static_cast<int>(entries), nullptr, nullptr, 0);
  if (q->cq_ == nullptr) {
    *why = "cannot make a CQ of " + std::to_string(entries) + " entries for one-sided ops on " +
           dev.choice().device + ": " + std::strerror(errno);
    return Code::kNoResource;
  }
  const uint32_t got = static_cast<uint32_t>(q->cq_->cqe);
  q->limit_ = got / 2 != 0 ? got / 2 : 1;
  return q;
}

OneSidedCq::~OneSidedCq() {
  if (cq_ != nullptr) ibv_destroy_cq(cq_);
}

}  // namespace lt::transport::verbs
