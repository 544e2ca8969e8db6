// rc's export_memory on a real device: memory another transport made (here
// a plain page-aligned mapping, as shm's memfd regions are) becomes
// reachable by peers' READ, WRITE and atomics through the returned key,
// bounds checked at post, and unreachable once unexported.
#include <sys/mman.h>

#include "transport_harness.h"

namespace lt::transport::test {
namespace {

class RcExport : public TransportHarness {
 protected:
  RcExport() : TransportHarness(&make_rc, &rc_peer) {}
  void SetUp() override {
    set_up_pair();
    void* p = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    mem_ = static_cast<std::byte*>(p);
  }
  void TearDown() override {
    if (mem_ != nullptr) ::munmap(mem_, kLen);
  }
  static constexpr size_t kLen = 3 * 4096;
  std::byte* mem_ = nullptr;
};

TEST_F(RcExport, PeersReachExportedMemory) {
  auto x = b_->t->export_memory(std::span<std::byte>(mem_, kLen), kRemoteAll);
  ASSERT_TRUE(x.is_ok()) << x.status().name();
  EXPECT_EQ(x->addr, mem_);
  EXPECT_NE(x->rkey, 0u);
  auto data = pattern(5000, 7);
  ASSERT_TRUE(
      post_one(ab_.get(), rdma_wr(Op::kWrite, 1, data.data(), data.size(), 4000, x->rkey)).is_ok());
  EXPECT_EQ(std::memcmp(mem_ + 4000, data.data(), data.size()), 0);
  EXPECT_EQ(mem_[3999], std::byte{0});
  std::vector<std::byte> back(5000);
  ASSERT_TRUE(
      post_one(ab_.get(), rdma_wr(Op::kRead, 2, back.data(), back.size(), 4000, x->rkey)).is_ok());
  EXPECT_EQ(back, data);
  uint64_t old = 0;
  ASSERT_TRUE(post_one(ab_.get(), atomic_wr(Op::kFetchAdd, &old, 8, x->rkey, 0, 5)).is_ok());
  ASSERT_TRUE(post_one(ab_.get(), atomic_wr(Op::kFetchAdd, &old, 8, x->rkey, 0, 5)).is_ok());
  EXPECT_EQ(old, 5u);
  // Past the end of the export: refused at post, nothing touched.
  auto r = ab_->post(
      std::vector<WorkRequest>{rdma_wr(Op::kWrite, 3, data.data(), 16, kLen - 8, x->rkey)});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kOutOfBounds);
  EXPECT_TRUE(ab_->alive());
  b_->t->unexport_memory(*x);
  // The memory is still the caller's, untouched by the unexport.
  EXPECT_EQ(std::memcmp(mem_ + 4000, data.data(), data.size()), 0);
}

TEST_F(RcExport, RefusesMemoryNotOnPageBoundaries) {
  auto x = b_->t->export_memory(std::span<std::byte>(mem_ + 8, 4096), kRemoteAll);
  ASSERT_FALSE(x.is_ok());
  EXPECT_EQ(x.status().code(), Code::kInvalidArg);
  x = b_->t->export_memory(std::span<std::byte>(mem_, 100), kRemoteAll);
  ASSERT_FALSE(x.is_ok());
  EXPECT_EQ(x.status().code(), Code::kInvalidArg);
}

}  // namespace
}  // namespace lt::transport::test
