// ViewCache (proto/rma/view_cache.h): a thread's views of peer regions,
// found by engine, owner and rkey, and only while live; a retired view is
// replaced in its own entry, and a new key takes the entry filled longest
// ago.
#include "proto/rma/view_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace lt::proto {
namespace {

using transport::MappedRegion;

std::shared_ptr<MappedRegion> region(std::vector<std::byte>& mem) {
  return std::make_shared<MappedRegion>(mem.data(), mem.size(), transport::kRemoteAll);
}

TEST(ViewCache, FindsAViewByEngineOwnerAndRkeyOnly) {
  std::vector<std::byte> mem(64);
  ViewCache c;
  int engine = 0, other = 0;
  auto v = region(mem);
  EXPECT_EQ(c.find(&engine, 7, 100), nullptr);
  EXPECT_EQ(c.put(&engine, 7, 100, v), v.get());
  EXPECT_EQ(c.find(&engine, 7, 100), v.get());
  EXPECT_EQ(c.find(&other, 7, 100), nullptr) << "another engine";
  EXPECT_EQ(c.find(&engine, 8, 100), nullptr) << "another owner";
  EXPECT_EQ(c.find(&engine, 7, 101), nullptr) << "another rkey";
}

TEST(ViewCache, ARetiredViewIsNotFoundAndIsReplacedInItsEntry) {
  std::vector<std::byte> mem(64);
  ViewCache c;
  int engine = 0;
  std::vector<std::shared_ptr<MappedRegion>> held;
  for (uint64_t k = 1; k <= ViewCache::kEntries; ++k) {
    held.push_back(region(mem));
    c.put(&engine, 1, k, held.back());
  }
  held[0]->retire();
  EXPECT_EQ(c.find(&engine, 1, 1), nullptr);
  auto fresh = region(mem);
  c.put(&engine, 1, 1, fresh);
  EXPECT_EQ(c.find(&engine, 1, 1), fresh.get());
  for (uint64_t k = 2; k <= ViewCache::kEntries; ++k) {
    EXPECT_EQ(c.find(&engine, 1, k), held[k - 1].get()) << "entry " << k << " was replaced";
  }
}

TEST(ViewCache, ANewKeyTakesTheEntryFilledLongestAgoAndLetsItsViewGo) {
  std::vector<std::byte> mem(64);
  ViewCache c;
  int engine = 0;
  std::weak_ptr<MappedRegion> first;
  {
    auto v = region(mem);
    first = v;
    c.put(&engine, 1, 1, std::move(v));
  }
  for (uint64_t k = 2; k <= ViewCache::kEntries; ++k) c.put(&engine, 1, k, region(mem));
  EXPECT_FALSE(first.expired()) << "the cache holds its views";
  c.put(&engine, 1, 99, region(mem));
  EXPECT_TRUE(first.expired()) << "the oldest entry let its view go";
  EXPECT_EQ(c.find(&engine, 1, 1), nullptr);
  EXPECT_NE(c.find(&engine, 1, 2), nullptr);
  EXPECT_NE(c.find(&engine, 1, 99), nullptr);
}

}  // namespace
}  // namespace lt::proto
