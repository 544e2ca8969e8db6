// QoS isolation: a latency tenant issuing 8 B RPCs at a fixed rate and a bulk
// tenant writing 1 MiB flat out to the same node, alone, together with QoS
// off, and together with QoS on; as two processes (two tenants) or as two
// threads of one process (two classes). A benchmark: it prints figures and
// asserts nothing.
//
//   qos_isolation [--mode procs|threads|peers] [--seconds S] [--period-us P]
//                 [--target-rtt auto|DURATION] [--cpus LATENCY_CPUS/BULK_CPUS]
//                 [--bulk-cpu-policy normal|batch|idle] [--bulk-op write|send]
//                 [--cases NAME,NAME] [--bins] [--server-qos]
//                 [--host-ip IP --netns NS_A@IP_A,NS_B@IP_B]
//
// --cases runs only the cases named (latency_alone, bulk_alone,
// both_qos_off, both_qos_on), in that order. --bins adds, for each case with
// both tenants, a line per bulk thread with the MiB it moved in each
// millisecond from 10 ms before the latency tenant stopped to 40 ms after:
// what the "after" figure averages, and where a dip sits. The server node
// is started afresh for each case; --server-qos has it join as a tenant in
// the cases with QoS on, its thread that receives the bulk tenant's
// messages (--bulk-op send) in the bulk class, as a server that classifies
// its own work would.
//
// --bulk-op send makes the bulk tenant send 16 KiB eager messages to a port
// the server drains, instead of writing 1 MiB to an LMR: its thread then
// copies into the connection itself (for an idle-class thread, the case of a
// lock held by a thread the kernel leaves preempted).
//
// `peers` adds a second server node: the latency tenant calls the first,
// and the bulk tenant writes to both at once (a thread each), which shows
// the scheduler throttling bulk per peer (towards the node where the
// classes meet) or as a whole (when the shared part is this host). With
// --netns the servers run in those network namespaces, listening on those
// addresses, and the manager and the tenants on IP in this one: a slow link
// to one server is then congestion at that peer only (bench/qos_peers.sh
// builds such a setup).
//
// --cpus gives the two classes CPUs of their own with QoS on (the classes'
// `cpus` key, e.g. 0/1), and places the server node with the latency class
// in every case. --bulk-cpu-policy gives the bulk class that `cpu_policy`
// with QoS on (idle: its threads run on CPU time no other thread wants).
// In `threads` mode the process's class is latency, so the engine's own
// threads keep their policy and only the bulk thread changes.
//
// LTIER_TRANSPORTS picks the transport (tcp or shm,tcp). Output lines:
//   case=NAME lat_p50_us= lat_p99_us= lat_p999_us= bulk_gbps= bulk_after_gbps=
// bulk_gbps counts while the latency tenant runs (its first 100 ms left out);
// bulk_after_gbps is the 10 ms after it stopped calling (as a process it
// stays joined and idle until the bulk tenant is done). In `peers` mode
// bulk_gbps is split too: bulk_shared_gbps towards the latency tenant's
// server, bulk_other_gbps towards the other node. When latency_alone,
// bulk_alone and both_qos_on all ran, a last line
//   targets p99_x_solo= p999_x_solo= bulk_during_x_solo= bulk_after_x_solo= met=N/4
// reads the QoS-on case against the solo ones as the isolation targets do.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "child.h"
#include "isolation_report.h"
#include "ltier/lt.h"
#include "ltier/manager.h"

