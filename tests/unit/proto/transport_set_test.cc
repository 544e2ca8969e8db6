#include "proto/transport_set.h"

#include <gtest/gtest.h>

#include <string>

#include "transport/factory.h"

namespace lt::proto {
namespace {

using transport::PeerInfo;

Config local_config(const std::string& transports) {
  Config c;
  c.transports = transports;
  c.tcp.listen = "127.0.0.1:0";
  return c;
}

TEST(TransportSet, BuildsTheConfiguredTransportsBestRankFirst) {
  TransportSet s;
  ASSERT_TRUE(s.build(local_config("tcp,shm")).is_ok());
  ASSERT_EQ(s.all().size(), 2u);
  EXPECT_STREQ(s.all()[0]->name(), "shm");
  EXPECT_STREQ(s.all()[1]->name(), "tcp");
  auto a = s.addresses();
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].transport, "shm");
  EXPECT_EQ(a[1].transport, "tcp");
  EXPECT_FALSE(a[1].address.empty());
  EXPECT_STREQ(s.memory()->name(), "shm") << "LMR memory from the one-sided transport";
}

TEST(TransportSet, UnknownTransportIsRefused) {
  TransportSet s;
  EXPECT_EQ(s.build(local_config("tcp,rdma")).code(), Code::kInvalidArg);
  TransportSet e;
  EXPECT_EQ(e.build(local_config("")).code(), Code::kInvalidArg);
}

TEST(TransportSet, PicksSameHostTransportOnlyOnThisHost) {
  TransportSet s;
  ASSERT_TRUE(s.build(local_config("shm,tcp")).is_ok());
  const char* why = nullptr;
  PeerInfo here{2, s.host_id(), {{"tcp", "127.0.0.1:1"}, {"shm", "shm:1:x"}}};
  transport::Transport* t = s.pick(here, &why);
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->name(), "shm");
  EXPECT_STREQ(why, "same host (boot id and network namespace match)");

  PeerInfo there{3, "another-boot", here.addresses};
  t = s.pick(there, &why);
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->name(), "tcp");
  EXPECT_STREQ(why, "other host or network namespace");

  PeerInfo no_shm{4, s.host_id(), {{"tcp", "127.0.0.1:1"}}};
  t = s.pick(no_shm, &why);
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->name(), "tcp");
  EXPECT_STREQ(why, "same host, but the peer offers no shm");

  PeerInfo nothing{5, "another-boot", {{"shm", "shm:1:x"}}};
  EXPECT_EQ(s.pick(nothing, &why), nullptr);
  EXPECT_STREQ(why, "no common transport");
}

TEST(TransportSet, WithoutShmASameHostPeerGetsTcpAndSaysWhy) {
  TransportSet s;
  ASSERT_TRUE(s.build(local_config("tcp")).is_ok());
  const char* why = nullptr;
  PeerInfo here{2, s.host_id(), {{"tcp", "127.0.0.1:1"}, {"shm", "shm:1:x"}}};
  transport::Transport* t = s.pick(here, &why);
  ASSERT_NE(t, nullptr);
  EXPECT_STREQ(t->name(), "tcp");
  EXPECT_STREQ(why, "same host, but shm is not in this node's transports");
  EXPECT_STREQ(s.memory()->name(), "tcp");
}

// Where there is no RDMA device (or no libibverbs in the build), rc and ud
// step aside: the default list joins over the others, either alone joins
// nothing.
TEST(TransportSet, RcAndUdStepAsideWithoutADevice) {
  if (transport::make_rc_transport(local_config("rc"))) {
    GTEST_SKIP() << "this host has an RDMA device";
  }
  TransportSet s;
  ASSERT_TRUE(s.build(local_config("shm,rc,ud,tcp")).is_ok());
  ASSERT_EQ(s.all().size(), 2u);
  EXPECT_STREQ(s.all()[0]->name(), "shm");
  EXPECT_STREQ(s.all()[1]->name(), "tcp");
  EXPECT_EQ(s.exporter(), nullptr);
  for (const char* one : {"rc", "ud", "rc,ud"}) {
    TransportSet alone;
    EXPECT_EQ(alone.build(local_config(one)).code(), Code::kUnsupported) << one;
  }
  EXPECT_EQ(Config().transports, "shm,rc,ud,tcp");
}

