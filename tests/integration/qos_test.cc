// QoS with real processes: two tenants of one QoS file in separate ltier-node
// processes, their classes, every quota, and joins the file refuses.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cluster.h"

namespace lt::itest {
namespace {

const char* kPolicy = R"(qos:
  classes:
    - name: latency
      priority: 0
      target_rtt: 1us
    - name: bulk
      priority: 1
  tenants:
    - name: kv
      classes: [latency, bulk]
      default_class: latency
      max_ops_in_flight: 4
    - name: etl
      classes: [bulk]
      max_lmrs: 2
      max_lmr_bytes: 1MiB
    - name: capped
      classes: [bulk]
      max_msg_credits: 4
      max_rpc_credits: 2
)";

// The QoS file, written for one test and removed after it.
class PolicyFile {
 public:
  explicit PolicyFile(const std::string& text) {
    char tmpl[] = "/tmp/ltier-qos-XXXXXX";
    int fd = mkstemp(tmpl);
    EXPECT_GE(fd, 0);
    path_ = tmpl;
    std::ofstream(path_) << text;
    if (fd >= 0) close(fd);
  }
  ~PolicyFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The host board of one test: its own, so other engines on this host do not
// throttle the test's, and removed after it.
class Board {
 public:
  Board() : name_("ltier-qos-itest-" + std::to_string(getpid())) {}
  ~Board() { shm_unlink(("/" + name_).c_str()); }
  std::string env() const { return "LTIER_QOS_BOARD=" + name_; }

 private:
  std::string name_;
};

// The field `key` of class `cls` in a "qos" answer, or -1.
long long qos_field(const std::string& reply, const std::string& cls, const std::string& key) {
  size_t at = reply.find(" " + cls + ":");
  if (at == std::string::npos) return -1;
  size_t end = reply.find(' ', at + 1);
  std::string part =
      reply.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
  size_t k = part.find(key + "=");
  if (k == std::string::npos) return -1;
  return std::stoll(part.substr(k + key.size() + 1));
}

// Tenants kv and etl of kPolicy, an ltier-node each, on a board of their own.
class QosTwoTenants : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(c_.ok());
    kv = c_.add_node({"LTIER_CONFIG=" + f_.path(), "LTIER_TENANT=kv", board_.env()});
    etl = c_.add_node({"LTIER_CONFIG=" + f_.path(), "LTIER_TENANT=etl", board_.env()});
    ASSERT_TRUE(kv && etl);
    ikv = id_of(kv);
    ietl = id_of(etl);
  }
  PolicyFile f_{kPolicy};
  Board board_;
  Cluster c_;
  Proc* kv = nullptr;
  Proc* etl = nullptr;
  std::string ikv, ietl;
};

