// What rc costs a node, read from LT_stats (ltier-node's stats command) in
// the Soft-RoCE guest (tests/rdma runs this binary with LTIER_ITEST_RC=1):
// QPs grow with peers, not with threads (verbs.qps_per_peer for messages and
// verbs.rdma_qps_per_peer for one-sided ops per peer, shared by every thread
// of the engine), rc and ud of a node share one device
// context, and peers' native one-sided ops never
// reach the owner's CPU (its served-request counter does not move), most of
// them one work request each.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "cluster.h"

namespace lt::itest {
namespace {

constexpr int kMsgQps = 2;
constexpr int kRdmaQps = 1;
constexpr int kQpsPerPeer = kMsgQps + kRdmaQps;
constexpr int kThreads = 8;

bool have_rc() {
  const char* rc = std::getenv("LTIER_ITEST_RC");
  return rc != nullptr && rc[0] == '1';
}

// One counter of a stats reply: "served", or "rc:qps" (a field of the
// "rc:conns=2,qps=4,..." token); -1 when missing.
long long stat(const std::string& reply, const std::string& key) {
  std::string text = " " + reply;
  std::string field = " " + key + "=";
  const size_t colon = key.find(':');
  if (colon != std::string::npos) {
    const std::string scope = " " + key.substr(0, colon + 1);
    const size_t at = text.find(scope);
    if (at == std::string::npos) return -1;
    const size_t begin = at + scope.size();
    text = "," + text.substr(begin, text.find(' ', begin) - begin);
    field = "," + key.substr(colon + 1) + "=";
  }
  const size_t at = text.find(field);
  if (at == std::string::npos) return -1;
  return std::stoll(text.substr(at + field.size()));
}

class RcResources : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_rc()) GTEST_SKIP() << "needs an RDMA device (LTIER_ITEST_RC=1, tests/rdma)";
    ASSERT_TRUE(cluster_.ok()) << "ltier-manager did not start";
    for (int i = 0; i < 3; ++i) {
      Proc* p = cluster_.add_node(env());
      ASSERT_NE(p, nullptr) << "ltier-node did not become ready";
      nodes_.push_back(p);
      ids_.push_back(id_of(p));
    }
  }
  virtual std::vector<std::string> env() const {
    return {"LTIER_TRANSPORTS=rc,tcp", "LTIER_VERBS_QPS_PER_PEER=" + std::to_string(kMsgQps),
            "LTIER_VERBS_RDMA_QPS_PER_PEER=" + std::to_string(kRdmaQps)};
  }
  // Sends `line(i)` to every node at once, then takes their replies.
  template <typename F>
  void on_all(F line) {
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(nodes_[i]->send(line(i)));
    for (int i = 0; i < 3; ++i) EXPECT_EQ(nodes_[i]->read_line(120000), "ok") << "node " << i;
  }
  Cluster cluster_;
  std::vector<Proc*> nodes_;
  std::vector<std::string> ids_;
};

// 3 nodes x 8 threads, each thread calling RPCs on both peers and adding to
// an LMR on one of them: K + R QPs per peer, 2 peers, so (K + R) x 2 QPs per node; the
// calls go into the servers' RPC rings.
TEST_F(RcResources, QueuePairsGrowWithPeersNotThreads) {
  std::vector<std::string> h(3);
  for (int i = 0; i < 3; ++i) {
    h[i] = ok_value(nodes_[i]->cmd("malloc " + ids_[(i + 1) % 3] + " 4096 rwa"));
    ASSERT_FALSE(h[i].empty());
  }
  const std::string threads = " " + std::to_string(kThreads) + " ";
  on_all([&](int i) { return "rpc_threads " + ids_[(i + 1) % 3] + threads + "40"; });
  on_all([&](int i) { return "rpc_threads " + ids_[(i + 2) % 3] + threads + "40"; });
  on_all([&](int i) { return "fadd_loop " + h[i] + " 0 40" + threads; });
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(nodes_[i]->cmd("fadd " + h[i] + " 0 0"), "ok " + std::to_string(40 * kThreads));
    std::string st = nodes_[i]->cmd("stats");
    SCOPED_TRACE(st);
    EXPECT_EQ(stat(st, "rc:conns"), 2);
    EXPECT_EQ(stat(st, "rc:qps"), 2 * kQpsPerPeer);
    EXPECT_LE(stat(st, "rc:spare"), kQpsPerPeer);
    EXPECT_GE(stat(st, "rc:regs"), 1);
    // LITE's path: most calls went into the servers' rings (the first to
    // each server went as a message while the ring was set up), and the
    // replies came back into this node's reply rings.
    EXPECT_GT(stat(st, "ring_calls"), 2 * 40 * kThreads / 2);
    EXPECT_GT(stat(st, "ring_replies"), 2 * 40 * kThreads / 2);
  }
}

