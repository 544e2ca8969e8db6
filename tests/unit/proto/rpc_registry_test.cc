#include <gtest/gtest.h>

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

TEST(RpcRegistry, DropWaitingFromRemovesOnlyThatCallersRequests) {
  RpcRegistry r;
  ASSERT_TRUE(r.add_queue(1).is_ok());
  ASSERT_TRUE(r.add_queue(2).is_ok());
  for (uint32_t f : {1u, 2u}) {
    RpcQueue* q = r.queue(f);
    q->waiting.push_back({7, 100, {}});
    q->waiting.push_back({8, 101, {}});
    q->waiting.push_back({7, 102, {}});
  }
  EXPECT_EQ(r.drop_waiting_from(7), 4u);
  for (uint32_t f : {1u, 2u}) {
    ASSERT_EQ(r.queue(f)->waiting.size(), 1u);
    EXPECT_EQ(r.queue(f)->waiting.front().caller_req, 101u);
  }
}

}  // namespace
}  // namespace lt::proto
