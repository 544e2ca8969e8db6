// shm-only tests: what the conformance suite cannot say through the generic
// interface. A peer process killed with SIGKILL; no names in /dev/shm; the
// sleep/wake-up protocol with both sides blocking on wait_fd(); config checks.
#include <dirent.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/time.h"
#include "transport/factory.h"
#include "transport/transport.h"
#include "transport_harness.h"

extern char** environ;

namespace lt::transport {
namespace {

using test::poll_once;

constexpr uint64_t kToken = 0x5eed5eed12345678ull;
constexpr uint64_t kWaitMs = 10000;
constexpr const char* kParentEnv = "LTIER_SHM_TEST_PARENT";
constexpr const char* kRkeyEnv = "LTIER_SHM_TEST_RKEY";

std::unique_ptr<Transport> make(NodeId node, uint32_t ring_bytes = 0) {
  ShmConfig c;
  if (ring_bytes != 0) c.ring_bytes = ring_bytes;
  auto t = make_shm_transport(c);
  EXPECT_TRUE(t.is_ok()) << t.status().name();
  if (!t.is_ok()) return nullptr;
  if (node != kNoNode) (*t)->set_identity(node, kToken, lt::Mac{});
  return std::move(t).value();
}

PeerInfo peer(NodeId node, const std::string& address) {
  PeerInfo p;
  p.node = node;
  p.addresses = {{"shm", address}};
  return p;
}

WorkRequest send_wr(const void* p, size_t len) {
  WorkRequest wr;
  wr.op = Op::kSend;
  wr.num_sge = 1;
  wr.sge[0] = Sge{static_cast<const std::byte*>(p), static_cast<uint32_t>(len), 0};
  return wr;
}

// Arms and blocks on wait_fd() for at most `ms`, as the engine's pollers
// do; false on timeout.
bool wait_readable(Transport* t, int ms) {
  t->prepare_sleep();
  pollfd p{t->wait_fd(), POLLIN, 0};
  if (::poll(&p, 1, ms) <= 0) return false;
  t->woken();
  return true;
}

std::set<std::string> dev_shm_names() {
  std::set<std::string> names;
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d)) names.insert(e->d_name);
  ::closedir(d);
  return names;
}

TEST(ShmTransportTest, AddressNamesThePidAndAnAbstractSocket) {
  auto t = make(1);
  ASSERT_NE(t, nullptr);
  std::string want = "shm:" + std::to_string(::getpid()) + ":";
  EXPECT_EQ(t->local_address().rfind(want, 0), 0u) << t->local_address();
  EXPECT_STREQ(t->name(), "shm");
  auto other = make(2);
  ASSERT_NE(other, nullptr);
  EXPECT_NE(t->local_address(), other->local_address());
}

TEST(ShmTransportTest, BadRingSizesAreRefused) {
  for (uint32_t r : {0u, 1000u, 2048u, 4097u, 3u << 20, 1u << 31}) {
    ShmConfig c;
    c.ring_bytes = r;
    auto t = make_shm_transport(c);
    ASSERT_FALSE(t.is_ok()) << r;
    EXPECT_EQ(t.status().code(), Code::kInvalidArg) << r;
  }
  ShmConfig c;
  c.max_msg_bytes = 0;
  EXPECT_EQ(make_shm_transport(c).status().code(), Code::kInvalidArg);
  c = ShmConfig{};
  c.ring_bytes = 4096;  // the smallest ring works
  EXPECT_TRUE(make_shm_transport(c).is_ok());
}

TEST(ShmTransportTest, ConfigKeysAreInTheTable) {
  Config c;
  std::set<std::string> paths;
  for (const auto& k : config_keys(c)) paths.insert(k.path);
  for (const char* p :
       {"shm.ring_bytes", "shm.max_msg_bytes", "shm.eager_max_bytes", "shm.stage_bytes"}) {
    EXPECT_TRUE(paths.count(p)) << p;
  }
  std::string err;
  ASSERT_TRUE(load_config_text("shm: {ring_bytes: 65536, eager_max_bytes: 4096}", &c, &err).is_ok())
      << err;
  EXPECT_EQ(c.shm.ring_bytes, 65536u);
  EXPECT_EQ(c.shm.eager_max_bytes, 4096u);
  // The spin before arming is gone (a poller arms when it goes to sleep):
  // an old file that sets it is told so by name, not half-applied.
  EXPECT_FALSE(load_config_text("shm: {spin_us: 0}", &c, &err).is_ok());
  EXPECT_NE(err.find("shm.spin_us"), std::string::npos) << err;
}