// Reads, writes, atomics, memsets and memcpys between nodes by a peer over
// rc leave the owners' served counters where they were; a memcpy between
// two LMRs of one owner is served by it, and moves its counter.
TEST_F(RcResources, NativeOpsDoNotReachTheOwnersCpu) {
  Proc *a = nodes_[0], *b = nodes_[1];
  std::string hb = ok_value(a->cmd("malloc " + ids_[1] + " 65536 rwa"));
  ASSERT_FALSE(hb.empty());
  ASSERT_EQ(a->cmd("write " + hb + " 0 0102030405060708"), "ok");  // connected, warmed up
  const long long before = stat(b->cmd("stats"), "served");
  ASSERT_GE(before, 0);
  EXPECT_EQ(a->cmd("write " + hb + " 100 c0ffee"), "ok");
  EXPECT_EQ(a->cmd("read " + hb + " 100 3"), "ok c0ffee");
  EXPECT_EQ(a->cmd("fadd_loop " + hb + " 8 50 4"), "ok");
  EXPECT_EQ(a->cmd("cas " + hb + " 16 0 7"), "ok 0");
  EXPECT_EQ(a->cmd("fadd " + hb + " 8 0"), "ok 200");
  EXPECT_EQ(a->cmd("memset " + hb + " 2000 171 40000"), "ok");  // 0xab, in chunks
  // memcpy between b's LMR and c's, and between a's own and b's: no owner
  // serves it (c's LMR is mapped by a, its master, which made it there).
  Proc* c = nodes_[2];
  std::string hc = ok_value(a->cmd("malloc " + ids_[2] + " 200000 rwa"));
  std::string ha = ok_value(a->cmd("malloc " + ids_[0] + " 65536 rwa"));
  ASSERT_FALSE(hc.empty());
  ASSERT_FALSE(ha.empty());
  ASSERT_EQ(a->cmd("write " + hc + " 0 00"), "ok");  // connected, warmed up
  const long long c_before = stat(c->cmd("stats"), "served");
  EXPECT_EQ(a->cmd("memcpy " + hc + " 5 " + hb + " 1999 40001"), "ok");  // b -> c, chunks
  EXPECT_EQ(a->cmd("memcpy " + ha + " 7 " + hb + " 100 3"), "ok");       // b -> here
  EXPECT_EQ(a->cmd("memcpy " + hb + " 60000 " + ha + " 7 3"), "ok");     // here -> b
  EXPECT_EQ(stat(b->cmd("stats"), "served"), before);
  EXPECT_EQ(stat(c->cmd("stats"), "served"), c_before);
  EXPECT_EQ(a->cmd("read " + hb + " 1999 3"), "ok 00abab");
  EXPECT_EQ(a->cmd("read " + hb + " 41998 3"), "ok abab00");
  EXPECT_EQ(a->cmd("read " + hc + " 4 3"), "ok 0000ab");
  EXPECT_EQ(a->cmd("read " + hc + " 40004 3"), "ok abab00");
  EXPECT_EQ(a->cmd("read " + hb + " 60000 3"), "ok c0ffee");
  EXPECT_EQ(a->cmd("memcpy " + hb + " 1000 " + hb + " 100 3"), "ok");
  EXPECT_GT(stat(b->cmd("stats"), "served"), before);
  EXPECT_EQ(a->cmd("read " + hb + " 1000 3"), "ok c0ffee");
}

// A memset of 1 MiB is 16 one-sided writes of 64 KiB. Right after a checked
// read they go without their liveness checks, one work request each where
// each with its check would be two; a check comes back only when the last
// one matched more than 50 ms ago.
TEST_F(RcResources, OpsGoAloneWhileTheLivenessCheckIsFresh) {
  Proc *a = nodes_[0], *c = nodes_[2];
  std::string h = ok_value(a->cmd("malloc " + ids_[1] + " 1048576 rw"));
  ASSERT_FALSE(h.empty());
  ASSERT_EQ(a->cmd("publish " + h + " itest.fresh rw"), "ok");
  std::string m = ok_value(c->cmd("map itest.fresh rw"));
  ASSERT_FALSE(m.empty());
  ASSERT_EQ(c->cmd("read " + m + " 0 1"), "ok 00");
  const long long before = tx_ops_to(c, ids_[1]);
  ASSERT_GE(before, 0);
  ASSERT_EQ(c->cmd("memset " + m + " 0 5 1048576"), "ok");
  const long long sent = tx_ops_to(c, ids_[1]) - before;
  EXPECT_GE(sent, 16);
  EXPECT_LT(sent, 24) << "work requests for 16 chunks";
  EXPECT_EQ(c->cmd("sum " + m + " 0 1048576"), "ok " + std::to_string(5 * 1048576));
  // Freed by its master, the mapping fails at once, whatever its stamp.
  ASSERT_EQ(a->cmd("free " + h), "ok");
  EXPECT_EQ(c->cmd("write " + m + " 0 01"), "err LT_ERR_BAD_HANDLE");
}

