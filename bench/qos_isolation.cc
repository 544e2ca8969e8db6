// QoS isolation: a latency tenant issuing 8 B RPCs at a fixed rate and a bulk
// tenant writing 1 MiB flat out to the same node, alone, together with QoS
// off, and together with QoS on; as two processes (two tenants) or as two
// threads of one process (two classes). A benchmark: it prints figures and
// asserts nothing.
//
//   qos_isolation [--mode procs|threads] [--seconds S] [--period-us P]
//
// LTIER_TRANSPORTS picks the transport (tcp or shm,tcp). Output lines:
//   case=NAME lat_p50_us= lat_p99_us= lat_p999_us= bulk_gbps= bulk_after_gbps=
// bulk_gbps counts while the latency tenant runs (its first 100 ms left out);
// bulk_after_gbps is the 10 ms after it stopped.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
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

#include "ltier/lt.h"
#include "ltier/manager.h"

extern char** environ;

namespace {

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

lt_engine_t* join(const std::string& manager) {
  lt_join_opts_t o{};
  o.manager = manager.c_str();
  o.secret = "qos-bench";
  o.listen = "127.0.0.1:0";
  lt_engine_t* e = nullptr;
  if (int rc = LT_join(&o, &e); rc != 0) die("join", rc);
  return e;
}

// The latency side: an 8 B RPC every period_us for `seconds`, each timed
// from when it was due (so falling behind counts). Prints its percentiles
// and when it stopped.
void run_latency(lt_engine_t* e, lt_node_t server, double seconds, uint64_t period_us) {
  std::vector<uint64_t> lat;
  const uint64_t start = mono_ns(), end = start + static_cast<uint64_t>(seconds * 1e9);
  uint64_t due = start;
  char in[8] = {}, out[8];
  while (due < end) {
    due += period_us * 1000;
    uint64_t now = mono_ns();
    if (due > now + 60'000) {
      timespec ts{0, static_cast<long>(due - now - 50'000)};
      nanosleep(&ts, nullptr);
    }
    while (mono_ns() < due) {
    }
    size_t n = 0;
    if (int rc = LT_RPC(e, server, 1, in, 8, out, 8, &n); rc != 0) die("LT_RPC", rc);
    lat.push_back(mono_ns() - due);
  }
  const uint64_t stop = mono_ns();
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double q) {
    return lat.empty() ? 0.0
                       : lat[std::min(lat.size() - 1, static_cast<size_t>(q * lat.size()))] / 1e3;
  };
  printf("lat p50=%.2f p99=%.2f p999=%.2f n=%zu start=%llu stop=%llu\n", pct(0.5), pct(0.99),
         pct(0.999), lat.size(), static_cast<unsigned long long>(start),
         static_cast<unsigned long long>(stop));
}

// The bulk side: 1 MiB LT_writes to an LMR at the server, flat out, for
// `seconds`; prints the bytes written in each millisecond.
void run_bulk(lt_engine_t* e, lt_node_t server, double seconds) {
  constexpr size_t kMsg = 1 << 20;
  lt_lmr_t h;
  if (int rc = LT_malloc(e, server, kMsg, LT_RW, &h); rc != 0) die("LT_malloc", rc);
  std::vector<char> buf(kMsg, 7);
  const uint64_t start = mono_ns(), end = start + static_cast<uint64_t>(seconds * 1e9);
  std::vector<uint64_t> bins(static_cast<size_t>(seconds * 1000) + 2, 0);
  for (uint64_t now = start; now < end; now = mono_ns()) {
    if (int rc = LT_write(e, h, 0, buf.data(), kMsg); rc != 0) die("LT_write", rc);
    size_t b = (mono_ns() - start) / 1'000'000;
    if (b < bins.size()) bins[b] += kMsg;
  }
  printf("bulk start=%llu bins=", static_cast<unsigned long long>(start));
  for (uint64_t b : bins) printf("%llu,", static_cast<unsigned long long>(b));
  printf("\n");
  LT_free(e, h);
}

int client_main(const std::string& manager, lt_node_t server, const std::string& what,
                double seconds, uint64_t period_us) {
  lt_engine_t* e = join(manager);
  if (what == "lat") {
    run_latency(e, server, seconds, period_us);
  } else if (what == "bulk") {
    run_bulk(e, server, seconds + 0.3);
  } else {  // both, as two threads of this process in two classes
    const bool qos = LT_set_class(e, "bulk") == 0;
    std::thread bulk([&] {
      if (qos) LT_set_class(e, "bulk");
      run_bulk(e, server, seconds + 0.3);
    });
    if (qos) LT_set_class(e, "latency");
    usleep(50'000);
    run_latency(e, server, seconds, period_us);
    bulk.join();
  }
  fflush(stdout);
  LT_leave(e);
  return 0;
}

std::string self_exe() { return "/proc/" + std::to_string(getpid()) + "/exe"; }

// A child: this program again with `args`, extra environment `env`, stdout to a pipe.
struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;
};
Child spawn(const std::vector<std::string>& args, const std::vector<std::string>& env,
            bool keep_stdin_pipe, int* stdin_fd) {
  int o[2], i[2] = {-1, -1};
  if (pipe2(o, O_CLOEXEC) != 0 || (keep_stdin_pipe && pipe2(i, O_CLOEXEC) != 0)) exit(1);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, o[1], 1);
  if (keep_stdin_pipe) posix_spawn_file_actions_adddup2(&fa, i[0], 0);
  std::vector<std::string> all = {self_exe()};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv, envp;
  for (auto& a : all) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> envs;
  for (char** p = environ; *p; ++p) envs.push_back(*p);
  for (auto& x : env) envs.push_back(x);
  for (auto& x : envs) envp.push_back(const_cast<char*>(x.c_str()));
  envp.push_back(nullptr);
  Child c;
  if (posix_spawn(&c.pid, all[0].c_str(), &fa, nullptr, argv.data(), envp.data()) != 0) exit(1);
  posix_spawn_file_actions_destroy(&fa);
  close(o[1]);
  c.out = fdopen(o[0], "r");
  if (keep_stdin_pipe) {
    close(i[0]);
    *stdin_fd = i[1];
  }
  return c;
}

std::string read_all(Child& c) {
  std::string s;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), c.out)) > 0) s.append(buf, n);
  fclose(c.out);
  int st = 0;
  waitpid(c.pid, &st, 0);
  return s;
}

