#include "proto/traffic.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace lt::proto {
namespace {

const PeerTraffic* find(const std::vector<PeerTraffic>& v, NodeId node, uint32_t t) {
  for (const auto& p : v) {
    if (p.node == node && p.transport == t) return &p;
  }
  return nullptr;
}

TEST(Traffic, ThreadsCountInTheirOwnBlocksAndTheSumIsExact) {
  Traffic tr;
  constexpr int kThreads = 4, kOps = 100000;
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i) {
    ts.emplace_back([&] {
      for (int k = 0; k < kOps; ++k) {
        tr.tx(7, 1, 1, 24);
        tr.rx(7, 1, 40);
      }
    });
  }
  // A reader meanwhile sees counts that only grow.
  uint64_t last = 0;
  for (int k = 0; k < 100; ++k) {
    auto s = tr.snapshot();
    if (const PeerTraffic* p = find(s, 7, 1)) {
      EXPECT_GE(p->tx_ops, last);
      last = p->tx_ops;
    }
  }
  for (auto& t : ts) t.join();
  auto s = tr.snapshot();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].tx_ops, uint64_t{kThreads} * kOps);
  EXPECT_EQ(s[0].tx_bytes, uint64_t{kThreads} * kOps * 24);
  EXPECT_EQ(s[0].rx_ops, uint64_t{kThreads} * kOps);
  EXPECT_EQ(s[0].rx_bytes, uint64_t{kThreads} * kOps * 40);
}

TEST(Traffic, PeersAndTransportsAreKeptApartAndSorted) {
  Traffic tr;
  tr.tx(9, 0, 2, 100);
  tr.tx(3, 2, 1, 10);
  tr.rx(3, 0, 5);
  tr.tx(transport::kNoNode, 0, 1, 1);       // no node: not counted
  tr.tx(4, Traffic::kMaxTransports, 1, 1);  // no such transport: not counted
  auto s = tr.snapshot();
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].node, 3u);
  EXPECT_EQ(s[0].transport, 0u);
  EXPECT_EQ(s[0].rx_ops, 1u);
  EXPECT_EQ(s[1].node, 3u);
  EXPECT_EQ(s[1].transport, 2u);
  EXPECT_EQ(s[1].tx_bytes, 10u);
  EXPECT_EQ(s[2].node, 9u);
  EXPECT_EQ(s[2].tx_ops, 2u);
}

TEST(Traffic, ANewNodeInASlotStartsFromZero) {
  Traffic tr;
  const NodeId old_node = 5, new_node = 5 + transport::kNodeSlots;  // same slot
  tr.tx(old_node, 0, 10, 1000);
  tr.tx(new_node, 0, 1, 8);
  auto s = tr.snapshot();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].node, new_node);
  EXPECT_EQ(s[0].tx_ops, 1u);
  EXPECT_EQ(s[0].tx_bytes, 8u);
}

// A thread remembers the cell it counted in last: a count for another
// transport, or for another node in the same slot, must not land there.
TEST(Traffic, TheLastCellIsLeftForAnotherTransportOrNode) {
  Traffic tr;
  const NodeId a = 6, b = 6 + transport::kNodeSlots;  // same slot
  tr.tx(a, 0, 1, 1);
  tr.tx(a, 1, 1, 2);
  tr.tx(a, 0, 1, 4);
  auto s = tr.snapshot();
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].tx_bytes, 5u);
  EXPECT_EQ(s[1].tx_bytes, 2u);
  tr.tx(b, 0, 1, 8);   // takes the slot over: a's counts go
  tr.tx(a, 0, 1, 16);  // and back: b's go
  s = tr.snapshot();
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].node, a);
  EXPECT_EQ(s[0].tx_ops, 1u);
  EXPECT_EQ(s[0].tx_bytes, 16u);
}

TEST(Traffic, EnginesOfOneThreadDoNotMix) {
  auto a = std::make_unique<Traffic>();
  auto b = std::make_unique<Traffic>();
  for (int i = 0; i < 10; ++i) {
    a->tx(2, 0, 1, 1);
    b->tx(2, 0, 1, 2);
  }
  EXPECT_EQ(a->snapshot().at(0).tx_bytes, 10u);
  EXPECT_EQ(b->snapshot().at(0).tx_bytes, 20u);
  // An engine gone and a new one (perhaps at the same address) start afresh.
  a.reset();
  a = std::make_unique<Traffic>();
  EXPECT_TRUE(a->snapshot().empty());
  a->tx(2, 0, 1, 1);
  EXPECT_EQ(a->snapshot().at(0).tx_ops, 1u);
  // More engines than the per-thread cache holds still count right.
  std::vector<std::unique_ptr<Traffic>> many;
  for (int i = 0; i < 6; ++i) many.push_back(std::make_unique<Traffic>());
  for (int round = 0; round < 3; ++round) {
    for (auto& t : many) t->tx(1, 0, 1, 1);
  }
  for (auto& t : many) EXPECT_EQ(t->snapshot().at(0).tx_ops, 3u);
}

}  // namespace
}  // namespace lt::proto