// LT_write_async with a window of requests: the writes are done by the
// device (the owner's served counter does not move), every byte arrives,
// and a window cut by the owner's death fails with LT_ERR_PEER_DOWN instead
// of hanging.
TEST_F(RcResources, WindowedAsyncWritesLandWholeAndFailWithTheirPeer) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  std::string h = ok_value(a->cmd("malloc " + ids_[1] + " 4194304 rw"));
  ASSERT_FALSE(h.empty());
  ASSERT_EQ(a->cmd("publish " + h + " itest.window rw"), "ok");
  std::string m = ok_value(c->cmd("map itest.window rw"));
  ASSERT_FALSE(m.empty());
  ASSERT_EQ(c->cmd("read " + m + " 0 1"), "ok 00");  // connected, the stamp fresh
  const long long before = stat(b->cmd("stats"), "served");
  ASSERT_GE(before, 0);
  // 64 KiB writes 16 in flight, then odd sizes that straddle chunks.
  EXPECT_EQ(c->cmd("write_pat " + m + " 0 3145728 11 65536 16", 120000), "ok");
  EXPECT_EQ(c->cmd("write_pat " + m + " 3145728 1048576 12 200003 4", 120000), "ok");
  EXPECT_EQ(stat(b->cmd("stats"), "served"), before);
  EXPECT_EQ(a->cmd("check_pat " + h + " 0 3145728 11 1048576", 120000), "ok");
  EXPECT_EQ(a->cmd("check_pat " + h + " 3145728 1048576 12 1048576", 120000), "ok");
  // The owner dies while a window is in flight.
  ASSERT_TRUE(c->send("write_pat " + m + " 0 4194304 13 65536 16"));
  b->signal(SIGKILL);
  const std::string r = c->read_line(120000);
  EXPECT_TRUE(r == "ok" || r.rfind("err LT_ERR_PEER_DOWN", 0) == 0) << r;
  EXPECT_EQ(c->cmd("write_pat " + m + " 0 65536 13 65536 16", 60000).rfind("err ", 0), 0u);
}

// With verbs.rc_qp_budget = K every node has room for one rc peer: a reaches
// b over rc, and the pairs that come after go over ud (the dialer's budget
// or the acceptor's refuses), saying why; every pair still works, and ud
// holds one QP whatever the number of its peers.
class RcBudget : public RcResources {
 protected:
  std::vector<std::string> env() const override {
    return {"LTIER_TRANSPORTS=rc,ud,tcp", "LTIER_VERBS_QPS_PER_PEER=" + std::to_string(kMsgQps),
            "LTIER_VERBS_RDMA_QPS_PER_PEER=" + std::to_string(kRdmaQps),
            "LTIER_VERBS_RC_QP_BUDGET=" + std::to_string(kQpsPerPeer)};
  }
};

TEST_F(RcBudget, FurtherPeersGoToUd) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  EXPECT_EQ(a->cmd("transport " + ids_[1]).rfind("ok rc", 0), 0u);
  std::string ac = a->cmd("transport " + ids_[2]);  // a's budget is spent
  EXPECT_EQ(ac.rfind("ok ud", 0), 0u) << ac;
  EXPECT_NE(ac.find("rc_qp_budget"), std::string::npos) << ac;
  EXPECT_EQ(b->cmd("transport " + ids_[0]).rfind("ok rc", 0), 0u);  // a's connection
  std::string cb = c->cmd("transport " + ids_[1]);  // b refuses: its budget went to a
  EXPECT_EQ(cb.rfind("ok ud", 0), 0u) << cb;
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) {
      if (i == j) continue;
      EXPECT_EQ(nodes_[i]->cmd("rpc " + ids_[j] + " 1 0a0b0c"), "ok 0a0b0c") << i << "->" << j;
    }
    std::string st = nodes_[i]->cmd("stats");
    EXPECT_LE(stat(st, "rc:qps"), kQpsPerPeer) << st;
    EXPECT_EQ(stat(st, "ud:qps"), 1) << st;
  }
}

