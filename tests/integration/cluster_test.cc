// Integration tests over a real ltier-manager and three real ltier-node
// processes on loopback. Assertions are on behaviour only; the generous
// command deadlines in the harness guard against hangs and are not timings.
#include "cluster.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <random>

#include "three_nodes.h"

namespace lt::itest {
namespace {

INSTANTIATE_TEST_SUITE_P(Transports, ThreeNodes, ::testing::ValuesIn(three_node_transports()),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string name = p.param;
                           std::replace(name.begin(), name.end(), ',', '_');
                           return name;
                         });

TEST_P(ThreeNodes, WriteOnOneNodeReadOnAnother) {
  Proc *a = nodes_[0], *c = nodes_[2];
  // Memory lives on node b; a is its master; c maps it by name.
  std::string h = ok_value(a->cmd("malloc " + ids_[1] + " 4096 rw"));
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(a->cmd("write " + h + " 100 deadbeef0102"), "ok");
  EXPECT_EQ(a->cmd("publish " + h + " itest.buf rw"), "ok");
  std::string hc = ok_value(c->cmd("map itest.buf r"));
  ASSERT_FALSE(hc.empty());
  EXPECT_EQ(c->cmd("read " + hc + " 100 6"), "ok deadbeef0102");
  EXPECT_EQ(c->cmd("read " + hc + " 98 2"), "ok 0000");  // zero-filled
  // A large write crosses many socket buffers; the sum proves every byte.
  EXPECT_EQ(a->cmd("fill " + h + " 0 4096 7"), "ok");
  EXPECT_EQ(c->cmd("sum " + hc + " 0 4096"), "ok " + std::to_string(4096 * 7));
}

TEST_P(ThreeNodes, MemsetAndMemcpyAcrossNodes) {
  Proc* a = nodes_[0];
  std::string src = ok_value(a->cmd("malloc " + ids_[1] + " 1048576 rw"));
  std::string dst = ok_value(a->cmd("malloc " + ids_[2] + " 1048576 rw"));
  std::string loc = ok_value(a->cmd("malloc " + ids_[0] + " 4096 rw"));
  ASSERT_FALSE(src.empty());
  ASSERT_FALSE(dst.empty());
  ASSERT_FALSE(loc.empty());
  EXPECT_EQ(a->cmd("memset " + src + " 0 9 1048576"), "ok");
  EXPECT_EQ(a->cmd("sum " + src + " 0 1048576"), "ok " + std::to_string(9 * 1048576));
  // Remote to remote, on two different nodes.
  EXPECT_EQ(a->cmd("memcpy " + dst + " 0 " + src + " 0 1048576"), "ok");
  EXPECT_EQ(a->cmd("sum " + dst + " 0 1048576"), "ok " + std::to_string(9 * 1048576));
  // Within one remote node, and between local and remote memory.
  EXPECT_EQ(a->cmd("write " + src + " 0 0a0b0c"), "ok");
  EXPECT_EQ(a->cmd("memcpy " + src + " 10 " + src + " 0 3"), "ok");
  EXPECT_EQ(a->cmd("read " + src + " 10 3"), "ok 0a0b0c");
  EXPECT_EQ(a->cmd("memcpy " + loc + " 0 " + src + " 0 3"), "ok");
  EXPECT_EQ(a->cmd("read " + loc + " 0 3"), "ok 0a0b0c");
  EXPECT_EQ(a->cmd("write " + loc + " 0 ffee"), "ok");
  EXPECT_EQ(a->cmd("memcpy " + dst + " 5 " + loc + " 0 2"), "ok");
  EXPECT_EQ(a->cmd("read " + dst + " 5 2"), "ok ffee");
}

// With tiny frames every 1 MiB operation is split into many requests; the
// result must be the same, and a range that ends out of bounds must be
// refused before any chunk is written.
TEST(SmallFrames, LongOperationsAreSplitAndExact) {
  Cluster cluster;
  ASSERT_TRUE(cluster.ok());
  std::vector<std::string> env = {"LTIER_TCP_MAX_MSG_BYTES=65536"};
  Proc* a = cluster.add_node(env);
  Proc* b = cluster.add_node(env);
  Proc* c = cluster.add_node(env);
  ASSERT_TRUE(a && b && c);
  std::string ib = id_of(b), ic = id_of(c);
  const int n = 1048576 + 3;
  std::string src = ok_value(a->cmd("malloc " + ib + " " + std::to_string(n) + " rw"));
  std::string dst = ok_value(a->cmd("malloc " + ic + " " + std::to_string(n) + " rw"));
  ASSERT_FALSE(src.empty());
  ASSERT_FALSE(dst.empty());
  EXPECT_EQ(a->cmd("fill " + src + " 0 " + std::to_string(n) + " 5"), "ok");
  EXPECT_EQ(a->cmd("write " + src + " " + std::to_string(n - 3) + " 010203"), "ok");
  EXPECT_EQ(a->cmd("sum " + src + " 0 " + std::to_string(n)),
            "ok " + std::to_string((n - 3) * 5 + 6));
  EXPECT_EQ(a->cmd("memcpy " + dst + " 0 " + src + " 0 " + std::to_string(n)), "ok");
  EXPECT_EQ(a->cmd("sum " + dst + " 0 " + std::to_string(n)),
            "ok " + std::to_string((n - 3) * 5 + 6));
  EXPECT_EQ(a->cmd("read " + dst + " " + std::to_string(n - 3) + " 3"), "ok 010203");
  // Ends one byte past the LMR: nothing may be written, not even the chunks
  // that would have been in bounds.
  EXPECT_EQ(a->cmd("fill " + dst + " 1 " + std::to_string(n) + " 9"), "err LT_ERR_OUT_OF_BOUNDS");
  EXPECT_EQ(a->cmd("sum " + dst + " 0 " + std::to_string(n)),
            "ok " + std::to_string((n - 3) * 5 + 6));
}

TEST_P(ThreeNodes, BadAccessIsRejectedAndTouchesNothing) {
  Proc *a = nodes_[0], *c = nodes_[2];
  std::string h = ok_value(a->cmd("malloc " + ids_[1] + " 64 rw"));
  ASSERT_FALSE(h.empty());
  ASSERT_EQ(a->cmd("fill " + h + " 0 64 1"), "ok");
  ASSERT_EQ(a->cmd("publish " + h + " itest.guard r"), "ok");
  auto unchanged = [&] { EXPECT_EQ(a->cmd("sum " + h + " 0 64"), "ok 64"); };

  // Out of bounds, including offset overflow.
  EXPECT_EQ(a->cmd("write " + h + " 63 0102"), "err LT_ERR_OUT_OF_BOUNDS");
  EXPECT_EQ(a->cmd("read " + h + " 65 1"), "err LT_ERR_OUT_OF_BOUNDS");
  EXPECT_EQ(a->cmd("memset " + h + " 18446744073709551615 0 2"), "err LT_ERR_OUT_OF_BOUNDS");
  unchanged();

  // Wrong rights: mapped read-only, asked for more than published.
  EXPECT_EQ(c->cmd("map itest.guard rw"), "err LT_ERR_PERM");
  EXPECT_EQ(c->cmd("map itest.nothing r"), "err LT_ERR_NOT_FOUND");
  std::string ro = ok_value(c->cmd("map itest.guard r"));
  ASSERT_FALSE(ro.empty());
  EXPECT_EQ(c->cmd("write " + ro + " 0 ff"), "err LT_ERR_PERM");
  EXPECT_EQ(c->cmd("memset " + ro + " 0 0 64"), "err LT_ERR_PERM");
  EXPECT_EQ(c->cmd("free " + ro), "err LT_ERR_PERM");
  unchanged();

  // Forged handles: flipped tag bits, flipped generation, garbage.
  uint64_t hv = std::stoull(h);
  for (uint64_t forged : std::vector<uint64_t>{hv ^ (1ull << 40), hv ^ (1ull << 21), 12345, 0}) {
    EXPECT_EQ(a->cmd("write " + std::to_string(forged) + " 0 ff"), "err LT_ERR_BAD_HANDLE");
  }
  unchanged();

  // Stale after free: the master's handle fails locally, the mapper's
  // handle is refused by the owner.
  EXPECT_EQ(a->cmd("free " + h), "ok");
  EXPECT_EQ(a->cmd("read " + h + " 0 1"), "err LT_ERR_BAD_HANDLE");
  EXPECT_EQ(c->cmd("read " + ro + " 0 1"), "err LT_ERR_BAD_HANDLE");
  EXPECT_EQ(c->cmd("map itest.guard r"), "err LT_ERR_NOT_FOUND");
}

// 3 nodes x 4 threads of fetch_add on one word give the exact sum: the owner
// node's own threads take the local path, the others go over tcp.
TEST_P(ThreeNodes, FetchAddFromEveryNodeAndThreadIsExact) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  std::string h = ok_value(a->cmd("malloc " + ids_[1] + " 4096 rwa"));
  ASSERT_FALSE(h.empty());
  ASSERT_EQ(a->cmd("publish " + h + " atomic.word rwa"), "ok");
  std::string hb = ok_value(b->cmd("map atomic.word rwa"));
  std::string hc = ok_value(c->cmd("map atomic.word a"));
  ASSERT_FALSE(hb.empty());
  ASSERT_FALSE(hc.empty());
  const int kPerThread = 400;
  ASSERT_TRUE(a->send("fadd_loop " + h + " 8 " + std::to_string(kPerThread) + " 4"));
  ASSERT_TRUE(b->send("fadd_loop " + hb + " 8 " + std::to_string(kPerThread) + " 4"));
  ASSERT_TRUE(c->send("fadd_loop " + hc + " 8 " + std::to_string(kPerThread) + " 4"));
  for (Proc* p : {a, b, c}) EXPECT_EQ(p->read_line(60000), "ok");
  EXPECT_EQ(a->cmd("fadd " + h + " 8 0"), "ok " + std::to_string(3 * 4 * kPerThread));
  // The neighbouring words were not touched.
  EXPECT_EQ(a->cmd("read " + h + " 0 8"), "ok 0000000000000000");
  EXPECT_EQ(a->cmd("read " + h + " 16 8"), "ok 0000000000000000");
}