TEST_F(QosTwoTenants, GetTheirClassesAndQuotas) {
  // kv's calls go to its default class, latency, until it picks bulk.
  std::string h = ok_value(kv->cmd("malloc " + ietl + " 4096 rw"));
  ASSERT_FALSE(h.empty());
  ASSERT_EQ(kv->cmd("fill " + h + " 0 4096 7"), "ok");
  std::string q = kv->cmd("qos");
  ASSERT_EQ(q.rfind("ok latency:prio=0,", 0), 0u) << q;
  EXPECT_GE(qos_field(q, "latency", "ops"), 1) << q;
  EXPECT_GE(qos_field(q, "latency", "bytes"), 4096) << q;
  EXPECT_EQ(qos_field(q, "bulk", "ops"), 0) << q;
  EXPECT_EQ(qos_field(q, "bulk", "throttled_peers"), 0) << q;
  ASSERT_EQ(kv->cmd("class bulk"), "ok");
  ASSERT_EQ(kv->cmd("fill " + h + " 0 4096 8"), "ok");
  ASSERT_EQ(kv->cmd("sum " + h + " 0 4096"), "ok " + std::to_string(4096 * 8));
  q = kv->cmd("qos");
  EXPECT_GE(qos_field(q, "bulk", "ops"), 2) << q;
  EXPECT_GE(qos_field(q, "bulk", "bytes"), 8192) << q;
  EXPECT_GT(qos_field(q, "bulk", "p50_ns"), 0) << q;
  ASSERT_EQ(kv->cmd("class -"), "ok");

  // etl may use bulk only.
  EXPECT_EQ(etl->cmd("class latency"), "err LT_ERR_PERM");
  EXPECT_EQ(etl->cmd("class gold"), "err LT_ERR_NOT_FOUND");
  EXPECT_EQ(etl->cmd("class bulk"), "ok");

  // kv: at most 4 operations in flight; a fifth async call is refused with
  // QUOTA and the four complete.
  EXPECT_EQ(kv->cmd("rpc_async " + ietl + " 4 64"), "ok");
  EXPECT_EQ(kv->cmd("rpc_async " + ietl + " 5 64"), "err LT_ERR_QUOTA issuing call 4");
  EXPECT_EQ(kv->cmd("rpc_async " + ietl + " 4 64"), "ok");  // nothing leaked

  // etl: at most 2 LMRs and 1 MiB of them, wherever they live.
  std::string l1 = ok_value(etl->cmd("malloc " + ikv + " 4096 rw"));
  std::string l2 = ok_value(etl->cmd("malloc " + ietl + " 4096 rw"));
  ASSERT_FALSE(l1.empty());
  ASSERT_FALSE(l2.empty());
  EXPECT_EQ(etl->cmd("malloc " + ikv + " 4096 rw"), "err LT_ERR_QUOTA");
  ASSERT_EQ(etl->cmd("free " + l1), "ok");
  EXPECT_EQ(etl->cmd("malloc " + ikv + " 2000000 rw"), "err LT_ERR_QUOTA");
  std::string l3 = ok_value(etl->cmd("malloc " + ikv + " 1000000 rw"));
  EXPECT_FALSE(l3.empty());
  // kv has no LMR quota.
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(ok_value(kv->cmd("malloc " + ikv + " 4096 rw")).empty());
}

// The latency tenant's class (target 1 us: every call is above it) in one
// process throttles the bulk tenant's writes in another, through the host
// board; the writes still all arrive.
TEST_F(QosTwoTenants, ALatencyTenantThrottlesABulkTenantInAnotherProcess) {
  std::string h = ok_value(etl->cmd("malloc " + ikv + " 1000000 rw"));
  ASSERT_FALSE(h.empty());
  std::string q = etl->cmd("qos");
  EXPECT_EQ(qos_field(q, "bulk", "throttles"), 0) << q;
  // kv calls etl in a loop of 300000 calls; etl writes 1000000 bytes at a
  // time meanwhile, in ten back-to-back writes of 100000: at least 64 times,
  // and on until one of its writes has waited for its class's tokens (at
  // most 640 times a loop). How many writes pass before the cut rate makes
  // one wait depends on the two processes' timing: 64 fast writes sometimes
  // all went first, and under a sanitizer kv's loop has ended before 640
  // writes were made with none delayed; then kv calls again, up to four
  // loops in all. The writes go back to back because the bucket refills in
  // the gaps between commands: under TSan, where making each command's
  // pattern is slow and a write into a peer's mapped region is not, 2562
  // single writes of 1000000 bytes were all let through.
  int writes = 0;
  bool delayed = false;
  for (int loop = 0; loop < 4 && !delayed; ++loop) {
    ASSERT_TRUE(kv->send("rpc_threads " + ietl + " 1 300000"));
    for (int i = 0; i < 640 && !delayed; ++i, ++writes) {
      ASSERT_EQ(etl->cmd("write_pat " + h + " 0 1000000 " + std::to_string(writes) + " 100000"),
                "ok");
      if (i >= 63 && i % 16 == 15) delayed = qos_field(etl->cmd("qos"), "bulk", "delayed") >= 1;
    }
    EXPECT_EQ(kv->read_line(100000), "ok");
  }
  ASSERT_EQ(etl->cmd("check_pat " + h + " 0 1000000 " + std::to_string(writes - 1) + " 1000000"),
            "ok");
  q = etl->cmd("qos");
  EXPECT_GE(qos_field(q, "bulk", "throttles"), 1) << q;
  EXPECT_GE(qos_field(q, "bulk", "delayed"), 1) << q;
  std::string qk = kv->cmd("qos");
  EXPECT_EQ(qos_field(qk, "latency", "throttles"), 0) << qk;
}

// GET /metrics from 127.0.0.1:PORT ("" on failure): the whole HTTP answer.
std::string http_get(const std::string& address) {
  const size_t colon = address.rfind(':');
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &a.sin_addr);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\n\r\n";
    if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;)
        out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
}

