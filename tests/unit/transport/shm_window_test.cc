// The shm ring window: small messages cycle through the start of each ring
// (its first 64 KiB, or the connection's share of shm.ring_budget_bytes if
// that is less), so the rest of the ring's pages are never touched; a
// consumer that lags widens the window up to the share, a larger message
// beyond it, and once the connection has carried no such message for a
// while the sender narrows it again and frees the pages beyond the share. What a connection costs
// is read where the kernel counts it: the resident pages of the "ltier-shm-conn" mappings in
// /proc/self/smaps (both ends live in this process, so every touched page of the segment is counted
// twice).
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/time.h"
#include "transport/factory.h"
#include "transport/transport.h"
#include "transport_harness.h"

namespace lt::transport {
namespace {

using test::poll_once;

constexpr uint64_t kToken = 0x5eed5eed87654321ull;
constexpr uint64_t kWaitMs = 20000;
constexpr uint32_t kRing = 1u << 20;
constexpr uint32_t kWindow = 16u << 10;
constexpr uint32_t kHotWindow = 64u << 10;  // where a connection's records go while kept up with

std::unique_ptr<Transport> make(NodeId node, uint32_t budget) {
  ShmConfig c;
  c.ring_bytes = kRing;
  c.ring_budget_bytes = budget;
  auto t = make_shm_transport(c);
  EXPECT_TRUE(t.is_ok()) << t.status().name();
  if (!t.is_ok()) return nullptr;
  (*t)->set_identity(node, kToken, lt::Mac{});
  return std::move(t).value();
}

// Resident kB of this process's shm connection segments.
uint64_t conn_resident_kb() {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool ours = false;
  uint64_t kb = 0;
  while (std::getline(in, line)) {
    unsigned long long v = 0;
    if (line.find('-') < line.find(' ') && line.find(':') != std::string::npos &&
        line.find("kB") == std::string::npos) {  // a mapping's first line
      ours = line.find("ltier-shm-conn") != std::string::npos;
    } else if (ours && sscanf(line.c_str(), "Rss: %llu kB", &v) == 1) {
      kb += v;
    }
  }
  return kb;
}

struct Pair {
  std::unique_ptr<Transport> a, b;
  std::unique_ptr<Endpoint> ab;
  uint64_t sent = 0, received = 0;
  bool in_order = true;

  // b may be another pair's: a then dials a transport that already serves.
  explicit Pair(uint32_t budget, std::unique_ptr<Transport> from = nullptr, NodeId to = 2)
      : a(from ? std::move(from) : make(1, budget)), b(make(to, budget)) {
    auto ep = a->connect(test::shm_peer(to, b->local_address()), Deadline::after_ms(kWaitMs));
    EXPECT_TRUE(ep.is_ok()) << ep.status().name();
    if (ep.is_ok()) ab = std::move(ep).value();
  }

  // Receives on b; every message starts with its sequence number and holds
  // that number's low byte after it.
  void drain() {
    poll_once(a.get(), [](const Completion&) {});
    poll_once(b.get(), [&](const Completion& c) {
      if (c.kind != CqKind::kRecv) return;
      uint64_t seq = ~uint64_t{0};
      if (c.len >= sizeof(seq)) std::memcpy(&seq, c.rx, sizeof(seq));
      bool ok = seq == received;
      for (uint32_t i = sizeof(seq); ok && i < c.len; ++i) {
        ok = c.rx[i] == static_cast<std::byte>(seq);
      }
      in_order &= ok;
      ++received;
    });
  }

  // Posts the next message, of `len` bytes: 1 when the ring took it, 0 when
  // it refused it (back-pressure), -1 on an error.
  int post_next(std::vector<std::byte>& buf) {
    const uint64_t seq = sent;
    std::memset(buf.data(), static_cast<int>(seq & 0xff), buf.size());
    std::memcpy(buf.data(), &seq, sizeof(seq));
    WorkRequest wr;
    wr.op = Op::kSend;
    wr.num_sge = 1;
    wr.sge[0] = Sge{buf.data(), static_cast<uint32_t>(buf.size()), 0};
    auto r = ab->post(std::span<const WorkRequest>(&wr, 1));
    if (!r.is_ok()) return -1;
    sent += *r;
    return static_cast<int>(*r);
  }

