// The cluster's lifecycle with real processes: a manager killed and
// restarted under a live cluster, a node stalled past the down time that
// comes back under a new id, and a flood of idle connections at the manager.
#include <arpa/inet.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "cluster.h"

namespace lt::itest {
namespace {

// kill -9 of the manager under a live cluster, and a restart on the same
// address: the nodes reconnect on their own and keep their ids, the lock and
// the name they held come back with them, a node that died meanwhile is
// reported down, and a newcomer gets an id nobody has seen.
TEST(Lifecycle, ManagerRestartKeepsTheClusterAndIds) {
  Cluster c;
  ASSERT_TRUE(c.ok());
  Proc *a = c.add_node(), *b = c.add_node(), *x = c.add_node();
  ASSERT_TRUE(a && b && x);
  std::string ia = id_of(a), ib = id_of(b), ix = id_of(x);
  std::string h = ok_value(a->cmd("malloc " + ia + " 64 rw"));
  ASSERT_FALSE(h.empty());
  ASSERT_EQ(a->cmd("publish " + h + " life.table rw"), "ok");
  ASSERT_EQ(a->cmd("lock life.lock 5000"), "ok");

  c.kill_manager();
  x->signal(SIGKILL);  // dies while there is no manager to say so
  EXPECT_EQ(await_event(a, "manager_lost"), "ok manager_lost " + ia);
  EXPECT_EQ(await_event(b, "manager_lost"), "ok manager_lost " + ib);
  // The data path does not need the manager; names and locks do.
  std::string hb = ok_value(b->cmd("malloc " + ia + " 64 rw"));
  ASSERT_FALSE(hb.empty());
  EXPECT_EQ(b->cmd("write " + hb + " 0 0102"), "ok");
  EXPECT_EQ(b->cmd("lock life.other 2000"), "err LT_ERR_PEER_DOWN");

  ASSERT_TRUE(c.restart_manager({"--recover-ms", "1500"}));
  EXPECT_EQ(await_event(a, "rejoined"), "ok rejoined " + ia);
  EXPECT_EQ(await_event(b, "rejoined"), "ok rejoined " + ib);
  EXPECT_EQ(id_of(a), ia);
  EXPECT_EQ(id_of(b), ib);
  // x did not come back: declared down once the survivors' time to claim
  // their place (the down time) is over, and gone from the address book.
  EXPECT_EQ(await_event(a, "down"), "ok down " + ix);
  std::string nodes = a->cmd("nodes");
  EXPECT_TRUE(lists(nodes, ib)) << nodes;
  EXPECT_FALSE(lists(nodes, ix)) << nodes;

  // A newcomer: an id above every id the survivors have seen (x's included).
  Proc* n = c.add_node();
  ASSERT_TRUE(n);
  std::string in = id_of(n);
  EXPECT_GT(std::stoul(in), std::max({std::stoul(ia), std::stoul(ib), std::stoul(ix)}));
  EXPECT_FALSE(ok_value(n->cmd("map life.table rw")).empty());  // the name came back
  // The lock came back with its holder.
  EXPECT_EQ(b->cmd("lock life.lock 300"), "err LT_ERR_TIMEDOUT");
  EXPECT_EQ(a->cmd("unlock life.lock"), "ok");
  EXPECT_EQ(b->cmd("lock life.lock 5000"), "ok");
  EXPECT_EQ(b->cmd("unlock life.lock"), "ok");
  // Barriers work across old and new members.
  for (Proc* p : {a, b, n}) ASSERT_TRUE(p->send("barrier life.b 3 10000"));
  for (Proc* p : {a, b, n}) EXPECT_EQ(p->read_line(15000), "ok");
  // Everyone reaches the newcomer, and it reaches them.
  std::string hn = ok_value(a->cmd("malloc " + in + " 64 rw"));
  ASSERT_FALSE(hn.empty());
  EXPECT_EQ(a->cmd("write " + hn + " 0 aabb"), "ok");
  EXPECT_EQ(n->cmd("read " + hb + " 0 2"), "err LT_ERR_BAD_HANDLE");  // b's handle, not n's
  EXPECT_EQ(b->cmd("read " + hb + " 0 2"), "ok 0102");
}

// A node stopped past the manager's down time learns, when it runs again,
// that it was expelled (an event, and CLOSED from every call), joins again
// under a new id, and the cluster uses it under that id.
TEST(Lifecycle, StalledNodeRejoinsUnderANewId) {
  Cluster c;
  ASSERT_TRUE(c.ok());
  Proc* a = c.add_node();
  Proc* s = c.add_node({"LTIER_NODE_NAME=stalled"});
  ASSERT_TRUE(a && s);
  std::string is = id_of(s);
  s->signal(SIGSTOP);
  ASSERT_TRUE(s->wait_stopped(5000));
  std::string nodes;
  for (int i = 0; i < 300; ++i) {
    nodes = a->cmd("nodes");
    if (!lists(nodes, is)) break;
    usleep(50000);
  }
  ASSERT_FALSE(lists(nodes, is)) << nodes;
  auto t0 = std::chrono::steady_clock::now();
  s->signal(SIGCONT);
  EXPECT_EQ(await_event(s, "expelled"), "ok expelled " + is);
  EXPECT_EQ(s->cmd("malloc " + is + " 64 rw"), "err LT_ERR_CLOSED");
  std::string fresh = ok_value(s->cmd("rejoin"));
  auto t1 = std::chrono::steady_clock::now();
  ASSERT_FALSE(fresh.empty());
  EXPECT_NE(fresh, is);
  EXPECT_EQ(ok_value(a->cmd("node_by_name stalled 5000")), fresh);
  std::string h = ok_value(a->cmd("malloc " + fresh + " 64 rw"));
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(a->cmd("write " + h + " 0 0a0b"), "ok");
  EXPECT_EQ(a->cmd("read " + h + " 0 2"), "ok 0a0b");
  printf("stalled node usable again %lld ms after SIGCONT\n",
         static_cast<long long>(
             std::chrono::duration_cast<std::chrono::milliseconds>(t1 - t0).count()));
}

// Thousands of idle connections (a flood, or a leak somewhere) do not keep
// a real node out: the manager keeps at most max_unjoined strangers, closes
// the oldest for each newcomer and admits real joins all along.
TEST(Lifecycle, IdleConnectionFloodStillAdmitsAJoin) {
  Cluster c;
  ASSERT_TRUE(c.ok());
  rlimit nofile{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &nofile), 0);
  nofile.rlim_cur = nofile.rlim_max;
  setrlimit(RLIMIT_NOFILE, &nofile);
  getrlimit(RLIMIT_NOFILE, &nofile);
  const size_t want = std::min<size_t>(20000, nofile.rlim_cur > 256 ? nofile.rlim_cur - 256 : 0);
  const std::string& addr = c.manager_address();
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoul(addr.substr(addr.rfind(':') + 1))));
  inet_pton(AF_INET, addr.substr(0, addr.rfind(':')).c_str(), &sa.sin_addr);
  std::vector<int> flood;
  for (size_t i = 0; i < want; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) break;
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      close(fd);
      break;
    }
    flood.push_back(fd);
  }
  printf("%zu idle connections opened\n", flood.size());
  EXPECT_GE(flood.size(), want * 9 / 10);
  Proc* n = c.add_node();
  for (int fd : flood) close(fd);
  ASSERT_TRUE(n != nullptr);
  EXPECT_FALSE(id_of(n).empty());
}

