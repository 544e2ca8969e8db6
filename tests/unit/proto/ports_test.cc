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
        Unexpected& u = t.keep_new_locked(t.get_locked(port));
        u.src = src;
        u.len = port;
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
  (void)t.keep_new_locked(t.get_locked(1));
  (void)t.keep_new_locked(t.get_locked(2));
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
    Port& p = t.get_locked(3);
    // From the cache and from the heap.
    t.keep_new_locked(p).data.assign(src, n % 2 ? t.byte_cache() : nullptr);
    for (int i = 0; i < 40; ++i) (void)t.keep_new_locked(p);  // the store grows: it moves
    Unexpected back = t.take_locked(p);
    auto v = back.data.view();
    ASSERT_EQ(v.size(), n);
    EXPECT_TRUE(std::equal(v.begin(), v.end(), src.begin())) << n;
  }
}

// An entry is made in a slot an earlier message left (taken, dropped,
// erased with its sender's, or moved by growth): it starts empty, whatever
// that message held.
TEST(PortTable, AKeptEntryStartsEmptyInAReusedSlot) {
  PortTable t;
  std::vector<std::byte> big(MsgBytes::kInline + 100, std::byte{7});
  for (int round = 0; round < 3; ++round) {
    {
      std::lock_guard<SpinLock> g(t.mutex());
      Port& p = t.get_locked(1);
      for (int i = 0; i < 20; ++i) {  // past the first room of 8: the store grows
        Unexpected& u = t.keep_new_locked(p);
        EXPECT_EQ(u.src, 0u) << round;
        EXPECT_EQ(u.len, 0u);
        EXPECT_FALSE(u.rts);
        EXPECT_TRUE(u.data.view().empty());
        u.src = 9;
        u.len = big.size();
        u.rts = true;
        u.data.assign(big, i % 2 ? t.byte_cache() : nullptr);
      }
      if (round != 1) {
        for (int i = 0; i < 10; ++i) t.drop_front_locked(p);
        for (int i = 0; i < 10; ++i) {
          EXPECT_EQ(t.take_locked(p).data.view().size(), big.size());
        }
        EXPECT_TRUE(p.unexpected.empty());
      }
    }
    if (round == 1) {
      EXPECT_EQ(t.drop_from(9), 20u);
    }
  }
  EXPECT_FALSE(t.any_waiting());
}

// A freed buffer is the next one of its class; the cache keeps at most
// kKeepBytes and nothing above its largest class.
TEST(ByteCache, ReusesByClassWithinItsBound) {
  ByteCache c;
  unsigned cls = 0;
  std::byte* a = c.take(3000, &cls);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(cls, 12u);  // 4 KiB
  c.give(a, cls);
  EXPECT_EQ(c.kept_bytes(), 4096u);
  unsigned cls2 = 0;
  EXPECT_EQ(c.take(4096, &cls2), a);  // same class: the same buffer
  EXPECT_EQ(cls2, cls);
  EXPECT_EQ(c.kept_bytes(), 0u);
  unsigned small = 0;
  std::byte* b = c.take(65, &small);  // the smallest class
  EXPECT_EQ(small, ByteCache::kMinShift);
  EXPECT_NE(b, a);
  c.give(b, small);
  c.give(a, cls);
  // Above the largest class: not kept.
  unsigned big = 0;
  std::byte* h = c.take((size_t{1} << ByteCache::kMaxShift) + 1, &big);
  EXPECT_EQ(big, ByteCache::kNoClass);
  c.give(h, big);
  EXPECT_EQ(c.kept_bytes(), 4096u + 128u);
  // Fill past the bound: what does not fit is freed, not kept.
  std::vector<std::byte*> held;
  std::vector<unsigned> classes;
  const size_t n = ByteCache::kKeepBytes / (size_t{1} << 16) + 8;
  for (size_t i = 0; i < n; ++i) {
    unsigned k = 0;
    held.push_back(c.take(size_t{1} << 16, &k));
    classes.push_back(k);
  }
  for (size_t i = 0; i < n; ++i) c.give(held[i], classes[i]);
  EXPECT_LE(c.kept_bytes(), ByteCache::kKeepBytes);
  EXPECT_GT(c.kept_bytes(), ByteCache::kKeepBytes - (size_t{1} << 16) - 4096u - 128u - 1);
}

// A message's bytes from the cache go back to it when the entry dies, and
// a move hands them over whole (no double return).
TEST(ByteCache, MessageBytesReturnTheirBuffer) {
  PortTable t;
  std::vector<std::byte> src(5000, std::byte{0x5a});
  {
    MsgBytes a;
    a.assign(src, t.byte_cache());
    MsgBytes b(std::move(a));
    MsgBytes c;
    c.assign(std::span<const std::byte>(src).first(10), t.byte_cache());  // inline
    c = std::move(b);
    EXPECT_EQ(c.view().size(), src.size());
    EXPECT_EQ(a.view().size(), 0u);
    EXPECT_EQ(t.byte_cache()->kept_bytes(), 0u);
  }
  EXPECT_EQ(t.byte_cache()->kept_bytes(), 8192u);
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
