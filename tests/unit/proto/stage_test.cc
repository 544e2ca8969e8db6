#include "proto/msg/stage.h"

#include <gtest/gtest.h>

#include <vector>

namespace lt::proto {
namespace {

// A memory source backed by a vector (the stage's real source is the shm
// transport's alloc_memory; the allocator only hands out offsets in it).
struct Source {
  std::vector<std::byte> mem;
  int calls = 0;
  bool fail = false;
  StageAllocator::MemorySource fn() {
    return [this](uint64_t n) -> Result<transport::MemRegion> {
      ++calls;
      if (fail) return Code::kNoMemory;
      mem.resize(n);
      return transport::MemRegion{mem.data(), mem.size(), 0, 42};
    };
  }
};

TEST(StageAllocator, RegionIsMadeOnFirstUseOnly) {
  Source src;
  StageAllocator s(4096, src.fn());
  EXPECT_EQ(src.calls, 0);
  EXPECT_EQ(s.base(), nullptr);
  uint64_t off;
  ASSERT_TRUE(s.alloc(1, 100, &off));
  ASSERT_TRUE(s.alloc(1, 100, &off));
  EXPECT_EQ(src.calls, 1);
  EXPECT_EQ(s.base(), src.mem.data());
  EXPECT_EQ(s.rkey(), 42u);
}

TEST(StageAllocator, FirstFitIn64ByteGranules) {
  Source src;
  StageAllocator s(4096, src.fn());
  uint64_t a, b, c;
  ASSERT_TRUE(s.alloc(1, 1, &a));
  ASSERT_TRUE(s.alloc(1, 65, &b));
  ASSERT_TRUE(s.alloc(1, 64, &c));
  EXPECT_EQ(a, 0u);
  EXPECT_EQ(b, 64u);
  EXPECT_EQ(c, 192u);
  EXPECT_EQ(s.used_bytes(), 64u + 128u + 64u);
}

TEST(StageAllocator, FullStageRefusesAndFreedRangesCoalesce) {
  Source src;
  StageAllocator s(1024, src.fn());
  uint64_t off[4];
  for (auto& o : off) ASSERT_TRUE(s.alloc(1, 256, &o));
  uint64_t x;
  EXPECT_FALSE(s.alloc(1, 64, &x)) << "full: the message is pulled instead";
  // Free the middle two, then the first: one 768-byte range again.
  s.free(1, off[1]);
  s.free(1, off[2]);
  EXPECT_FALSE(s.alloc(1, 600, &x)) << "512 bytes free, in one range";
  s.free(1, off[0]);
  ASSERT_TRUE(s.alloc(1, 768, &x));
  EXPECT_EQ(x, 0u);
}

TEST(StageAllocator, OnlyTheHolderFreesARange) {
  Source src;
  StageAllocator s(1024, src.fn());
  uint64_t a;
  ASSERT_TRUE(s.alloc(5, 1024, &a));
  s.free(6, a);  // another peer's MsgStaged naming it: ignored
  uint64_t x;
  EXPECT_FALSE(s.alloc(5, 64, &x));
  s.free(5, a + 64);  // not the start of a range: ignored
  EXPECT_FALSE(s.alloc(5, 64, &x));
  s.free(5, a);
  EXPECT_TRUE(s.alloc(5, 64, &x));
}

TEST(StageAllocator, ReleasePeerFreesAllItsRanges) {
  Source src;
  StageAllocator s(1024, src.fn());
  uint64_t a, b, c;
  ASSERT_TRUE(s.alloc(1, 256, &a));
  ASSERT_TRUE(s.alloc(2, 256, &b));
  ASSERT_TRUE(s.alloc(1, 256, &c));
  s.release_peer(1);
  EXPECT_EQ(s.used_bytes(), 256u);
  s.free(2, b);
  EXPECT_EQ(s.used_bytes(), 0u);
  uint64_t x;
  ASSERT_TRUE(s.alloc(3, 1024, &x)) << "everything coalesced back";
}

TEST(StageAllocator, OversizeZeroCapacityAndFailedSourceRefuse) {
  Source src;
  uint64_t x;
  StageAllocator small(1024, src.fn());
  EXPECT_FALSE(small.alloc(1, 1025, &x));
  EXPECT_EQ(src.calls, 0) << "refused before any memory is made";
  StageAllocator off(0, src.fn());
  EXPECT_FALSE(off.alloc(1, 1, &x));
  Source bad;
  bad.fail = true;
  StageAllocator broken(1024, bad.fn());
  EXPECT_FALSE(broken.alloc(1, 64, &x));
  EXPECT_FALSE(broken.alloc(1, 64, &x));
  EXPECT_EQ(bad.calls, 1) << "a failed source is not asked again";
}

TEST(StageAllocator, CloseHandsTheRegionBack) {
  Source src;
  StageAllocator s(1024, src.fn());
  uint64_t x;
  ASSERT_TRUE(s.alloc(1, 64, &x));
  int given = 0;
  s.close([&](const transport::MemRegion& r) {
    EXPECT_EQ(r.addr, src.mem.data());
    ++given;
  });
  EXPECT_EQ(given, 1);
  EXPECT_EQ(s.used_bytes(), 0u);
}

}  // namespace
}  // namespace lt::proto
