// The 3-node data test with every node in its own network namespace, joined
// by veth pairs to a bridge in the root namespace where ltier-manager runs,
// so tcp traffic really crosses interfaces. Skipped (loudly) only where
// `ip netns add` is refused, e.g. without CAP_SYS_ADMIN.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "cluster.h"

namespace lt::itest {
namespace {

int sh(const std::string& cmd) {
  std::string c = cmd + " >/dev/null 2>&1";
  return std::system(c.c_str());
}

class NetnsCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tag_ = std::to_string(getpid() % 100000);
    bridge_ = "ltbr" + tag_;
    std::string probe = "ltier-probe-" + tag_;
    if (sh("ip netns add " + probe) != 0) {
      skip_reason_ = "`ip netns add` was refused here (needs root/CAP_SYS_ADMIN)";
      return;
    }
    sh("ip netns del " + probe);
    bool ok = sh("ip link add " + bridge_ + " type bridge") == 0 &&
              sh("ip addr add 10.213.0.254/24 dev " + bridge_) == 0 &&
              sh("ip link set " + bridge_ + " up") == 0;
    for (int i = 1; ok && i <= 3; ++i) {
      std::string ns = ns_name(i), a = "lta" + tag_ + "_" + std::to_string(i),
                  b = "ltb" + tag_ + "_" + std::to_string(i);
      ok = sh("ip netns add " + ns) == 0 &&
           sh("ip link add " + a + " type veth peer name " + b) == 0 &&
           sh("ip link set " + b + " netns " + ns) == 0 &&
           sh("ip link set " + a + " master " + bridge_) == 0 &&
           sh("ip link set " + a + " up") == 0 &&
           sh("ip netns exec " + ns + " ip addr add 10.213.0." + std::to_string(i) + "/24 dev " +
              b) == 0 &&
           sh("ip netns exec " + ns + " ip link set " + b + " up") == 0 &&
           sh("ip netns exec " + ns + " ip link set lo up") == 0;
    }
    if (!ok) setup_failed_ = true;
  }
  static void TearDownTestSuite() {
    for (int i = 1; i <= 3; ++i) sh("ip netns del " + ns_name(i));
    sh("ip link del " + bridge_);
  }
  static std::string ns_name(int i) { return "ltier-it" + tag_ + "-" + std::to_string(i); }

  void SetUp() override {
    if (!skip_reason_.empty()) {
      fprintf(stderr,
              "\n*** SKIPPED LOUDLY: netns integration test: %s. Traffic did NOT cross "
              "interfaces in this run. ***\n\n",
              skip_reason_.c_str());
      GTEST_SKIP() << skip_reason_;
    }
    ASSERT_FALSE(setup_failed_) << "could create namespaces but not wire them with veth/bridge";
  }

  static std::string tag_, bridge_, skip_reason_;
  static bool setup_failed_;
};
std::string NetnsCluster::tag_, NetnsCluster::bridge_, NetnsCluster::skip_reason_;
bool NetnsCluster::setup_failed_ = false;

TEST_F(NetnsCluster, DataCrossesNamespaces) {
  ClusterOptions o;
  o.manager_listen = "10.213.0.254:0";
  Cluster cluster(o);
  ASSERT_TRUE(cluster.ok());
  Proc* n[3];
  std::string ids[3];
  for (int i = 0; i < 3; ++i) {
    std::string ip = "10.213.0." + std::to_string(i + 1);
    n[i] = cluster.add_node({"LTIER_TCP_LISTEN=" + ip + ":0"},
                            {"ip", "netns", "exec", ns_name(i + 1)});
    ASSERT_NE(n[i], nullptr) << "node in namespace " << ns_name(i + 1) << " did not join";
    ids[i] = ok_value(n[i]->cmd("id"));
    // Each node is reachable only at its own namespace's address.
    EXPECT_EQ(ok_value(n[i]->cmd("address")).rfind(ip + ":", 0), 0u);
  }
  // Same kernel, different network namespaces: treated as different hosts,
  // so tcp even though shm is enabled (the default transports).
  for (int i = 0; i < 3; ++i) {
    std::string t = n[i]->cmd("transport " + ids[(i + 1) % 3]);
    EXPECT_EQ(t.rfind("ok tcp other host", 0), 0u) << t;
  }
  std::string h = ok_value(n[0]->cmd("malloc " + ids[1] + " 65536 rw"));
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(n[0]->cmd("fill " + h + " 0 65536 3"), "ok");
  EXPECT_EQ(n[0]->cmd("write " + h + " 1000 a1b2c3"), "ok");
  EXPECT_EQ(n[0]->cmd("publish " + h + " netns.buf r"), "ok");
  std::string hc = ok_value(n[2]->cmd("map netns.buf r"));
  ASSERT_FALSE(hc.empty());
  EXPECT_EQ(n[2]->cmd("read " + hc + " 1000 3"), "ok a1b2c3");
  EXPECT_EQ(n[2]->cmd("sum " + hc + " 0 65536"),
            "ok " + std::to_string(65533 * 3 + 0xa1 + 0xb2 + 0xc3));
  std::string hd = ok_value(n[0]->cmd("malloc " + ids[2] + " 65536 rw"));
  ASSERT_FALSE(hd.empty());
  EXPECT_EQ(n[0]->cmd("memcpy " + hd + " 0 " + h + " 0 65536"), "ok");
  EXPECT_EQ(n[0]->cmd("read " + hd + " 1000 3"), "ok a1b2c3");
}

}  // namespace
}  // namespace lt::itest