// Which of a peer's LMR keys a transport uses: its place among the peer's
// native-memory transports, best rank first; none for one without native
// memory or one the peer does not offer.
TEST(TransportSet, NativeSlotIsThePlaceAmongThePeersNativeTransports) {
  TransportSet s;
  ASSERT_TRUE(s.build(local_config("shm,tcp")).is_ok());
  transport::Transport* shm = s.all()[0].get();
  transport::Transport* tcp = s.all()[1].get();
  PeerInfo both{2, s.host_id(), {{"tcp", "127.0.0.1:1"}, {"rc", "10.0.0.1:2"}, {"shm", "shm:1:x"}}};
  EXPECT_EQ(s.native_slot(both, shm), 0);
  EXPECT_EQ(s.native_slot(both, tcp), -1);
  EXPECT_EQ(s.native_slot(both, nullptr), -1);
  PeerInfo no_shm{3, s.host_id(), {{"tcp", "127.0.0.1:1"}, {"rc", "10.0.0.1:2"}}};
  EXPECT_EQ(s.native_slot(no_shm, shm), -1);
}

// Atomics on a peer's LMRs go natively over shm (CPU atomics) unless the
// peer does its atomics by its device; the "atomics" entry, which names no
// transport, leaves the key slots alone. A node without a device publishes
// none, and a bad verbs.atomic_mode is refused.
TEST(TransportSet, NativeAtomicsFollowThePeersAtomicDomain) {
  TransportSet s;
  ASSERT_TRUE(s.build(local_config("shm,tcp")).is_ok());
  EXPECT_EQ(s.atomic_domain(), TransportSet::AtomicDomain::kCpu);
  EXPECT_EQ(s.atomics_device(), nullptr);
  for (const auto& a : s.addresses()) EXPECT_NE(a.transport, "atomics");
  transport::Transport* shm = s.all()[0].get();
  transport::Transport* tcp = s.all()[1].get();
  PeerInfo cpu{2, s.host_id(), {{"shm", "shm:1:x"}, {"rc", "10.0.0.1:2"}}};
  PeerInfo device{3, s.host_id(), {{"shm", "shm:1:y"}, {"atomics", "device"}, {"rc", "h:2"}}};
  PeerInfo global{4, s.host_id(), {{"atomics", "global"}, {"shm", "shm:1:z"}}};
  EXPECT_TRUE(s.native_atomics(cpu, shm));
  EXPECT_FALSE(s.native_atomics(device, shm));
  EXPECT_TRUE(s.native_atomics(global, shm));
  EXPECT_FALSE(s.native_atomics(cpu, tcp));
  EXPECT_FALSE(s.native_atomics(cpu, nullptr));
  EXPECT_EQ(s.native_slot(device, shm), 0);
  EXPECT_EQ(s.native_slot(global, shm), 0);

  Config bad = local_config("shm,tcp");
  bad.verbs.atomic_mode = "gpu";
  TransportSet refused;
  EXPECT_EQ(refused.build(bad).code(), Code::kInvalidArg);
}

TEST(TransportAddresses, FormatAndParseRoundTripAndSkipJunk) {
  std::vector<transport::PeerAddress> in = {{"tcp", "10.0.0.1:7"}, {"shm", "shm:1:x"}};
  std::string text = transport::format_addresses(in);
  EXPECT_EQ(text, "tcp=10.0.0.1:7 shm=shm:1:x");
  auto out = transport::parse_addresses(text);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].transport, "shm");
  EXPECT_EQ(out[1].address, "shm:1:x");
  auto junk = transport::parse_addresses("  bare =noname verbs=gid:1=2 ");
  ASSERT_EQ(junk.size(), 1u) << "tokens without a name are skipped";
  EXPECT_EQ(junk[0].transport, "verbs");
  EXPECT_EQ(junk[0].address, "gid:1=2") << "split at the first '='";
  PeerInfo p{1, "", junk};
  EXPECT_EQ(p.address("verbs"), "gid:1=2");
  EXPECT_EQ(p.address("tcp"), "");
}

}  // namespace
}  // namespace lt::proto