namespace {

using bench::Child;
using bench::parse;
using bench::print;
using bench::read_all;
using bench::spawn;

// --bulk-op send: the bulk tenant sends eager messages of this size to this
// port at the server (copied into the connection under its send lock),
// rather than writing 1 MiB to an LMR.
constexpr uint32_t kBulkPort = 7;
constexpr size_t kBulkSendBytes = 16 << 10;
bool bulk_sends() {
  const char* op = getenv("QOS_BENCH_BULK_OP");
  return op != nullptr && strcmp(op, "send") == 0;
}

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

[[noreturn]] void die(const char* what, int rc) {
  fprintf(stderr, "qos_isolation: %s: %s\n", what, LT_strerror(rc));
  exit(1);
}

int echo(void*, lt_node_t, const void* in, size_t n, void* out, size_t cap, size_t* len) {
  if (n > cap) return -LT_ERR_TRUNCATED;
  memcpy(out, in, n);
  *len = n;
  return 0;
}

// The address this node listens on: QOS_BENCH_IP (set by the parent for
// nodes in other namespaces), else loopback.
lt_engine_t* join(const std::string& manager) {
  const char* ip = getenv("QOS_BENCH_IP");
  const std::string listen = std::string(ip != nullptr ? ip : "127.0.0.1") + ":0";
  lt_join_opts_t o{};
  o.manager = manager.c_str();
  o.secret = "qos-bench";
  o.listen = listen.c_str();
  lt_engine_t* e = nullptr;
  if (int rc = LT_join(&o, &e); rc != 0) die("join", rc);
  return e;
}

// The latency side: an 8 B RPC every period_us for `seconds`. A call is
// timed from when it was due if the previous one ended after that (falling
// behind counts), else from when this thread woke to make it: the wake-up
// of a sleeping thread is late by 30-60 us on a VM (measured: timer slack
// cut to 1 ns, an absolute clock_nanosleep), which would otherwise swamp
// the call, and spinning it away would take half a core from the tenants
// being measured. Prints its percentiles and when it stopped, 50 ms later.
void run_latency(lt_engine_t* e, lt_node_t server, double seconds, uint64_t period_us) {
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  std::vector<uint64_t> lat;
  const uint64_t start = mono_ns(), end = start + static_cast<uint64_t>(seconds * 1e9);
  uint64_t due = start, last_end = start;
  char in[8] = {}, out[8];
  while (due < end) {
    due += period_us * 1000;
    if (mono_ns() < due) {
      timespec ts{static_cast<time_t>(due / 1'000'000'000), static_cast<long>(due % 1'000'000'000)};
      clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
    }
    const uint64_t begin = last_end > due ? due : mono_ns();
    size_t n = 0;
    if (int rc = LT_RPC(e, server, 1, in, 8, out, 8, &n); rc != 0) die("LT_RPC", rc);
    last_end = mono_ns();
    lat.push_back(last_end - begin);
  }
  const uint64_t stop = mono_ns();
  // Quiet through the bulk tenant's "after" window and its bins (40 ms)
  // before the sort: sorting 20,000 samples right away took the CPU the
  // bulk thread was about to get back, and showed as 1-2 ms of slow bulk
  // just after the stop in every case, QoS on or off.
  timespec quiet{0, 50'000'000};
  clock_nanosleep(CLOCK_MONOTONIC, 0, &quiet, nullptr);
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double q) {
    return lat.empty() ? 0.0
                       : lat[std::min(lat.size() - 1, static_cast<size_t>(q * lat.size()))] / 1e3;
  };
  printf("lat p50=%.2f p99=%.2f p999=%.2f n=%zu start=%llu stop=%llu\n", pct(0.5), pct(0.99),
         pct(0.999), lat.size(), static_cast<unsigned long long>(start),
         static_cast<unsigned long long>(stop));
}

// The bulk side: 1 MiB LT_writes to an LMR at the server (or, with --bulk-op
// send, 16 KiB messages to its port), flat out, for
// `seconds`; prints the bytes written in each millisecond (a line per
// server: `peer` is its place in the client's list).
void run_bulk(lt_engine_t* e, lt_node_t server, int peer, double seconds) {
  constexpr size_t kMsg = 1 << 20;
  lt_lmr_t h;
  if (int rc = LT_malloc(e, server, kMsg, LT_RW, &h); rc != 0) die("LT_malloc", rc);
  std::vector<char> buf(kMsg, 7);
  const uint64_t start = mono_ns(), end = start + static_cast<uint64_t>(seconds * 1e9);
  std::vector<uint64_t> bins(static_cast<size_t>(seconds * 1000) + 2, 0);
  const bool send = bulk_sends();
  const size_t len = send ? kBulkSendBytes : kMsg;
  for (uint64_t now = start; now < end; now = mono_ns()) {
    int rc =
        send ? LT_send(e, server, kBulkPort, buf.data(), len) : LT_write(e, h, 0, buf.data(), len);
    if (rc != 0) die(send ? "LT_send" : "LT_write", rc);
    size_t b = (mono_ns() - start) / 1'000'000;
    if (b < bins.size()) bins[b] += len;
  }
  std::string line =
      "bulk peer=" + std::to_string(peer) + " start=" + std::to_string(start) + " bins=";
  for (uint64_t b : bins) line += std::to_string(b) + ",";
  printf("%s\n", line.c_str());  // one write: the threads' lines stay whole
  LT_free(e, h);
}