// The value of the sample line that starts with `prefix`, or -1.
double sample(const std::string& text, const std::string& prefix) {
  size_t at = text.find("\n" + prefix);
  if (at == std::string::npos) return -1;
  size_t eol = text.find('\n', at + 1);
  std::string line = text.substr(at + 1, eol - at - 1);
  return std::stod(line.substr(line.rfind(' ') + 1));
}

// Metrics scraped over HTTP from a running node, and shown by ltier-info.
TEST(Qos, MetricsAreServedOverHttp) {
  PolicyFile f(kPolicy);
  Board board;
  Cluster c;
  ASSERT_TRUE(c.ok());
  Proc* kv = c.add_node({"LTIER_CONFIG=" + f.path(), "LTIER_TENANT=kv", board.env(),
                         "LTIER_METRICS_LISTEN=127.0.0.1:0"});
  Proc* plain = c.add_node();
  ASSERT_TRUE(kv && plain);
  EXPECT_EQ(plain->cmd("metrics"), "err LT_ERR_UNSUPPORTED");
  const std::string addr = ok_value(kv->cmd("metrics"));
  ASSERT_EQ(addr.rfind("127.0.0.1:", 0), 0u) << addr;
  std::string h = ok_value(kv->cmd("malloc " + id_of(plain) + " 4096 rw"));
  ASSERT_FALSE(h.empty());
  for (int i = 0; i < 10; ++i) ASSERT_EQ(kv->cmd("fill " + h + " 0 4096 3"), "ok");
  ASSERT_EQ(kv->cmd("class bulk"), "ok");
  ASSERT_EQ(kv->cmd("fill " + h + " 0 100 3"), "ok");
  const std::string m = http_get(addr);
  ASSERT_EQ(m.rfind("HTTP/1.", 0), 0u) << m.substr(0, 200);
  const std::string lat = "ltier_class_ops_total{node=\"" + id_of(kv) + "\",tenant=\"kv\",class=";
  EXPECT_GE(sample(m, lat + "\"latency\"}"), 11) << m;
  EXPECT_GE(sample(m, lat + "\"bulk\"}"), 1) << m;
  EXPECT_GE(sample(m, "ltier_class_bytes_total{node=\"" + id_of(kv) +
                          "\",tenant=\"kv\",class=\"latency\"}"),
            40960)
      << m;
  EXPECT_NE(m.find("ltier_class_rtt_seconds{"), std::string::npos);
  EXPECT_NE(m.find("ltier_quota_refused_total{"), std::string::npos);
  EXPECT_NE(m.find("ltier_transport_connections{"), std::string::npos);
  // Traffic with the peer: 11 writes (and the allocation) posted by kv.
  double tx_ops = -1;
  std::istringstream lines(m);
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind("ltier_peer_ops_total{node=\"" + id_of(kv) + "\",peer=\"" + id_of(plain), 0) == 0 &&
        l.find("direction=\"tx\"") != std::string::npos) {
      tx_ops = std::stod(l.substr(l.rfind(' ') + 1));
    }
  }
  EXPECT_GE(tx_ops, 11) << m;
  EXPECT_GE(sample(m, "ltier_posted_total{"), 11) << m;
  // ltier-info --stats shows the same as a table.
  FILE* p = popen((Cluster::bin("ltier-info") + " --stats " + addr).c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string table;
  char buf[512];
  while (fgets(buf, sizeof(buf), p)) table += buf;
  EXPECT_EQ(pclose(p), 0);
  EXPECT_NE(table.find("kv/latency"), std::string::npos) << table;
  EXPECT_NE(table.find("kv/bulk"), std::string::npos) << table;
  EXPECT_NE(table.find("\n" + id_of(plain) + " "), std::string::npos) << table;
  // A metrics address that cannot be served refuses the join.
  std::string line;
  EXPECT_EQ(c.add_node({"LTIER_METRICS_LISTEN=" + addr}, {}, &line), nullptr);  // taken
  EXPECT_EQ(line, "err LT_ERR_INVAL");
  EXPECT_EQ(c.add_node({"LTIER_METRICS_LISTEN=nowhere"}, {}, &line), nullptr);
  EXPECT_EQ(line, "err LT_ERR_INVAL");
}

