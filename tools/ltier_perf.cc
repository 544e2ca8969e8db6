// ltier-perf: latency and bandwidth of ltier operations between two nodes on
// this host, in the spirit of ucx_perftest. It runs its own ltier-manager (in
// a thread) and a server node (a child process), then measures from this
// process. Output lines are machine-readable:
//
//   lat op=read size=8 iters=N p50_us=X p99_us=Y p999_us=Z avg_us=A
//                                                       (round trip of one op)
//   bw op=write size=1048576 window=W MBps=X            (W ops in flight)
//   join op=first_op p50_us=X p90_us=Y                  (fresh process: LT_join
//        start to its first completed operation on a peer, an LT_malloc)
//   join op=after_join p50_us=X p90_us=Y                (LT_join return to it)
//   newpeer op=first_rpc tries=N p50_us=X p90_us=Y      (--new-peer: this warm engine's
//        first LT_RPC to a node that just joined, its connection included)
//
//   lat op=fetch_add size=8 iters=N p50_us=X p99_us=Y  (LT_fetch_add round trip)
//   lat op=rpc size=S iters=N p50_us=X p99_us=Y        (LT_RPC echo, S bytes each way)
//   rate op=rpc size=8 window=W calls_per_s=X          (W calls outstanding)
//   lat op=rpc_loop ..., rate op=rpc_loop ...          (the same, the echo answered by a
//                                                       server-loop thread: LT_recvRPC)
//   lat op=send size=S ...                             (LT_send + LT_recv of the echo)
//   bw op=send size=S window=1 MBps=X                  (back-to-back LT_send, with --bw)
//   rate op=burst size=8 window=16 msgs_per_s=X        (16 LT_send, then one answer: the
//                                                       receives are not posted ahead)
//
// A latency sample is the time from the end of one iteration to the end of
// the next (one clock read per iteration, as ucx_perftest takes it), so the
// loop's own work is in every sample, as it is in ucx_perftest's.
//
//   ltier-perf [--ops read,write,fetch_add,rpc,rpc_rate,rpc_loop,send,burst]
//              [--sizes 8,4096,65536,1048576] [--iters N] [--warmup N] [--bw]
//              [--window W] [--join] [--join-tries N] [--new-peer] [--dump PREFIX]
//
// --dump PREFIX writes each latency run's samples to PREFIX.OP.SIZE (µs, one
// per line, in the order taken).
//
// The parts: tools/ltier_perf/ (server.cc: the server node and join trials;
// ops.cc: one function per operation).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ltier/manager.h"
#include "ltier_perf/perf.h"

namespace ltier_perf {

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

[[noreturn]] void die(const char* what, int rc) {
  fprintf(stderr, "ltier-perf: %s: %s\n", what, LT_strerror(rc));
  exit(1);
}

lt_join_opts_t opts_for(const std::string& manager, const std::string& secret) {
  lt_join_opts_t o{};
  o.manager = manager.c_str();
  o.secret = secret.c_str();
  o.listen = "127.0.0.1:0";
  return o;
}

}  // namespace ltier_perf

namespace {

using namespace ltier_perf;

constexpr const char* kUsage =
    "usage: ltier-perf [--ops read,write,fetch_add,rpc,rpc_rate,rpc_loop,send,burst] "
    "[--sizes 8,4096,...] [--iters N] [--warmup N] [--bw] [--window W] [--join] "
    "[--join-tries N] [--new-peer] [--dump PREFIX]\n";

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string t;
  while (std::getline(ss, t, ',')) {
    if (!t.empty()) v.push_back(t);
  }
  return v;
}

struct Options {
  std::vector<std::string> ops = {"read", "write"};
  Run run;
  bool join = false, new_peer = false;
  int join_tries = 30;  // also the number of new peers
};

// The command line into *o; false (usage printed) on a bad one.
bool parse(int argc, char** argv, Options* o) {
  o->run.sizes = {8, 4096, 65536, 1048576};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "ltier-perf: %s needs a value\n", a.c_str());
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--ops") {
      o->ops = split(val());
    } else if (a == "--sizes") {
      o->run.sizes.clear();
      for (auto& s : split(val())) o->run.sizes.push_back(std::stoull(s));
    } else if (a == "--iters") {
      o->run.iters = std::stoi(val());
    } else if (a == "--warmup") {
      o->run.warmup = std::stoi(val());
    } else if (a == "--window") {
      o->run.window = std::stoi(val());
    } else if (a == "--join-tries") {
      o->join_tries = std::stoi(val());
    } else if (a == "--dump") {
      o->run.dump = val();
    } else if (a == "--bw") {
      o->run.bw = true;
    } else if (a == "--join") {
      o->join = true;
    } else if (a == "--new-peer") {
      o->new_peer = true;
    } else {
      fputs(kUsage, stderr);
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && argc <= 5 && std::string(argv[1]) == "--serve-node") {
    return serve_node_main(argv[2], argv[3], argc == 5 && std::string(argv[4]) == "loop");
  }
  if (argc == 5 && std::string(argv[1]) == "--join-trial") {
    return join_trial_main(argv[2], argv[3], static_cast<lt_node_t>(std::stoul(argv[4])));
  }
  Options o;
  if (!parse(argc, argv, &o)) return 2;
  const std::map<std::string, std::function<void(const Run&)>> measure = {
      {"read", [](const Run& r) { op_rma(r, true); }},
      {"write", [](const Run& r) { op_rma(r, false); }},
      {"fetch_add", op_fetch_add},
      {"rpc", op_rpc},
      {"rpc_rate", op_rpc_rate},
      {"rpc_loop", op_rpc_loop},
      {"send", op_send},
      {"burst", op_burst},
  };
  signal(SIGPIPE, SIG_IGN);
  ltier::LocalManager manager("ltier-perf");
  if (int rc = manager.start(); rc != 0) die("manager", rc);
  const std::string& maddr = manager.address();

  int stop_server = -1;
  const bool loop = std::find(o.ops.begin(), o.ops.end(), "rpc_loop") != o.ops.end();
  pid_t server = start_server(maddr, manager.secret(), loop, &stop_server);
  Run& r = o.run;
  lt_join_opts_t jo = opts_for(maddr, manager.secret());
  if (int rc = LT_join(&jo, &r.e); rc != 0) die("join", rc);
  r.peer = wait_for_peer(r.e);
  uint64_t max_size = *std::max_element(r.sizes.begin(), r.sizes.end());
  uint64_t region = max_size * static_cast<uint64_t>(std::max(r.window, 1));
  if (int rc = LT_malloc(r.e, r.peer, region, LT_RW | LT_ATOMIC, &r.h); rc != 0) die("malloc", rc);
  std::vector<char> buf(region, 'x');
  r.buf = &buf;

  for (const auto& op : o.ops) {
    auto it = measure.find(op);
    if (it == measure.end()) {
      fprintf(stderr,
              "ltier-perf: unknown op '%s' (read, write, fetch_add, rpc, rpc_rate, rpc_loop, "
              "send, burst)\n",
              op.c_str());
      continue;
    }
    it->second(r);
  }
  if (r.bw) {
    for (const auto& op : o.ops) {
      if (op == "read" || op == "write") op_rma_bw(r, op == "read");  // the others report their own
    }
  }
  if (o.join) run_join(maddr, manager.secret(), r.peer, o.join_tries);
  if (o.new_peer) run_new_peer(r.e, maddr, manager.secret(), o.join_tries);
  LT_free(r.e, r.h);
  LT_leave(r.e);
  close(stop_server);
  waitpid(server, nullptr, 0);
  return 0;
}
