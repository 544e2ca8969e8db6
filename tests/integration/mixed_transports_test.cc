// Nodes with different transport lists in one cluster, where an RDMA device
// is (tests/rdma runs this binary in the Soft-RoCE guest with
// LTIER_ITEST_RC=1): a node running shm and rc keeps its LMRs in shm memory
// and exports them to rc, so a same-host shm peer and an rc peer both reach
// the same bytes natively, each with its own key; an rc-only node's LMRs
// live in rc's pools.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>

#include "cluster.h"

namespace lt::itest {
namespace {

bool have_rc() {
  const char* rc = std::getenv("LTIER_ITEST_RC");
  return rc != nullptr && rc[0] == '1';
}

class MixedTransports : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_rc()) GTEST_SKIP() << "needs an RDMA device (LTIER_ITEST_RC=1, tests/rdma)";
    ASSERT_TRUE(cluster_.ok()) << "ltier-manager did not start";
    // a and c run shm and rc; b runs rc only (the same host, but no shm).
    for (const char* t : {"shm,rc,tcp", "rc,tcp", "shm,rc,tcp"}) {
      Proc* p = cluster_.add_node({std::string("LTIER_TRANSPORTS=") + t});
      ASSERT_NE(p, nullptr) << "ltier-node did not become ready";
      nodes_.push_back(p);
      ids_.push_back(id_of(p));
    }
  }
  // A node is stopped for a moment below: it is not to be declared down.
  static ClusterOptions options() {
    ClusterOptions o;
    o.down_after_ms = 30000;
    return o;
  }
  Cluster cluster_{options()};
  std::vector<Proc*> nodes_;
  std::vector<std::string> ids_;
};

TEST_F(MixedTransports, EachPairUsesItsBestTransport) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  EXPECT_EQ(a->cmd("transport " + ids_[1]).rfind("ok rc", 0), 0u);
  EXPECT_EQ(a->cmd("transport " + ids_[2]).rfind("ok shm", 0), 0u);
  EXPECT_EQ(b->cmd("transport " + ids_[2]).rfind("ok rc", 0), 0u);
  EXPECT_EQ(c->cmd("transport " + ids_[0]).rfind("ok shm", 0), 0u);
}

// An LMR on a (shm memory exported to rc): b writes it over rc, c reads it
// over shm and writes back, b reads that; every node adds to one word.
TEST_F(MixedTransports, ExportedLmrIsOneMemoryForShmAndRcPeers) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  std::string hb = ok_value(b->cmd("malloc " + ids_[0] + " 65536 rwa"));
  ASSERT_FALSE(hb.empty());
  EXPECT_EQ(b->cmd("write " + hb + " 40000 c0ffee"), "ok");
  ASSERT_EQ(b->cmd("publish " + hb + " mixed.a rwa"), "ok");
  std::string hc = ok_value(c->cmd("map mixed.a rwa"));
  std::string ha = ok_value(a->cmd("map mixed.a rwa"));
  ASSERT_FALSE(hc.empty());
  ASSERT_FALSE(ha.empty());
  EXPECT_EQ(c->cmd("read " + hc + " 40000 3"), "ok c0ffee");
  EXPECT_EQ(a->cmd("read " + ha + " 40000 3"), "ok c0ffee");
  EXPECT_EQ(c->cmd("write " + hc + " 65530 0102030405ff"), "ok");
  EXPECT_EQ(b->cmd("read " + hb + " 65530 6"), "ok 0102030405ff");
  EXPECT_EQ(b->cmd("write " + hb + " 65535 0102"), "err LT_ERR_OUT_OF_BOUNDS");
  const int kPerThread = 300;
  for (auto [p, h] : {std::pair{a, ha}, std::pair{b, hb}, std::pair{c, hc}}) {
    ASSERT_TRUE(p->send("fadd_loop " + h + " 8 " + std::to_string(kPerThread) + " 2"));
  }
  for (Proc* p : {a, b, c}) EXPECT_EQ(p->read_line(60000), "ok");
  EXPECT_EQ(b->cmd("fadd " + hb + " 8 0"), "ok " + std::to_string(3 * 2 * kPerThread));
  EXPECT_EQ(c->cmd("cas " + hc + " 16 0 9"), "ok 0");
  EXPECT_EQ(b->cmd("cas " + hb + " 16 9 11"), "ok 9");
  EXPECT_EQ(a->cmd("read " + ha + " 16 8"), "ok 0b00000000000000");
  // Native: the owner's CPU takes no part. With a stopped, b (over rc, with
  // the exported key) and c (over shm) still read and add.
  a->signal(SIGSTOP);
  EXPECT_EQ(b->cmd("read " + hb + " 40000 3"), "ok c0ffee");
  EXPECT_EQ(c->cmd("read " + hc + " 40000 3"), "ok c0ffee");
  EXPECT_EQ(b->cmd("fadd " + hb + " 8 1"), "ok " + std::to_string(3 * 2 * kPerThread));
  a->signal(SIGCONT);
  // Freed by its master: the exported memory is gone for every peer.
  EXPECT_EQ(b->cmd("free " + hb), "ok");
  EXPECT_EQ(c->cmd("read " + hc + " 0 1"), "err LT_ERR_BAD_HANDLE");
}

// An LMR on the rc-only node b: a and c reach it over rc with its pool key.
TEST_F(MixedTransports, RcOnlyNodesLmrIsReachedByEveryone) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  std::string ha = ok_value(a->cmd("malloc " + ids_[1] + " 8192 rwa"));
  ASSERT_FALSE(ha.empty());
  EXPECT_EQ(a->cmd("write " + ha + " 8000 abcdef"), "ok");
  ASSERT_EQ(a->cmd("publish " + ha + " mixed.b rw"), "ok");
  std::string hc = ok_value(c->cmd("map mixed.b rw"));
  std::string hb = ok_value(b->cmd("map mixed.b rw"));
  EXPECT_EQ(c->cmd("read " + hc + " 8000 3"), "ok abcdef");
  EXPECT_EQ(b->cmd("read " + hb + " 8000 3"), "ok abcdef");
  EXPECT_EQ(c->cmd("write " + hc + " 0 77"), "ok");
  EXPECT_EQ(a->cmd("read " + ha + " 0 1"), "ok 77");
  // Native with the pool key: b stopped, a and c still read it.
  b->signal(SIGSTOP);
  EXPECT_EQ(a->cmd("read " + ha + " 8000 3"), "ok abcdef");
  EXPECT_EQ(c->cmd("read " + hc + " 0 1"), "ok 77");
  b->signal(SIGCONT);
}

// Messages between a shm,rc node and an rc-only one, above the eager size
// (a's stage is shm memory, so they go by rendezvous, not by its stage).
TEST_F(MixedTransports, LargeMessagesCrossBetweenShmRcAndRcOnlyNodes) {
  Proc *a = nodes_[0], *b = nodes_[1];
  ASSERT_TRUE(a->send("send_seq " + ids_[1] + " 5 12 300000"));
  EXPECT_EQ(b->cmd("recv_seq 5 12 300000", 60000), "ok");
  EXPECT_EQ(a->read_line(60000), "ok");
  ASSERT_TRUE(b->send("send_seq " + ids_[0] + " 6 12 300000"));
  EXPECT_EQ(a->cmd("recv_seq 6 12 300000", 60000), "ok");
  EXPECT_EQ(b->read_line(60000), "ok");
}

}  // namespace
}  // namespace lt::itest
