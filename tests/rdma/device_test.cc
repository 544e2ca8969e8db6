// Device, port and GID selection on a real Soft-RoCE device: run inside the
// rxe guest (tests/rdma/in_guest.sh), where rxe0 sits on a dummy netdev
// with 192.0.2.1.
#include "transport/verbs/device.h"

#include <gtest/gtest.h>

namespace lt::transport::verbs {
namespace {

std::vector<DeviceInfo> devices() {
  std::string why;
  std::vector<DeviceInfo> d = list_devices(&why);
  EXPECT_FALSE(d.empty()) << why;
  return d;
}

TEST(VerbsDevice, ListsRxe0WithAnActivePortAndItsGids) {
  std::vector<DeviceInfo> devs = devices();
  ASSERT_FALSE(devs.empty());
  const DeviceInfo& d = devs[0];
  EXPECT_EQ(d.name, "rxe0");
  EXPECT_GT(d.max_qp, 0u);
  EXPECT_TRUE(d.atomics);
  ASSERT_EQ(d.ports.size(), 1u);
  const PortInfo& p = d.ports[0];
  EXPECT_EQ(p.state, "ACTIVE");
  EXPECT_EQ(p.link_layer, "Ethernet");
  EXPECT_EQ(p.active_mtu, 1024u);
  bool mapped = false;
  for (const GidInfo& g : p.gids) mapped |= g.ipv4_mapped && g.text == "::ffff:192.0.2.1";
  EXPECT_TRUE(mapped);
}

TEST(VerbsDevice, PicksTheRoceV2GidOfTheIpv4Address) {
  std::string why;
  Result<Choice> c = choose(devices(), VerbsConfig{}, &why);
  ASSERT_TRUE(c.is_ok()) << why;
  EXPECT_EQ(c->device, "rxe0");
  EXPECT_EQ(c->port, 1u);
  EXPECT_EQ(c->gid.text, "::ffff:192.0.2.1");
  EXPECT_EQ(c->gid.type, "RoCE v2");
  EXPECT_EQ(c->mtu, 1024u);
}

TEST(VerbsDevice, HonoursAndChecksTheConfiguration) {
  std::vector<DeviceInfo> devs = devices();
  std::string why;
  VerbsConfig named;
  named.device = "rxe0";
  named.gid_index = "0";
  Result<Choice> c = choose(devs, named, &why);
  ASSERT_TRUE(c.is_ok()) << why;
  EXPECT_EQ(c->gid.index, 0u);

  VerbsConfig missing;
  missing.device = "mlx5_9";
  EXPECT_EQ(choose(devs, missing, &why).status().code(), Code::kInvalidArg);
  EXPECT_NE(why.find("verbs.device"), std::string::npos) << why;
  EXPECT_NE(why.find("rxe0"), std::string::npos) << why;

  VerbsConfig bad_gid;
  bad_gid.gid_index = "77";
  EXPECT_EQ(choose(devs, bad_gid, &why).status().code(), Code::kInvalidArg);
  EXPECT_NE(why.find("verbs.gid_index"), std::string::npos) << why;
  EXPECT_NE(why.find("MTU 1024"), std::string::npos) << why;
  EXPECT_NE(why.find("::ffff:192.0.2.1"), std::string::npos) << why;

  VerbsConfig no_port;
  no_port.port = 2;
  EXPECT_EQ(choose(devs, no_port, &why).status().code(), Code::kNotFound);
  EXPECT_NE(why.find("verbs.port"), std::string::npos) << why;
}

}  // namespace
}  // namespace lt::transport::verbs