TEST_P(ThreeNodes, CompareSwapAndAtomicErrors) {
  Proc *a = nodes_[0], *c = nodes_[2];
  std::string h = ok_value(a->cmd("malloc " + ids_[1] + " 64 rwa"));
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(a->cmd("cas " + h + " 0 0 7"), "ok 0");  // swapped: 0 -> 7
  EXPECT_EQ(a->cmd("cas " + h + " 0 0 9"), "ok 7");  // not swapped: still 7
  EXPECT_EQ(a->cmd("cas " + h + " 0 7 9"), "ok 7");  // swapped: 7 -> 9
  EXPECT_EQ(a->cmd("fadd " + h + " 0 1"), "ok 9");
  EXPECT_EQ(a->cmd("fadd " + h + " 0 18446744073709551615"), "ok 10");  // wraps: adds -1
  EXPECT_EQ(a->cmd("fadd " + h + " 0 0"), "ok 9");
  EXPECT_EQ(a->cmd("fadd " + h + " 4 1"), "err LT_ERR_ALIGN");
  EXPECT_EQ(a->cmd("fadd " + h + " 64 1"), "err LT_ERR_OUT_OF_BOUNDS");
  EXPECT_EQ(a->cmd("cas " + h + " 60 0 1"), "err LT_ERR_OUT_OF_BOUNDS");
  // A handle without the atomic right, and an LMR created without it.
  ASSERT_EQ(a->cmd("publish " + h + " atomic.rw rw"), "ok");
  std::string rw = ok_value(c->cmd("map atomic.rw rw"));
  ASSERT_FALSE(rw.empty());
  EXPECT_EQ(c->cmd("fadd " + rw + " 0 1"), "err LT_ERR_PERM");
  EXPECT_EQ(c->cmd("map atomic.rw rwa"), "err LT_ERR_PERM");
  std::string plain = ok_value(a->cmd("malloc " + ids_[2] + " 64 rw"));
  EXPECT_EQ(a->cmd("fadd " + plain + " 0 1"), "err LT_ERR_PERM");
  EXPECT_EQ(a->cmd("fadd " + h + " 0 0"), "ok 9");  // nothing changed
}

