#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "proto/rpc/registry.h"

namespace lt::proto {
namespace {

RpcHandler echo() {
  return [](NodeId, std::span<const std::byte> in, std::span<std::byte> out, size_t* n) {
    *n = std::min(in.size(), out.size());
    std::copy_n(in.begin(), *n, out.begin());
    return Status::ok();
  };
}

TEST(RpcRegistry, HandlersAreFoundWithAndWithoutALock) {
  RpcRegistry r;
  ASSERT_TRUE(r.add_handler(7, echo()).is_ok());
  ASSERT_TRUE(r.add_handler(0x1234, echo()).is_ok());
  EXPECT_NE(r.fast(7), nullptr);
  EXPECT_NE(r.fast(0x1234), nullptr);
  EXPECT_EQ(r.fast(8), nullptr);
  EXPECT_EQ(r.fast(0x1235), nullptr);
  EXPECT_EQ(r.fast(0x10000), nullptr) << "ids travel in 16 bits";
  auto h = r.handler(7);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h.get(), r.fast(7)) << "one handler object behind both lookups";
  EXPECT_EQ(r.queue(7), nullptr);
}

TEST(RpcRegistry, OneRegistrationPerIdAndBadArgumentsRefused) {
  RpcRegistry r;
  ASSERT_TRUE(r.add_handler(1, echo()).is_ok());
  EXPECT_EQ(r.add_handler(1, echo()).code(), Code::kExists);
  EXPECT_EQ(r.add_queue(1).code(), Code::kExists);
  ASSERT_TRUE(r.add_queue(2).is_ok());
  EXPECT_EQ(r.add_handler(2, echo()).code(), Code::kExists);
  EXPECT_EQ(r.add_queue(2).code(), Code::kExists);
  EXPECT_EQ(r.add_handler(kMaxRpcFunc + 1, echo()).code(), Code::kInvalidArg);
  EXPECT_EQ(r.add_queue(kMaxRpcFunc + 1).code(), Code::kInvalidArg);
  EXPECT_EQ(r.add_handler(3, RpcHandler()).code(), Code::kInvalidArg);
}

TEST(RpcRegistry, QueuesAreStableAndDistinct) {
  RpcRegistry r;
  ASSERT_TRUE(r.add_queue(10).is_ok());
  RpcQueue* q = r.queue(10);
  ASSERT_NE(q, nullptr);
  for (uint32_t f = 11; f < 300; ++f) ASSERT_TRUE(r.add_queue(f).is_ok());
  EXPECT_EQ(r.queue(10), q) << "never moved or erased";
  EXPECT_NE(r.queue(11), q);
  EXPECT_EQ(r.fast(10), nullptr) << "a queue is not a handler";
  EXPECT_EQ(r.handler(10), nullptr);
}

TEST(ReplyTokens, ATokenAnswersOnce) {
  ReplyTokens t;
  uint64_t a = t.add({3, 100});
  uint64_t b = t.add({4, 200});
  EXPECT_NE(a, b);
  ReplyTokens::Caller c;
  ASSERT_TRUE(t.take(b, &c));
  EXPECT_EQ(c.src, 4u);
  EXPECT_EQ(c.caller_req, 200u);
  EXPECT_FALSE(t.take(b, &c)) << "already answered";
  EXPECT_FALSE(t.take(12345, &c)) << "never handed out";
  ASSERT_TRUE(t.take(a, &c));
  EXPECT_EQ(c.src, 3u);
}

// Tokens stay right while answered calls' map nodes are reused: each token
// names its own caller once, whatever the order of the answers.
TEST(ReplyTokens, ReusedNodesKeepTokensApart) {
  ReplyTokens t;
  std::vector<std::pair<uint64_t, uint64_t>> live;  // token, its caller's request
  uint64_t next_req = 0, seen = 0;
  auto answer = [&](size_t pick) {
    ReplyTokens::Caller c;
    ASSERT_TRUE(t.take(live[pick].first, &c));
    EXPECT_EQ(c.caller_req, live[pick].second);
    EXPECT_FALSE(t.take(live[pick].first, &c)) << "answered twice";
    live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick));
    ++seen;
  };
  for (int round = 0; round < 300; ++round) {
    for (int k = 0; k < 3; ++k) {
      live.emplace_back(t.add({static_cast<NodeId>(k + 1), next_req}), next_req);
      ++next_req;
    }
    answer(live.size() / 2);  // out of order: the middle one, then the oldest
    answer(0);
  }
  while (!live.empty()) answer(0);
  EXPECT_EQ(seen, next_req);
}

TEST(RpcRegistry, DropWaitingFromRemovesOnlyThatCallersRequests) {
  RpcRegistry r;
  ASSERT_TRUE(r.add_queue(1).is_ok());
  ASSERT_TRUE(r.add_queue(2).is_ok());
  for (uint32_t f : {1u, 2u}) {
    RpcQueue* q = r.queue(f);
    std::lock_guard<std::mutex> g(q->mu);
    q->keep({7, 100, {}});
    q->keep({8, 101, {}});
    q->keep({7, 102, {}});
  }
  EXPECT_EQ(r.drop_waiting_from(7), 4u);
  for (uint32_t f : {1u, 2u}) {
    RpcQueue* q = r.queue(f);
    EXPECT_TRUE(q->may_have_waiting());
    std::lock_guard<std::mutex> g(q->mu);
    ASSERT_TRUE(q->has_waiting());
    EXPECT_EQ(q->take().caller_req, 101u);
    EXPECT_FALSE(q->has_waiting());
    EXPECT_FALSE(q->may_have_waiting());  // what a receive reads without the lock
  }
}

// Queued requests keep their bytes whole, small (inline) and large.
TEST(RpcRegistry, QueuedRequestsKeepTheirBytes) {
  RpcRegistry r;
  ASSERT_TRUE(r.add_queue(3).is_ok());
  RpcQueue* q = r.queue(3);
  std::lock_guard<std::mutex> g(q->mu);
  std::vector<std::byte> small(5, std::byte{1}), large(5000, std::byte{2});
  QueuedRpc a, b;
  a.data.assign(small);
  b.data.assign(large);
  q->keep(std::move(a));
  q->keep(std::move(b));
  QueuedRpc x = q->take(), y = q->take();
  EXPECT_TRUE(std::ranges::equal(x.data.view(), small));
  EXPECT_TRUE(std::ranges::equal(y.data.view(), large));
}

}  // namespace
}  // namespace lt::proto
