// Clusters formed through a real etcd (cluster.backend: etcd), no
// ltier-manager: etcd-server on loopback with its own data directory,
// killed and restarted under a live cluster, and ltier-node processes
// driven through their command protocol.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cluster.h"

namespace lt::itest {
namespace {

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

// One HTTP POST to 127.0.0.1:port; the whole answer, or "" on failure.
std::string http_post(int port, const std::string& path, const std::string& body) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    std::string req = "POST " + path + " HTTP/1.0\r\nContent-Type: application/json\r\n" +
                      "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      pollfd p{fd, POLLIN, 0};
      while (poll(&p, 1, 2000) > 0) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n <= 0) break;
        out.append(buf, static_cast<size_t>(n));
      }
    }
  }
  close(fd);
  return out;
}

std::string base64(const std::string& in) {
  static const char* abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < in.size(); i += 3) {
    uint32_t v = static_cast<uint32_t>(static_cast<uint8_t>(in[i])) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint32_t>(static_cast<uint8_t>(in[i + 1])) << 8;
    if (i + 2 < in.size()) v |= static_cast<uint8_t>(in[i + 2]);
    out += abc[(v >> 18) & 63];
    out += abc[(v >> 12) & 63];
    out += i + 1 < in.size() ? abc[(v >> 6) & 63] : '=';
    out += i + 2 < in.size() ? abc[v & 63] : '=';
  }
  return out;
}