// A non-atomic read-modify-write under a named lock, from 3 nodes x 4
// threads, stays exact.
TEST_P(ThreeNodes, LockProtectedCounterIsExact) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  std::string h = ok_value(a->cmd("malloc " + ids_[1] + " 64 rw"));
  ASSERT_FALSE(h.empty());
  ASSERT_EQ(a->cmd("publish " + h + " lock.ctr rw"), "ok");
  std::string hb = ok_value(b->cmd("map lock.ctr rw"));
  std::string hc = ok_value(c->cmd("map lock.ctr rw"));
  const int kPerThread = 60;
  ASSERT_TRUE(a->send("lock_loop " + h + " 0 ctr.lock " + std::to_string(kPerThread) + " 4"));
  ASSERT_TRUE(b->send("lock_loop " + hb + " 0 ctr.lock " + std::to_string(kPerThread) + " 4"));
  ASSERT_TRUE(c->send("lock_loop " + hc + " 0 ctr.lock " + std::to_string(kPerThread) + " 4"));
  for (Proc* p : {a, b, c}) EXPECT_EQ(p->read_line(120000), "ok");
  uint64_t want = 3 * 4 * kPerThread;
  char hex[17];
  snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(__builtin_bswap64(want)));
  EXPECT_EQ(a->cmd("read " + h + " 0 8"), std::string("ok ") + hex);
}

TEST_P(ThreeNodes, BarriersOverFiftyGenerations) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  std::string h = ok_value(a->cmd("malloc " + ids_[0] + " 64 rwa"));
  ASSERT_FALSE(h.empty());
  ASSERT_EQ(a->cmd("publish " + h + " barrier.ctr rwa"), "ok");
  std::string hb = ok_value(b->cmd("map barrier.ctr ra"));
  std::string hc = ok_value(c->cmd("map barrier.ctr ra"));
  ASSERT_TRUE(a->send("barrier_loop gen.barrier 3 50 " + h + " 0"));
  ASSERT_TRUE(b->send("barrier_loop gen.barrier 3 50 " + hb + " 0"));
  ASSERT_TRUE(c->send("barrier_loop gen.barrier 3 50 " + hc + " 0"));
  for (Proc* p : {a, b, c}) EXPECT_EQ(p->read_line(120000), "ok");
}

TEST_P(ThreeNodes, LockAndBarrierErrors) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  EXPECT_EQ(a->cmd("unlock never.taken"), "err LT_ERR_PERM");
  EXPECT_EQ(a->cmd("lock l1"), "ok");
  EXPECT_EQ(a->cmd("lock l1"), "err LT_ERR_EXISTS");  // not reentrant
  EXPECT_EQ(c->cmd("unlock l1"), "err LT_ERR_PERM");  // not the holder
  EXPECT_EQ(c->cmd("lock l1 200"), "err LT_ERR_TIMEDOUT");
  EXPECT_EQ(a->cmd("unlock l1"), "ok");
  // c's timed-out wait was withdrawn: it does not hold the lock now.
  EXPECT_EQ(b->cmd("lock l1 5000"), "ok");
  // A node that dies releases its locks to the next waiter.
  ASSERT_TRUE(c->send("lock l1 10000"));
  b->signal(SIGKILL);
  ASSERT_NE(b->wait_exit(5000), -1);
  EXPECT_EQ(c->read_line(15000), "ok");
  EXPECT_EQ(c->cmd("unlock l1"), "ok");
  // Barriers: a lone arrival times out and is withdrawn, so the next
  // generation still needs two arrivals (had the withdrawal failed, a's
  // second arrival would complete it alone and c would time out). Count
  // mismatches are tested on the manager directly (unit_proto), where the
  // order of arrivals is deterministic.
  EXPECT_EQ(a->cmd("barrier b1 2 200"), "err LT_ERR_TIMEDOUT");
  ASSERT_TRUE(a->send("barrier b1 2 10000"));
  EXPECT_EQ(c->cmd("barrier b1 2 10000"), "ok");
  EXPECT_EQ(a->read_line(15000), "ok");
  EXPECT_EQ(a->cmd("barrier b1 0"), "err LT_ERR_INVAL");
}

