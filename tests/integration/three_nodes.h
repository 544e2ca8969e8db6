// The three-node fixture of the integration tests: a real ltier-manager
// and three real ltier-node processes on this host, run once per transport
// set (value-parameterised; cluster_test.cc instantiates it for every file
// of the binary).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "cluster.h"

namespace lt::itest {

// In the Soft-RoCE guest (LTIER_ITEST_RC=1) every node runs under TCG
// emulation, where a node busy with eight threads' traffic can leave its
// heartbeat without a CPU for over a second and be declared down: there the
// down time is 3 s (1 s elsewhere). Tests that wait for a stopped node to be
// declared down wait up to 15 s.
inline ClusterOptions three_node_options() {
  ClusterOptions o;
  if (const char* rc = std::getenv("LTIER_ITEST_RC"); rc != nullptr && rc[0] == '1') {
    o.down_after_ms = 3000;
  }
  return o;
}

// Three nodes on this host, run once per transport set: "tcp" only, and the
// default (shm for same-host peers, with native one-sided ops and atomics).
class ThreeNodes : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(cluster_.ok()) << "ltier-manager did not start";
    for (auto*& n : nodes_) {
      n = cluster_.add_node({std::string("LTIER_TRANSPORTS=") + GetParam()});
      ASSERT_NE(n, nullptr) << "ltier-node did not become ready";
    }
    for (int i = 0; i < 3; ++i) ids_[i] = id_of(nodes_[i]);
    // Every pair uses the transport the parameter implies.
    const std::string param = GetParam();
    std::string want = param == "tcp"      ? "ok tcp"
                       : param == "rc,tcp" ? "ok rc"
                       : param == "ud,tcp" ? "ok ud"
                                           : "ok shm";
    for (int i = 0; i < 3; ++i) {
      std::string got = nodes_[i]->cmd("transport " + ids_[(i + 1) % 3]);
      ASSERT_EQ(got.rfind(want, 0), 0u) << got;
    }
  }
  Cluster cluster_{three_node_options()};
  Proc* nodes_[3] = {};
  std::string ids_[3];
};

// rc,tcp where an RDMA device is: tests/rdma runs this binary in the
// Soft-RoCE guest with LTIER_ITEST_RC=1.
inline std::vector<const char*> three_node_transports() {
  std::vector<const char*> v = {"tcp", "shm,tcp"};
  if (const char* rc = std::getenv("LTIER_ITEST_RC"); rc != nullptr && rc[0] == '1') {
    v.push_back("rc,tcp");
    v.push_back("ud,tcp");
  }
  return v;
}

}  // namespace lt::itest
