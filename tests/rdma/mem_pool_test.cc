// LMR pools on a real Soft-RoCE device (run inside the rxe guest): the
// first pool is small and each next one doubles up to the pool size, so a
// node's first LMR does not register a whole large pool; registrations
// still grow with pools, not with slices.
#include "transport/verbs/mem_pool.h"

#include <gtest/gtest.h>

#include <cstring>

#include "transport/verbs/device.h"
#include "transport/verbs/verbs_device.h"

namespace lt::transport::verbs {
namespace {

constexpr size_t kMiB = 1u << 20;

class Pools : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    Result<Choice> c = choose(list_devices(&why), VerbsConfig{}, &why);
    ASSERT_TRUE(c.is_ok()) << why;
    auto d = VerbsDevice::open(*c, 64, &why);
    ASSERT_TRUE(d.is_ok()) << why;
    dev_ = std::move(*d);
  }
  // Allocates `len` bytes, checks the slice is zeroed and writable, keeps it.
  MemRegion take(MemPools& p, size_t len) {
    auto r = p.alloc(len);
    EXPECT_TRUE(r.is_ok()) << len;
    if (!r.is_ok()) return {};
    EXPECT_GE(r->len, len);
    EXPECT_EQ(r->addr[0], std::byte{0});
    EXPECT_EQ(r->addr[len - 1], std::byte{0});
    std::memset(r->addr, 0x5a, len);
    return *r;
  }
  std::unique_ptr<VerbsDevice> dev_;
};

TEST_F(Pools, TheFirstPoolIsSmallAndEachNextDoubles) {
  MemPools p(*dev_, 64 * kMiB, -1);
  ASSERT_EQ(MemPools::kFirstPoolBytes, 4 * kMiB);
  EXPECT_EQ(p.registrations(), 0u);  // nothing until the first LMR
  MemRegion a = take(p, 4096);
  EXPECT_EQ(p.registrations(), 1u);
  MemRegion b = take(p, 3 * kMiB);  // the rest of the 4 MiB pool
  EXPECT_EQ(p.registrations(), 1u);
  MemRegion c = take(p, 2 * kMiB);  // no room: a pool of 8 MiB
  EXPECT_EQ(p.registrations(), 2u);
  MemRegion d = take(p, 6 * kMiB);  // the rest of the 8 MiB pool
  EXPECT_EQ(p.registrations(), 2u);
  MemRegion e = take(p, 10 * kMiB);  // a pool of 16 MiB
  EXPECT_EQ(p.registrations(), 3u);
  MemRegion f = take(p, 6 * kMiB);  // the 16 MiB pool's rest
  EXPECT_EQ(p.registrations(), 3u);
  MemRegion g = take(p, 40 * kMiB);  // 32 MiB would be next: a pool of 40 MiB instead
  EXPECT_EQ(p.registrations(), 4u);
  MemRegion h = take(p, 100 * kMiB);  // above the pool size: a registration of its own
  EXPECT_EQ(p.registrations(), 5u);
  // Every slice still says where it is: offsets within bounds, and only them.
  for (const MemRegion& r : {a, b, c, d, e, f, g, h}) {
    uint32_t key = 0;
    uint64_t raddr = 0;
    EXPECT_TRUE(decode_rkey(r.rkey, 0, r.len, &key, &raddr)) << std::hex << r.rkey;
    EXPECT_FALSE(decode_rkey(r.rkey, 0, r.len + 1, &key, &raddr)) << std::hex << r.rkey;
    p.free(r);
  }
}

TEST_F(Pools, AFirstPoolAboveThePoolSizeIsThePoolSize) {
  MemPools p(*dev_, 2 * kMiB, -1, true, 64 * kMiB);
  MemRegion a = take(p, 2 * kMiB);
  EXPECT_EQ(p.registrations(), 1u);
  MemRegion b = take(p, 4096);  // the pool was 2 MiB: a second one
  EXPECT_EQ(p.registrations(), 2u);
  p.free(a);
  p.free(b);
}

// Room made ahead (the poller's, for a new peer's channels and first LMR):
// reserve() registers a pool only when the slices asked for do not fit, and
// the allocations it made room for then register nothing.
TEST_F(Pools, ReserveRegistersAheadOnlyWhatDoesNotFit) {
  MemPools p(*dev_, 16 * kMiB, -1, false, kMiB);
  EXPECT_TRUE(p.reserve(256 * 1024, 3).is_ok());
  EXPECT_EQ(p.registrations(), 1u);  // the first pool, 1 MiB: four slices fit
  EXPECT_TRUE(p.reserve(256 * 1024, 4).is_ok());
  EXPECT_EQ(p.registrations(), 1u);
  MemRegion a = take(p, 256 * 1024), b = take(p, 256 * 1024), c = take(p, 256 * 1024);
  EXPECT_EQ(p.registrations(), 1u);  // made ahead: nothing registered now
  EXPECT_TRUE(p.reserve(256 * 1024, 3).is_ok());
  EXPECT_EQ(p.registrations(), 2u);  // one slice was left: the next pool (2 MiB)
  MemRegion d = take(p, 256 * 1024), e = take(p, 256 * 1024), f = take(p, 256 * 1024);
  EXPECT_EQ(p.registrations(), 2u);
  EXPECT_TRUE(p.reserve(64 * kMiB, 1).is_ok());  // larger than a pool: its own, when taken
  EXPECT_TRUE(p.reserve(4096, 0).is_ok());
  EXPECT_EQ(p.registrations(), 2u);
  for (const MemRegion& r : {a, b, c, d, e, f}) p.free(r);
}

}  // namespace
}  // namespace lt::transport::verbs
