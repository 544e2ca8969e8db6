// Two RC QPs of one Soft-RoCE device connected to each other, for the
// device-level tests that run inside the rxe guest.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "transport/verbs/rc_qp.h"

namespace lt::transport::verbs {

struct QpPair {
  std::unique_ptr<VerbsDevice> dev;
  std::unique_ptr<RcQp> a, b;
};

/// Opens the device ltier would choose (a send CQ of `cq_entries`; an SRQ of
/// `srq_depth` that both QPs take their receives from, when above 0) and
/// connects two QPs on it to each other.
inline ::testing::AssertionResult open_qp_pair(uint32_t cq_entries, uint32_t srq_depth,
                                               QpPair* out) {
  std::string why;
  std::vector<DeviceInfo> devs = list_devices(&why);
  Result<Choice> c = choose(devs, VerbsConfig{}, &why);
  if (!c.is_ok()) return ::testing::AssertionFailure() << why;
  auto d = VerbsDevice::open(*c, cq_entries, &why, srq_depth);
  if (!d.is_ok()) return ::testing::AssertionFailure() << why;
  out->dev = std::move(*d);
  auto qa = RcQp::create(*out->dev, RcOptions{}, &why);
  auto qb = qa.is_ok() ? RcQp::create(*out->dev, RcOptions{}, &why) : qa.status();
  if (!qb.is_ok()) return ::testing::AssertionFailure() << why;
  out->a = std::move(*qa);
  out->b = std::move(*qb);
  if (!out->a->connect(out->b->local(), &why).is_ok() ||
      !out->b->connect(out->a->local(), &why).is_ok()) {
    return ::testing::AssertionFailure() << why;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace lt::transport::verbs