TEST_P(ThreeNodes, RpcEchoErrorsAndManyOutstanding) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  EXPECT_EQ(a->cmd("rpc " + ids_[1] + " 1 0a0b0c"), "ok 0a0b0c");
  EXPECT_EQ(a->cmd("rpc " + ids_[1] + " 1 -"), "ok -");  // 0 bytes each way
  // Every size from 0 B to past 8 MiB, checked byte for byte.
  EXPECT_EQ(a->cmd("rpc_sizes " + ids_[1] + " 8388619", 120000), "ok 37");
  EXPECT_EQ(c->cmd("rpc " + ids_[1] + " 777 00"), "err LT_ERR_NO_HANDLER");
  // A call to the caller's own node runs the handler locally.
  EXPECT_EQ(a->cmd("rpc " + ids_[0] + " 1 0d0e"), "ok 0d0e");
  EXPECT_EQ(a->cmd("rpc " + ids_[0] + " 777 00"), "err LT_ERR_NO_HANDLER");
  // Reply of 10 bytes into a 4-byte buffer: the needed size comes back.
  EXPECT_EQ(a->cmd("rpc " + ids_[1] + " 2 3130 4"), "err LT_ERR_TRUNCATED 10");
  EXPECT_EQ(a->cmd("rpc " + ids_[1] + " 2 33 4"), "ok 01080f");
  // 1,000 async calls outstanding at once, from two callers.
  ASSERT_TRUE(a->send("rpc_async " + ids_[1] + " 1000 256"));
  ASSERT_TRUE(c->send("rpc_async " + ids_[1] + " 1000 16"));
  EXPECT_EQ(a->read_line(120000), "ok");
  EXPECT_EQ(c->read_line(120000), "ok");
  // A per-call timeout; the server (blocked 300 ms in the slow handler)
  // then answers the next call normally and the credit came back.
  EXPECT_EQ(a->cmd("rpc_timeout " + ids_[1] + " 50"), "err LT_ERR_TIMEDOUT");
  EXPECT_EQ(a->cmd("rpc " + ids_[1] + " 1 ff"), "ok ff");
  // A dead server.
  b->signal(SIGKILL);
  ASSERT_NE(b->wait_exit(5000), -1);
  EXPECT_EQ(a->cmd("rpc " + ids_[1] + " 1 ff", 15000), "err LT_ERR_PEER_DOWN");
}

// LITE's server loop: two server threads answer with LT_recvRPC/LT_replyRPC
// while two clients call; a request larger than the server's buffer is
// reported truncated and then served (nothing lost); an error status passes
// through; spent tokens are refused (checked inside rpc_loop).
TEST_P(ThreeNodes, RpcServerLoopAnswersInItsOwnThreads) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  // 2 x 3 calls below + 1 denied + 1 large = 8 requests.
  ASSERT_TRUE(b->send("rpc_loop 6 8 2 16"));
  EXPECT_EQ(a->cmd("rpc " + ids_[1] + " 6 010203"), "ok 030201");
  EXPECT_EQ(c->cmd("rpc " + ids_[1] + " 6 0a0b"), "ok 0b0a");
  EXPECT_EQ(a->cmd("rpc " + ids_[1] + " 6 -"), "ok -");
  EXPECT_EQ(c->cmd("rpc " + ids_[1] + " 6 ff"), "ok ff");
  EXPECT_EQ(a->cmd("rpc " + ids_[1] + " 6 ee01"), "err LT_ERR_PERM");
  std::string big(2 * 40, '0');  // 40 bytes: above the server's 16-byte buffer
  big[1] = '1';
  std::string rev(2 * 40, '0');
  rev[2 * 39 + 1] = '1';
  EXPECT_EQ(c->cmd("rpc " + ids_[1] + " 6 " + big), "ok " + rev);
  EXPECT_EQ(a->cmd("rpc " + ids_[1] + " 6 11"), "ok 11");
  EXPECT_EQ(c->cmd("rpc " + ids_[1] + " 6 1122"), "ok 2211");
  std::string done = b->read_line(30000);
  EXPECT_TRUE(done.rfind("ok 8 ", 0) == 0) << done;
  EXPECT_NE(done, "ok 8 0") << "the 40-byte request was never truncated";
  // Nobody serving now: the caller times out, and function 6 on a node that
  // runs no loop still queues (it is registered) rather than failing.
  EXPECT_EQ(a->cmd("rpc_timeout_func " + ids_[2] + " 6 50"), "err LT_ERR_TIMEDOUT");
}

// A call to the node's own server-loop function waits in its queue like a
// peer's and is completed by that node's own LT_replyRPC: replies, a
// truncated request served after its buffer grew, and a denial.
TEST_P(ThreeNodes, RpcToOwnServerLoop) {
  std::string done = nodes_[2]->cmd("rpc_loop_self 6 12", 60000);
  EXPECT_TRUE(done.rfind("ok 12 ", 0) == 0) << done;
  EXPECT_NE(done, "ok 12 0") << "no request outgrew the server's 4-byte buffer";
  // A call already waiting in the queue is taken at the LT_recvRPC_async
  // call (LT_REQ_DONE); one larger than the receive's buffer still goes
  // through a request (TRUNCATED, left queued for the next receive).
  EXPECT_EQ(nodes_[2]->cmd("rpc_queue_take 6", 60000), "ok done");
}

