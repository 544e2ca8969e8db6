// What a master's LT_free does to the handles other nodes mapped: it
// revokes them, so they fail at once with BAD_HANDLE and send nothing to the
// owner, and a stopped mapper does not hold the free up. And LMRs made and
// freed by the dozen on one peer: each op reaches its own LMR's memory
// (over shm, more regions than a connection or a thread keeps mapped).
#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include "cluster.h"
#include "three_nodes.h"

namespace lt::itest {
namespace {

TEST_P(ThreeNodes, FreeRevokesMappedHandlesWithoutAWordToTheOwner) {
  Proc *a = nodes_[0], *c = nodes_[2];
  // On b, a is the master, c maps it by name and uses it.
  std::string h = ok_value(a->cmd("malloc " + ids_[1] + " 4096 rw"));
  ASSERT_FALSE(h.empty());
  ASSERT_EQ(a->cmd("publish " + h + " itest.revoke rw"), "ok");
  std::string m = ok_value(c->cmd("map itest.revoke rw"));
  ASSERT_FALSE(m.empty());
  ASSERT_EQ(c->cmd("write " + m + " 8 2a"), "ok");
  ASSERT_EQ(c->cmd("read " + m + " 8 1"), "ok 2a");
  const long long before = tx_ops_to(c, ids_[1]);
  ASSERT_GE(before, 0);

  ASSERT_EQ(a->cmd("free " + h), "ok");
  // c learnt it before the free returned: its ops fail in c itself.
  EXPECT_EQ(c->cmd("read " + m + " 8 1"), "err LT_ERR_BAD_HANDLE");
  EXPECT_EQ(c->cmd("write " + m + " 8 2b"), "err LT_ERR_BAD_HANDLE");
  EXPECT_EQ(c->cmd("fadd " + m + " 0 1"), "err LT_ERR_BAD_HANDLE");
  EXPECT_EQ(tx_ops_to(c, ids_[1]), before);
  EXPECT_EQ(c->cmd("map itest.revoke rw"), "err LT_ERR_NOT_FOUND");
  // b and c still work with each other.
  std::string h2 = ok_value(c->cmd("malloc " + ids_[1] + " 64 rw"));
  ASSERT_FALSE(h2.empty());
  EXPECT_EQ(c->cmd("write " + h2 + " 0 11"), "ok");
  EXPECT_EQ(c->cmd("read " + h2 + " 0 1"), "ok 11");
}

TEST_P(ThreeNodes, FreeReturnsWhileAMapperIsStopped) {
  Proc *a = nodes_[0], *c = nodes_[2];
  std::string h = ok_value(a->cmd("malloc " + ids_[1] + " 64 rw"));
  ASSERT_FALSE(h.empty());
  ASSERT_EQ(a->cmd("publish " + h + " itest.stopped rw"), "ok");
  std::string m = ok_value(c->cmd("map itest.stopped rw"));
  ASSERT_FALSE(m.empty());
  ASSERT_EQ(c->cmd("read " + m + " 0 1"), "ok 00");
  c->signal(SIGSTOP);
  ASSERT_TRUE(c->wait_stopped(5000));
  // The revocation waits for c's answer only a bounded time.
  EXPECT_EQ(a->cmd("free " + h), "ok");
  c->signal(SIGCONT);
  EXPECT_EQ(c->cmd("read " + m + " 0 1"), "err LT_ERR_BAD_HANDLE");
  EXPECT_EQ(c->cmd("write " + m + " 0 01"), "err LT_ERR_BAD_HANDLE");
}

TEST_P(ThreeNodes, ManyLmrsOnOnePeerMadeFreedAndMadeAgainKeepTheirOwnBytes) {
  Proc* a = nodes_[0];
  constexpr int kLmrs = 70;  // past the shm connection's 64 mapped regions
  auto hex = [](int i) {
    char b[3];
    snprintf(b, sizeof(b), "%02x", i & 0xff);
    return std::string(b);
  };
  for (int round = 0; round < 2; ++round) {
    std::vector<std::string> hs;
    for (int i = 0; i < kLmrs; ++i) {
      hs.push_back(ok_value(a->cmd("malloc " + ids_[1] + " 4096 rwa")));
      ASSERT_FALSE(hs.back().empty()) << i;
      ASSERT_EQ(a->cmd("read " + hs.back() + " 8 1"), "ok 00") << "round " << round << ", " << i;
      ASSERT_EQ(a->cmd("write " + hs.back() + " 8 " + hex(i + round)), "ok");
    }
    for (int pass = 0; pass < 2; ++pass) {
      for (int i = 0; i < kLmrs; ++i) {
        ASSERT_EQ(a->cmd("read " + hs[i] + " 8 1"), "ok " + hex(i + round)) << i;
        ASSERT_EQ(a->cmd("fadd " + hs[i] + " 16 1"), "ok " + std::to_string(pass)) << i;
      }
    }
    for (const std::string& h : hs) ASSERT_EQ(a->cmd("free " + h), "ok");
    EXPECT_EQ(a->cmd("read " + hs[0] + " 8 1").rfind("err ", 0), 0u) << "a freed LMR still read";
  }
}

}  // namespace
}  // namespace lt::itest
