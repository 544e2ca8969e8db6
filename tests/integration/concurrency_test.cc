// Integration tests of many threads in several processes using one peer at
// once, over every transport: every kind of operation, sizes on both sides
// of each transport's fragment and eager limits, all checked. A lock-order
// slip between a poster and the progress thread shows up here as a hang
// (the harness dumps the stuck node's threads).
#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace lt::itest