// An async op that can be done at once (here an atomic on this node's own
// LMR) takes its request slot first: refused for the tenant's quota, it has
// not happened (a caller that retries a fetch_add must not add twice).
TEST(Quota, RefusedAsyncAtomicDoesNothing) {
  Cluster cluster;
  ASSERT_TRUE(cluster.ok());
  // No stage: a large send over shm is placed or pulled, and waits for b.
  Proc* a = cluster.add_node({"LTIER_MAX_OUTSTANDING_OPS=1", "LTIER_SHM_STAGE_BYTES=0"});
  Proc* b = cluster.add_node();
  ASSERT_TRUE(a && b);
  std::string ia = id_of(a), ib = id_of(b);
  std::string h = ok_value(a->cmd("malloc " + ia + " 64 rwa"));
  ASSERT_FALSE(h.empty());
  ASSERT_EQ(a->cmd("fadd_async " + h + " 0 1"), "ok 0");
  // A rendezvous send b does not receive yet holds a's only operation.
  ASSERT_EQ(a->cmd("send_async " + ib + " 31 1048576"), "ok");
  EXPECT_EQ(a->cmd("fadd_async " + h + " 0 5"), "err LT_ERR_QUOTA");
  EXPECT_EQ(b->cmd("recv_pat 31 1048576"), "ok " + ia + " 0");
  EXPECT_EQ(a->cmd("wait_sends"), "ok");
  EXPECT_EQ(a->cmd("fadd " + h + " 0 0"), "ok 1") << "the refused add did not happen";
}

// engine.rpc_workers: handlers run on a pool and may block; a blocked
// handler (function 4, waiting for function 5) does not stop others.
TEST(RpcWorkers, BlockingHandlerDoesNotStallOthers) {
  Cluster cluster;
  ASSERT_TRUE(cluster.ok());
  Proc* server = cluster.add_node({"LTIER_RPC_WORKERS=2"});
  Proc* client = cluster.add_node();
  ASSERT_TRUE(server && client);
  std::string is = id_of(server);
  EXPECT_EQ(client->cmd("rpc_gate " + is, 60000), "ok");
  EXPECT_EQ(client->cmd("rpc " + is + " 1 0102"), "ok 0102");
  EXPECT_EQ(client->cmd("rpc_sizes " + is + " 300000", 60000).rfind("ok ", 0), 0u);
}

TEST_P(ThreeNodes, KilledNodeFailsFastWithPeerDown) {
  Proc *a = nodes_[0], *b = nodes_[1];
  std::string h = ok_value(a->cmd("malloc " + ids_[1] + " 4096 rw"));
  ASSERT_FALSE(h.empty());
  ASSERT_EQ(a->cmd("read " + h + " 0 4"), "ok 00000000");
  b->signal(SIGKILL);
  ASSERT_NE(b->wait_exit(5000), -1);  // kill() returns before the process is gone
  // Over shm b's memory stays mapped at a until a's poller reads the closed
  // connection: a read issued in that instant may still complete from it.
  // Within a few polls (well before the manager's verdict) every op fails.
  EXPECT_EQ(cmd_until_not(a, "read " + h + " 0 4", "ok 00000000", 50, 10), "err LT_ERR_PEER_DOWN");
  EXPECT_EQ(a->cmd("malloc " + ids_[1] + " 64 rw", 15000), "err LT_ERR_PEER_DOWN");
  // The survivors still work with each other.
  std::string h2 = ok_value(a->cmd("malloc " + ids_[2] + " 64 rw"));
  ASSERT_FALSE(h2.empty());
  EXPECT_EQ(a->cmd("write " + h2 + " 0 11"), "ok");
}

// An LMR lives until its master frees it or is gone: when the master dies,
// the owner frees what it held for it (nobody else could), and handles
// mapped by other nodes fail with BAD_HANDLE, as after the master's LT_free.
TEST_P(ThreeNodes, DeadMastersLmrsAreFreed) {
  Proc *a = nodes_[0], *b = nodes_[1];
  std::string h = ok_value(a->cmd("malloc " + ids_[2] + " 4096 rw"));  // on c, a is master
  ASSERT_FALSE(h.empty());
  ASSERT_EQ(a->cmd("publish " + h + " itest.orphan rw"), "ok");
  std::string m = ok_value(b->cmd("map itest.orphan rw"));
  ASSERT_FALSE(m.empty());
  ASSERT_EQ(b->cmd("write " + m + " 0 2a"), "ok");
  ASSERT_EQ(b->cmd("read " + m + " 0 1"), "ok 2a");
  a->signal(SIGKILL);
  ASSERT_NE(a->wait_exit(5000), -1);
  // c frees it when the manager declares a down (down_after_ms).
  EXPECT_EQ(cmd_until_not(b, "read " + m + " 0 1", "ok 2a", 300, 50), "err LT_ERR_BAD_HANDLE");
  // c's own LMRs, and b's on c, are untouched.
  std::string h2 = ok_value(b->cmd("malloc " + ids_[2] + " 64 rw"));
  ASSERT_FALSE(h2.empty());
  EXPECT_EQ(b->cmd("write " + h2 + " 0 11"), "ok");
  EXPECT_EQ(b->cmd("read " + h2 + " 0 1"), "ok 11");
}

TEST_P(ThreeNodes, StoppedNodeIsDeclaredDownByHeartbeat) {
  Proc *a = nodes_[0], *c = nodes_[2];
  std::string h = ok_value(a->cmd("malloc " + ids_[2] + " 64 rw"));
  ASSERT_FALSE(h.empty());
  c->signal(SIGSTOP);  // connections stay open; only heartbeats stop
  ASSERT_TRUE(c->wait_stopped(5000));
  // The manager declares it down after down_after_ms, well before the 10 s
  // op timeout, so the read fails with PEER_DOWN rather than TIMEDOUT. Over
  // shm the stopped node's memory stays readable natively (as an RNIC
  // serves a stopped process) until then: reads succeed, then PEER_DOWN.
  std::string r;
  for (int i = 0; i < 300; ++i) {
    r = a->cmd("read " + h + " 0 4", 15000);
    if (r != "ok 00000000") break;
    usleep(50000);
  }
  EXPECT_EQ(r, "err LT_ERR_PEER_DOWN");
  c->signal(SIGKILL);
  c->signal(SIGCONT);
}