// Connections, messages and regions leave no name in /dev/shm (memfd only).
TEST(ShmTransportTest, NothingAppearsInDevShm) {
  auto before = dev_shm_names();
  auto a = make(1);
  auto b = make(2);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto ep = a->connect(peer(2, b->local_address()), Deadline::after_ms(kWaitMs));
  ASSERT_TRUE(ep.is_ok()) << ep.status().name();
  auto mr = b->alloc_memory(1 << 20, kRemoteAll);
  ASSERT_TRUE(mr.is_ok());
  char msg[] = "hello";
  WorkRequest wr = send_wr(msg, sizeof(msg));
  ASSERT_TRUE((*ep)->post(std::span<const WorkRequest>(&wr, 1)).is_ok());
  bool got = false;
  Deadline d = Deadline::after_ms(kWaitMs);
  while (!got && !d.expired()) {
    poll_once(a.get(), [](const Completion&) {});
    poll_once(b.get(), [&](const Completion& c) { got |= c.kind == CqKind::kRecv; });
  }
  EXPECT_TRUE(got);
  EXPECT_EQ(dev_shm_names(), before);
  b->free_memory(*mr);
}

// Both sides arm and block on wait_fd() whenever a poll finds nothing, as
// the engine does (prepare_sleep). A lost wake-up shows as a wait that times
// out while a message or free ring space is pending. Short random delays on
// both sides make a record land before, during and after the other side's
// arming.
TEST(ShmTransportTest, PingPongWithBlockingWaitsLosesNoWakeUp) {
  auto a = make(1);
  auto b = make(2);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto ab = a->connect(peer(2, b->local_address()), Deadline::after_ms(kWaitMs));
  ASSERT_TRUE(ab.is_ok()) << ab.status().name();
  constexpr uint64_t kRounds = 400;
  // A lost wake-up never ends by itself here (the other side waits for this
  // one), so a long wait still catches it, while a machine that stalls for a
  // second or two (a shared VM) does not read as one.
  constexpr int kLostWakeUpMs = 10000;
  std::atomic<int> timeouts{0};
  std::atomic<bool> stop{false};
  // b echoes every message back on the inbound connection.
  std::thread echo([&] {
    std::unique_ptr<Endpoint> ba;
    uint64_t seen = 0;
    while (!stop.load() && seen < kRounds) {
      size_t n = poll_once(b.get(), [&](const Completion& c) {
        if (c.kind != CqKind::kRecv) return;
        if (!ba) {
          auto r = b->connect(peer(1, ""), Deadline::after_ms(kWaitMs));
          if (!r.is_ok()) return;
          ba = std::move(r).value();
        }
        uint64_t v;
        std::memcpy(&v, c.rx, sizeof(v));
        if ((v % 7) == 3) std::this_thread::sleep_for(std::chrono::microseconds(v % 120));
        WorkRequest wr = send_wr(&v, sizeof(v));
        for (;;) {
          auto r = ba->post(std::span<const WorkRequest>(&wr, 1));
          if (!r.is_ok()) return;
          if (*r == 1) break;
        }
        ++seen;
      });
      if (n == 0 && seen < kRounds && !wait_readable(b.get(), kLostWakeUpMs)) {
        timeouts.fetch_add(1);
      }
    }
  });
  uint64_t got = 0;
  for (uint64_t i = 0; i < kRounds && timeouts.load() < 3; ++i) {
    if (i % 5 == 1) std::this_thread::sleep_for(std::chrono::microseconds((i * 13) % 150));
    WorkRequest wr = send_wr(&i, sizeof(i));
    auto r = (*ab)->post(std::span<const WorkRequest>(&wr, 1));
    if (!r.is_ok() || *r != 1) {
      ADD_FAILURE() << "post " << i << ": " << r.status().name();
      break;
    }
    Deadline d = Deadline::after_ms(kWaitMs);
    while (got <= i && !d.expired()) {
      size_t n = poll_once(a.get(), [&](const Completion& c) {
        if (c.kind != CqKind::kRecv) return;
        uint64_t v;
        std::memcpy(&v, c.rx, sizeof(v));
        EXPECT_EQ(v, got);
        ++got;
      });
      if (n == 0 && got <= i && !wait_readable(a.get(), kLostWakeUpMs)) timeouts.fetch_add(1);
    }
  }
  stop.store(true);
  echo.join();
  EXPECT_EQ(got, kRounds);
  EXPECT_EQ(timeouts.load(), 0) << "a wait on wait_fd() slept through pending work";
}