// With room for 4 members, clients come and go through 3 slots: each new one
// gets a new id in a reused slot, the server talks to it both ways, and a
// call to a departed id fails with PEER_DOWN instead of reaching the new
// process in its slot.
TEST(Lifecycle, SlotsAreReusedAndOldIdsStayDead) {
  ClusterOptions o;
  o.manager_args = {"--max-nodes", "4"};
  Cluster c(o);
  ASSERT_TRUE(c.ok());
  Proc* server = c.add_node();
  ASSERT_TRUE(server);
  const std::string is = id_of(server);
  std::set<std::string> ids;
  std::vector<std::string> gone;
  for (int round = 0; round < 8; ++round) {
    std::vector<Proc*> batch;
    for (int i = 0; i < 3; ++i) {
      Proc* p = c.add_node();
      ASSERT_TRUE(p) << round;
      batch.push_back(p);
    }
    for (Proc* p : batch) {
      std::string id = id_of(p);
      EXPECT_TRUE(ids.insert(id).second) << "id " << id << " given twice";
      EXPECT_EQ(p->cmd("rpc " + is + " 1 0102"), "ok 0102");
      EXPECT_EQ(server->cmd("rpc " + id + " 1 0304"), "ok 0304");
      EXPECT_EQ(server->cmd("send " + id + " 5 aa"), "ok");
      EXPECT_EQ(p->cmd("recv 5 16 5000"), "ok " + is + " aa");
      for (const std::string& old : gone) {
        if (std::stoul(old) % 1024 != std::stoul(id) % 1024) continue;
        // The departed node of this slot: refused, and nothing reaches p.
        EXPECT_EQ(server->cmd("send " + old + " 5 bb"), "err LT_ERR_PEER_DOWN") << old;
        EXPECT_EQ(server->cmd("rpc " + old + " 1 05"), "err LT_ERR_PEER_DOWN") << old;
      }
      EXPECT_EQ(p->cmd("recv 5 16 0"), "err LT_ERR_TIMEDOUT");
    }
    for (Proc* p : batch) {
      gone.push_back(id_of(p));
      p->signal(SIGKILL);
      EXPECT_NE(p->wait_exit(10000), -1);
    }
    // The manager frees their slots once it sees them gone.
    for (int i = 0; i < 200; ++i) {
      if (ok_value(server->cmd("nodes")) == is) break;
      usleep(20000);
    }
  }
  EXPECT_EQ(ids.size(), 24u);
  EXPECT_GT(
      std::stoul(*std::max_element(ids.begin(), ids.end(),
                                   [](auto& a, auto& b) { return std::stoul(a) < std::stoul(b); })),
      1024u);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

// What a process holds: descriptors, mappings, resident memory.
struct Footprint {
  size_t fds = 0, maps = 0, rss_kib = 0;
  size_t shared = 0;  // mappings of ltier's memfds (shm rings, LMR memory)
  size_t sockets = 0;
  std::string fd_list;  // "N:target" for each descriptor, to say which differ
};
Footprint footprint(pid_t pid) {
  Footprint f;
  std::string dir = "/proc/" + std::to_string(pid);
  if (DIR* d = opendir((dir + "/fd").c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      ++f.fds;
      char target[256];
      const std::string link = dir + "/fd/" + e->d_name;
      ssize_t len = readlink(link.c_str(), target, sizeof(target) - 1);
      target[len > 0 ? len : 0] = '\0';
      f.sockets += std::string(target).rfind("socket:", 0) == 0;
      f.fd_list += std::string(" ") + e->d_name + ":" + target;
    }
    closedir(d);
  }
  std::ifstream maps(dir + "/maps");
  for (std::string line; std::getline(maps, line);) {
    ++f.maps;
    f.shared += line.find("/memfd:ltier") != std::string::npos;
  }
  std::ifstream status(dir + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) f.rss_kib = std::stoul(line.substr(6));
  }
  return f;
}

