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
  Cluster cluster_;
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
