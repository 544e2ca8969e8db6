// HandleTable::check and its per-thread cache: a handle erased after the
// thread looked it up is refused at the next check, a MappingRef keeps its
// mapping valid whatever happens to the handle, and nested checks on one
// thread each get their own mapping; the names, their mappers and revocation.
#include "proto/lmr/handles.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

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

// The master side of revocation: lookup_name remembers who mapped a name,
// and remove_names_of hands them over once, with the names.
TEST(HandleTable, MappersOfANameAreRememberedUntilItsNamesAreRemoved) {
  HandleTable t(16);
  auto m = mapping(2, 64, kAllRights);
  auto h = t.insert(m);
  ASSERT_TRUE(h.is_ok());
  ASSERT_TRUE(t.add_name("a", *h, kRightRead).is_ok());
  std::shared_ptr<Mapping> got;
  ASSERT_TRUE(t.lookup_name("a", kRightRead, 5, &got).is_ok());
  EXPECT_EQ(got, m);
  ASSERT_TRUE(t.lookup_name("a", kRightRead, 7, &got).is_ok());
  ASSERT_TRUE(t.lookup_name("a", kRightRead, 5, &got).is_ok());  // counted once
  // Refused lookups are not mappers.
  EXPECT_EQ(t.lookup_name("a", kRightWrite, 9, &got).code(), Code::kPerm);
  EXPECT_EQ(t.lookup_name("b", kRightRead, 9, &got).code(), Code::kNotFound);
  std::vector<NodeId> who;
  EXPECT_EQ(t.remove_names_of(*h, &who), std::vector<std::string>{"a"});
  EXPECT_EQ(who, (std::vector<NodeId>{5, 7}));
  who.clear();
  EXPECT_TRUE(t.remove_names_of(*h, &who).empty());
  EXPECT_TRUE(who.empty());
  EXPECT_EQ(t.lookup_name("a", kRightRead, 5, &got).code(), Code::kNotFound);
}

// The mapper side: only handles minted by the revoking master for that
// LMR are marked, whichever thread cached them.
TEST(HandleTable, RevokeMarksOnlyTheMastersHandlesOfThatLmr) {
  HandleTable t(16);
  auto make = [&](NodeId minted_by, NodeId owner, uint64_t key) {
    auto m = mapping(owner, 64, kRightRead);
    m->minted_by = minted_by;
    m->key = key;
    auto h = t.insert(m);
    EXPECT_TRUE(h.is_ok());
    return m;
  };
  auto a = make(1, 2, 100), b = make(1, 2, 100), other_key = make(1, 2, 101),
       other_owner = make(1, 3, 100), other_master = make(4, 2, 100);
  EXPECT_EQ(t.revoke(1, 2, 100), 2u);
  EXPECT_TRUE(a->revoked.v.load());
  EXPECT_TRUE(b->revoked.v.load());
  EXPECT_FALSE(other_key->revoked.v.load());
  EXPECT_FALSE(other_owner->revoked.v.load());
  EXPECT_FALSE(other_master->revoked.v.load());
  EXPECT_EQ(t.revoke(9, 2, 100), 0u);
}

}  // namespace
}  // namespace lt::proto
