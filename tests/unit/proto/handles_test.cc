// HandleTable::check and its per-thread cache: a handle erased after the
// thread looked it up is refused at the next check, a MappingRef keeps its
// mapping valid whatever happens to the handle, and nested checks on one
// thread each get their own mapping.
#include "proto/lmr/handles.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace lt::proto {
namespace {

std::shared_ptr<Mapping> mapping(NodeId owner, uint64_t size, uint32_t rights) {
  auto m = std::make_shared<Mapping>();
  m->owner = owner;
  m->size = size;
  m->rights = rights;
  return m;
}

TEST(HandleTable, RightsBoundsAndUnknownHandlesAreRefused) {
  HandleTable t(16);
  auto h = t.insert(mapping(2, 4096, kRightRead));
  ASSERT_TRUE(h.is_ok());
  {
    MappingRef m;
    ASSERT_TRUE(t.check(*h, kRightRead, 0, 4096, &m).is_ok());
    EXPECT_EQ(m->owner, 2u);
  }
  for (int pass = 0; pass < 2; ++pass) {  // the second pass finds the handle cached
    MappingRef a, b, c, d;
    EXPECT_EQ(t.check(*h, kRightWrite, 0, 8, &a).code(), Code::kPerm);
    EXPECT_EQ(t.check(*h, kRightRead, 4090, 8, &b).code(), Code::kOutOfBounds);
    EXPECT_EQ(t.check(*h, kRightRead, 8192, 0, &c).code(), Code::kOutOfBounds);
    EXPECT_EQ(t.check(*h ^ (uint64_t{1} << 40), kRightRead, 0, 8, &d).code(), Code::kBadHandle);
  }
}

TEST(HandleTable, AnErasedHandleIsRefusedThoughTheThreadCachedIt) {
  HandleTable t(16);
  auto h = t.insert(mapping(2, 64, kRightRead));
  ASSERT_TRUE(h.is_ok());
  {
    MappingRef m;
    ASSERT_TRUE(t.check(*h, kRightRead, 0, 8, &m).is_ok());
  }
  std::thread([&] { ASSERT_TRUE(t.erase(*h).is_ok()); }).join();
  MappingRef m;
  EXPECT_EQ(t.check(*h, kRightRead, 0, 8, &m).code(), Code::kBadHandle);
}

TEST(HandleTable, ARefKeepsItsMappingWhileAnotherThreadErasesTheHandle) {
  HandleTable t(16);
  auto h = t.insert(mapping(3, 64, kRightRead | kRightWrite));
  ASSERT_TRUE(h.is_ok());
  std::weak_ptr<const Mapping> watch;
  {
    MappingRef m;
    ASSERT_TRUE(t.check(*h, kRightRead, 0, 8, &m).is_ok());
    std::thread([&] { ASSERT_TRUE(t.erase(*h).is_ok()); }).join();
    EXPECT_EQ(m->owner, 3u);  // still readable (ASan would catch a freed one)
    EXPECT_EQ(m->size, 64u);
  }
  // The next lookup by this thread lets the erased mapping go.
  auto other = t.insert(mapping(4, 64, kRightRead));
  ASSERT_TRUE(other.is_ok());
  MappingRef n;
  ASSERT_TRUE(t.check(*other, kRightRead, 0, 8, &n).is_ok());
  EXPECT_EQ(n->owner, 4u);
}

TEST(HandleTable, NestedChecksOnOneThreadEachGetTheirOwnMapping) {
  HandleTable t(16);
  auto a = t.insert(mapping(5, 64, kRightWrite));
  auto b = t.insert(mapping(6, 128, kRightRead));
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  for (int pass = 0; pass < 3; ++pass) {
    MappingRef d, s;
    ASSERT_TRUE(t.check(*a, kRightWrite, 0, 64, &d).is_ok());
    ASSERT_TRUE(t.check(*b, kRightRead, 0, 128, &s).is_ok());  // the cache is lent to d
    EXPECT_EQ(d->owner, 5u);
    EXPECT_EQ(s->owner, 6u);
    MappingRef again;  // the same handle while d holds the cache
    ASSERT_TRUE(t.check(*a, kRightWrite, 0, 64, &again).is_ok());
    EXPECT_EQ(&*again, &*d);
  }
}

// The outer operation's mapping outlives an erase and an inner lookup of
// another handle on the same thread (the inner one must not take the cache).
TEST(HandleTable, AnInnerCheckDoesNotReleaseTheOuterMapping) {
  HandleTable t(16);
  auto outer = mapping(8, 64, kRightRead);
  std::weak_ptr<Mapping> alive = outer;
  auto a = t.insert(std::move(outer));
  auto b = t.insert(mapping(9, 64, kRightRead));
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  MappingRef d;
  ASSERT_TRUE(t.check(*a, kRightRead, 0, 8, &d).is_ok());
  std::thread([&] { ASSERT_TRUE(t.erase(*a).is_ok()); }).join();
  {
    MappingRef s;
    ASSERT_TRUE(t.check(*b, kRightRead, 0, 8, &s).is_ok());
    EXPECT_EQ(s->owner, 9u);
  }
  EXPECT_FALSE(alive.expired());
  EXPECT_EQ(d->owner, 8u);
}

TEST(HandleTable, TablesDoNotShareCachedLookups) {
  auto one = std::make_unique<HandleTable>(16);
  auto h = one->insert(mapping(7, 64, kRightRead));
  ASSERT_TRUE(h.is_ok());
  {
    MappingRef m;
    ASSERT_TRUE(one->check(*h, kRightRead, 0, 8, &m).is_ok());
  }
  HandleTable two(16);  // the same handle value means nothing here
  MappingRef m;
  EXPECT_EQ(two.check(*h, kRightRead, 0, 8, &m).code(), Code::kBadHandle);
}

}  // namespace
}  // namespace lt::proto