// The RDMA device files process `pid` holds open: one per device context
// (ibv_open_device opens /dev/infiniband/uverbsN).
int device_files(pid_t pid) {
  int n = 0;
  std::error_code ec;
  for (const auto& e :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::error_code rec;
    if (std::filesystem::read_symlink(e.path(), rec).string().rfind("/dev/infiniband/uverbs", 0) ==
        0) {
      ++n;
    }
  }
  return ec ? -1 : n;
}

// rc and ud of one engine open the device once between them: one context
// and one protection domain, while both carry peers.
TEST_F(RcBudget, RcAndUdShareOneDeviceContext) {
  Proc* a = nodes_[0];
  EXPECT_EQ(a->cmd("transport " + ids_[1]).rfind("ok rc", 0), 0u);
  EXPECT_EQ(a->cmd("transport " + ids_[2]).rfind("ok ud", 0), 0u);
  for (int j = 1; j < 3; ++j) {
    EXPECT_EQ(a->cmd("rpc " + ids_[j] + " 1 0a0b"), "ok 0a0b") << j;
  }
  const std::string st = a->cmd("stats");
  EXPECT_GE(stat(st, "rc:qps"), 1) << st;
  EXPECT_EQ(stat(st, "ud:qps"), 1) << st;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(device_files(nodes_[i]->pid()), 1) << "node " << i;
}

// ud with 10% of datagrams dropped on receipt at every node: 32 MiB of
// messages (eager and rendezvous sizes, every byte and the order checked)
// and 32 MiB of one-sided data written and read back through the owner
// (every byte compared) arrive whole, and the stats show the recovery.
class UdLoss : public RcResources {
 protected:
  std::vector<std::string> env() const override {
    return {"LTIER_TRANSPORTS=ud,tcp", "LTIER_VERBS_UD_LOSS_PERCENT=10"};
  }
};

TEST_F(UdLoss, SixtyFourMiBArriveWholeThroughTenPercentLoss) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  EXPECT_EQ(a->cmd("transport " + ids_[1]).rfind("ok ud", 0), 0u);
  // Messages to b: 16 MiB by rendezvous from c, 16 MiB eager from a.
  ASSERT_TRUE(b->send("recv_seq 7 16 1048576"));
  EXPECT_EQ(c->cmd("send_seq " + ids_[1] + " 7 16 1048576", 120000), "ok");
  EXPECT_EQ(b->read_line(120000), "ok");
  ASSERT_TRUE(b->send("recv_seq 8 1024 16384"));
  EXPECT_EQ(a->cmd("send_seq " + ids_[1] + " 8 1024 16384", 120000), "ok");
  EXPECT_EQ(b->read_line(120000), "ok");
  // One-sided: 32 MiB on b, written by a in 1 MiB writes, read back by c.
  std::string h = ok_value(a->cmd("malloc " + ids_[1] + " 33554432 rw"));
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(a->cmd("publish " + h + " ud.loss rw"), "ok");
  std::string hc = ok_value(c->cmd("map ud.loss r"));
  ASSERT_FALSE(hc.empty());
  EXPECT_EQ(a->cmd("write_pat " + h + " 0 33554432 5 1048576", 120000), "ok");
  EXPECT_EQ(c->cmd("check_pat " + hc + " 0 33554432 5 4194304", 120000), "ok");
  // Every node sent tens of MiB through the loss: LT_stats counts what it
  // sent again, and the congestion windows it cut.
  for (int i = 0; i < 3; ++i) {
    std::string st = nodes_[i]->cmd("stats");
    EXPECT_GT(stat(st, "ud:rexmit"), 0) << st;
    EXPECT_GT(stat(st, "ud:cuts"), 0) << st;
  }
}