struct Result {
  double p50 = 0, p99 = 0, p999 = 0, bulk_gbps = 0, after_gbps = 0;
  bool has_lat = false, has_bulk = false;
};

// Reads the lat and bulk lines of the children's output.
Result parse(const std::string& out) {
  Result r;
  unsigned long long lstart = 0, lstop = 0, bstart = 0;
  std::vector<double> bins;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("lat ", 0) == 0) {
      size_t n;
      sscanf(line.c_str(), "lat p50=%lf p99=%lf p999=%lf n=%zu start=%llu stop=%llu", &r.p50,
             &r.p99, &r.p999, &n, &lstart, &lstop);
      r.has_lat = true;
    } else if (line.rfind("bulk ", 0) == 0) {
      sscanf(line.c_str(), "bulk start=%llu", &bstart);
      std::string list = line.substr(line.find("bins=") + 5);
      std::istringstream ls(list);
      std::string v;
      while (std::getline(ls, v, ',')) bins.push_back(std::stod(v));
      r.has_bulk = true;
    }
  }
  if (!r.has_bulk) return r;
  // Bulk throughput in [from, to) (ns, CLOCK_MONOTONIC), from its 1 ms bins.
  auto rate = [&](uint64_t from, uint64_t to) {
    size_t a = from > bstart ? (from - bstart) / 1'000'000 : 0;
    size_t b = to > bstart ? (to - bstart) / 1'000'000 : 0;
    double bytes = 0;
    for (size_t k = a; k < b && k < bins.size(); ++k) bytes += bins[k];
    return b > a ? bytes / ((b - a) * 1e-3) / 1e9 : 0.0;
  };
  if (r.has_lat) {
    r.bulk_gbps = rate(lstart + 100'000'000, lstop);
    r.after_gbps = rate(lstop, lstop + 10'000'000);
  } else {
    r.bulk_gbps = rate(bstart + 100'000'000, bstart + (bins.size() - 40) * 1'000'000);
  }
  return r;
}