// A tenant's caps on message and RPC credits over all peers: QUOTA at the
// call beyond them, counted; and the message credits come back although the
// cap (4) is below the receiver's batch (a quarter of 64), since messages
// past half the cap ask for their credit at once.
TEST(Qos, CreditQuotasRefuseAndComeBack) {
  PolicyFile f(kPolicy);
  Board board;
  Cluster c;
  ASSERT_TRUE(c.ok());
  Proc* s = c.add_node({"LTIER_CONFIG=" + f.path(), "LTIER_TENANT=capped", board.env(),
                        "LTIER_METRICS_LISTEN=127.0.0.1:0"});
  Proc* r = c.add_node();
  Proc* r2 = c.add_node();
  ASSERT_TRUE(s && r && r2);
  const std::string ir = id_of(r), ir2 = id_of(r2);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(s->cmd("send " + ir + " 9 0a0b0c0d"), "ok") << i;
  ASSERT_EQ(s->cmd("send " + ir2 + " 9 0a0b0c0d"), "ok");
  EXPECT_EQ(s->cmd("send " + ir + " 9 0a0b0c0d"), "err LT_ERR_QUOTA");   // a fifth, anywhere
  EXPECT_EQ(s->cmd("send " + ir2 + " 9 0a0b0c0d"), "err LT_ERR_QUOTA");  // (LT_send too)
  // Two calls of the slow function in flight; a third is refused.
  EXPECT_EQ(s->cmd("rpc_async " + ir + " 3 8 3"), "err LT_ERR_QUOTA issuing call 2");
  EXPECT_EQ(s->cmd("rpc_async " + ir + " 2 8 3"), "ok");  // nothing leaked
  // The receivers take their messages; the credits come back, so sends go
  // again (a bounded retry each: the credits travel back asynchronously, one
  // receiver's after the other's).
  ASSERT_EQ(r->cmd("recv_n 9 3"), "ok");
  ASSERT_EQ(r2->cmd("recv_n 9 1"), "ok");
  auto send_soon = [&](const std::string& to) {
    std::string got;
    for (int i = 0; i < 200 && got != "ok"; ++i) {
      got = s->cmd("send " + to + " 9 0a0b0c0d");
      if (got != "ok") usleep(50000);
    }
    return got;
  };
  EXPECT_EQ(send_soon(ir), "ok");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(send_soon(ir2), "ok") << i;
  // Four held again, none taken: the fifth is refused whatever comes back late.
  EXPECT_EQ(s->cmd("send " + ir2 + " 9 0a0b0c0d"), "err LT_ERR_QUOTA");
  ASSERT_EQ(r->cmd("recv_n 9 1"), "ok");
  ASSERT_EQ(r2->cmd("recv_n 9 3"), "ok");
  const std::string m = http_get(ok_value(s->cmd("metrics")));
  EXPECT_GE(sample(m, "ltier_quota_refused_total{"), 4) << m;
}

// Cpus_allowed_list of thread `tid` of process `pid` ("0-1,3", as the
// kernel writes it), or "" when it cannot be read.
std::string cpus_of(pid_t pid, pid_t tid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) {
      return line.substr(line.find_first_not_of(" \t", 18));
    }
  }
  return "";
}

// Every thread of `pid`, with its CPUs.
std::vector<std::pair<pid_t, std::string>> threads_of(pid_t pid) {
  std::vector<std::pair<pid_t, std::string>> out;
  for (const auto& t :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    const pid_t tid = static_cast<pid_t>(std::stol(t.path().filename().string()));
    out.emplace_back(tid, cpus_of(pid, tid));
  }
  return out;
}

