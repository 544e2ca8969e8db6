// RC queue pairs on a real Soft-RoCE device, run inside the rxe guest: two
// QPs of one device connected to each other, and the one-sided operations
// of the verbs transport on registered memory, checked byte by byte.
#include "transport/verbs/rc_qp.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "qp_pair.h"

namespace lt::transport::verbs {
namespace {

class RcPair : public ::testing::Test {
 protected:
  void SetUp() override {
    QpPair p;
    ASSERT_TRUE(open_qp_pair(1024, 0, &p));
    dev_ = std::move(p.dev);
    qa_ = std::move(p.a);
    qb_ = std::move(p.b);
    std::string why;
    a_mem_.assign(1 << 16, 0);
    b_mem_.assign(1 << 16, 0);
    auto ra = Region::make(*dev_, a_mem_.data(), a_mem_.size(), &why);
    auto rb = Region::make(*dev_, b_mem_.data(), b_mem_.size(), &why);
    ASSERT_TRUE(ra.is_ok() && rb.is_ok()) << why;
    a_ = std::move(*ra);
    b_ = std::move(*rb);
  }

  // The completion of wr_id, waiting on the completion channel.
  WorkCompletion await(uint64_t wr_id) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    WorkCompletion c;
    while (std::chrono::steady_clock::now() < end) {
      if (dev_->poll(&c, 1) == 1) {
        if (c.wr_id == wr_id) return c;
        continue;
      }
      if (dev_->arm() && dev_->poll(&c, 1) == 1) {
        if (c.wr_id == wr_id) return c;
        continue;
      }
      dev_->block(100);
    }
    c.error = "no completion in 20 s";
    return c;
  }

  std::unique_ptr<VerbsDevice> dev_;
  std::vector<unsigned char> a_mem_, b_mem_;
  std::unique_ptr<Region> a_, b_;
  std::unique_ptr<RcQp> qa_, qb_;
};

TEST_F(RcPair, WriteThenReadBackEveryByte) {
  for (size_t i = 0; i < 8192; ++i) a_mem_[i] = static_cast<unsigned char>(i * 7 + 1);
  ASSERT_TRUE(qa_->write(1, *a_, 0, b_->addr() + 4096, b_->rkey(), 8192).is_ok());
  WorkCompletion c = await(1);
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(std::memcmp(a_mem_.data(), b_mem_.data() + 4096, 8192), 0);
  // Small writes go inline.
  a_mem_[20000] = 0x5a;
  ASSERT_TRUE(qa_->write(2, *a_, 20000, b_->addr(), b_->rkey(), 1).is_ok());
  ASSERT_TRUE(await(2).ok);
  EXPECT_EQ(b_mem_[0], 0x5a);
  // Read it back into another place.
  ASSERT_TRUE(qa_->read(3, *a_, 32768, b_->addr() + 4096, b_->rkey(), 8192).is_ok());
  c = await(3);
  ASSERT_TRUE(c.ok) << c.error;
  EXPECT_EQ(std::memcmp(a_mem_.data(), a_mem_.data() + 32768, 8192), 0);
}

TEST_F(RcPair, AtomicsReturnTheOldValue) {
  uint64_t v = 40;
  std::memcpy(b_mem_.data() + 64, &v, 8);
  ASSERT_TRUE(qa_->fetch_add(1, *a_, 0, b_->addr() + 64, b_->rkey(), 2).is_ok());
  ASSERT_TRUE(await(1).ok);
  uint64_t old, now;
  std::memcpy(&old, a_mem_.data(), 8);
  std::memcpy(&now, b_mem_.data() + 64, 8);
  EXPECT_EQ(old, 40u);
  EXPECT_EQ(now, 42u);
  ASSERT_TRUE(qa_->compare_swap(2, *a_, 8, b_->addr() + 64, b_->rkey(), 41, 7).is_ok());
  ASSERT_TRUE(await(2).ok);
  std::memcpy(&now, b_mem_.data() + 64, 8);
  EXPECT_EQ(now, 42u);  // expected 41: no swap
  ASSERT_TRUE(qa_->compare_swap(3, *a_, 8, b_->addr() + 64, b_->rkey(), 42, 7).is_ok());
  ASSERT_TRUE(await(3).ok);
  std::memcpy(&old, a_mem_.data() + 8, 8);
  std::memcpy(&now, b_mem_.data() + 64, 8);
  EXPECT_EQ(old, 42u);
  EXPECT_EQ(now, 7u);
  EXPECT_EQ(qa_->fetch_add(4, *a_, 3, b_->addr(), b_->rkey(), 1).code(), Code::kAlign);
}

// The send CQ grows with the QPs (VerbsTransport::count_qp): completions it
// holds when it grows are all still there after, and a size beyond the
// device's is refused with the limit named.
TEST_F(RcPair, TheSendCqGrowsKeepingItsCompletions) {
  const uint32_t before = dev_->cq_entries();
  constexpr uint64_t kWrites = 32;
  for (uint64_t i = 0; i < kWrites; ++i) {
    a_mem_[i] = static_cast<unsigned char>(i + 1);
    ASSERT_TRUE(qa_->write(100 + i, *a_, i, b_->addr() + 1024 + i, b_->rkey(), 1).is_ok());
  }
  std::string why;
  ASSERT_TRUE(dev_->grow_cq(before * 4, &why).is_ok()) << why;
  EXPECT_GE(dev_->cq_entries(), before * 4);
  for (uint64_t i = 0; i < kWrites; ++i) {
    WorkCompletion c = await(100 + i);
    ASSERT_TRUE(c.ok) << "write " << i << ": " << c.error;
  }
  EXPECT_EQ(std::memcmp(a_mem_.data(), b_mem_.data() + 1024, kWrites), 0);
  ASSERT_GT(dev_->max_cqe(), 0u);
  Status s = dev_->grow_cq(dev_->max_cqe() + 1, &why);
  EXPECT_FALSE(s.is_ok());
  EXPECT_NE(why.find("allows"), std::string::npos) << why;
  ASSERT_TRUE(qa_->write(1, *a_, 0, b_->addr(), b_->rkey(), 8).is_ok());  // still usable
  EXPECT_TRUE(await(1).ok);
}

TEST_F(RcPair, BadAccessFailsTheOperationClearly) {
  // A wrong rkey: the responder refuses, the requester's QP reports it.
  ASSERT_TRUE(qa_->write(1, *a_, 0, b_->addr(), b_->rkey() ^ 0x1234, 64).is_ok());
  WorkCompletion c = await(1);
  EXPECT_FALSE(c.ok);
  EXPECT_NE(c.error.find("remote access"), std::string::npos) << c.error;
  std::string why;
  EXPECT_EQ(qa_->write(2, *a_, a_->size() - 4, b_->addr(), b_->rkey(), 8).code(),
            Code::kOutOfBounds);
}

}  // namespace
}  // namespace lt::transport::verbs