// A message many times the ring travels through the backlog; the sender
// blocks on wait_fd() between flushes and must be woken when the receiver
// frees room (want_space).
TEST(ShmTransportTest, BlockedSenderIsWokenForRingSpace) {
  auto a = make(1, 4096);
  auto b = make(2, 4096);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  auto ab = a->connect(peer(2, b->local_address()), Deadline::after_ms(kWaitMs));
  ASSERT_TRUE(ab.is_ok()) << ab.status().name();
  std::vector<uint8_t> big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<uint8_t>(i * 131 + 7);
  std::atomic<int> timeouts{0};
  bool intact = false;
  // The receiver answers the big message with a small one, so the sender
  // always has something to wait for: room for its backlog, then the answer.
  std::thread receiver([&] {
    Deadline d = Deadline::after_ms(4 * kWaitMs);
    bool got = false;
    while (!got && !d.expired()) {
      size_t n = poll_once(b.get(), [&](const Completion& c) {
        if (c.kind != CqKind::kRecv) return;
        intact = c.len == big.size() && std::memcmp(c.rx, big.data(), big.size()) == 0;
        got = true;
      });
      if (n == 0 && !got && !wait_readable(b.get(), 10000)) timeouts.fetch_add(1);
    }
    auto ba = b->connect(peer(1, ""), Deadline::after_ms(kWaitMs));
    if (!ba.is_ok()) return;
    char ok = 1;
    WorkRequest wr = send_wr(&ok, 1);
    auto posted = (*ba)->post(std::span<const WorkRequest>(&wr, 1));  // an empty ring takes it
    EXPECT_TRUE(posted.is_ok() && *posted == 1);
  });
  WorkRequest wr = send_wr(big.data(), big.size());
  auto r = (*ab)->post(std::span<const WorkRequest>(&wr, 1));
  ASSERT_TRUE(r.is_ok() && *r == 1);
  Deadline d = Deadline::after_ms(4 * kWaitMs);
  bool answered = false;
  while (!answered && !d.expired()) {
    size_t n =
        poll_once(a.get(), [&](const Completion& c) { answered |= c.kind == CqKind::kRecv; });
    if (n == 0 && !answered && !wait_readable(a.get(), 10000)) timeouts.fetch_add(1);
  }
  receiver.join();
  EXPECT_TRUE(answered);
  EXPECT_TRUE(intact);
  EXPECT_EQ(timeouts.load(), 0) << "a side slept through pending work";
}

