// Integration tests of many threads in several processes using one peer at
// once, over every transport: every kind of operation, sizes on both sides
// of each transport's fragment and eager limits, all checked. A lock-order
// slip between a poster and the progress thread shows up here as a hang
// (the harness dumps the stuck node's threads).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cluster.h"
#include "three_nodes.h"

namespace lt::itest {
namespace {

// Two nodes, four threads each, call, write, read, add and send messages
// (8 B to 1 MiB) to the third at the same time; the third serves, owns the
// memory and receives.
TEST_P(ThreeNodes, EveryOperationFromManyThreadsAtOnce) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  ASSERT_TRUE(b->send("recv_mixed 7 96"));  // 2 nodes x 4 threads x 12 rounds
  const std::string cmd = "mixed_threads " + ids_[1] + " 4 12 7";
  ASSERT_TRUE(a->send(cmd));
  ASSERT_TRUE(c->send(cmd));
  EXPECT_EQ(a->read_line(120000), "ok");
  EXPECT_EQ(c->read_line(120000), "ok");
  EXPECT_EQ(b->read_line(120000), "ok");
  // And the peer still answers after it.
  EXPECT_EQ(a->cmd("rpc " + ids_[1] + " 1 0a0b"), "ok 0a0b");
}

// Handlers that do one-sided ops on each other's memory while calls flood
// both ways: a's calls run b's handler, which reads a's memory, and b's
// calls run a's, which reads b's; c calls a as well. Over rc a READ once
// queued behind message SENDs on the same QP, which the peer answered with
// receiver-not-ready while its own handler waited the same way: two such
// nodes could wait on each other for good (one-sided ops now have QPs of
// their own, verbs.rdma_qps_per_peer). Every call must finish with the
// right bytes. Over rc, a and b have 16 receive buffers: a progress thread
// held in a handler then leaves its peer's SENDs receiver-not-ready at once
// (in the Soft-RoCE guest, with verbs.rdma_qps_per_peer 0 this test timed
// out and lost a node; with 1 it passes). Over tcp and ud the owner's CPU
// serves a one-sided op, and a handler on the progress thread must not
// wait for one (ARCHITECTURE §5): there a and b run their handlers on
// workers (engine.rpc_workers).
TEST_P(ThreeNodes, HandlersReadingEachOtherUnderAFloodAllFinish) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  std::string ida = ids_[0], idb = ids_[1];
  const std::string param = GetParam();
  std::vector<std::string> env;
  if (param == "rc,tcp") env = {"LTIER_VERBS_RECV_BUFFERS=16"};
  if (param == "tcp" || param == "ud,tcp") env = {"LTIER_RPC_WORKERS=2"};
  if (!env.empty()) {
    env.push_back("LTIER_TRANSPORTS=" + param);
    a = cluster_.add_node(env);
    b = cluster_.add_node(env);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    ida = id_of(a);
    idb = id_of(b);
  }
  // ha: a's handle to memory on b; hb: b's handle to memory on a.
  const std::string ha = ok_value(a->cmd("malloc " + idb + " 4096 rw"));
  const std::string hb = ok_value(b->cmd("malloc " + ida + " 4096 rw"));
  ASSERT_FALSE(ha.empty());
  ASSERT_FALSE(hb.empty());
  ASSERT_EQ(a->cmd("fill " + ha + " 0 4096 90"), "ok");
  ASSERT_EQ(b->cmd("fill " + hb + " 0 4096 165"), "ok");
  // Function 7 on the callee reads its own handle: b's handler reads a's
  // memory (165), a's handler reads b's (90).
  ASSERT_TRUE(a->send("rpc_read_threads " + idb + " " + hb + " 4096 165 8 100"));
  ASSERT_TRUE(b->send("rpc_read_threads " + ida + " " + ha + " 4096 90 8 100"));
  ASSERT_TRUE(c->send("rpc_read_threads " + ida + " " + ha + " 4096 90 4 100"));
  EXPECT_EQ(a->read_line(180000), "ok");
  EXPECT_EQ(b->read_line(180000), "ok");
  EXPECT_EQ(c->read_line(180000), "ok");
  // A handler's failed read reaches the caller as the call's status.
  EXPECT_EQ(a->cmd("rpc_read_threads " + idb + " 12345 8 0 1 1"), "err LT_ERR_BAD_HANDLE");
}

// A handler on the progress thread that waits for its peer (an LT_read
// the owner serves, over tcp and ud) could only time out, since no pass
// can run until it returns, and its node's heartbeats would stop meanwhile.
// The read fails at once instead, and the node stays up and answers. Over
// shm and rc the read is native and done in the handler.
TEST_P(ThreeNodes, AHandlerWaitingForItsPeerFailsAtOnceAndTheNodeStays) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  const std::string ha = ok_value(a->cmd("malloc " + ids_[1] + " 4096 rw"));
  ASSERT_FALSE(ha.empty());
  ASSERT_EQ(a->cmd("fill " + ha + " 0 4096 90"), "ok");
  const std::string param = GetParam();
  const bool native = param != "tcp" && param != "ud,tcp";
  EXPECT_EQ(b->cmd("rpc_read_threads " + ids_[0] + " " + ha + " 4096 90 1 3"),
            native ? "ok" : "err LT_ERR_TIMEDOUT");
  EXPECT_EQ(b->cmd("rpc " + ids_[0] + " 1 0a0b"), "ok 0a0b");
  EXPECT_EQ(c->cmd("rpc " + ids_[0] + " 1 0a0b"), "ok 0a0b");
  const std::string hc = ok_value(c->cmd("malloc " + ids_[0] + " 64 rw"));  // a still serves
  ASSERT_FALSE(hc.empty());
  EXPECT_EQ(c->cmd("read " + hc + " 0 2"), "ok 0000");
}

// Messages and a call arriving together: the handler of the call, run
// while the messages before it in the same batch of arrivals have just been
// stored on their port, takes them with LT_recv (a look, timeout 0). Each
// call must answer its round's messages, whole and in order, and a look
// that finds none is no error (a batch held under the port lock, or a
// look treated as a handler's wait, would hang or fail here).
TEST_P(ThreeNodes, AHandlerTakesTheMessagesThatArrivedInItsBatch) {
  Proc *a = nodes_[0], *c = nodes_[2];
  ASSERT_TRUE(a->send("send_then_take " + ids_[1] + " 9 300"));
  ASSERT_TRUE(c->send("send_then_take " + ids_[1] + " 10 300"));
  EXPECT_EQ(a->read_line(120000), "ok");
  EXPECT_EQ(c->read_line(120000), "ok");
  EXPECT_EQ(a->cmd("rpc " + ids_[1] + " 1 0a0b"), "ok 0a0b");
}

}  // namespace
}  // namespace lt::itest