// Classes that name CPUs place their processes' threads: every thread of a
// node joined in such a class runs on its CPUs (the joining thread, and the
// threads the engine started, which inherit them); `class` moves the
// command thread (the node's main thread) to another class's CPUs and back;
// a class whose CPUs the process may use none of is refused at join.
TEST(Qos, ClassesWithCpusPlaceTheirThreads) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof(mine), &mine), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c) {
    if (CPU_ISSET(c, &mine)) cpus.push_back(c);
  }
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs this process may run on";
  const std::string a = std::to_string(cpus[0]), b = std::to_string(cpus[1]);
  const std::string own = cpus_of(getpid(), getpid());  // what the nodes inherit
  ASSERT_FALSE(own.empty());
  PolicyFile f("qos:\n  classes:\n    - {name: latency, priority: 0, cpus: \"" + a +
               "\"}\n    - {name: bulk, priority: 1, cpus: \"" + b +
               "\"}\n    - {name: batch, priority: 2}\n  tenants:\n"
               "    - {name: fast, classes: [latency, bulk, batch]}\n"
               "    - {name: slow, classes: [bulk]}\n");
  Board board;
  Cluster c;
  ASSERT_TRUE(c.ok());
  Proc* fast = c.add_node({"LTIER_CONFIG=" + f.path(), "LTIER_TENANT=fast", board.env()});
  Proc* slow = c.add_node({"LTIER_CONFIG=" + f.path(), "LTIER_TENANT=slow", board.env()});
  ASSERT_TRUE(fast && slow);
  const pid_t pf = fast->pid(), ps = slow->pid();
  auto all_on = [](pid_t pid, const std::string& want) {
    const auto ts = threads_of(pid);
    EXPECT_GE(ts.size(), 2u) << "the engine's threads";
    for (const auto& [tid, got] : ts) EXPECT_EQ(got, want) << "thread " << tid << " of " << pid;
  };
  all_on(pf, a);
  all_on(ps, b);
  ASSERT_EQ(fast->cmd("class bulk"), "ok");
  EXPECT_EQ(cpus_of(pf, pf), b);  // the command thread moved
  for (const auto& [tid, got] : threads_of(pf)) {
    if (tid == pf) continue;
    EXPECT_EQ(got, a) << "thread " << tid << " moved with the command thread";
  }
  ASSERT_EQ(fast->cmd("class batch"), "ok");  // names no CPUs: the thread's own again
  EXPECT_EQ(cpus_of(pf, pf), own);
  ASSERT_EQ(fast->cmd("class -"), "ok");  // the process's class, latency
  EXPECT_EQ(cpus_of(pf, pf), a);
  // A list of CPUs the process may not use: the join is refused, naming it.
  PolicyFile nowhere("qos:\n  classes:\n    - {name: a, priority: 0, cpus: \"1023\"}\n");
  std::string line;
  EXPECT_EQ(c.add_node({"LTIER_CONFIG=" + nowhere.path(), board.env()}, {}, &line), nullptr);
  EXPECT_EQ(line, "err LT_ERR_INVAL");
}

// Every thread of `pid` with its kernel scheduling policy.
std::vector<std::pair<pid_t, int>> policies_of(pid_t pid) {
  std::vector<std::pair<pid_t, int>> out;
  for (const auto& t :
       std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    const pid_t tid = static_cast<pid_t>(std::stol(t.path().filename().string()));
    out.emplace_back(tid, sched_getscheduler(tid));
  }
  return out;
}

