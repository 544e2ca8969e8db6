// A device's asynchronous events on a real Soft-RoCE device, run inside the
// rxe guest: a shared receive queue's limit event reaches the flag that
// watches it once, and only once, the device has taken enough receives to
// fall below the limit (ud's receiver signal rests on it).
#include "transport/verbs/async_events.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <thread>
#include <vector>

#include "qp_pair.h"

namespace lt::transport::verbs {
namespace {

constexpr uint32_t kDepth = 16;
constexpr uint32_t kLimit = 12;

class SrqLimit : public ::testing::Test {
 protected:
  void SetUp() override {
    QpPair p;
    ASSERT_TRUE(open_qp_pair(256, kDepth, &p));
    dev_ = std::move(p.dev);
    qa_ = std::move(p.a);
    qb_ = std::move(p.b);
    std::string why;
    mem_.assign(4096, 0);
    auto r = Region::make(*dev_, mem_.data(), mem_.size(), &why);
    ASSERT_TRUE(r.is_ok()) << why;
    region_ = std::move(*r);
    for (uint32_t i = 0; i < kDepth; ++i) {
      ibv_sge sge{region_->addr() + 2048 + 64 * i, 64, region_->lkey()};
      ibv_recv_wr wr{};
      wr.wr_id = 100 + i;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      ASSERT_EQ(ibv_post_srq_recv(dev_->srq(), &wr, &bad), 0);
    }
    ibv_srq_attr a{};
    a.srq_limit = kLimit;
    ASSERT_EQ(ibv_modify_srq(dev_->srq(), &a, IBV_SRQ_LIMIT), 0);
    dev_->events().watch_srq(dev_->srq(), &fired_);
  }
  void TearDown() override {
    if (dev_) dev_->events().unwatch(dev_->srq());
  }

  // `n` SENDs from qa to qb (each takes one of the SRQ's receives), waited
  // for on both sides.
  void send(int n) {
    for (int i = 0; i < n; ++i) {
      ibv_sge sge{region_->addr(), 8, region_->lkey()};
      ibv_send_wr wr{};
      wr.wr_id = 1;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = IBV_WR_SEND;
      wr.send_flags = IBV_SEND_SIGNALED;
      ibv_send_wr* bad = nullptr;
      ASSERT_EQ(ibv_post_send(qa_->raw(), &wr, &bad), 0);
      int sent = 0, got = 0;
      const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while ((sent == 0 || got == 0) && std::chrono::steady_clock::now() < end) {
        ibv_wc wc;
        if (ibv_poll_cq(dev_->cq(), 1, &wc) == 1) {
          ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
          ++sent;
        }
        if (ibv_poll_cq(dev_->recv_cq(), 1, &wc) == 1) {
          ASSERT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
          ++got;
        }
      }
      ASSERT_EQ(sent, 1);
      ASSERT_EQ(got, 1);
    }
  }

  // Reads events for up to `ms` or until the flag is set.
  bool fired_within(int ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    do {
      dev_->events().read();
      if (fired_.load()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    } while (std::chrono::steady_clock::now() < end);
    return false;
  }

  std::unique_ptr<VerbsDevice> dev_;
  std::vector<unsigned char> mem_;
  std::unique_ptr<Region> region_;
  std::unique_ptr<RcQp> qa_, qb_;
  std::atomic<bool> fired_{false};
};

TEST_F(SrqLimit, FiresOnlyOnceTheDeviceHasTakenReceivesBelowTheLimit) {
  send(static_cast<int>(kDepth - kLimit));  // 12 posted: not below the limit yet
  EXPECT_FALSE(fired_within(200));
  send(2);  // 10 posted
  EXPECT_TRUE(fired_within(5000)) << "no SRQ limit event";
  EXPECT_GE(dev_->events().count(), 1u);
  // The device turned the limit off when it fired: no second event.
  fired_.store(false);
  send(2);
  EXPECT_FALSE(fired_within(200));
}

}  // namespace
}  // namespace lt::transport::verbs