// Bulk to every server at once, a thread each, in the thread's class.
void run_bulk_all(lt_engine_t* e, const std::vector<lt_node_t>& servers, double seconds, bool qos) {
  std::vector<std::thread> ts;
  for (size_t i = 0; i < servers.size(); ++i) {
    ts.emplace_back([=] {
      if (qos) LT_set_class(e, "bulk");
      run_bulk(e, servers[i], static_cast<int>(i), seconds);
    });
  }
  for (auto& t : ts) t.join();
}

// `servers`: the latency tenant calls the first; bulk writes to each.
int client_main(const std::string& manager, const std::vector<lt_node_t>& servers,
                const std::string& what, double seconds, uint64_t period_us) {
  lt_engine_t* e = join(manager);
  if (what == "lat") {
    run_latency(e, servers[0], seconds, period_us);
    // Idle, not gone, while the bulk tenant (which runs 0.3 s longer) is
    // measured after it: a leave and an exit in that window would take CPU
    // and membership traffic the "after" figure is not about.
    fflush(stdout);
    usleep(300'000);
  } else if (what == "bulk") {
    run_bulk_all(e, servers, seconds + 0.3, false);
  } else {  // both, as threads of this process in two classes
    const bool qos = LT_set_class(e, "latency") == 0;  // the process's class, when QoS is on
    std::thread bulk([&] { run_bulk_all(e, servers, seconds + 0.3, qos); });
    usleep(50'000);
    run_latency(e, servers[0], seconds, period_us);
    bulk.join();
  }
  fflush(stdout);
  LT_leave(e);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 7 && std::string(argv[1]) == "--client") {
    std::vector<lt_node_t> servers;  // "A" or "A,B"
    std::istringstream ids(argv[3]);
    for (std::string id; std::getline(ids, id, ',');) {
      servers.push_back(static_cast<lt_node_t>(atoi(id.c_str())));
    }
    return client_main(argv[2], servers, argv[4], atof(argv[5]), strtoull(argv[6], nullptr, 10));
  }
  if (argc == 3 && std::string(argv[1]) == "--server") {
    lt_engine_t* e = join(argv[2]);
    if (int rc = LT_regRPC(e, 1, echo, nullptr); rc != 0) die("LT_regRPC", rc);
    // With --bulk-op send, a thread drains the bulk tenant's messages.
    std::atomic<bool> stop{false};
    std::thread drain([&] {
      // --server-qos: the thread that receives the bulk tenant's data runs
      // in the bulk class (with QoS on).
      if (const char* cls = getenv("QOS_BENCH_DRAIN_CLASS")) LT_set_class(e, cls);
      std::vector<char> buf(kBulkSendBytes);
      lt_node_t src;
      size_t n;
      while (bulk_sends() && !stop.load())
        LT_recv(e, kBulkPort, buf.data(), buf.size(), &src, &n, 50000);
    });
    printf("ready %u\n", LT_node_id(e));
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {
    }
    stop.store(true);
    drain.join();
    LT_leave(e);
    return 0;
  }
  std::string mode = "procs";
  double seconds = 2;
  uint64_t period_us = 100;
  std::string host_ip = "127.0.0.1";
  std::string target_rtt = "auto";  // the latency class's (a duration, or auto)
  std::string lat_cpus, bulk_cpus;  // the classes' cpus keys, or nothing
  std::string bulk_policy;          // the bulk class's cpu_policy key, or nothing
  std::vector<std::pair<std::string, std::string>> netns;  // (namespace, address) per server
  static const char* const kUsage =
      "usage: qos_isolation [--mode procs|threads|peers] [--seconds S] [--period-us P]\n"
      "                     [--target-rtt auto|DURATION] [--cpus LATENCY_CPUS/BULK_CPUS]\n"
      "                     [--bulk-cpu-policy normal|batch|idle] [--bulk-op write|send]\n"
      "                     [--cases NAME,NAME] [--bins] [--server-qos]\n"
      "                     [--host-ip IP --netns NS_A@IP_A,NS_B@IP_B]\n"
      "LTIER_TRANSPORTS picks the transport (tcp, or shm,tcp)\n";
  static const char* const kOptions[] = {
      "--mode", "--seconds", "--period-us", "--host-ip", "--target-rtt", "--bulk-cpu-policy",
      "--cpus", "--netns",   "--bulk-op",   "--cases"};
  static const char* const kCases[] = {"latency_alone", "bulk_alone", "both_qos_off",
                                       "both_qos_on"};
  std::vector<std::string> cases(std::begin(kCases), std::end(kCases));
  bool bins = false, server_qos = false;
  for (int i = 1; i < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--bins" || a == "--server-qos") {
      (a == "--bins" ? bins : server_qos) = true;
      --i;  // takes no value
      continue;
    }
    bool known = false;
    for (const char* o : kOptions) known = known || a == o;
    if (!known || i + 1 >= argc) {
      fprintf(stderr, "qos_isolation: %s '%s'\n%s", known ? "no value after" : "unknown option",
              a.c_str(), kUsage);
      return 2;
    }
    if (a == "--mode") mode = argv[i + 1];
    if (a == "--seconds") seconds = atof(argv[i + 1]);
    if (a == "--period-us") period_us = strtoull(argv[i + 1], nullptr, 10);
    if (a == "--host-ip") host_ip = argv[i + 1];
    if (a == "--target-rtt") target_rtt = argv[i + 1];
    if (a == "--bulk-cpu-policy") bulk_policy = std::string(", cpu_policy: ") + argv[i + 1];
    if (a == "--bulk-op") {
      if (strcmp(argv[i + 1], "write") != 0 && strcmp(argv[i + 1], "send") != 0) {
        fprintf(stderr, "qos_isolation: --bulk-op is write or send, not '%s'\n", argv[i + 1]);
        return 2;
      }
      setenv("QOS_BENCH_BULK_OP", argv[i + 1], 1);  // the children inherit it
    }
    if (a == "--cases") {
      cases.clear();
      std::istringstream list(argv[i + 1]);
      for (std::string c; std::getline(list, c, ',');) {
        if (std::find(std::begin(kCases), std::end(kCases), c) == std::end(kCases)) {
          fprintf(stderr,
                  "qos_isolation: --cases names latency_alone, bulk_alone, both_qos_off or "
                  "both_qos_on, not '%s'\n",
                  c.c_str());
          return 2;
        }
        cases.push_back(c);
      }
    }
    if (a == "--cpus") {
      const std::string v = argv[i + 1];
      const size_t slash = v.find('/');
      if (slash == std::string::npos) {
        fprintf(stderr, "qos_isolation: --cpus takes LATENCY_CPUS/BULK_CPUS, not '%s'\n",
                v.c_str());
        return 2;
      }
      lat_cpus = ", cpus: \"" + v.substr(0, slash) + "\"";
      bulk_cpus = ", cpus: \"" + v.substr(slash + 1) + "\"";
    }
    if (a == "--netns") {
      std::istringstream list(argv[i + 1]);
      for (std::string item; std::getline(list, item, ',');) {
        const size_t at = item.find('@');
        if (at == std::string::npos) {
          fprintf(stderr, "qos_isolation: --netns takes NS@IP,NS@IP, not '%s'\n", item.c_str());
          return 2;
        }
        netns.emplace_back(item.substr(0, at), item.substr(at + 1));
      }
    }
  }
  // Checked before the manager thread starts: a return after it aborts.
  const int nservers = mode == "peers" ? 2 : 1;
  if (mode != "procs" && mode != "threads" && mode != "peers") {
    fprintf(stderr, "qos_isolation: --mode is procs, threads or peers, not '%s'\n", mode.c_str());
    return 2;
  }
  if (server_qos && !netns.empty()) {
    // Servers in other namespaces do not share this host's QoS board.
    fprintf(stderr, "qos_isolation: --server-qos does not go with --netns\n");
    return 2;
  }
  if (!netns.empty() && netns.size() != static_cast<size_t>(nservers)) {
    fprintf(stderr, "qos_isolation: --netns names %d namespace(s) for this mode\n", nservers);
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  ltier::ManagerOptions mo;
  mo.listen = host_ip + ":0";
  mo.secret = "qos-bench";
  ltier::Manager manager(mo);
  if (int rc = manager.start(); rc != 0) die("manager", rc);
  std::atomic<bool> stop_manager{false};
  std::thread manager_thread([&] { manager.run(stop_manager); });
  const std::string maddr = manager.address();
  const std::string host_env = "QOS_BENCH_IP=" + host_ip;

  // QoS on: two classes, two tenants; QoS off: no classes. Each run has its
  // own host board.
  const std::string dir = "/tmp";
  const std::string on = dir + "/qos_isolation_on_" + std::to_string(getpid()) + ".yaml";
  const std::string off = dir + "/qos_isolation_off_" + std::to_string(getpid()) + ".yaml";
  std::ofstream(on)
      << "qos:\n  classes:\n    - {name: latency, priority: 0, target_rtt: " << target_rtt
      << lat_cpus << "}\n    - {name: bulk, priority: 1" << bulk_cpus << bulk_policy
      << "}\n  tenants:\n"
         "    - {name: lat, classes: [latency]}\n    - {name: bulk, classes: [bulk]}\n"
         "    - {name: app, classes: [latency, bulk], default_class: latency}\n";
  std::ofstream(off) << "qos: {}\n";
  const std::string board = "LTIER_QOS_BOARD=ltier-qos-bench-" + std::to_string(getpid());

  // One server node; two in `peers` mode (the latency tenant's first),
  // started for each case.
  std::vector<Child> servers;
  std::vector<int> server_ins;
  std::string sid;
  auto start_servers = [&](bool qos) {
    sid.clear();
    for (int i = 0; i < nservers; ++i) {
      int in = -1;
      if (netns.empty()) {
        // With --cpus the server runs on the latency class's CPUs in every
        // case (as tenant lat: it serves that tenant; over shm the bulk
        // writes take none of its CPU). With --server-qos and QoS on it
        // joins as tenant app, and its receiving thread is of class bulk.
        std::vector<std::string> env = {host_env};
        if (!lat_cpus.empty()) env = {host_env, "LTIER_CONFIG=" + on, board, "LTIER_TENANT=lat"};
        if (server_qos && qos) {
          env = {host_env, "LTIER_CONFIG=" + on, board, "LTIER_TENANT=app",
                 "QOS_BENCH_DRAIN_CLASS=bulk"};
        }
        servers.push_back(spawn({"--server", maddr}, env, true, &in));
      } else {
        servers.push_back(spawn({"--server", maddr}, {"QOS_BENCH_IP=" + netns[i].second}, true, &in,
                                netns[i].first));
      }
      server_ins.push_back(in);
      char line[64] = {};
      if (!fgets(line, sizeof(line), servers.back().out)) die("server", -LT_ERR_INTERNAL);
      sid += (sid.empty() ? "" : ",") + std::to_string(atoi(line + 6));
    }
  };
  auto stop_servers = [&] {
    for (int in : server_ins) close(in);
    for (auto& server : servers) read_all(server);
    servers.clear();
    server_ins.clear();
  };
  const std::string secs = std::to_string(seconds), period = std::to_string(period_us);

  std::vector<std::pair<std::string, bench::Result>> results;
  auto run = [&](const char* name, bool lat, bool bulk, bool qos) {
    if (std::find(cases.begin(), cases.end(), name) == cases.end()) return;
    start_servers(qos);
    const std::string cfg = "LTIER_CONFIG=" + (qos ? on : off);
    std::string out;
    if (mode == "threads" && lat && bulk) {
      Child c = spawn({"--client", maddr, sid, "both", secs, period},
                      {cfg, board, host_env, "LTIER_TENANT=app"}, false, nullptr);
      out = read_all(c);
    } else {
      std::vector<Child> cs;
      if (bulk) {
        cs.push_back(spawn({"--client", maddr, sid, "bulk", secs, period},
                           {cfg, board, host_env, "LTIER_TENANT=bulk"}, false, nullptr));
        usleep(50'000);
      }
      if (lat) {
        cs.push_back(spawn({"--client", maddr, sid, "lat", secs, period},
                           {cfg, board, host_env, "LTIER_TENANT=lat"}, false, nullptr));
      }
      for (auto& c : cs) out += read_all(c);
    }
    stop_servers();
    results.emplace_back(name, parse(out));
    print(name, results.back().second, bins);
  };
  run("latency_alone", true, false, true);
  run("bulk_alone", false, true, true);
  run("both_qos_off", true, true, false);
  run("both_qos_on", true, true, true);
  bench::print_targets(results);
  stop_manager.store(true);
  manager_thread.join();
  std::remove(on.c_str());
  std::remove(off.c_str());
  shm_unlink(("/" + board.substr(board.find('=') + 1)).c_str());
  return 0;
}