// Child mode of KilledPeerProcessIsLost: runs only when the parent test
// spawns this binary with kParentEnv set. Connects as node 7, does one-sided
// ops on the parent's region (kRkeyEnv), then streams numbered messages that
// carry the rkey of a region of its own, until it is killed.
TEST(ShmChildProcess, StreamUntilKilled) {
  const char* parent = std::getenv(kParentEnv);
  const char* parent_rkey = std::getenv(kRkeyEnv);
  if (parent == nullptr || parent_rkey == nullptr) {
    GTEST_SKIP() << "helper for KilledPeerProcessIsLost";
  }
  auto t = make(7);
  ASSERT_NE(t, nullptr);
  auto mr = t->alloc_memory(4096, kRemoteAll);
  ASSERT_TRUE(mr.is_ok());
  std::memcpy(mr->addr, "child-region", 12);
  auto ep = t->connect(peer(1, parent), Deadline::after_ms(kWaitMs));
  ASSERT_TRUE(ep.is_ok()) << ep.status().name();
  uint64_t rkey = std::strtoull(parent_rkey, nullptr, 10);
  uint64_t old = 0;
  WorkRequest ops[2];
  ops[0].op = Op::kFetchAdd;
  ops[0].num_sge = 1;
  ops[0].sge[0] = Sge{reinterpret_cast<const std::byte*>(&old), 8, 0};
  ops[0].remote = RemoteRef{0, rkey};
  ops[0].operand = 1;
  ops[1] = send_wr("child!", 6);
  ops[1].op = Op::kWrite;
  ops[1].remote = RemoteRef{64, rkey};
  auto r = (*ep)->post(ops);
  ASSERT_TRUE(r.is_ok()) << r.status().name();
  ASSERT_EQ(*r, 2u);
  Deadline d = Deadline::after_ms(3 * kWaitMs);
  std::array<uint64_t, 32> msg{};
  msg[1] = mr->rkey;
  for (uint64_t seq = 0; !d.expired();) {
    msg[0] = seq;
    WorkRequest wr = send_wr(msg.data(), sizeof(msg));
    auto posted = (*ep)->post(std::span<const WorkRequest>(&wr, 1));
    if (!posted.is_ok()) break;
    seq += *posted;
    if (*posted == 0) {
      poll_once(t.get(), [](const Completion&) {});
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

// A peer process killed with SIGKILL in the middle of a stream: the kernel
// closes its socket, so the survivor reports kPeerLost once, its endpoint is
// dead, and the messages that did arrive are whole and in order. On the way,
// one-sided ops cross the process boundary in both directions.
TEST(ShmTransportTest, KilledPeerProcessIsLost) {
  auto t = make(1);
  ASSERT_NE(t, nullptr);
  auto region = t->alloc_memory(4096, kRemoteAll);
  ASSERT_TRUE(region.is_ok());
  std::string env_var = std::string(kParentEnv) + "=" + t->local_address();
  std::string rkey_var = std::string(kRkeyEnv) + "=" + std::to_string(region->rkey);
  std::string filter = "--gtest_filter=ShmChildProcess.StreamUntilKilled";
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "LTIER_SHM_TEST_", 15) != 0) env.push_back(*e);
  }
  env.push_back(env_var.data());
  env.push_back(rkey_var.data());
  env.push_back(nullptr);
  char exe[] = "/proc/self/exe";
  char* argv[] = {exe, filter.data(), nullptr};
  pid_t pid = -1;
  ASSERT_EQ(::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, env.data()), 0);

  uint64_t child_rkey = 0;
  uint64_t next = 0, bad = 0;
  std::vector<NodeId> lost;
  auto on = [&](const Completion& c) {
    if (c.kind == CqKind::kPeerLost) lost.push_back(c.peer);
    if (c.kind != CqKind::kRecv) return;
    uint64_t seq;
    if (c.peer != 7 || c.len != 256) {
      ++bad;
      return;
    }
    std::memcpy(&seq, c.rx, sizeof(seq));
    std::memcpy(&child_rkey, c.rx + 8, sizeof(child_rkey));
    if (seq != next) ++bad;
    next = seq + 1;
  };
  Deadline d = Deadline::after_ms(kWaitMs);
  while (next < 2000 && !d.expired()) {
    if (poll_once(t.get(), on) == 0) wait_readable(t.get(), 5);
  }
  auto ep = t->connect(peer(7, ""), Deadline::after_ms(kWaitMs));  // the inbound connection
  // The child's ops on our region were done before its first message.
  uint64_t word;
  std::memcpy(&word, region->addr, 8);
  bool wrote = std::memcmp(region->addr + 64, "child!", 6) == 0;
  // And we read the child's region.
  char back[12] = {};
  Status read_status = Code::kInternal;
  if (ep.is_ok()) {
    WorkRequest rd = send_wr(back, sizeof(back));
    rd.op = Op::kRead;
    rd.remote = RemoteRef{0, child_rkey};
    auto r = (*ep)->post(std::span<const WorkRequest>(&rd, 1));
    read_status = r.status();
  }
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_GE(next, 2000u) << "the child never streamed";
  ASSERT_TRUE(ep.is_ok()) << ep.status().name();
  EXPECT_EQ(word, 1u) << "the child's fetch-add did not land";
  EXPECT_TRUE(wrote) << "the child's write did not land";
  EXPECT_TRUE(read_status.is_ok()) << read_status.name();
  EXPECT_EQ(std::memcmp(back, "child-region", 12), 0);
  d = Deadline::after_ms(kWaitMs);
  while (lost.empty() && !d.expired()) {
    if (poll_once(t.get(), on) == 0) wait_readable(t.get(), 5);
  }
  ASSERT_EQ(lost, std::vector<NodeId>{7}) << "no kPeerLost for the killed process";
  for (int i = 0; i < 20; ++i) {
    poll_once(t.get(), on);
    wait_readable(t.get(), 1);
  }
  EXPECT_EQ(lost.size(), 1u);
  EXPECT_EQ(bad, 0u);
  EXPECT_FALSE((*ep)->alive());
  std::array<uint64_t, 32> msg{};
  WorkRequest wr = send_wr(msg.data(), sizeof(msg));
  auto r = (*ep)->post(std::span<const WorkRequest>(&wr, 1));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), Code::kPeerDown);
  t->free_memory(*region);
}

