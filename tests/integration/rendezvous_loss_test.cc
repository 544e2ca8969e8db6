// Integration tests of large messages and writes whose receiver is lost
// while the data is on its way: the sender's transport may still be sending
// it from the sender's own buffer (tcp queues a placement write, or a large
// LT_write's payload, by reference), and the operation must still end, with
// the peer's loss, not hang.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <string>

#include "cluster.h"
#include "three_nodes.h"

namespace lt::itest {
namespace {

// A receiver stopped in the middle of a stream of 32 MiB messages (far more
// than the sockets between the two hold, so the sender's queue holds the
// rest of one), then killed: the blocked sender fails with PEER_DOWN, and
// goes on with the others.
TEST_P(ThreeNodes, ReceiverStoppedMidMessageThenKilled) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  const std::string size = std::to_string(32u << 20);
  ASSERT_TRUE(b->send("recv_seq 11 200 " + size));
  ASSERT_TRUE(a->send("send_seq " + ids_[1] + " 11 200 " + size));
  usleep(100000);  // a few messages in
  b->signal(SIGSTOP);
  ASSERT_TRUE(b->wait_stopped(5000));
  usleep(100000);  // the sockets fill; what is left of the message waits in a's queue
  b->signal(SIGKILL);
  b->signal(SIGCONT);
  ASSERT_NE(b->wait_exit(5000), -1);
  std::string r = a->read_line(30000);
  EXPECT_EQ(r.rfind("err LT_ERR_PEER_DOWN", 0), 0u) << r;
  EXPECT_EQ(a->cmd("send " + ids_[2] + " 12 0102"), "ok");
  EXPECT_EQ(c->cmd("recv 12 8"), "ok " + ids_[0] + " 0102");
}

// Large writes in flight (tcp sends their payload from the writer's buffer
// until it left) land whole and in order: every byte read back.
TEST_P(ThreeNodes, LargeWritesInFlightLandWhole) {
  Proc *a = nodes_[0];
  std::string h = ok_value(a->cmd("malloc " + ids_[1] + " 16777216 rw"));
  EXPECT_EQ(a->cmd("write_pat " + h + " 0 16777216 3 1048576 16", 60000), "ok");
  EXPECT_EQ(a->cmd("check_pat " + h + " 0 16777216 3 1048576", 60000), "ok");
  EXPECT_EQ(a->cmd("write_pat " + h + " 4096 8388608 4 65536 16", 60000), "ok");
  EXPECT_EQ(a->cmd("check_pat " + h + " 4096 8388608 4 1048576", 60000), "ok");
}

// Writes of 1 MiB, 16 in flight, to a node that is stopped (the sockets
// fill, the rest waits in the writer's queue, sent from its buffer) and then
// killed: the writes fail with PEER_DOWN, not hang, and the writer goes on
// with the others. Over shm the writes are one-sided into memory that stays
// mapped: they may all succeed.
TEST_P(ThreeNodes, WritesToAStoppedThenKilledOwnerEnd) {
  Proc *a = nodes_[0], *b = nodes_[1], *c = nodes_[2];
  std::string h = ok_value(a->cmd("malloc " + ids_[1] + " 67108864 rw"));
  b->signal(SIGSTOP);
  ASSERT_TRUE(b->wait_stopped(5000));
  ASSERT_TRUE(a->send("write_pat " + h + " 0 67108864 9 1048576 16"));
  usleep(200000);  // the sockets fill; the rest of the writes wait in a's queue
  b->signal(SIGKILL);
  b->signal(SIGCONT);
  ASSERT_NE(b->wait_exit(5000), -1);
  std::string r = a->read_line(30000);
  if (std::string(GetParam()) == "tcp") {
    EXPECT_EQ(r.rfind("err LT_ERR_PEER_DOWN", 0), 0u) << r;
  } else {
    EXPECT_TRUE(r == "ok" || r.rfind("err LT_ERR_PEER_DOWN", 0) == 0) << r;
  }
  EXPECT_EQ(a->cmd("send " + ids_[2] + " 12 0102"), "ok");
  EXPECT_EQ(c->cmd("recv 12 8"), "ok " + ids_[0] + " 0102");
}

}  // namespace
}  // namespace lt::itest