// 200 clients join a long-lived server, call it, map its memory, leave
// messages it never receives, and die (most killed, some leaving): once
// they are gone the server holds what it held before they came. Their
// connections' descriptors and (over shm) ring mappings go with the
// endpoints, their unreceived messages and LMRs with the node.
class Churn : public ::testing::TestWithParam<const char*> {};

TEST_P(Churn, ServerReturnsToItsFootprint) {
  Cluster c;
  ASSERT_TRUE(c.ok());
  const std::string transports = std::string("LTIER_TRANSPORTS=") + GetParam();
  Proc* server = c.add_node({transports});
  ASSERT_TRUE(server);
  const std::string is = id_of(server);
  auto round = [&](int clients, bool kill) {
    std::vector<Proc*> batch;
    for (int i = 0; i < clients; ++i) {
      Proc* p = c.add_node({transports});
      ASSERT_TRUE(p);
      batch.push_back(p);
    }
    for (Proc* p : batch) {
      ASSERT_EQ(p->cmd("rpc " + is + " 1 0102"), "ok 0102");
      ASSERT_FALSE(ok_value(p->cmd("malloc " + is + " 65536 rw")).empty());
      // Never received; eager (below tcp's and shm's eager_max_bytes), so
      // each send completes at once and the bytes wait in the server's store.
      ASSERT_EQ(p->cmd("send_seq " + is + " 9 8 16000"), "ok");
      ASSERT_EQ(server->cmd("send " + id_of(p) + " 5 aa"), "ok");
    }
    for (Proc* p : batch) {
      if (kill) {
        p->signal(SIGKILL);
      } else {
        p->send("quit");
      }
      EXPECT_NE(p->wait_exit(10000), -1);
    }
  };
  // Let the server settle: each client's departure is seen at once (its
  // connections close), its endpoint freed within a progress pass or two.
  auto settled = [&](const Footprint& want) {
    Footprint f;
    for (int i = 0; i < 200; ++i) {
      f = footprint(server->pid());
      if (f.fds <= want.fds && f.shared <= want.shared) break;
      usleep(50000);
    }
    return f;
  };
  const Footprint start = footprint(server->pid());
  round(10, true);  // warm-up: lazily made things (stage region, threads) exist now
  // The warm-up's clients may still be going: the base is a footprint that
  // held for half a second.
  Footprint base = footprint(server->pid());
  for (int i = 0, same = 0; i < 200 && same < 10; ++i) {
    usleep(50000);
    const Footprint f = footprint(server->pid());
    same = f.fds == base.fds && f.shared == base.shared ? same + 1 : 0;
    base = f;
  }
  // None of those is a socket: every connection went with its client (an
  // idle engine once kept the last one open until its next event).
  EXPECT_EQ(base.sockets, start.sockets)
      << "at start:" << start.fd_list << "\nafter the warm-up:" << base.fd_list;
  for (int r = 0; r < 20; ++r) round(10, r % 4 != 3);
  Footprint after = settled(base);
  printf(
      "server footprint (%s): before %zu fds, %zu mappings (%zu of memfds), %zu KiB RSS; "
      "after 200 clients %zu fds, %zu mappings (%zu of memfds), %zu KiB RSS\n",
      GetParam(), base.fds, base.maps, base.shared, base.rss_kib, after.fds, after.maps,
      after.shared, after.rss_kib);
  EXPECT_EQ(after.fds, base.fds) << "before:" << base.fd_list << "\nafter:" << after.fd_list;
  EXPECT_EQ(after.shared, base.shared);
  // A sanitizer's runtime maps memory of its own as it goes.
  if (!kSanitized) {
    EXPECT_EQ(after.maps, base.maps);
  }
  // The allocator keeps some freed memory; 200 clients' worth of rings (8 MiB
  // each over shm) or messages (512 KiB each) would be far more than this.
  // A sanitizer's allocator keeps freed memory in quarantine on purpose.
  if (!kSanitized) {
    EXPECT_LT(after.rss_kib, base.rss_kib + 16 * 1024);
  }
  EXPECT_EQ(server->cmd("rpc " + is + " 1 07"), "ok 07");  // still serving
}

INSTANTIATE_TEST_SUITE_P(Transports, Churn, ::testing::Values("tcp", "shm,tcp"),
                         [](const auto& info) {
                           return std::string(info.param) == "tcp" ? "tcp" : "shm_tcp";
                         });

}  // namespace
}  // namespace lt::itest