// Classes with a cpu_policy run their threads under it: every thread of a
// node joined in an idle class is SCHED_IDLE (the engine's threads inherit
// it) and its calls still complete (its waits sleep instead of spinning,
// and the progress thread polls); `class` changes the command thread's
// policy and, back in a class that names none, restores its own, and an
// idle command thread in a normal process has its posts sent for it. Over
// tcp, so that the calls wait for their owner.
TEST(Qos, ClassesWithACpuPolicyRunTheirThreadsUnderIt) {
  if (geteuid() != 0) GTEST_SKIP() << "leaving SCHED_IDLE needs CAP_SYS_NICE";
  PolicyFile f(
      "qos:\n  classes:\n    - {name: latency, priority: 0}\n"
      "    - {name: bulk, priority: 1, cpu_policy: idle}\n"
      "    - {name: batch, priority: 2, cpu_policy: batch}\n  tenants:\n"
      "    - {name: fast, classes: [latency, bulk, batch]}\n"
      "    - {name: slow, classes: [bulk]}\n");
  Board board;
  Cluster c;
  ASSERT_TRUE(c.ok());
  const std::vector<std::string> tcp = {"LTIER_CONFIG=" + f.path(), board.env(),
                                        "LTIER_TRANSPORTS=tcp"};
  auto env = [&](const char* tenant) {
    auto e = tcp;
    e.push_back(std::string("LTIER_TENANT=") + tenant);
    return e;
  };
  Proc* fast = c.add_node(env("fast"));
  Proc* slow = c.add_node(env("slow"));
  ASSERT_TRUE(fast && slow);
  const pid_t pf = fast->pid(), ps = slow->pid();
  const auto slow_threads = policies_of(ps);
  EXPECT_GE(slow_threads.size(), 2u) << "the engine's threads";
  for (const auto& [tid, pol] : slow_threads) {
    EXPECT_EQ(pol, SCHED_IDLE) << "thread " << tid << " of the idle node";
  }
  for (const auto& [tid, pol] : policies_of(pf)) EXPECT_EQ(pol, SCHED_OTHER) << "thread " << tid;

  // The idle node's calls, and calls to it, complete.
  const std::string ifast = id_of(fast), islow = id_of(slow);
  EXPECT_EQ(slow->cmd("rpc " + ifast + " 1 0a0b0c"), "ok 0a0b0c");
  const std::string h = ok_value(slow->cmd("malloc " + ifast + " 4096 rw"));
  ASSERT_FALSE(h.empty());
  ASSERT_EQ(slow->cmd("fill " + h + " 0 4096 3"), "ok");
  EXPECT_EQ(slow->cmd("sum " + h + " 0 4096"), "ok " + std::to_string(4096 * 3));
  EXPECT_EQ(fast->cmd("rpc " + islow + " 1 0d0e"), "ok 0d0e");

  ASSERT_EQ(fast->cmd("class bulk"), "ok");
  EXPECT_EQ(sched_getscheduler(pf), SCHED_IDLE);  // the command thread only
  for (const auto& [tid, pol] : policies_of(pf)) {
    if (tid != pf) {
      EXPECT_EQ(pol, SCHED_OTHER) << "thread " << tid << " changed with it";
    }
  }
  EXPECT_EQ(fast->cmd("rpc " + islow + " 1 0f"), "ok 0f");  // a wait that does not spin
  // Its posts are deferred (its process is not idle): the progress thread
  // sends them, large writes (4 in flight) and calls of every size included.
  const std::string big = ok_value(fast->cmd("malloc " + islow + " 4194304 rw"));
  ASSERT_FALSE(big.empty());
  ASSERT_EQ(fast->cmd("write_pat " + big + " 0 4194304 7 1048576 4", 60000), "ok");
  EXPECT_EQ(fast->cmd("check_pat " + big + " 0 4194304 7 1048576", 60000), "ok");
  EXPECT_EQ(fast->cmd("rpc_sizes " + islow + " 300000", 60000).rfind("ok ", 0), 0u);
  ASSERT_EQ(fast->cmd("class batch"), "ok");
  EXPECT_EQ(sched_getscheduler(pf), SCHED_BATCH);
  ASSERT_EQ(fast->cmd("class -"), "ok");  // latency names no policy: the thread's own back
  EXPECT_EQ(sched_getscheduler(pf), SCHED_OTHER);
}

TEST(Qos, JoinsTheFileRefuses) {
  PolicyFile f(kPolicy);
  Cluster c;
  ASSERT_TRUE(c.ok());
  std::string line;
  EXPECT_EQ(c.add_node({"LTIER_CONFIG=" + f.path(), "LTIER_TENANT=nobody"}, {}, &line), nullptr);
  EXPECT_EQ(line, "err LT_ERR_INVAL");
  EXPECT_EQ(c.add_node({"LTIER_CONFIG=" + f.path(), "LTIER_TENANT=etl", "LTIER_QOS_CLASS=latency"},
                       {}, &line),
            nullptr);
  EXPECT_EQ(line, "err LT_ERR_INVAL");
  PolicyFile broken("qos:\n  classes:\n    - name: a\n      priority: top\n");
  EXPECT_EQ(c.add_node({"LTIER_CONFIG=" + broken.path()}, {}, &line), nullptr);
  EXPECT_EQ(line, "err LT_ERR_INVAL");
  // Without a QoS file any tenant joins, and there are no classes.
  Proc* plain = c.add_node({"LTIER_TENANT=whoever"});
  ASSERT_NE(plain, nullptr);
  EXPECT_EQ(plain->cmd("qos"), "err LT_ERR_UNSUPPORTED");
  EXPECT_EQ(plain->cmd("class bulk"), "err LT_ERR_UNSUPPORTED");
}

}  // namespace
}  // namespace lt::itest
