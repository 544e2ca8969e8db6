// ltier-manager's lock and barrier bookkeeping, driven over one raw control
// connection so the order of requests is exactly the order sent.
#include "proto/manager.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <map>
#include <memory>
#include <set>
#include <thread>

#include "common/config.h"
#include "common/net.h"
#include "common/wire.h"
#include "proto/control.h"

namespace lt::proto {
namespace {

class ManagerTest : public ::testing::Test {
 protected:
  virtual void options(ManagerOptions*) {}
  void SetUp() override {
    ManagerOptions o;
    o.listen = "127.0.0.1:0";
    // Move-assigned: GCC 12 at -O3 reports a false -Wrestrict inside
    // std::string when a one-byte literal is assigned over a longer string.
    o.secret = std::string("s");
    options(&o);
    m_ = std::make_unique<Manager>(o);
    ASSERT_TRUE(m_->start().is_ok());
    thread_ = std::thread([this] { (void)m_->run(stop_); });
  }
  void TearDown() override {
    stop_ = true;
    thread_.join();
  }

  // A connection to the manager that says nothing.
  net::Fd idle() {
    std::string host;
    uint16_t port = 0;
    sockaddr_in a{};
    EXPECT_TRUE(parse_host_port(m_->address(), &host, &port).is_ok());
    EXPECT_TRUE(net::resolve(host, port, &a).is_ok());
    auto fd = net::connect_tcp(a, Deadline::after_ms(2000));
    EXPECT_TRUE(fd.is_ok());
    return fd ? std::move(fd.value()) : net::Fd();
  }
  // True once the manager has closed `fd` (EOF after what it sent, its
  // challenge), waiting at most until `d`.
  static bool closed_by_manager(int fd, Deadline d) {
    for (;;) {
      pollfd pf{fd, POLLIN, 0};
      if (::poll(&pf, 1, static_cast<int>(std::min<uint64_t>(d.remaining_ms(), 100))) > 0) {
        char b[256];
        ssize_t n = ::recv(fd, b, sizeof(b), MSG_DONTWAIT);
        if (n == 0) return true;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return true;  // reset
      }
      if (d.expired()) return false;
    }
  }
  // The challenge the manager opens every connection with.
  Nonce challenge(int fd) {
    std::string p;
    Nonce n{};
    EXPECT_TRUE(next_frame(fd, &p));
    EXPECT_TRUE(parse_challenge(p, &n));
    return n;
  }
  // Sends a join (sealed with `secret`) on a fresh connection; the frame sent
  // goes to *sent when asked. The answer is left to the caller.
  net::Fd send_join(const JoinRequest& j, const std::string& secret = "s",
                    std::string* sent = nullptr) {
    net::Fd fd = idle();
    Nonce mine{};
    EXPECT_TRUE(make_nonce(&mine));
    std::string f = join_frame(secret, challenge(fd.get()), mine, j);
    EXPECT_TRUE(net::write_all(fd.get(), f.data(), f.size(), Deadline::after_ms(2000)).is_ok());
    if (sent) *sent = f;
    return fd;
  }
  static JoinRequest fresh(const std::string& name = "n") {
    JoinRequest j;
    j.name = name;
    j.addresses = "tcp=127.0.0.1:1";
    return j;
  }
  // A joined client connection.
  net::Fd join() {
    net::Fd fd = send_join(fresh());
    EXPECT_EQ(next_type(fd.get()), CtlType::kJoinOk);
    return fd;
  }
  // The next frame's payload, waiting up to 5 s.
  bool next_frame(int fd, std::string* p) {
    Deadline d = Deadline::after_ms(5000);
    for (;;) {
      Status s = in_[fd].next(p);
      if (s.is_ok()) return true;
      if (s.code() != Code::kNoResource || d.expired()) return false;
      pollfd pf{fd, POLLIN, 0};
      ::poll(&pf, 1, d.remaining_ms());
      if (!in_[fd].fill(fd).is_ok() && !in_[fd].next(p).is_ok()) return false;
      if (!p->empty()) return true;
    }
  }
  // The id (and *token) a join on `fd` was admitted with; 0 if refused.
  uint32_t joined_as(int fd, uint64_t* token = nullptr) {
    uint64_t t = 0;
    uint32_t id = 0;
    if (next_type(fd, &t, nullptr, &id) != CtlType::kJoinOk) return 0;
    if (token) *token = t;
    return id;
  }
  // The code of the kJoinRefused that answers a join on `fd`.
  Code refusal(int fd) {
    Code c = Code::kOk;
    CtlType t = next_type(fd, nullptr, &c);
    return t == CtlType::kJoinRefused ? c : Code::kInternal;
  }
  // A claim back of `node` in cluster `token`, as a survivor of a manager
  // restart sends it.
  static JoinRequest claim(uint32_t node, uint64_t token, std::vector<uint32_t> seen) {
    JoinRequest j = fresh("survivor");
    j.claim_node = node;
    j.claim_token = token;
    j.seen = std::move(seen);
    return j;
  }
  // A request (req, name[, count]); kBarrier carries the count.
  void send(int fd, CtlType t, uint64_t req, const std::string& name, uint32_t count) {
    std::string f = begin_ctl(t);
    wire::Writer w(&f);
    w.u64(req);
    w.str(name);
    if (t == CtlType::kBarrier) w.u32(count);
    finish_ctl(&f);
    ASSERT_TRUE(net::write_all(fd, f.data(), f.size(), Deadline::after_ms(2000)).is_ok());
  }
  // Next frame's type; a kNameReply's (req, code) into *req/*code.
  CtlType next_type(int fd, uint64_t* req = nullptr, Code* code = nullptr,
                    uint32_t* node = nullptr) {
    std::string p;
    if (!next_frame(fd, &p)) return CtlType{0};
    wire::Reader r(
        std::span<const std::byte>(reinterpret_cast<const std::byte*>(p.data()), p.size()));
    auto t = static_cast<CtlType>(r.u8());
    if (t == CtlType::kNameReply) {
      uint64_t q = r.u64();
      auto c = static_cast<Code>(r.u8());
      if (req) *req = q;
      if (code) *code = c;
    } else if (t == CtlType::kJoinOk) {
      r.bytes(kMacBytes);
      uint32_t id = r.u32();
      uint64_t token = r.u64();
      if (req) *req = token;
      if (node) *node = id;
    } else if (t == CtlType::kJoinRefused) {
      if (code) *code = static_cast<Code>(r.u8());
    }
    return t;
  }
  // Skips membership pushes until a name reply.
  void expect_reply(int fd, uint64_t req, Code code) {
    for (int i = 0; i < 10; ++i) {
      uint64_t q = 0;
      Code c = Code::kOk;
      CtlType t = next_type(fd, &q, &c);
      if (t == CtlType::kMemberUp || t == CtlType::kMemberDown) continue;
      ASSERT_EQ(t, CtlType::kNameReply);
      EXPECT_EQ(q, req);
      EXPECT_EQ(c, code);
      return;
    }
    FAIL() << "no reply";
  }

