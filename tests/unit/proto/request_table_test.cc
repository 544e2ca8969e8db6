#include "proto/request_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <set>
#include <thread>
#include <vector>

namespace lt::proto {
namespace {

TEST(RequestTable, ClaimGivesPendingRequestsWithDistinctIds) {
  RequestTable t(128);
  std::set<ReqId> ids;
  for (int i = 0; i < 128; ++i) {
    ReqId id = 0;
    auto r = t.claim(ReqKind::kPlain, 7, &id);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ((*r)->state(), kStPending);
    EXPECT_EQ((*r)->peer.load(), 7u);
    EXPECT_EQ(t.lookup(id), *r);
    EXPECT_TRUE(ids.insert(id).second);
  }
}

TEST(RequestTable, FullTableRefusesWithNoResource) {
  RequestTable t(64);  // one chunk
  ReqId id = 0;
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(t.claim(ReqKind::kPlain, 0, &id).is_ok());
  auto r = t.claim(ReqKind::kPlain, 0, &id);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kNoResource);
}

TEST(RequestTable, CapacityRoundsUpToWholeChunks) {
  RequestTable t(65);
  ReqId id = 0;
  for (uint32_t i = 0; i < 2 * RequestTable::kChunk; ++i) {
    ASSERT_TRUE(t.claim(ReqKind::kPlain, 0, &id).is_ok()) << i;
  }
  EXPECT_FALSE(t.claim(ReqKind::kPlain, 0, &id).is_ok());
}

TEST(RequestTable, ReleasedSlotIsReusedWithAnotherGeneration) {
  RequestTable t(64);
  ReqId a = 0;
  Request* r = *t.claim(ReqKind::kRead, 1, &a);
  t.put_back(r);
  EXPECT_EQ(t.lookup(a), nullptr) << "a stale id finds nothing";
  ReqId b = 0;
  Request* r2 = *t.claim(ReqKind::kRead, 1, &b);
  EXPECT_EQ(r2, r) << "the free stack hands back the last freed slot";
  EXPECT_EQ(req_index(a), req_index(b));
  EXPECT_NE(req_gen(a), req_gen(b));
  EXPECT_EQ(t.lookup(a), nullptr);
  EXPECT_EQ(t.lookup(b), r2);
}

TEST(RequestTable, CancelledRequestIsNotFoundAndLateReplyCannotClaimIt) {
  RequestTable t(64);
  ReqId id = 0;
  Request* r = *t.claim(ReqKind::kRpc, 3, &id);
  ASSERT_TRUE(r->move(req_gen(id), kStPending, kStCancelled));
  EXPECT_EQ(t.lookup(id), nullptr);
  // A reply arriving now names the slot (slot() finds it) but cannot claim it.
  EXPECT_EQ(t.slot(id), r);
  EXPECT_FALSE(r->move(req_gen(id), kStPending, kStClaimed));
  t.put_back(r);
  // Nor can it claim the slot's next use: the generation differs.
  ReqId next = 0;
  Request* again = *t.claim(ReqKind::kRpc, 3, &next);
  ASSERT_EQ(again, r);
  EXPECT_FALSE(again->move(req_gen(id), kStPending, kStClaimed));
  EXPECT_TRUE(again->move(req_gen(next), kStPending, kStClaimed));
}

TEST(RequestTable, IdsOfSlotsNeverMadeAreRefused) {
  RequestTable t(1024);
  ReqId id = 0;
  (void)t.claim(ReqKind::kPlain, 0, &id);
  EXPECT_EQ(t.size(), RequestTable::kChunk) << "slots are made a chunk at a time";
  EXPECT_EQ(t.slot(make_req_id(1, 5000)), nullptr);
  EXPECT_EQ(t.lookup(make_req_id(1, RequestTable::kChunk)), nullptr);
}

TEST(RequestTable, GenerationWrapSkipsZero) {
  RequestTable t(64);
  ReqId id = 0;
  Request* r = *t.claim(ReqKind::kPlain, 0, &id);
  // Force the slot to the last generation, then free it.
  r->word.store(req_word(UINT32_MAX, kStDone));
  t.put_back(r);
  EXPECT_EQ(word_gen(r->word.load()), 1u) << "generation 0 is never handed out";
  ReqId again = 0;
  ASSERT_EQ(*t.claim(ReqKind::kPlain, 0, &again), r);
  EXPECT_EQ(req_gen(again), 1u) << "after 2^32 - 1 uses an id repeats, never with generation 0";
}

// A waiter's sleep as Engine::wait_impl does it: counted, fenced, then a
// last look at the word before the futex (each sleep at most cap_ns).
void sleep_until_done(Request* r, uint64_t cap_ns) {
  while (!r->done()) {
    uint32_t seen = r->wake.load();
    r->sleepers.fetch_add(1);
    AsymFence::heavy();
    if (!r->done()) futex_wait(&r->wake, seen, cap_ns);
    r->sleepers.fetch_sub(1);
  }
}

TEST(RequestTable, CompleteWakesASleepingWaiter) {
  RequestTable t(64);
  ReqId id = 0;
  Request* r = *t.claim(ReqKind::kPlain, 0, &id);
  std::thread waiter([r] { sleep_until_done(r, kMaxSleepNs); });
  r->set_claimed();
  r->complete(Code::kPeerDown);
  waiter.join();
  EXPECT_EQ(r->status, Code::kPeerDown);
}

// With the asymmetric fence in use, a completion (a plain store) racing a
// waiter on its way to sleep still wakes it: the waiter here sleeps with no
// cap that would hide a lost wake-up (one would hang the test).
TEST(RequestTable, NoCompletionMissesAWaiterGoingToSleep) {
  AsymFence::wait_ready();
  RequestTable t(64);
  for (int i = 0; i < 2000; ++i) {
    ReqId id = 0;
    Request* r = *t.claim(ReqKind::kPlain, 0, &id);
    std::thread waiter([r] { sleep_until_done(r, 3600ull * 1000000000ull); });
    for (int spin = 0; spin < i % 64; ++spin) cpu_relax();  // vary who gets there first
    r->set_claimed();
    r->complete(Code::kOk);
    waiter.join();
    t.put_back(r);
  }
}

TEST(RequestTable, ConcurrentClaimAndReleaseNeverShareASlot) {
  RequestTable t(256);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        ReqId id = 0;
        auto r = t.claim(ReqKind::kPlain, 0, &id);
        if (!r) continue;  // all in use by the others
        // Only this thread may own the slot until it puts it back.
        if (!(*r)->move(req_gen(id), kStPending, kStClaimed)) errors.fetch_add(1);
        t.put_back(*r);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
}

// Claims every slot of `t` from the calling thread: how many it got.
int claim_all(RequestTable& t) {
  int n = 0;
  ReqId id = 0;
  while (t.claim(ReqKind::kPlain, 0, &id).is_ok()) ++n;
  return n;
}

TEST(RequestTable, ASlotParkedByAThreadThatExitedGoesBackToTheTable) {
  RequestTable t(64);
  std::thread([&] {
    ReqId id = 0;
    Request* r = *t.claim(ReqKind::kPlain, 0, &id);
    t.put_back(r);  // parked for this thread's next claim
  }).join();
  EXPECT_EQ(claim_all(t), 64) << "the exited thread's parked slot is on the free stack again";
}

TEST(RequestTable, AThreadParksOneTablesSlotAtATime) {
  auto a = std::make_unique<RequestTable>(64);
  RequestTable b(64);
  std::atomic<int> step{0};
  auto await = [&](int k) {
    while (step.load() != k) std::this_thread::yield();
  };
  std::thread x([&] {
    ReqId id = 0;
    Request* ra = *a->claim(ReqKind::kPlain, 0, &id);
    Request* rb = *b.claim(ReqKind::kPlain, 0, &id);
    a->put_back(ra);  // parked
    b.put_back(rb);   // not parked (a's slot is): on b's stack
    step = 1;
    await(2);
    a.reset();  // a going away frees the thread to park another table's slot
    rb = *b.claim(ReqKind::kPlain, 0, &id);
    b.put_back(rb);  // parked
    step = 3;
    await(4);
  });
  await(1);
  std::vector<Request*> got;
  ReqId id = 0;
  for (Result<Request*> r = b.claim(ReqKind::kPlain, 0, &id); r.is_ok();
       r = b.claim(ReqKind::kPlain, 0, &id)) {
    got.push_back(*r);
  }
  EXPECT_EQ(got.size(), 64u) << "b's slot freed by x went to b's stack";
  for (Request* r : got) b.put_back(r);  // one parked for this thread, the rest on the stack
  step = 2;
  await(3);
  EXPECT_EQ(claim_all(b), 63) << "x parks one of b's slots once a is gone";
  step = 4;
  x.join();
  EXPECT_EQ(claim_all(b), 1) << "and gives it back as it exits";
}

}  // namespace
}  // namespace lt::proto