// A single-member etcd on loopback ports of its own, with its data in a
// fresh directory that outlives a kill -9 (restart() starts it on it again).
class Etcd {
 public:
  Etcd() : client_port_(free_port()), peer_port_(free_port()) {
    char tmpl[] = "/tmp/ltier-etcd-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) dir_ = tmpl;
    start();
  }
  ~Etcd() {
    proc_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  bool ok() const { return ok_; }
  /// Whether some key starting with `prefix` exists.
  bool has_prefix(const std::string& prefix) {
    std::string end = prefix;
    end.back() = static_cast<char>(end.back() + 1);
    std::string a = http_post(client_port_, "/v3/kv/range",
                              "{\"key\":\"" + base64(prefix) + "\",\"range_end\":\"" + base64(end) +
                                  "\",\"count_only\":true}");
    return a.find("\"count\":") != std::string::npos;  // left out when 0
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(client_port_); }
  void kill9() {
    if (!proc_) return;
    proc_->signal(SIGKILL);
    proc_->wait_exit(5000);
    proc_.reset();
    ok_ = false;
  }
  bool restart() {
    kill9();
    start();
    return ok_;
  }

 private:
  void start() {
    const std::string curl = url(), purl = "http://127.0.0.1:" + std::to_string(peer_port_);
    proc_ = std::make_unique<Proc>(
        std::vector<std::string>{"etcd", "--name", "itest", "--data-dir", dir_ + "/data",
                                 "--listen-client-urls", curl, "--advertise-client-urls", curl,
                                 "--listen-peer-urls", purl, "--initial-advertise-peer-urls", purl,
                                 "--initial-cluster", "itest=" + purl, "--logger", "zap",
                                 "--log-level", "error"},
        std::vector<std::string>{});
    // Serving once a read goes through (the member has elected itself).
    for (int i = 0; i < 300 && !ok_; ++i) {
      ok_ = http_post(client_port_, "/v3/kv/range", R"({"key":"AA=="})").find("\"header\"") !=
            std::string::npos;
      if (!ok_) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  int client_port_, peer_port_;
  std::string dir_;
  std::unique_ptr<Proc> proc_;
  bool ok_ = false;
};

class EtcdCluster : public ::testing::Test {
 protected:
  // An ltier-node joining through etcd; nullptr (and *ready the reply)
  // when it did not report "ready".
  static std::string prefix() {
    return "/itest/" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  Proc* add_node(const std::vector<std::string>& extra = {}, std::string* ready = nullptr) {
    std::vector<std::string> env = {"LTIER_CLUSTER_BACKEND=etcd",    "LTIER_ETCD=" + etcd_.url(),
                                    "LTIER_ETCD_PREFIX=" + prefix(), "LTIER_SECRET=etcd-itest",
                                    "LTIER_TCP_LISTEN=127.0.0.1:0",  "LTIER_ETCD_LEASE_MS=2000"};
    for (auto& e : extra) env.push_back(e);
    nodes_.push_back(
        std::make_unique<Proc>(std::vector<std::string>{Cluster::bin("ltier-node")}, env));
    std::string line = nodes_.back()->read_line(15000);
    if (ready) *ready = line;
    return line.rfind("ready ", 0) == 0 ? nodes_.back().get() : nullptr;
  }
  void TearDown() override {
    for (auto& n : nodes_) n->signal(SIGTERM);
    nodes_.clear();
  }
  Etcd etcd_;
  std::vector<std::unique_ptr<Proc>> nodes_;
};

// Three nodes find each other through etcd: ids from etcd, the address
// book, messages, names (LMR publications), a FIFO lock, a barrier, and a
// node that leaves seen down by the others.
TEST_F(EtcdCluster, FormsAClusterWithNamesLocksAndBarriers) {
  ASSERT_TRUE(etcd_.ok());
  Proc* a = add_node({"LTIER_NODE_NAME=alpha"});
  Proc* b = add_node({"LTIER_NODE_NAME=beta"});
  Proc* c = add_node({"LTIER_NODE_NAME=gamma", "LTIER_TRANSPORTS=tcp"});
  ASSERT_TRUE(a && b && c);
  std::string ia = id_of(a), ib = id_of(b), ic = id_of(c);
  EXPECT_TRUE(ia != ib && ib != ic && ia != ic);
  for (Proc* p : {a, b, c}) {
    std::string nodes;
    for (int i = 0; i < 100; ++i) {  // the last one's up event may be on its way
      nodes = p->cmd("nodes");
      if (lists(nodes, ia) && lists(nodes, ib) && lists(nodes, ic)) break;
      usleep(20000);
    }
    EXPECT_TRUE(lists(nodes, ia) && lists(nodes, ib) && lists(nodes, ic)) << nodes;
  }
  EXPECT_EQ(ok_value(c->cmd("node_by_name alpha 5000")), ia);
  EXPECT_EQ(await_event(a, "up", 5000), "ok up " + ib);

  // Messages both ways, over shm (a, b) and tcp (c).
  EXPECT_EQ(a->cmd("send " + ic + " 7 c0ffee"), "ok");
  EXPECT_EQ(c->cmd("recv 7 16 5000"), "ok " + ia + " c0ffee");
  EXPECT_EQ(b->cmd("send " + ia + " 7 beef"), "ok");
  EXPECT_EQ(a->cmd("recv 7 16 5000"), "ok " + ib + " beef");

  // A published region, found by name and written by another node.
  std::string h = ok_value(a->cmd("malloc " + ia + " 64 rw"));
  ASSERT_FALSE(h.empty());
  EXPECT_EQ(a->cmd("publish " + h + " etcd.table rw"), "ok");
  EXPECT_EQ(b->cmd("publish " + h + " etcd.table rw").rfind("err", 0), 0u);  // b has no such handle
  std::string hc = ok_value(c->cmd("map etcd.table rw"));
  ASSERT_FALSE(hc.empty());
  EXPECT_EQ(c->cmd("write " + hc + " 8 0102"), "ok");
  EXPECT_EQ(a->cmd("read " + h + " 8 2"), "ok 0102");

  // The lock: exclusive, withdrawn at the timeout, then granted.
  EXPECT_EQ(a->cmd("lock etcd.lock 5000"), "ok");
  EXPECT_EQ(b->cmd("lock etcd.lock 300"), "err LT_ERR_TIMEDOUT");
  EXPECT_EQ(a->cmd("lock etcd.lock 300"), "err LT_ERR_EXISTS");  // not reentrant
  ASSERT_TRUE(c->send("lock etcd.lock 10000"));
  usleep(100000);
  EXPECT_EQ(b->cmd("unlock etcd.lock"), "err LT_ERR_PERM");
  EXPECT_EQ(a->cmd("unlock etcd.lock"), "ok");
  EXPECT_EQ(c->read_line(15000), "ok");
  EXPECT_EQ(c->cmd("unlock etcd.lock"), "ok");

  // Two generations of one barrier, and a count that does not match.
  for (int gen = 0; gen < 2; ++gen) {
    for (Proc* p : {a, b, c}) ASSERT_TRUE(p->send("barrier etcd.b 3 10000"));
    for (Proc* p : {a, b, c}) EXPECT_EQ(p->read_line(15000), "ok");
  }
  ASSERT_TRUE(a->send("barrier etcd.c 2 10000"));
  // a's arrival is in (and so fixes the count) before b comes.
  for (int i = 0; i < 200 && !etcd_.has_prefix(prefix() + "/barriers/etcd.c"); ++i) usleep(20000);
  EXPECT_EQ(b->cmd("barrier etcd.c 3 2000"), "err LT_ERR_INVAL");
  EXPECT_EQ(c->cmd("barrier etcd.c 2 5000"), "ok");
  EXPECT_EQ(a->read_line(15000), "ok");

  // c leaves: its lease is revoked, a and b see it down at once, and its
  // names are gone.
  std::string own = ok_value(c->cmd("malloc " + ic + " 64 rw"));
  ASSERT_FALSE(own.empty());
  EXPECT_EQ(c->cmd("publish " + own + " etcd.gamma rw"), "ok");
  EXPECT_FALSE(ok_value(b->cmd("map etcd.gamma rw")).empty());
  EXPECT_EQ(c->cmd("quit"), "EOF");
  EXPECT_EQ(await_event(a, "down", 5000), "ok down " + ic);
  EXPECT_EQ(await_event(b, "down", 5000), "ok down " + ic);
  EXPECT_FALSE(lists(a->cmd("nodes"), ic));
  EXPECT_EQ(a->cmd("map etcd.gamma rw"), "err LT_ERR_NOT_FOUND");
}

// kill -9 of etcd under a live cluster and a restart on its data: the data
// path goes on meanwhile, names and locks fail with PEER_DOWN, the nodes
// report manager_lost and then rejoined with their ids, what they held
// comes back, a node that died meanwhile is seen down, and a newcomer gets
// an id nobody had.
TEST_F(EtcdCluster, EtcdRestartedMidRun) {
  ASSERT_TRUE(etcd_.ok());
  Proc *a = add_node(), *b = add_node(), *x = add_node();
  ASSERT_TRUE(a && b && x);
  std::string ia = id_of(a), ib = id_of(b), ix = id_of(x);
  std::string h = ok_value(a->cmd("malloc " + ia + " 64 rw"));
  ASSERT_FALSE(h.empty());
  ASSERT_EQ(a->cmd("publish " + h + " life.table rw"), "ok");
  ASSERT_EQ(a->cmd("lock life.lock 5000"), "ok");

  etcd_.kill9();
  x->signal(SIGKILL);  // dies while etcd is away
  EXPECT_EQ(await_event(a, "manager_lost"), "ok manager_lost " + ia);
  EXPECT_EQ(await_event(b, "manager_lost"), "ok manager_lost " + ib);
  std::string hb = ok_value(b->cmd("malloc " + ia + " 64 rw"));
  ASSERT_FALSE(hb.empty());
  EXPECT_EQ(b->cmd("write " + hb + " 0 0102"), "ok");
  EXPECT_EQ(b->cmd("lock life.other 2000"), "err LT_ERR_PEER_DOWN");
  EXPECT_EQ(b->cmd("map life.table rw"), "err LT_ERR_PEER_DOWN");

  ASSERT_TRUE(etcd_.restart());
  EXPECT_EQ(await_event(a, "rejoined"), "ok rejoined " + ia);
  EXPECT_EQ(await_event(b, "rejoined"), "ok rejoined " + ib);
  EXPECT_EQ(id_of(a), ia);
  EXPECT_EQ(id_of(b), ib);
  // x's lease runs out a lease time after etcd is back.
  EXPECT_EQ(await_event(a, "down"), "ok down " + ix);
  EXPECT_FALSE(lists(a->cmd("nodes"), ix));

  Proc* n = add_node();
  ASSERT_TRUE(n);
  std::string in = id_of(n);
  EXPECT_TRUE(in != ia && in != ib && in != ix) << in;
  EXPECT_FALSE(ok_value(n->cmd("map life.table rw")).empty());
  EXPECT_EQ(b->cmd("lock life.lock 300"), "err LT_ERR_TIMEDOUT");
  EXPECT_EQ(a->cmd("unlock life.lock"), "ok");
  EXPECT_EQ(b->cmd("lock life.lock 5000"), "ok");
  EXPECT_EQ(b->cmd("unlock life.lock"), "ok");
  for (Proc* p : {a, b, n}) ASSERT_TRUE(p->send("barrier life.b 3 10000"));
  for (Proc* p : {a, b, n}) EXPECT_EQ(p->read_line(15000), "ok");
  std::string hn = ok_value(a->cmd("malloc " + in + " 64 rw"));
  ASSERT_FALSE(hn.empty());
  EXPECT_EQ(a->cmd("write " + hn + " 0 aabb"), "ok");
  EXPECT_EQ(b->cmd("read " + hb + " 0 2"), "ok 0102");
}

// A node stopped past its lease time: the others see it down; when it runs
// again it learns it was expelled, and joins again under a new id.
TEST_F(EtcdCluster, StalledNodeIsExpelledAndRejoins) {
  ASSERT_TRUE(etcd_.ok());
  Proc* a = add_node();
  Proc* s = add_node({"LTIER_NODE_NAME=stalled"});
  ASSERT_TRUE(a && s);
  std::string is = id_of(s);
  s->signal(SIGSTOP);
  ASSERT_TRUE(s->wait_stopped(5000));
  EXPECT_EQ(await_event(a, "down"), "ok down " + is);
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
  printf("etcd: stalled node usable again %lld ms after SIGCONT\n",
         static_cast<long long>(
             std::chrono::duration_cast<std::chrono::milliseconds>(t1 - t0).count()));
}

// Clear failures: another secret under the cluster's prefix, and no etcd.
TEST_F(EtcdCluster, WrongSecretAndNoEtcdAreRefused) {
  ASSERT_TRUE(etcd_.ok());
  ASSERT_TRUE(add_node());
  std::string ready;
  EXPECT_EQ(add_node({"LTIER_SECRET=another"}, &ready), nullptr);
  EXPECT_EQ(ready, "err LT_ERR_AUTH");
  EXPECT_EQ(add_node({"LTIER_ETCD=http://127.0.0.1:1", "LTIER_JOIN_TIMEOUT_MS=2000"}, &ready),
            nullptr);
  EXPECT_EQ(ready, "err LT_ERR_PEER_DOWN");
}

}  // namespace
}  // namespace lt::itest
