// Traffic per peer and transport (LT_peer_stats, through ltier-node's
// "peers" command) between real ltier-node processes, on each transport set.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>

#include "cluster.h"

namespace lt::itest {
namespace {

struct PeerLine {
  std::string transport;
  long long tx_ops = -1, tx_bytes = -1, rx_ops = -1, rx_bytes = -1;
};

// "ok NODE:TRANSPORT:tx=N/B,rx=N/B ..." -> by node id.
std::map<std::string, PeerLine> parse_peers(const std::string& line) {
  std::map<std::string, PeerLine> out;
  std::istringstream in(line);
  std::string tok;
  in >> tok;  // "ok"
  while (in >> tok) {
    const size_t c1 = tok.find(':'), c2 = tok.find(':', c1 + 1);
    if (c1 == std::string::npos || c2 == std::string::npos) continue;
    PeerLine p;
    p.transport = tok.substr(c1 + 1, c2 - c1 - 1);
    if (std::sscanf(tok.c_str() + c2 + 1, "tx=%lld/%lld,rx=%lld/%lld", &p.tx_ops, &p.tx_bytes,
                    &p.rx_ops, &p.rx_bytes) == 4) {
      out[tok.substr(0, c1)] = p;
    }
  }
  return out;
}

class PeerTraffic : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.ok()) << "ltier-manager did not start";
    a_ = cluster_.add_node({std::string("LTIER_TRANSPORTS=") + GetParam()});
    b_ = cluster_.add_node({std::string("LTIER_TRANSPORTS=") + GetParam()});
    ASSERT_TRUE(a_ && b_);
    ia_ = id_of(a_);
    ib_ = id_of(b_);
    const std::string got = a_->cmd("transport " + ib_);
    ASSERT_EQ(got.rfind("ok ", 0), 0u) << got;
    transport_ = got.substr(3, got.find(' ', 3) - 3);
  }
  PeerLine peer(Proc* at, const std::string& of) {
    const std::string line = at->cmd("peers");
    EXPECT_EQ(line.rfind("ok", 0), 0u) << line;
    auto all = parse_peers(line);
    auto it = all.find(of);
    return it == all.end() ? PeerLine{} : it->second;
  }
  Cluster cluster_;
  Proc *a_ = nullptr, *b_ = nullptr;
  std::string ia_, ib_, transport_;
};

std::vector<const char*> transports() {
  std::vector<const char*> v = {"tcp", "shm,tcp"};
  if (const char* rc = std::getenv("LTIER_ITEST_RC"); rc != nullptr && rc[0] == '1') {
    v.push_back("rc,tcp");
    v.push_back("ud,tcp");
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Transports, PeerTraffic, ::testing::ValuesIn(transports()),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string name = p.param;
                           std::replace(name.begin(), name.end(), ',', '_');
                           return name;
                         });

// Messages and writes show on both sides, under the transport the pair uses;
// sends from four threads at once are all counted.
TEST_P(PeerTraffic, CountsEachPeerOnItsTransport) {
  ASSERT_EQ(a_->cmd("send_seq " + ib_ + " 7 5 100"), "ok");
  ASSERT_EQ(b_->cmd("recv_seq 7 5 100"), "ok");
  const std::string h = a_->cmd("malloc " + ib_ + " 65536 rw").substr(3);
  ASSERT_FALSE(h.empty());
  for (int i = 0; i < 3; ++i) ASSERT_EQ(a_->cmd("fill " + h + " 0 4096 9"), "ok");

  PeerLine at_a = peer(a_, ib_), at_b = peer(b_, ia_);
  EXPECT_EQ(at_a.transport, transport_);
  EXPECT_EQ(at_b.transport, transport_);
  // a posted 5 messages and 3 writes of 4096 bytes to b, at least.
  EXPECT_GE(at_a.tx_ops, 8);
  EXPECT_GE(at_a.tx_bytes, 5 * 100 + 3 * 4096);
  EXPECT_GE(at_b.rx_ops, 5);
  EXPECT_GE(at_b.rx_bytes, 5 * 100);
  // b answered at least the allocation.
  EXPECT_GE(at_b.tx_ops, 1);
  EXPECT_GE(at_a.rx_ops, 1);
  if (transport_ == "tcp" || transport_ == "ud") {
    // No native one-sided ops: the writes reached b as messages.
    EXPECT_GE(at_b.rx_bytes, 5 * 100 + 3 * 4096);
  }
  // No traffic with a node never talked to.
  Proc* c = cluster_.add_node({std::string("LTIER_TRANSPORTS=") + GetParam()});
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(peer(a_, id_of(c)).tx_ops, -1);

  // Four threads of a send 4 x 50 messages at once (b receives them
  // meanwhile): each thread counts in its own block, and none is lost.
  const PeerLine before_a = peer(a_, ib_), before_b = peer(b_, ia_);
  ASSERT_TRUE(a_->send("send_threads " + ib_ + " 8 4 50"));
  ASSERT_EQ(b_->cmd("recv_n 8 200"), "ok");
  ASSERT_EQ(a_->read_line(60000), "ok");
  const PeerLine after_a = peer(a_, ib_), after_b = peer(b_, ia_);
  EXPECT_GE(after_a.tx_ops - before_a.tx_ops, 200);
  EXPECT_GE(after_a.tx_bytes - before_a.tx_bytes, 200 * 8);
  EXPECT_GE(after_b.rx_ops - before_b.rx_ops, 200);
  // Beyond the 200, only protocol messages (credit returns go b -> a).
  EXPECT_LE(after_a.tx_ops - before_a.tx_ops, 210);
}

}  // namespace
}  // namespace lt::itest