void print(const char* name, const Result& r) {
  printf("case=%s", name);
  if (r.has_lat) printf(" lat_p50_us=%.2f lat_p99_us=%.2f lat_p999_us=%.2f", r.p50, r.p99, r.p999);
  if (r.has_bulk) printf(" bulk_gbps=%.3f", r.bulk_gbps);
  if (r.has_bulk && r.has_lat) printf(" bulk_after_gbps=%.3f", r.after_gbps);
  printf("\n");
  fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 7 && std::string(argv[1]) == "--client") {
    return client_main(argv[2], static_cast<lt_node_t>(atoi(argv[3])), argv[4], atof(argv[5]),
                       strtoull(argv[6], nullptr, 10));
  }
  if (argc == 3 && std::string(argv[1]) == "--server") {
    lt_engine_t* e = join(argv[2]);
    if (int rc = LT_regRPC(e, 1, echo, nullptr); rc != 0) die("LT_regRPC", rc);
    printf("ready %u\n", LT_node_id(e));
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0) {
    }
    LT_leave(e);
    return 0;
  }
  std::string mode = "procs";
  double seconds = 2;
  uint64_t period_us = 100;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--mode") mode = argv[i + 1];
    if (a == "--seconds") seconds = atof(argv[i + 1]);
    if (a == "--period-us") period_us = strtoull(argv[i + 1], nullptr, 10);
  }
  signal(SIGPIPE, SIG_IGN);
  ltier::LocalManager manager("qos-bench");
  if (int rc = manager.start(); rc != 0) die("manager", rc);
  const std::string maddr = manager.address();

  // QoS on: two classes, two tenants; QoS off: no classes. Each run has its
  // own host board.
  const std::string dir = "/tmp";
  const std::string on = dir + "/qos_isolation_on_" + std::to_string(getpid()) + ".yaml";
  const std::string off = dir + "/qos_isolation_off_" + std::to_string(getpid()) + ".yaml";
  std::ofstream(on)
      << "qos:\n  classes:\n    - {name: latency, priority: 0}\n"
         "    - {name: bulk, priority: 1}\n  tenants:\n"
         "    - {name: lat, classes: [latency]}\n    - {name: bulk, classes: [bulk]}\n"
         "    - {name: app, classes: [latency, bulk], default_class: bulk}\n";
  std::ofstream(off) << "qos: {}\n";
  const std::string board = "LTIER_QOS_BOARD=ltier-qos-bench-" + std::to_string(getpid());

  int server_in = -1;
  Child server = spawn({"--server", maddr}, {}, true, &server_in);
  char line[64] = {};
  if (!fgets(line, sizeof(line), server.out)) die("server", -LT_ERR_INTERNAL);
  const std::string sid = std::to_string(atoi(line + 6));
  const std::string secs = std::to_string(seconds), period = std::to_string(period_us);

  auto run = [&](const char* name, bool lat, bool bulk, bool qos) {
    const std::string cfg = "LTIER_CONFIG=" + (qos ? on : off);
    std::string out;
    if (mode == "threads" && lat && bulk) {
      Child c = spawn({"--client", maddr, sid, "both", secs, period},
                      {cfg, board, "LTIER_TENANT=app"}, false, nullptr);
      out = read_all(c);
    } else {
      std::vector<Child> cs;
      if (bulk) {
        cs.push_back(spawn({"--client", maddr, sid, "bulk", secs, period},
                           {cfg, board, "LTIER_TENANT=bulk"}, false, nullptr));
        usleep(50'000);
      }
      if (lat) {
        cs.push_back(spawn({"--client", maddr, sid, "lat", secs, period},
                           {cfg, board, "LTIER_TENANT=lat"}, false, nullptr));
      }
      for (auto& c : cs) out += read_all(c);
    }
    print(name, parse(out));
  };
  run("latency_alone", true, false, true);
  run("bulk_alone", false, true, true);
  run("both_qos_off", true, true, false);
  run("both_qos_on", true, true, true);
  close(server_in);
  read_all(server);
  std::remove(on.c_str());
  std::remove(off.c_str());
  shm_unlink(("/" + board.substr(board.find('=') + 1)).c_str());
  return 0;
}
