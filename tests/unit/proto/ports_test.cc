#include "proto/msg/ports.h"

#include <gtest/gtest.h>

#include <memory>

#include "proto/msg/fifo.h"
#include "proto/request_table.h"

namespace lt::proto {
namespace {

struct Posted {
  RequestTable reqs{256};
  PostedRecv post(Port& p) {
    ReqId id = 0;
    Request* r = *reqs.claim(ReqKind::kRecv, 0, &id);
    p.posted.push_back({id, r});
    return {id, r};
  }
};

TEST(PortTable, PortsAreMadeOnFirstUseAndKeptApart) {
  PortTable t;
  std::lock_guard<SpinLock> g(t.mutex());
  Port& a = t.get_locked(1);
  a.unexpected.push_back({});
  Port& b = t.get_locked(2);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(&t.get_locked(1), &a);
  EXPECT_EQ(t.get_locked(1).unexpected.size(), 1u);
  EXPECT_EQ(t.size_locked(), 2u);
}

TEST(PortTable, PostedReceivesAreClaimedFifoSkippingCancelledOnes) {
  PortTable t;
  Posted p;
  std::lock_guard<SpinLock> g(t.mutex());
  Port& port = t.get_locked(9);
  PostedRecv a = p.post(port), b = p.post(port), c = p.post(port);
  ASSERT_TRUE(b.r->move(req_gen(b.id), kStPending, kStCancelled));
  Request* got = nullptr;
  ASSERT_TRUE(claim_posted(port.posted, &got));
  EXPECT_EQ(got, a.r);
  EXPECT_EQ(got->state(), kStClaimed);
  ASSERT_TRUE(claim_posted(port.posted, &got));
  EXPECT_EQ(got, c.r) << "the cancelled receive is skipped and dropped";
  EXPECT_FALSE(claim_posted(port.posted, &got));
  EXPECT_TRUE(port.posted.empty());
}

TEST(PortTable, UnpostRemovesOnlyThatReceive) {
  PortTable t;
  Posted p;
  PostedRecv a, b, c;
  {
    std::lock_guard<SpinLock> g(t.mutex());
    Port& port = t.get_locked(4);
    a = p.post(port);
    b = p.post(port);
    c = p.post(port);
  }
  t.unpost(4, b.id);
  t.unpost(4, b.id);  // already gone: nothing happens
  t.unpost(5, a.id);  // another port: nothing happens
  std::lock_guard<SpinLock> g(t.mutex());
  auto& q = t.get_locked(4).posted;
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].id, a.id);
  EXPECT_EQ(q[1].id, c.id);
}

TEST(PortTable, EmptyPortsAreSweptWhenManyExist) {
  PortTable t(8);
  std::lock_guard<SpinLock> g(t.mutex());
  t.get_locked(1000).unexpected.push_back({});  // holds a message: kept
  for (uint32_t i = 0; i < 7; ++i) t.get_locked(i);
  EXPECT_EQ(t.size_locked(), 8u);
  t.get_locked(500);  // the ninth: the empty ones go first
  EXPECT_EQ(t.size_locked(), 2u);
  EXPECT_EQ(t.get_locked(1000).unexpected.size(), 1u);
  // The mark doubles past what is left, but never below the first one.
  for (uint32_t i = 0; i < 6; ++i) t.get_locked(i);
  EXPECT_EQ(t.size_locked(), 8u);
}

TEST(PortTable, DropFromRemovesOnlyThatSendersMessages) {
  PortTable t;
  {
    std::lock_guard<SpinLock> g(t.mutex());
    for (uint32_t port : {1u, 2u, 3u}) {
      for (NodeId src : {5u, 6u, 5u}) {
        Unexpected u;
        u.src = src;
        u.len = port;
        t.keep_locked(t.get_locked(port), std::move(u));
      }
    }
  }
  EXPECT_EQ(t.drop_from(5), 6u);
  EXPECT_EQ(t.drop_from(5), 0u);
  EXPECT_TRUE(t.any_waiting());  // node 6's three
  std::lock_guard<SpinLock> g(t.mutex());
  for (uint32_t port : {1u, 2u, 3u}) {
    auto& q = t.get_locked(port).unexpected;
    ASSERT_EQ(q.size(), 1u);
    EXPECT_EQ(q.front().src, 6u);
  }
}

// any_waiting() follows what the stores hold, over all ports, without the
// lock: it is what lets a receive skip the lock when nothing waits.
TEST(PortTable, AnyWaitingCountsKeptAndTakenMessages) {
  PortTable t;
  EXPECT_FALSE(t.any_waiting());
  std::lock_guard<SpinLock> g(t.mutex());
  t.keep_locked(t.get_locked(1), Unexpected{});
  t.keep_locked(t.get_locked(2), Unexpected{});
  EXPECT_TRUE(t.any_waiting());
  (void)t.take_locked(t.get_locked(1));
  EXPECT_TRUE(t.any_waiting());
  (void)t.take_locked(t.get_locked(2));
  EXPECT_FALSE(t.any_waiting());
}

// A message's bytes survive the moves of the store, inline and on the heap.
TEST(MsgBytes, SmallInlineLargeOnTheHeapBothMoveWhole) {
  for (size_t n : {size_t{0}, size_t{1}, MsgBytes::kInline, MsgBytes::kInline + 1, size_t{70000}}) {
    std::vector<std::byte> src(n);
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<std::byte>(i * 7 + n);
    PortTable t;
    std::lock_guard<SpinLock> g(t.mutex());
    Unexpected u;
    u.data.assign(src);
    for (int i = 0; i < 40; ++i) t.keep_locked(t.get_locked(3), Unexpected{});  // the deque grows
    Port& p = t.get_locked(4);
    t.keep_locked(p, std::move(u));
    Unexpected back = t.take_locked(p);
    auto v = back.data.view();
    ASSERT_EQ(v.size(), n);
    EXPECT_TRUE(std::equal(v.begin(), v.end(), src.begin())) << n;
  }
}

// The FIFO keeps order across wrap-around and growth, and erase_if keeps
// the order of what it leaves.
TEST(Fifo, OrderThroughWrapGrowthAndErase) {
  Fifo<std::unique_ptr<int>> q;
  int next_in = 0, next_out = 0;
  for (int round = 0; round < 50; ++round) {  // the live window moves around the ring
    for (int i = 0; i < round % 7 + 3; ++i) q.push_back(std::make_unique<int>(next_in++));
    for (int i = 0; i < round % 5 + 1 && !q.empty(); ++i) {
      ASSERT_EQ(*q.front(), next_out++);
      q.pop_front();
    }
  }
  ASSERT_EQ(q.size(), static_cast<size_t>(next_in - next_out));
  const size_t odd = q.erase_if([](const std::unique_ptr<int>& v) { return *v % 2 != 0; });
  EXPECT_EQ(odd + q.size(), static_cast<size_t>(next_in - next_out));
  int last = -1;
  while (!q.empty()) {
    EXPECT_EQ(*q.front() % 2, 0);
    EXPECT_GT(*q.front(), last);
    last = *q.front();
    q.pop_front();
  }
  q.push_back(std::make_unique<int>(7));  // still usable once drained
  EXPECT_EQ(*q.front(), 7);
}

}  // namespace
}  // namespace lt::proto