// A node stopped past the down time (a stall) learns, when it runs again,
// that the manager declared it down: every call fails with CLOSED instead of
// going on as an orphan that its peers no longer know.
TEST_P(ThreeNodes, StalledNodeFailsLoudlyWhenItRunsAgain) {
  Proc *a = nodes_[0], *c = nodes_[2];
  std::string h = ok_value(c->cmd("malloc " + ids_[0] + " 64 rw"));  // on a; c is master
  ASSERT_FALSE(h.empty());
  c->signal(SIGSTOP);
  ASSERT_TRUE(c->wait_stopped(5000));
  // Wait until a has c down (the manager's down_after_ms).
  std::string r;
  for (int i = 0; i < 300; ++i) {
    r = a->cmd("nodes");
    if (r.find(" " + ids_[2] + " ") == std::string::npos &&
        r.substr(r.size() - ids_[2].size() - 1) != " " + ids_[2]) {
      break;
    }
    usleep(50000);
  }
  ASSERT_EQ(r.find(" " + ids_[2] + " "), std::string::npos) << r;
  c->signal(SIGCONT);
  // c reads the manager's word as soon as its progress thread runs; a
  // malloc on itself needs nobody else, so it answers at once either way.
  for (int i = 0; i < 300; ++i) {
    r = c->cmd("malloc " + ids_[2] + " 64 rw");
    if (r == "err LT_ERR_CLOSED") break;
    usleep(50000);
  }
  EXPECT_EQ(r, "err LT_ERR_CLOSED");
  EXPECT_EQ(c->cmd("read " + h + " 0 4"), "err LT_ERR_CLOSED");
  EXPECT_EQ(c->cmd("malloc " + ids_[1] + " 64 rw"), "err LT_ERR_CLOSED");
  EXPECT_EQ(c->cmd("send " + ids_[0] + " 5 01"), "err LT_ERR_CLOSED");
  EXPECT_EQ(c->cmd("lock L 1000"), "err LT_ERR_CLOSED");
  // The others go on without it.
  std::string h2 = ok_value(a->cmd("malloc " + ids_[1] + " 64 rw"));
  ASSERT_FALSE(h2.empty());
  EXPECT_EQ(a->cmd("write " + h2 + " 0 11"), "ok");
}

TEST_P(ThreeNodes, GarbageOnTcpPortLeavesNodeServing) {
  Proc *a = nodes_[0], *b = nodes_[1];
  std::string addr = ok_value(b->cmd("address"));
  ASSERT_FALSE(addr.empty());
  auto colon = addr.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(addr.substr(colon + 1))));
  inet_pton(AF_INET, addr.substr(0, colon).c_str(), &sa.sin_addr);

  std::mt19937 rng(42);
  std::vector<std::string> payloads;
  std::string junk(4096, '\0');
  for (auto& ch : junk) ch = static_cast<char>(rng());
  payloads.push_back(junk);
  payloads.push_back("GET / HTTP/1.0\r\n\r\n");
  // A valid-looking header with a huge length, and a hello with a bad token.
  payloads.push_back(std::string("\x4c\x54\x01\x02\xff\xff\xff\x7f", 8) + std::string(8, '\0'));
  payloads.push_back(std::string("\x4c\x54\x01\x01\x10\x00\x00\x00", 8) + std::string(8, '\0') +
                     std::string("\x02\x00\x00\x00\x00\x00\x00\x00", 8) + std::string(8, 'x'));
  for (auto& p : payloads) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    ASSERT_EQ(send(fd, p.data(), p.size(), MSG_NOSIGNAL), static_cast<ssize_t>(p.size()));
    // The node drops the connection (EOF) instead of crashing.
    pollfd pf{fd, POLLIN, 0};
    ASSERT_EQ(poll(&pf, 1, 10000), 1);
    char tmp[16];
    EXPECT_LE(recv(fd, tmp, sizeof(tmp), 0), 0);
    close(fd);
  }
  std::string h = ok_value(a->cmd("malloc " + ids_[1] + " 64 rw"));
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(a->cmd("write " + h + " 0 c0ffee"), "ok");
  EXPECT_EQ(a->cmd("read " + h + " 0 3"), "ok c0ffee");
}

// Two nodes joining at once: the MemberUp for the second can arrive in the
// same read as the first node's JoinOk. Each must still learn of the other.
TEST(Join, NodesJoiningTogetherSeeEachOther) {
  Cluster cluster;
  ASSERT_TRUE(cluster.ok());
  std::vector<std::string> env = {"LTIER_MANAGER=" + cluster.manager_address(),
                                  "LTIER_SECRET=itest-secret", "LTIER_TCP_LISTEN=127.0.0.1:0"};
  for (int round = 0; round < 8; ++round) {
    Proc a({Cluster::bin("ltier-node")}, env), b({Cluster::bin("ltier-node")}, env);
    std::string ra = a.read_line(15000), rb = b.read_line(15000);
    ASSERT_EQ(ra.rfind("ready ", 0), 0u) << ra;
    ASSERT_EQ(rb.rfind("ready ", 0), 0u) << rb;
    std::string ida = ra.substr(6), idb = rb.substr(6);
    auto lists = [](Proc& p, const std::string& id) {
      // Membership is pushed asynchronously: allow it a moment to arrive,
      // but a push stuck in a buffer never does.
      for (int i = 0; i < 100; ++i) {
        std::string n = p.cmd("nodes") + " ";
        if (n.find(" " + id + " ") != std::string::npos) return true;
        usleep(20000);
      }
      return false;
    };
    EXPECT_TRUE(lists(a, idb)) << "round " << round << ": node " << ida << " never saw " << idb;
    EXPECT_TRUE(lists(b, ida)) << "round " << round << ": node " << idb << " never saw " << ida;
  }
}