  std::unique_ptr<Manager> m_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::map<int, CtlStream> in_;
};

TEST_F(ManagerTest, BarrierCountMismatchIsRefusedAndWithdrawalWorks) {
  net::Fd a = join();
  send(a.get(), CtlType::kBarrier, 1, "b", 2);  // opens a generation of 2
  send(a.get(), CtlType::kBarrier, 2, "b", 3);  // disagrees: refused at once
  expect_reply(a.get(), 2, Code::kInvalidArg);
  send(a.get(), CtlType::kBarrier, 1, "b", 0);  // withdraw arrival 1
  send(a.get(), CtlType::kBarrier, 3, "b", 3);  // a fresh generation of 3 is fine
  send(a.get(), CtlType::kBarrier, 4, "b", 3);
  send(a.get(), CtlType::kBarrier, 5, "b", 3);  // third arrival releases all three
  expect_reply(a.get(), 3, Code::kOk);
  expect_reply(a.get(), 4, Code::kOk);
  expect_reply(a.get(), 5, Code::kOk);
}

TEST_F(ManagerTest, LockQueueIsFifoAndDeadHolderReleases) {
  net::Fd a = join(), b = join(), c = join();
  auto lock = [&](net::Fd& fd, CtlType t, uint64_t req) {
    std::string f = begin_ctl(t);
    wire::Writer w(&f);
    w.u64(req);
    w.str("L");
    w.u64(7);  // owner token
    finish_ctl(&f);
    ASSERT_TRUE(net::write_all(fd.get(), f.data(), f.size(), Deadline::after_ms(2000)).is_ok());
  };
  lock(a, CtlType::kLockAcquire, 1);
  expect_reply(a.get(), 1, Code::kOk);
  lock(b, CtlType::kLockAcquire, 2);
  // b is queued before c: make sure the manager saw b's request first by
  // round-tripping another request on b's connection.
  send(b.get(), CtlType::kNameLookup, 99, "nothing", 0);
  expect_reply(b.get(), 99, Code::kNotFound);
  lock(c, CtlType::kLockAcquire, 3);
  send(c.get(), CtlType::kNameLookup, 98, "nothing", 0);
  expect_reply(c.get(), 98, Code::kNotFound);
  a.reset();  // the holder dies: b, queued first, gets the lock
  expect_reply(b.get(), 2, Code::kOk);
  lock(b, CtlType::kLockRelease, 4);
  expect_reply(b.get(), 4, Code::kOk);
  expect_reply(c.get(), 3, Code::kOk);
}

// The secret never crosses the wire, so what an eavesdropper can capture is
// a sealed join: sent again on another connection it meets another
// challenge and is refused; a wrong secret is refused the same way.
TEST_F(ManagerTest, ReplayedJoinAndWrongSecretAreRefused) {
  std::string captured;
  net::Fd a = send_join(fresh("a"), "s", &captured);
  ASSERT_NE(joined_as(a.get()), 0u);
  net::Fd replay = idle();
  challenge(replay.get());
  ASSERT_TRUE(
      net::write_all(replay.get(), captured.data(), captured.size(), Deadline::after_ms(2000))
          .is_ok());
  EXPECT_EQ(refusal(replay.get()), Code::kAuth);
  net::Fd wrong = send_join(fresh("w"), "not-the-secret");
  EXPECT_EQ(refusal(wrong.get()), Code::kAuth);
}

// A restarted manager learns the cluster from its survivors: the first claim
// fixes the token, claimed ids come back with their names and locks, and a
// fresh id is newer than every id a survivor has seen in its slot. A claimed
// id is never admitted twice, and a claim from another cluster is refused.
TEST_F(ManagerTest, SurvivorsClaimTheirPlaceBackAfterARestart) {
  const uint64_t token = 0xfeedf00dull;
  const uint32_t dead = kNodeSlots + 1;  // slot 1, generation 1: died before the restart
  JoinRequest j = claim(5, token, {5, dead});
  j.names = {"table"};
  j.locks = {{"L", 77}};
  net::Fd s5 = send_join(j);
  uint64_t got = 0;
  EXPECT_EQ(joined_as(s5.get(), &got), 5u);
  EXPECT_EQ(got, token);
  net::Fd s3 = send_join(claim(3, token, {3}));
  EXPECT_EQ(joined_as(s3.get()), 3u);
  net::Fd fresh_node = send_join(fresh("new"));
  // Slot 1 is free the longest; its next generation is above the dead node's.
  EXPECT_EQ(joined_as(fresh_node.get(), &got), 2 * kNodeSlots + 1);
  EXPECT_EQ(got, token);
  // The name and the lock came back with node 5.
  send(s3.get(), CtlType::kNameLookup, 1, "table", 0);
  uint64_t q = 0;
  Code c = Code::kInternal;
  while (next_type(s3.get(), &q, &c) != CtlType::kNameReply) {
  }
  EXPECT_EQ(q, 1u);
  EXPECT_EQ(c, Code::kOk);
  auto lock = [&](net::Fd& fd, CtlType t, uint64_t req, uint64_t owner) {
    std::string f = begin_ctl(t);
    wire::Writer w(&f);
    w.u64(req);
    w.str("L");
    w.u64(owner);
    finish_ctl(&f);
    ASSERT_TRUE(net::write_all(fd.get(), f.data(), f.size(), Deadline::after_ms(2000)).is_ok());
  };
  lock(s3, CtlType::kLockAcquire, 2, 1);  // waits behind node 5's claimed hold
  send(s3.get(), CtlType::kNameLookup, 3, "nothing", 0);
  expect_reply(s3.get(), 3, Code::kNotFound);  // (not granted before this)
  lock(s5, CtlType::kLockRelease, 4, 77);
  expect_reply(s5.get(), 4, Code::kOk);
  expect_reply(s3.get(), 2, Code::kOk);
  // Node 5 again, another cluster's node: refused, and told why (kClosed:
  // the claimant's membership is over).
  net::Fd twice = send_join(claim(5, token, {5}));
  EXPECT_EQ(refusal(twice.get()), Code::kClosed);
  net::Fd older = send_join(claim(1, token, {1}));  // superseded by the dead node's id
  EXPECT_EQ(refusal(older.get()), Code::kClosed);
  net::Fd other = send_join(claim(7, token + 1, {7}));
  EXPECT_EQ(refusal(other.get()), Code::kClosed);
}

// Strangers that connect and say nothing cannot crowd out real joins: at most
// max_unjoined wait (the oldest is closed for a newcomer) and each is closed
// after join_timeout_ms.
class ManagerCapTest : public ManagerTest {
 protected:
  void options(ManagerOptions* o) override {
    o->max_unjoined = 16;
    o->join_timeout_ms = 600000;  // only the cap closes anyone here
  }
};

class ManagerJoinTimeoutTest : public ManagerTest {
 protected:
  void options(ManagerOptions* o) override {
    o->join_timeout_ms = 300;
    o->down_after_ms = 600000;  // the member below sends no heartbeats
  }
};

// With a recovery time, a fresh join waits for the survivors' claims, so it
// cannot take a survivor's slot even when it arrives first.
class ManagerRecoverTest : public ManagerTest {
 protected:
  void options(ManagerOptions* o) override { o->recover_ms = 1500; }
};

TEST_F(ManagerRecoverTest, FreshJoinWaitsForTheSurvivorsClaims) {
  net::Fd early = send_join(fresh("early"));
  net::Fd s = send_join(claim(1, 0xabcull, {1}));
  EXPECT_EQ(joined_as(s.get()), 1u);
  EXPECT_EQ(joined_as(early.get()), 2u);  // slot 1 would have been its own
}

// Slots are reused once their member is gone, each time under a new id: a
// cluster admits any number of joins over its life, at most max_nodes at once.
class ManagerSlotsTest : public ManagerTest {
 protected:
  void options(ManagerOptions* o) override { o->max_nodes = 2; }
};

TEST_F(ManagerSlotsTest, SlotsAreReusedUnderNewIds) {
  net::Fd a = send_join(fresh("a"));
  ASSERT_EQ(joined_as(a.get()), 1u);
  net::Fd b = send_join(fresh("b"));
  ASSERT_EQ(joined_as(b.get()), 2u);
  net::Fd full = send_join(fresh("c"));
  EXPECT_EQ(refusal(full.get()), Code::kNoResource);
  std::set<uint32_t> ids = {1, 2};
  for (int i = 0; i < 100; ++i) {
    a.reset();  // a's slot frees; b hears of it once the manager has seen it
    CtlType t;
    while ((t = next_type(b.get())) == CtlType::kMemberUp) {
    }
    ASSERT_EQ(t, CtlType::kMemberDown) << i;
    a = send_join(fresh("a"));
    uint32_t id = joined_as(a.get());
    ASSERT_NE(id, 0u) << i;
    EXPECT_TRUE(ids.insert(id).second) << "id " << id << " given twice";
    EXPECT_TRUE(node_slot(id) == 1 || node_slot(id) == 2) << id;
  }
  EXPECT_EQ(ids.size(), 102u);
}

TEST_F(ManagerCapTest, FloodOfIdleConnectionsStillAdmitsAJoin) {
  std::vector<net::Fd> flood;
  for (int i = 0; i < 200; ++i) flood.push_back(idle());
  net::Fd a = join();  // answered with kJoinOk (checked in join())
  ASSERT_TRUE(a.valid());
  // The first strangers made room for the later ones; the last 16 wait on.
  EXPECT_TRUE(closed_by_manager(flood.front().get(), Deadline::after_ms(10000)));
  EXPECT_FALSE(closed_by_manager(flood.back().get(), Deadline::after_ms(200)));
}

TEST_F(ManagerJoinTimeoutTest, IdleConnectionIsClosedAfterTheJoinTimeout) {
  net::Fd stranger = idle();
  net::Fd member = join();
  EXPECT_TRUE(closed_by_manager(stranger.get(), Deadline::after_ms(10000)));
  // A member is not a stranger: it stays.
  send(member.get(), CtlType::kNameLookup, 5, "nothing", 0);
  expect_reply(member.get(), 5, Code::kNotFound);
}

}  // namespace
}  // namespace lt::proto