// Two transports in this process, node 1 connected to node 2.
struct Pair {
  std::unique_ptr<Transport> a, b;
  std::unique_ptr<Endpoint> ab;
};
void connect_pair(Pair* p) {
  p->a = make(1);
  p->b = make(2);
  ASSERT_NE(p->a, nullptr);
  ASSERT_NE(p->b, nullptr);
  auto ab = p->a->connect(peer(2, p->b->local_address()), Deadline::after_ms(kWaitMs));
  ASSERT_TRUE(ab.is_ok()) << ab.status().name();
  p->ab = std::move(ab).value();
}

// Placement (Caps::placement): ordinary memory registered for remote writes
// is written by virtual address with one cross-memory copy; the bytes are in
// place before a message posted afterwards arrives, and nothing outside the
// target range changes.
TEST(ShmTransportTest, PlacementWritesRegisteredMemoryBeforeLaterMessages) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  if (!p.b->caps().placement) GTEST_SKIP() << "no cross-memory attach on this kernel";
  Transport* b = p.b.get();
  Endpoint* ab = p.ab.get();
  constexpr size_t kGuard = 64;
  for (size_t len : {size_t{1}, size_t{4095}, size_t{1} << 20, size_t{8} << 20}) {
    std::vector<std::byte> dst(len + 2 * kGuard, std::byte{0xee});
    std::vector<std::byte> src(len);
    for (size_t i = 0; i < len; ++i) src[i] = static_cast<std::byte>((i * 131 + len) & 0xff);
    auto reg =
        b->register_memory(std::span<std::byte>(dst.data() + kGuard, len), Access::kRemoteWrite);
    ASSERT_TRUE(reg.is_ok());
    ASSERT_NE(reg->rkey, 0u);
    WorkRequest wrs[2];
    wrs[0].op = Op::kWrite;
    wrs[0].num_sge = 1;
    wrs[0].sge[0] = Sge{src.data(), static_cast<uint32_t>(len), 0};
    wrs[0].remote = {reinterpret_cast<uintptr_t>(dst.data() + kGuard), reg->rkey};
    uint64_t tag = len;
    wrs[1] = send_wr(&tag, sizeof(tag));
    auto r = ab->post(std::span<const WorkRequest>(wrs, 2));
    ASSERT_TRUE(r.is_ok()) << r.status().name();
    ASSERT_EQ(*r, 2u);
    bool seen = false;
    Deadline d = Deadline::after_ms(kWaitMs);
    while (!seen && !d.expired()) {
      poll_once(b, [&](const Completion& c) {
        if (c.kind != CqKind::kRecv) return;
        uint64_t v;
        std::memcpy(&v, c.rx, sizeof(v));
        EXPECT_EQ(v, len);
        // When the message is seen, every written byte is in place.
        EXPECT_EQ(std::memcmp(dst.data() + kGuard, src.data(), len), 0) << len;
        seen = true;
      });
    }
    ASSERT_TRUE(seen) << len;
    for (size_t i = 0; i < kGuard; ++i) {
      ASSERT_EQ(dst[i], std::byte{0xee}) << "guard before, len " << len;
      ASSERT_EQ(dst[kGuard + len + i], std::byte{0xee}) << "guard after, len " << len;
    }
    b->deregister_memory(*reg);
  }
}