// A QP in error under a live peer: on node a, verbs.rc_fault_after moves the
// QP that carries its 30th work request to the error state, as a retry or
// access error would. The operation it carried (or the next one) fails with
// LT_ERR_PEER_DOWN and nothing hangs; the peer stays a member; the next
// operations connect again over rc, with new QPs, and see every byte; RPCs
// and messages work over the new connection.
TEST(RcRecovery, AQpInErrorIsReplacedAndThePeerStaysUp) {
  if (!have_rc()) GTEST_SKIP() << "needs an RDMA device (LTIER_ITEST_RC=1, tests/rdma)";
  Cluster cluster;
  ASSERT_TRUE(cluster.ok()) << "ltier-manager did not start";
  Proc* b = cluster.add_node({"LTIER_TRANSPORTS=rc,tcp"});
  Proc* a = cluster.add_node({"LTIER_TRANSPORTS=rc,tcp", "LTIER_VERBS_RC_FAULT_AFTER=30"});
  ASSERT_TRUE(a && b);
  const std::string ib = id_of(b), ia = id_of(a);
  const std::string h = ok_value(a->cmd("malloc " + ib + " 4096 rw"));
  ASSERT_FALSE(h.empty());
  int failed = 0, ok_in_a_row = 0;
  for (int i = 0; i < 60; ++i) {
    char hex[9];
    std::snprintf(hex, sizeof(hex), "%08x", 0x5a000000u + static_cast<unsigned>(i));
    std::string got = a->cmd("write " + h + " 0 " + hex, 20000);
    if (got == "ok") got = a->cmd("read " + h + " 0 4", 20000);
    if (got == "ok " + std::string(hex)) {
      ++ok_in_a_row;
      continue;
    }
    EXPECT_EQ(got, "err LT_ERR_PEER_DOWN") << "op " << i;
    ++failed;
    ok_in_a_row = 0;
  }
  EXPECT_GE(failed, 1) << "no operation saw the QP in error";
  EXPECT_LE(failed, 2) << "the connection was not made again at once";
  EXPECT_GE(ok_in_a_row, 20);
  const std::string t = a->cmd("transport " + ib);
  EXPECT_EQ(t.rfind("ok rc", 0), 0u) << t;
  EXPECT_EQ(a->cmd("rpc " + ib + " 1 0a0b0c"), "ok 0a0b0c");
  EXPECT_EQ(b->cmd("rpc " + ia + " 1 0d0e"), "ok 0d0e");
  EXPECT_EQ(a->cmd("send " + ib + " 9 c0ffee"), "ok");
  EXPECT_EQ(b->cmd("recv 9 16"), "ok " + ia + " c0ffee");
  const std::string members = a->cmd("nodes");
  EXPECT_NE(members.find(ib), std::string::npos) << members;
}

// ud's QP in error under live peers: on node a, verbs.ud_fault_after moves
// the UD QP to the error state at its 30th post, as a local error would.
// One QP serves every ud peer, so ud resets it in place and sends again
// what was lost with it: unlike rc's, no operation fails, the peer keeps
// its ud connection, and every byte arrives.
TEST(UdRecovery, AQpInErrorIsResetAndNoOperationFails) {
  if (!have_rc()) GTEST_SKIP() << "needs an RDMA device (LTIER_ITEST_RC=1, tests/rdma)";
  Cluster cluster;
  ASSERT_TRUE(cluster.ok()) << "ltier-manager did not start";
  Proc* b = cluster.add_node({"LTIER_TRANSPORTS=ud,tcp"});
  Proc* a = cluster.add_node({"LTIER_TRANSPORTS=ud,tcp", "LTIER_VERBS_UD_FAULT_AFTER=30"});
  ASSERT_TRUE(a && b);
  const std::string ib = id_of(b), ia = id_of(a);
  const std::string h = ok_value(a->cmd("malloc " + ib + " 4096 rw"));
  ASSERT_FALSE(h.empty());
  for (int i = 0; i < 60; ++i) {
    char hex[9];
    std::snprintf(hex, sizeof(hex), "%08x", 0x6b000000u + static_cast<unsigned>(i));
    EXPECT_EQ(a->cmd("write " + h + " 0 " + hex, 20000), "ok") << "op " << i;
    EXPECT_EQ(a->cmd("read " + h + " 0 4", 20000), "ok " + std::string(hex)) << "op " << i;
  }
  // Once in a full guest batch, right after UdLoss, one read here timed out
  // and the next write found the peer down: both nodes' counters say more.
  if (HasFailure()) {
    printf("node a stats: %s\nnode b stats: %s\n", a->cmd("stats").c_str(),
           b->cmd("stats").c_str());
  }
  // The QP was put back in service. Whether a datagram was still in the
  // device when it failed depends on the device's timing (Soft-RoCE may
  // have sent the 30th post already): what was, was sent again, which the
  // operations above arriving whole show; the count of those is not fixed.
  EXPECT_GE(stat(a->cmd("stats"), "ud:resets"), 1);
  const std::string t = a->cmd("transport " + ib);
  EXPECT_EQ(t.rfind("ok ud", 0), 0u) << t;
  EXPECT_EQ(a->cmd("rpc " + ib + " 1 0a0b0c"), "ok 0a0b0c");
  EXPECT_EQ(b->cmd("rpc " + ia + " 1 0d0e"), "ok 0d0e");
  EXPECT_EQ(a->cmd("send " + ib + " 9 c0ffee"), "ok");
  EXPECT_EQ(b->cmd("recv 9 16"), "ok " + ia + " c0ffee");
}

}  // namespace
}  // namespace lt::itest