// The examples, run as a user would against a live cluster, must succeed.
TEST(Examples, RunAgainstLiveCluster) {
  Cluster cluster;
  ASSERT_TRUE(cluster.ok());
  ASSERT_NE(cluster.add_node(), nullptr);
  ASSERT_NE(cluster.add_node(), nullptr);
  std::vector<std::string> env = {"LTIER_MANAGER=" + cluster.manager_address(),
                                  "LTIER_SECRET=itest-secret", "LTIER_TCP_LISTEN=127.0.0.1:0"};
  for (const char* ex : {"remote_memset", "quickstart", "tour"}) {
    Proc p({std::string(LTIER_EXAMPLES_DIR) + "/" + ex}, env);
    std::string out, line;
    while ((line = p.read_line(60000)) != "EOF" && line != "TIMEOUT") out += line + "\n";
    EXPECT_EQ(p.wait_exit(10000), 0) << ex << " printed:\n" << out;
  }
}

// ltier-run starts a manager and N ranks of one program, and stops them.
void run_ring(const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {Cluster::bin("ltier-run"), "-n", "3", "--timeout", "60"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back("--");
  argv.push_back(std::string(LTIER_EXAMPLES_DIR) + "/spmd_ring");
  Proc p(argv, {});
  std::string out, line;
  int oks = 0;
  while ((line = p.read_line(90000)) != "EOF" && line != "TIMEOUT") {
    out += line + "\n";
    if (line.find(": ok") != std::string::npos) ++oks;
  }
  EXPECT_EQ(p.wait_exit(10000), 0) << out;
  EXPECT_EQ(oks, 3) << out;
}

TEST(Tools, LtierRunRing) { run_ring({}); }

// Nodes are found by their name and by the rank a launcher gave them
// (LTIER_RANK, as ltier-run sets it), and a node that joins later is waited for.
TEST(Names, NodesByNameAndRank) {
  Cluster cluster;
  ASSERT_TRUE(cluster.ok());
  Proc* a = cluster.add_node({"LTIER_RANK=0", "LTIER_NODE_NAME=alpha"});
  Proc* b = cluster.add_node({"LTIER_RANK=1", "LTIER_NODE_NAME=beta"});
  Proc* c = cluster.add_node({"LTIER_NODE_NAME=gamma"});
  ASSERT_TRUE(a && b && c);
  std::string ia = id_of(a), ib = id_of(b), ic = id_of(c);
  EXPECT_EQ(a->cmd("node_by_rank 1"), "ok " + ib);
  EXPECT_EQ(c->cmd("node_by_rank 0"), "ok " + ia);
  EXPECT_EQ(a->cmd("node_by_name gamma"), "ok " + ic);
  EXPECT_EQ(b->cmd("node_by_name beta"), "ok " + ib) << "a node finds itself";
  EXPECT_EQ(a->cmd("node_info " + ib), "ok " + ib + " 1 beta");
  EXPECT_EQ(a->cmd("node_info " + ic), "ok " + ic + " - gamma");
  EXPECT_EQ(a->cmd("node_by_rank 7"), "err LT_ERR_NOT_FOUND");
  EXPECT_EQ(a->cmd("node_by_name nobody"), "err LT_ERR_NOT_FOUND");
  EXPECT_EQ(a->cmd("node_info 999"), "err LT_ERR_NOT_FOUND");
  // A rank that has not joined yet is waited for.
  ASSERT_TRUE(a->send("node_by_rank 2 20000"));
  Proc* d = cluster.add_node({"LTIER_RANK=2"});
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(a->read_line(20000), "ok " + id_of(d));
  // A rank that is not a number is refused at LT_join.
  std::string line;
  EXPECT_EQ(cluster.add_node({"LTIER_RANK=two"}, {}, &line), nullptr);
  EXPECT_EQ(line, "err LT_ERR_INVAL");
}

// ltier-run stops the ranks' programs themselves, not only the shells that
// run them, when it times out or is terminated.
TEST(Tools, LtierRunStopsItsRanks) {
  // A sleep whose length names this test run: no other process has it.
  const std::string secs = std::to_string(1000 + getpid() % 5000);
  auto ranks_left = [&] { return shell("pgrep -f '^sleep " + secs + "$' >/dev/null") == 0; };
  auto wait_gone = [&] {
    for (int i = 0; i < 100 && ranks_left(); ++i) usleep(50000);
    return !ranks_left();
  };
  {
    Proc p({Cluster::bin("ltier-run"), "-n", "2", "--timeout", "1", "--", "sleep", secs}, {});
    EXPECT_EQ(p.wait_exit(30000), 124);
    EXPECT_TRUE(wait_gone()) << "a rank's program outlived ltier-run's timeout";
  }
  {
    Proc p({Cluster::bin("ltier-run"), "-n", "2", "--timeout", "60", "--", "sleep", secs}, {});
    for (int i = 0; i < 100 && !ranks_left(); ++i) usleep(50000);
    ASSERT_TRUE(ranks_left()) << "the ranks did not start";
    p.signal(SIGTERM);
    EXPECT_EQ(p.wait_exit(30000), 130);
    EXPECT_TRUE(wait_gone()) << "a rank's program outlived ltier-run's SIGTERM";
  }
}

// Streaming large messages with 16 sends in flight, over tcp and over shm,
// as ltier-perf --bw does. Regression: over tcp, replies corked behind a
// progress pass that kept finding work starved the pulls (the sends then
// timed out) and the node's heartbeats (it was declared down).
TEST(Tools, PerfStreamsLargeMessages) {
#if defined(__SANITIZE_THREAD__)
  // Under TSan every recv() and memcpy of a 1 MiB message updates shadow
  // memory byte by byte: a node streaming them misses its 1.5 s heartbeats
  // and is declared down. Covered by the RelWithDebInfo and ASan runs.
  GTEST_SKIP() << "too slow under ThreadSanitizer to keep heartbeats (see comment)";
#endif
  for (const char* transports : {"tcp", "shm,tcp"}) {
    Proc p({Cluster::bin("ltier-perf"), "--ops", "send", "--sizes", "1048576", "--iters", "25",
            "--bw"},
           {std::string("LTIER_TRANSPORTS=") + transports});
    std::string out, line;
    bool bw = false;
    while ((line = p.read_line(120000)) != "EOF" && line != "TIMEOUT") {
      out += line + "\n";
      bw = bw || line.rfind("bw op=send size=1048576", 0) == 0;
    }
    EXPECT_EQ(p.wait_exit(10000), 0) << transports << ":\n" << out;
    EXPECT_TRUE(bw) << transports << ":\n" << out;
  }
}

// --dump writes every latency sample of a run, in order: as many as the run
// reports, each a time, and their median the p50 it prints.
TEST(Tools, PerfDumpsEverySample) {
  char dir[] = "/tmp/ltier-perf-dump.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string prefix = std::string(dir) + "/lat";
  Proc p({Cluster::bin("ltier-perf"), "--ops", "read", "--sizes", "8", "--iters", "300", "--warmup",
          "10", "--dump", prefix},
         {"LTIER_TRANSPORTS=tcp"});
  std::string out, line;
  double p50 = -1;
  while ((line = p.read_line(60000)) != "EOF" && line != "TIMEOUT") {
    out += line + "\n";
    if (line.rfind("lat op=read size=8 iters=300 ", 0) == 0) {
      p50 = std::atof(line.substr(line.find("p50_us=") + 7).c_str());
    }
  }
  ASSERT_EQ(p.wait_exit(10000), 0) << out;
  ASSERT_GT(p50, 0) << out;
  FILE* f = fopen((prefix + ".read.8").c_str(), "r");
  ASSERT_NE(f, nullptr) << "no " << prefix << ".read.8";
  std::vector<double> v;
  double x;
  while (fscanf(f, "%lf", &x) == 1) v.push_back(x);
  fclose(f);
  ASSERT_EQ(v.size(), 300u);
  for (double s : v) EXPECT_GT(s, 0);
  std::sort(v.begin(), v.end());
  // ltier-perf's p50 is a middle sample, printed to 0.01 us.
  EXPECT_GE(p50, v[149] - 0.01);
  EXPECT_LE(p50, v[150] + 0.01);
  (void)system(("rm -rf " + std::string(dir)).c_str());

  // A prefix that cannot be written is refused, not ignored.
  Proc bad({Cluster::bin("ltier-perf"), "--ops", "read", "--sizes", "8", "--iters", "50", "--dump",
            "/nonexistent-dir/lat"},
           {"LTIER_TRANSPORTS=tcp"});
  out.clear();
  while ((line = bad.read_line(60000)) != "EOF" && line != "TIMEOUT") out += line + "\n";
  EXPECT_EQ(bad.wait_exit(10000), 1) << out;
}

TEST(Tools, LtierRunRingInNamespaces) {
  if (system("ip netns add ltier-run-probe >/dev/null 2>&1") != 0) {
    fprintf(stderr, "\n*** SKIPPED LOUDLY: ltier-run --netns: `ip netns add` refused ***\n\n");
    GTEST_SKIP() << "ip netns add refused";
  }
  (void)system("ip netns del ltier-run-probe >/dev/null 2>&1");
  run_ring({"--netns"});
}

TEST(Join, WrongSecretIsRefusedClearly) {
  Cluster cluster;
  ASSERT_TRUE(cluster.ok());
  std::string line;
  Proc* p = cluster.add_node({"LTIER_SECRET=not-the-secret"}, {}, &line);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(line, "err LT_ERR_AUTH");
}

TEST(Join, NoManagerIsPeerDown) {
  Cluster cluster;
  ASSERT_TRUE(cluster.ok());
  std::string line;
  // Port 1 on loopback: nothing listens there.
  Proc* p = cluster.add_node({"LTIER_MANAGER=127.0.0.1:1"}, {}, &line);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(line, "err LT_ERR_PEER_DOWN");
}

TEST(Join, BrokenConfigIsInvalid) {
  Cluster cluster;
  ASSERT_TRUE(cluster.ok());
  std::string line;
  Proc* p = cluster.add_node({"LTIER_SPIN_US=lots"}, {}, &line);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(line, "err LT_ERR_INVAL");
  // Values that parse but could never work: an unknown transport, no credits.
  for (const char* bad :
       {"LTIER_TRANSPORTS=rdma", "LTIER_MSG_CREDITS=0", "LTIER_RPC_RING_SLOTS=0"}) {
    line.clear();
    EXPECT_EQ(cluster.add_node({bad}, {}, &line), nullptr) << bad;
    EXPECT_EQ(line, "err LT_ERR_INVAL") << bad;
  }
}

}  // namespace
}  // namespace lt::itest