  // Sends `count` messages of `len` bytes, receiving as it goes.
  bool send(uint64_t count, size_t len) {
    std::vector<std::byte> buf(len);
    Deadline d = Deadline::after_ms(kWaitMs);
    for (uint64_t i = 0; i < count && !d.expired();) {
      const int r = post_next(buf);
      if (r < 0) return false;
      i += static_cast<uint64_t>(r);
      drain();
    }
    while (received < sent && !d.expired()) drain();
    return received == sent && in_order;
  }
};

TEST(ShmWindowTest, BudgetIsAConfigKey) {
  Config c;
  std::string err;
  ASSERT_TRUE(load_config_text("shm: {ring_budget_bytes: 65536}", &c, &err).is_ok()) << err;
  EXPECT_EQ(c.shm.ring_budget_bytes, 65536u);
  ASSERT_TRUE(load_config_text("shm: {ring_budget_bytes: 0}", &c, &err).is_ok()) << err;
  EXPECT_EQ(c.shm.ring_budget_bytes, 0u);
}

// Three laps' worth of the ring in 1000-byte messages, each received before
// the next goes: they cycle through the hot window, or with a 16 KiB budget
// (one connection: a 16 KiB share) through those 16 KiB, and never touch the
// rest of the ring.
TEST(ShmWindowTest, SmallMessagesTouchOnlyTheWindow) {
  const uint64_t kCount = 3 * kRing / 1000;
  uint64_t windowed_kb = 0, hot_kb = 0;
  {
    Pair p(kWindow);
    ASSERT_NE(p.ab, nullptr);
    ASSERT_TRUE(p.send(kCount, 1000)) << p.received << " of " << p.sent;
    windowed_kb = conn_resident_kb();
  }
  {
    Pair p(0);
    ASSERT_NE(p.ab, nullptr);
    // Connected once b has taken the hello (in one of its polls): until then
    // messages wait in the ring, as behind a lagging consumer.
    ASSERT_TRUE(p.send(1, 8));
    ASSERT_TRUE(p.send(kCount, 1000)) << p.received << " of " << p.sent;
    hot_kb = conn_resident_kb();
  }
  // Two mappings of one segment; the window's pages, the control block, and
  // the reverse ring's first page.
  EXPECT_LE(windowed_kb, 2 * (kWindow / 1024 + 16));
  EXPECT_LE(hot_kb, 2 * (kHotWindow / 1024 + 16));
}

// A consumer that lags: messages posted while none is received fill most of
// the ring, not just the hot window (each wrap that finds the window's start
// still unreleased doubles it, up to the share: here the whole ring); then
// they all arrive, in order.
TEST(ShmWindowTest, ALaggingConsumerWidensTheWindowToTheShare) {
  Pair p(0);
  ASSERT_NE(p.ab, nullptr);
  std::vector<std::byte> buf(1000);
  int r = 1;
  while (r == 1 && p.sent < 2 * kRing / 1000) r = p.post_next(buf);
  ASSERT_EQ(r, 0) << "the ring never refused a message";
  EXPECT_GE(p.sent * 1024, kRing * 3 / 4) << p.sent << " messages taken";
  EXPECT_GE(conn_resident_kb(), kRing / 1024 * 3 / 4);
  Deadline d = Deadline::after_ms(kWaitMs);
  while (p.received < p.sent && !d.expired()) p.drain();
  EXPECT_EQ(p.received, p.sent);
  EXPECT_TRUE(p.in_order);
  ASSERT_TRUE(p.send(3000, 1000));  // and the connection goes on
}

// A message above a quarter of the window widens it (it arrives whole, in
// order with the small ones around it); a quiet connection then gives the
// pages beyond the window back without another message.
TEST(ShmWindowTest, WideMessageWidensThenThePagesAreFreed) {
  Pair p(kWindow);
  ASSERT_NE(p.ab, nullptr);
  ASSERT_TRUE(p.send(100, 512));
  ASSERT_TRUE(p.send(1, 200u << 10));  // 200 KiB: the window grows to 1 MiB
  ASSERT_TRUE(p.send(100, 512));
  ASSERT_TRUE(p.send(1, 100u << 10));
  const uint64_t wide_kb = conn_resident_kb();
  EXPECT_GE(wide_kb, 2 * 300u) << "the wide messages' pages";
  uint64_t kb = wide_kb;
  Deadline d = Deadline::after_ms(kWaitMs);
  while (kb > 2 * (kWindow / 1024 + 16) && !d.expired()) {
    p.drain();
    kb = conn_resident_kb();
  }
  EXPECT_LE(kb, 2 * (kWindow / 1024 + 16)) << "was " << wide_kb << " kB";
  // The narrowed ring still carries both kinds.
  ASSERT_TRUE(p.send(2000, 700));
  ASSERT_TRUE(p.send(3, 150u << 10));
  EXPECT_TRUE(p.in_order);
}

// One sender, four connections, a 64 KiB budget: the first connection starts
// with the whole budget, and once the others exist each is held to its
// quarter (the first one narrowed, its pages beyond freed).
TEST(ShmWindowTest, ConnectionsShareTheBudget) {
  constexpr uint32_t kBudget = 64u << 10;
  constexpr size_t kPeers = 4;
  auto a = make(1, kBudget);
  ASSERT_NE(a, nullptr);
  std::vector<std::unique_ptr<Transport>> peers;
  std::vector<std::unique_ptr<Endpoint>> eps;
  std::vector<uint64_t> sent(kPeers, 0), got(kPeers, 0);
  auto poll_all = [&] {
    poll_once(a.get(), [](const Completion&) {});
    for (size_t i = 0; i < peers.size(); ++i) {
      poll_once(peers[i].get(), [&](const Completion& c) { got[i] += c.kind == CqKind::kRecv; });
    }
  };
  std::vector<std::byte> buf(1000);
  WorkRequest wr;
  wr.op = Op::kSend;
  wr.num_sge = 1;
  wr.sge[0] = Sge{buf.data(), static_cast<uint32_t>(buf.size()), 0};
  Deadline d = Deadline::after_ms(kWaitMs);
  for (size_t i = 0; i < kPeers; ++i) {
    peers.push_back(make(static_cast<NodeId>(2 + i), kBudget));
    ASSERT_NE(peers.back(), nullptr);
    auto ep = a->connect(test::shm_peer(static_cast<NodeId>(2 + i), peers.back()->local_address()),
                         Deadline::after_ms(kWaitMs));
    ASSERT_TRUE(ep.is_ok()) << ep.status().name();
    eps.push_back(std::move(ep).value());
    // Two laps of the ring in 1000-byte messages over every connection so far.
    for (uint64_t k = 0; k < 2 * kRing / 1000 && !d.expired(); ++k) {
      for (size_t j = 0; j <= i; ++j) {
        while (!d.expired()) {
          auto r = eps[j]->post(std::span<const WorkRequest>(&wr, 1));
          ASSERT_TRUE(r.is_ok()) << r.status().name();
          if (*r == 1) break;
          poll_all();
        }
        ++sent[j];
      }
      poll_all();
    }
  }
  const uint64_t bound = kPeers * 2 * (kBudget / kPeers / 1024 + 16);
  uint64_t kb = conn_resident_kb();
  while ((kb > bound || got != sent) && !d.expired()) {
    poll_all();
    kb = conn_resident_kb();
  }
  EXPECT_EQ(got, sent);
  EXPECT_LE(kb, bound);
}

}  // namespace
}  // namespace lt::transport