// Each record names the CPU its sender wrote it on (a scheduling hint for the
// receiver's waiters), whole messages and fragmented ones alike.
TEST(ShmTransportTest, MessagesCarryTheSendersCpu) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  cpu_set_t mask;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mask), &mask), 0);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &mask)) continue;
    CpuHint got = kCpuUnknown;
    uint32_t got_len = 0;
    std::thread sender([&] {  // pinned to `cpu`, so the record's hint is known
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
      static std::vector<std::byte> big(1u << 20, std::byte{7});  // fragmented
      for (size_t len : {size_t{8}, big.size()}) {
        WorkRequest wr = send_wr(big.data(), len);
        auto r = p.ab->post(std::span<const WorkRequest>(&wr, 1));
        ASSERT_TRUE(r.is_ok() && *r == 1u);
        bool seen = false;
        Deadline d = Deadline::after_ms(kWaitMs);
        while (!seen && !d.expired()) {
          poll_once(p.b.get(), [&](const Completion& c) {
            if (c.kind != CqKind::kRecv) return;
            got = c.src_cpu;
            got_len = c.len;
            seen = true;
          });
          poll_once(p.a.get(), [](const Completion&) {});
        }
        ASSERT_TRUE(seen) << len;
        EXPECT_EQ(got_len, len);
        EXPECT_EQ(got, static_cast<CpuHint>(cpu + 1)) << "len " << len;
      }
    });
    sender.join();
  }
}

// What placement refuses, with nothing written: no write right, memory not
// registered for remote access, an unmapped address, atomics.
TEST(ShmTransportTest, PlacementRefusals) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&p));
  if (!p.b->caps().placement) GTEST_SKIP() << "no cross-memory attach on this kernel";
  Transport* b = p.b.get();
  Endpoint* ab = p.ab.get();
  std::vector<std::byte> dst(4096, std::byte{0x11});
  std::vector<std::byte> src(4096, std::byte{0x22});
  auto local = b->register_memory(dst, Access::kLocal);
  ASSERT_TRUE(local.is_ok());
  EXPECT_EQ(local->rkey, 0u) << "memory without remote rights must get no usable rkey";
  auto ro = b->register_memory(dst, Access::kRemoteRead);
  auto rw = b->register_memory(dst, Access::kRemoteWrite);
  ASSERT_TRUE(ro.is_ok() && rw.is_ok());
  auto post = [&](Op op, uint64_t addr, uint64_t rkey) {
    WorkRequest wr;
    wr.op = op;
    wr.num_sge = 1;
    wr.sge[0] = Sge{src.data(), 8, 0};
    wr.remote = {addr, rkey};
    auto r = ab->post(std::span<const WorkRequest>(&wr, 1));
    return r.is_ok() ? Code::kOk : r.status().code();
  };
  uint64_t at = reinterpret_cast<uintptr_t>(dst.data());
  EXPECT_EQ(post(Op::kWrite, at, ro->rkey), Code::kPerm);
  EXPECT_EQ(post(Op::kWrite, 16, rw->rkey), Code::kOutOfBounds);
  EXPECT_EQ(post(Op::kWrite, UINT64_MAX - 4, rw->rkey), Code::kOutOfBounds);
  EXPECT_EQ(post(Op::kFetchAdd, at, rw->rkey), Code::kUnsupported);
  for (std::byte x : dst) ASSERT_EQ(x, std::byte{0x11});
  // A read with the read right copies from the owner.
  EXPECT_EQ(post(Op::kRead, at, ro->rkey), Code::kOk);
  EXPECT_EQ(src[0], std::byte{0x11});
  EXPECT_EQ(src[8], std::byte{0x22});
  EXPECT_TRUE(ab->alive());
}

// shm.cma = 0 turns placement off: ordinary memory gets rkey 0 again.
TEST(ShmTransportTest, PlacementCanBeTurnedOff) {
  ShmConfig c;
  c.cma = 0;
  auto t = make_shm_transport(c);
  ASSERT_TRUE(t.is_ok());
  EXPECT_FALSE((*t)->caps().placement);
  std::vector<std::byte> mem(64);
  auto reg = (*t)->register_memory(mem, Access::kRemoteWrite);
  ASSERT_TRUE(reg.is_ok());
  EXPECT_EQ(reg->rkey, 0u);
}

}  // namespace
}  // namespace lt::transport
