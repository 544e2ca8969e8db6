#include "common/status.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <set>
#include <string>

namespace lt {
namespace {

TEST(StatusTest, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_TRUE(static_cast<bool>(s));
  EXPECT_EQ(s.code(), Code::kOk);
  EXPECT_EQ(s, Status::ok());
}

TEST(StatusTest, ErrorCodeIsKept) {
  Status s = Code::kPeerDown;
  EXPECT_FALSE(s.is_ok());
  EXPECT_FALSE(static_cast<bool>(s));
  EXPECT_EQ(s.code(), Code::kPeerDown);
  EXPECT_NE(s, Status::ok());
  EXPECT_EQ(s, Status(Code::kPeerDown));
  EXPECT_STREQ(s.name(), "LT_ERR_PEER_DOWN");
}

TEST(StatusTest, EveryCodeHasDistinctNameAndText) {
  std::set<std::string> names;
  for (int i = 0; i < kNumCodes; ++i) {
    Code c = static_cast<Code>(i);
    const char* name = code_name(c);
    const char* text = code_text(c);
    ASSERT_NE(name, nullptr) << "code " << i;
    ASSERT_NE(text, nullptr) << "code " << i;
    EXPECT_GT(std::strlen(name), 0u) << "code " << i;
    EXPECT_GT(std::strlen(text), 0u) << "code " << i;
    EXPECT_EQ(std::string(name).rfind("LT_", 0), 0u) << name;
    EXPECT_NE(std::string(name), "LT_ERR_UNKNOWN") << "code " << i << " has no table entry";
    EXPECT_TRUE(names.insert(name).second) << "duplicate name " << name;
    EXPECT_STREQ(Status(c).name(), name);
    EXPECT_STREQ(Status(c).text(), text);
  }
  EXPECT_STREQ(code_name(Code::kOk), "LT_OK");
}

TEST(StatusTest, OutOfRangeCodeIsUnknownNotACrash) {
  Code c = static_cast<Code>(kNumCodes);
  ASSERT_NE(code_name(c), nullptr);
  ASSERT_NE(code_text(c), nullptr);
  EXPECT_STREQ(code_name(c), "LT_ERR_UNKNOWN");
  EXPECT_STREQ(code_name(static_cast<Code>(255)), "LT_ERR_UNKNOWN");
}

TEST(ResultTest, HoldsValue) {
  Result<int> r = 42;
  ASSERT_TRUE(r.is_ok());
  EXPECT_TRUE(static_cast<bool>(r));
  EXPECT_TRUE(r.status().is_ok());
  EXPECT_EQ(r.value(), 42);
  EXPECT_EQ(*r, 42);
}

TEST(ResultTest, HoldsError) {
  Result<int> r = Code::kTimedOut;
  EXPECT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kTimedOut);
  Result<int> r2 = Status(Code::kQuota);
  EXPECT_FALSE(r2.is_ok());
  EXPECT_EQ(r2.status().code(), Code::kQuota);
}

TEST(ResultTest, CopyAndMoveKeepValue) {
  Result<std::string> a = std::string("hello");
  Result<std::string> b = a;
  ASSERT_TRUE(b.is_ok());
  EXPECT_EQ(b.value(), "hello");
  EXPECT_EQ(b->size(), 5u);
  Result<std::string> c = std::move(b);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(*c, "hello");
  Result<std::string> d = Code::kNotFound;
  d = a;
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(*d, "hello");
  d = Result<std::string>(Code::kExists);
  EXPECT_FALSE(d.is_ok());
  EXPECT_EQ(d.status().code(), Code::kExists);
}

TEST(ResultTest, MoveOnlyValue) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(7);
  ASSERT_TRUE(r.is_ok());
  std::unique_ptr<int> p = std::move(r).value();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(*p, 7);
}

TEST(ResultTest, DestroysValueOnce) {
  auto counter = std::make_shared<int>(0);
  {
    Result<std::shared_ptr<int>> r = counter;
    EXPECT_EQ(counter.use_count(), 2);
    Result<std::shared_ptr<int>> r2 = r;
    EXPECT_EQ(counter.use_count(), 3);
    r2 = Result<std::shared_ptr<int>>(Code::kInternal);
    EXPECT_EQ(counter.use_count(), 2);
  }
  EXPECT_EQ(counter.use_count(), 1);
}

Status fails_with(Code c) { return c; }

Status propagate(Code c, bool* reached_end) {
  LT_RETURN_IF_ERROR(fails_with(c));
  *reached_end = true;
  return Status::ok();
}

TEST(StatusTest, ReturnIfErrorPropagates) {
  bool reached = false;
  EXPECT_EQ(propagate(Code::kMalformed, &reached).code(), Code::kMalformed);
  EXPECT_FALSE(reached);
  EXPECT_TRUE(propagate(Code::kOk, &reached).is_ok());
  EXPECT_TRUE(reached);
}

Result<int> half(int v) {
  if (v % 2 != 0) return Code::kInvalidArg;
  return v / 2;
}

Result<int> quarter(int v) {
  auto h = half(v);
  if (!h) return h.status();
  return half(*h);
}

TEST(ResultTest, ErrorPropagatesThroughResult) {
  EXPECT_EQ(quarter(8).value(), 2);
  EXPECT_EQ(quarter(6).status().code(), Code::kInvalidArg);
  EXPECT_EQ(quarter(3).status().code(), Code::kInvalidArg);
}

}  // namespace
}  // namespace lt
