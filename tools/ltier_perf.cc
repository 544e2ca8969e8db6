// ltier-perf: latency and bandwidth of ltier operations between two nodes on
// this host, in the spirit of ucx_perftest. It runs its own ltier-manager (in
// a thread) and a server node (a child process), then measures from this
// process. Output lines are machine-readable:
//
//   lat op=read size=8 iters=N p50_us=X p99_us=Y       (round trip of one op)
//   bw op=write size=1048576 window=W MBps=X            (W ops in flight)
//   join op=first_op p50_us=X p90_us=Y                  (fresh process: LT_join
//        start to its first completed operation on a peer, an LT_malloc)
//   join op=after_join p50_us=X p90_us=Y                (LT_join return to it)
//
//   lat op=fetch_add size=8 iters=N p50_us=X p99_us=Y  (LT_fetch_add round trip)
//   lat op=rpc size=S iters=N p50_us=X p99_us=Y        (LT_RPC echo, S bytes each way)
//   rate op=rpc size=8 window=W calls_per_s=X          (W calls outstanding)
//   lat op=send size=S ...                             (LT_send + LT_recv of the echo)
//   bw op=send size=S window=1 MBps=X                  (back-to-back LT_send, with --bw)
//   rate op=burst size=8 window=16 msgs_per_s=X        (16 LT_send, then one answer: the
//                                                       receives are not posted ahead)
//
// A latency sample is the time from the end of one iteration to the end of
// the next (one clock read per iteration, as ucx_perftest takes it), so the
// loop's own work is in every sample, as it is in ucx_perftest's.
//
//   ltier-perf [--ops read,write,fetch_add,rpc,rpc_rate,send,burst] [--sizes 8,4096,65536,1048576]
//   [--iters N]
//              [--warmup N] [--bw] [--window W] [--join] [--join-tries N]
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ltier/lt.h"
#include "ltier/manager.h"

namespace {

using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// Per-iteration latencies: lap() at the end of each iteration records the
// time since the previous lap (one clock read per iteration).
class Laps {
 public:
  explicit Laps(int n) {
    lat_.reserve(static_cast<size_t>(n));
    prev_ = Clock::now();
  }
  void lap(bool keep) {
    auto now = Clock::now();
    if (keep) lat_.push_back(std::chrono::duration<double, std::micro>(now - prev_).count());
    prev_ = now;
  }
  const std::vector<double>& lat() const { return lat_; }

 private:
  Clock::time_point prev_;
  std::vector<double> lat_;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  std::string t;
  while (std::getline(ss, t, ',')) {
    if (!t.empty()) v.push_back(t);
  }
  return v;
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

// Child processes are this program started again (not forks: this process
// already has threads). "--serve-node MANAGER SECRET" serves until its stdin
// closes; "--join-trial MANAGER SECRET NODE" prints its join timings.
int rpc_echo(void*, lt_node_t, const void* in, size_t in_len, void* out, size_t out_cap,
             size_t* out_len) {
  if (in_len > out_cap) return -LT_ERR_TRUNCATED;
  if (in_len) std::memcpy(out, in, in_len);
  *out_len = in_len;
  return 0;
}

constexpr int kWindow = 16;           // messages in flight when streaming (ucx_perftest -O)
constexpr size_t kMaxMsg = 8u << 20;  // largest message the perf server receives

int serve_node_main(const std::string& manager, const std::string& secret) {
  lt_engine_t* e;
  lt_join_opts_t o = opts_for(manager, secret);
  int rc = LT_join(&o, &e);
  if (rc != 0) die("server join", rc);
  if ((rc = LT_regRPC(e, 1, rpc_echo, nullptr)) != 0) die("server LT_regRPC", rc);
  // Messaging peers: port 1 echoes to the sender's port 2; port 3 is a sink
  // that answers an empty message with an empty message on port 4.
  std::atomic<bool> stop{false};
  auto echo_loop = [&] {
    std::unique_ptr<char[]> m(new char[kMaxMsg]);
    while (!stop.load()) {
      lt_node_t src = 0;
      size_t n = 0;
      if (LT_recv(e, 1, m.get(), kMaxMsg, &src, &n, 100000) == 0)
        (void)LT_send(e, src, 2, m.get(), n);
    }
  };
  // The sink keeps kWindow receives posted, as a streaming receiver would,
  // all into one buffer as ucx_perftest's tag_bw does (the bytes are not
  // looked at; one buffer keeps the comparison like for like).
  auto sink_loop = [&] {
    std::unique_ptr<char[]> buf(new char[kMaxMsg]);  // not zeroed: untouched pages cost nothing
    std::vector<lt_req_t> reqs(kWindow);
    std::vector<lt_node_t> srcs(kWindow);
    std::vector<size_t> lens(kWindow);
    for (int k = 0; k < kWindow; ++k) {
      if (int r = LT_recv_async(e, 3, buf.get(), kMaxMsg, &srcs[k], &lens[k], &reqs[k]); r)
        die("sink LT_recv_async", r);
    }
    for (uint64_t i = 0; !stop.load(); ++i) {
      int k = static_cast<int>(i % kWindow);
      int r;
      while ((r = LT_wait(e, reqs[k], 100000)) == -LT_ERR_TIMEDOUT && !stop.load()) {
      }
      if (r == -LT_ERR_TIMEDOUT) break;
      if (r == 0 && lens[k] == 0) (void)LT_send(e, srcs[k], 4, nullptr, 0);
      if ((r = LT_recv_async(e, 3, buf.get(), kMaxMsg, &srcs[k], &lens[k], &reqs[k])) != 0)
        die("sink LT_recv_async", r);
    }
  };
  // Port 5 takes bursts of kWindow messages with no receive posted ahead
  // (each is taken after the one before it), then answers on port 6: most
  // arrive before their receive, the common case for a busy server.
  auto burst_loop = [&] {
    std::unique_ptr<char[]> m(new char[kMaxMsg]);
    int got = 0;
    while (!stop.load()) {
      lt_node_t src = 0;
      size_t n = 0;
      if (LT_recv(e, 5, m.get(), kMaxMsg, &src, &n, 100000) != 0) continue;
      if (++got == kWindow) {
        got = 0;
        (void)LT_send(e, src, 6, nullptr, 0);
      }
    }
  };
  std::thread echo(echo_loop), sink(sink_loop), burst(burst_loop);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  stop.store(true);
  echo.join();
  sink.join();
  burst.join();
  LT_leave(e);
  return 0;
}

int join_trial_main(const std::string& manager, const std::string& secret, lt_node_t server) {
  auto t0 = Clock::now();
  lt_engine_t* e;
  lt_join_opts_t o = opts_for(manager, secret);
  int rc = LT_join(&o, &e);
  if (rc != 0) return 1;
  auto t1 = Clock::now();
  // The first operation on a peer: an LT_malloc there (one round trip,
  // including the connection to that peer).
  lt_lmr_t h;
  rc = LT_malloc(e, server, 64, LT_RW, &h);
  double first = us_since(t0), after = us_since(t1);
  if (rc == 0) {
    printf("%.3f %.3f\n", first, after);
    LT_free(e, h);
  }
  LT_leave(e);
  return rc == 0 ? 0 : 1;
}

std::string self_exe() { return "/proc/" + std::to_string(getpid()) + "/exe"; }

// Starts the server node with a pipe on its stdin; closing our end (at exit
// or explicitly) stops it.
pid_t start_server(const std::string& manager, const std::string& secret, int* stop_fd) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) exit(1);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[0], 0);
  std::string exe = self_exe();
  std::vector<std::string> args = {exe, "--serve-node", manager, secret};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  if (posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ) != 0) {
    fprintf(stderr, "ltier-perf: cannot start the server node\n");
    exit(1);
  }
  posix_spawn_file_actions_destroy(&fa);
  close(p[0]);
  *stop_fd = p[1];
  return pid;
}

lt_node_t wait_for_peer(lt_engine_t* e) {
  for (int i = 0; i < 1000; ++i) {
    lt_node_t ids[16];
    size_t n = 0;
    LT_nodes(e, ids, 16, &n);
    for (size_t k = 0; k < n && k < 16; ++k) {
      if (ids[k] != LT_node_id(e)) return ids[k];
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  fprintf(stderr, "ltier-perf: server node never joined\n");
  exit(1);
}

void run_join(const std::string& manager, const std::string& secret, lt_node_t server, int tries) {
  std::vector<double> first, after;
  std::string cmd =
      self_exe() + " --join-trial " + manager + " " + secret + " " + std::to_string(server);
  for (int t = 0; t < tries; ++t) {
    FILE* f = popen(cmd.c_str(), "r");
    if (f == nullptr) break;
    double a = 0, b = 0;
    bool ok = fscanf(f, "%lf %lf", &a, &b) == 2;
    if (pclose(f) == 0 && ok) {
      first.push_back(a);
      after.push_back(b);
    }
  }
  printf("join op=first_op p50_us=%.2f p90_us=%.2f\n", pct(first, 50), pct(first, 90));
  printf("join op=after_join p50_us=%.2f p90_us=%.2f\n", pct(after, 50), pct(after, 90));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string(argv[1]) == "--serve-node") return serve_node_main(argv[2], argv[3]);
  if (argc == 5 && std::string(argv[1]) == "--join-trial") {
    return join_trial_main(argv[2], argv[3], static_cast<lt_node_t>(std::stoul(argv[4])));
  }
  std::vector<std::string> ops = {"read", "write"};
  std::vector<uint64_t> sizes = {8, 4096, 65536, 1048576};
  int iters = 10000, warmup = -1, window = 16, join_tries = 30;
  bool bw = false, join = false;
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
      ops = split(val());
    } else if (a == "--sizes") {
      sizes.clear();
      for (auto& s : split(val())) sizes.push_back(std::stoull(s));
    } else if (a == "--iters") {
      iters = std::stoi(val());
    } else if (a == "--warmup") {
      warmup = std::stoi(val());
    } else if (a == "--window") {
      window = std::stoi(val());
    } else if (a == "--join-tries") {
      join_tries = std::stoi(val());
    } else if (a == "--bw") {
      bw = true;
    } else if (a == "--join") {
      join = true;
    } else {
      fprintf(stderr,
              "usage: ltier-perf [--ops read,write,fetch_add,rpc,rpc_rate,send,burst] [--sizes "
              "8,4096,...] "
              "[--iters N] "
              "[--warmup N] [--bw] [--window W] [--join] [--join-tries N]\n");
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  ltier::LocalManager manager("ltier-perf");
  if (int rc = manager.start(); rc != 0) die("manager", rc);
  const std::string& maddr = manager.address();

  int stop_server = -1;
  pid_t server = start_server(maddr, manager.secret(), &stop_server);
  lt_engine_t* e;
  lt_join_opts_t o = opts_for(maddr, manager.secret());
  if (int rc = LT_join(&o, &e); rc != 0) die("join", rc);
  lt_node_t peer = wait_for_peer(e);
  uint64_t max_size = *std::max_element(sizes.begin(), sizes.end());
  uint64_t region = max_size * static_cast<uint64_t>(std::max(window, 1));
  lt_lmr_t h;
  if (int rc = LT_malloc(e, peer, region, LT_RW | LT_ATOMIC, &h); rc != 0) die("malloc", rc);
  std::vector<char> buf(region, 'x');

  for (const auto& op : ops) {
    if (op == "fetch_add") {
      // One LT_fetch_add round trip on a word of the server's LMR.
      int w = warmup >= 0 ? warmup : iters / 10 + 1;
      Laps laps(iters);
      for (int i = 0; i < w + iters; ++i) {
        uint64_t old;
        if (int rc = LT_fetch_add(e, h, 0, 1, &old); rc != 0) die("fetch_add", rc);
        laps.lap(i >= w);
      }
      printf("lat op=fetch_add size=8 iters=%d p50_us=%.2f p99_us=%.2f\n", iters,
             pct(laps.lat(), 50), pct(laps.lat(), 99));
      fflush(stdout);
      continue;
    }
    if (op == "rpc") {
      // One LT_RPC round trip: `size` bytes each way to an echo handler.
      for (uint64_t size : sizes) {
        int n = size > 4096 ? std::max(200, static_cast<int>(iters * 4096.0 / size)) : iters;
        n = std::min(n, iters);
        int w = warmup >= 0 ? warmup : n / 10 + 1;
        std::vector<char> rep(size);
        Laps laps(n);
        for (int i = 0; i < w + n; ++i) {
          size_t got = 0;
          int rc = LT_RPC(e, peer, 1, buf.data(), size, rep.data(), size, &got);
          if (rc != 0) die("rpc", rc);
          laps.lap(i >= w);
        }
        const std::vector<double>& lat = laps.lat();
        printf("lat op=rpc size=%llu iters=%d p50_us=%.2f p99_us=%.2f\n",
               static_cast<unsigned long long>(size), n, pct(lat, 50), pct(lat, 99));
        fflush(stdout);
      }
      continue;
    }
    if (op == "send") {
      // Message ping-pong (round trip: LT_send there, LT_recv of the echo),
      // then bandwidth: back-to-back messages, one empty message to close.
      for (uint64_t size : sizes) {
        int n = size > 4096 ? std::max(200, static_cast<int>(iters * 4096.0 / size)) : iters;
        n = std::min(n, iters);
        int w = warmup >= 0 ? warmup : n / 10 + 1;
        std::vector<char> back(size + 1);
        Laps laps(n);
        for (int i = 0; i < w + n; ++i) {
          lt_node_t src = 0;
          size_t got = 0;
          int rc = LT_send(e, peer, 1, buf.data(), size);
          if (rc == 0) rc = LT_recv(e, 2, back.data(), back.size(), &src, &got, -1);
          if (rc != 0) die("send/recv", rc);
          laps.lap(i >= w);
        }
        const std::vector<double>& lat = laps.lat();
        printf("lat op=send size=%llu iters=%d p50_us=%.2f p99_us=%.2f\n",
               static_cast<unsigned long long>(size), n, pct(lat, 50), pct(lat, 99));
        fflush(stdout);
      }
      if (bw) {
        // Streaming, as ucx_perftest tag_bw does it: up to kWindow sends in
        // flight (rendezvous ones keep their buffer until they complete);
        // an empty message closes the run and is answered once all arrived.
        for (uint64_t size : sizes) {
          uint64_t total = std::min<uint64_t>(static_cast<uint64_t>(iters) * 20,
                                              std::max<uint64_t>(200, (512ull << 20) / size));
          std::vector<lt_req_t> ids(kWindow);
          uint64_t issued = 0, done = 0;
          auto t0 = Clock::now();
          while (done < total) {
            if (issued < total && issued - done < static_cast<uint64_t>(kWindow)) {
              int rc = LT_send_async(e, peer, 3, buf.data(), size, &ids[issued % kWindow]);
              if (rc == 0) {
                ++issued;
                continue;
              }
              if (rc != -LT_ERR_AGAIN) die("LT_send_async", rc);
              if (issued == done) {  // out of credits, nothing to wait for: block for one
                if ((rc = LT_send(e, peer, 3, buf.data(), size)) != 0) die("LT_send", rc);
                ++issued;
                ++done;
                continue;
              }
            }
            if (int rc = LT_wait(e, ids[done % kWindow], -1); rc != 0) die("send wait", rc);
            ++done;
          }
          lt_node_t src = 0;
          size_t got = 0;
          char z;
          if (int rc = LT_send(e, peer, 3, nullptr, 0); rc != 0) die("send", rc);
          if (int rc = LT_recv(e, 4, &z, 1, &src, &got, -1); rc != 0) die("recv", rc);
          double secs = us_since(t0) / 1e6;
          printf("bw op=send size=%llu window=%d MBps=%.1f msgs_per_s=%.0f\n",
                 static_cast<unsigned long long>(size), kWindow,
                 static_cast<double>(total * size) / secs / 1e6, static_cast<double>(total) / secs);
          fflush(stdout);
        }
      }
      continue;
    }
    if (op == "burst") {
      // kWindow back-to-back LT_send of 8 bytes, then the server's one
      // answer: messages per second when receives are not posted ahead.
      uint64_t rounds = std::max<uint64_t>(1, static_cast<uint64_t>(iters) / kWindow);
      auto t0 = Clock::now();
      for (uint64_t r = 0; r < rounds; ++r) {
        for (int k = 0; k < kWindow; ++k) {
          if (int rc = LT_send(e, peer, 5, buf.data(), 8); rc != 0) die("burst send", rc);
        }
        lt_node_t src = 0;
        size_t got = 0;
        char z;
        if (int rc = LT_recv(e, 6, &z, 1, &src, &got, -1); rc != 0) die("burst recv", rc);
      }
      printf("rate op=burst size=8 window=%d msgs_per_s=%.0f\n", kWindow,
             static_cast<double>(rounds * kWindow) / (us_since(t0) / 1e6));
      fflush(stdout);
      continue;
    }
    if (op == "rpc_rate") {
      // Calls per second with 1 and 32 calls outstanding (8-byte echo).
      for (int win : {1, 32}) {
        std::vector<lt_req_t> ids(win);
        std::vector<size_t> lens(win);
        std::vector<uint64_t> reps(win);
        uint64_t total = static_cast<uint64_t>(iters) * 4, issued = 0, done = 0;
        auto t0 = Clock::now();
        while (done < total) {
          if (issued < total && issued - done < static_cast<uint64_t>(win)) {
            size_t k = issued % win;
            int rc = LT_RPC_async(e, peer, 1, buf.data(), 8, &reps[k], 8, &lens[k], &ids[k]);
            if (rc != 0) die("rpc_async", rc);
            ++issued;
            continue;
          }
          if (int rc = LT_wait(e, ids[done % win], -1); rc != 0) die("rpc wait", rc);
          ++done;
        }
        printf("rate op=rpc size=8 window=%d calls_per_s=%.0f\n", win,
               static_cast<double>(total) / (us_since(t0) / 1e6));
        fflush(stdout);
      }
      continue;
    }
    if (op != "read" && op != "write") {
      fprintf(stderr,
              "ltier-perf: unknown op '%s' (read, write, fetch_add, rpc, rpc_rate, send, burst)\n",
              op.c_str());
      continue;
    }
    bool is_read = op == "read";
    for (uint64_t size : sizes) {
      int n = iters;
      if (size > 4096) n = std::max(200, static_cast<int>(iters * 4096.0 / size));
      n = std::min(n, iters);
      int w = warmup >= 0 ? warmup : n / 10 + 1;
      Laps laps(n);
      for (int i = 0; i < w + n; ++i) {
        int rc = is_read ? LT_read(e, h, 0, buf.data(), size) : LT_write(e, h, 0, buf.data(), size);
        if (rc != 0) die(op.c_str(), rc);
        laps.lap(i >= w);
      }
      const std::vector<double>& lat = laps.lat();
      printf("lat op=%s size=%llu iters=%d p50_us=%.2f p99_us=%.2f\n", op.c_str(),
             static_cast<unsigned long long>(size), n, pct(lat, 50), pct(lat, 99));
      fflush(stdout);
    }
  }
  if (bw) {
    for (const auto& op : ops) {
      if (op != "read" && op != "write") continue;  // the others report their own
      bool is_read = op == "read";
      for (uint64_t size : sizes) {
        if (size < 65536) continue;
        // About 256 MiB or 2,000 ops, whichever is fewer; window W in flight.
        uint64_t total = std::min<uint64_t>(2000, std::max<uint64_t>(200, (256ull << 20) / size));
        std::vector<lt_req_t> reqs(static_cast<size_t>(window));
        auto t0 = Clock::now();
        uint64_t issued = 0, done = 0;
        size_t slot = 0;
        while (done < total) {
          if (issued < total && issued - done < static_cast<uint64_t>(window)) {
            char* p = buf.data() + (issued % window) * size;
            uint64_t off = (issued % window) * size;
            int rc = is_read ? LT_read_async(e, h, off, p, size, &reqs[issued % window])
                             : LT_write_async(e, h, off, p, size, &reqs[issued % window]);
            if (rc != 0) die(op.c_str(), rc);
            ++issued;
            continue;
          }
          slot = done % window;
          int rc = LT_wait(e, reqs[slot], -1);
          if (rc != 0) die("wait", rc);
          ++done;
        }
        double secs = us_since(t0) / 1e6;
        printf("bw op=%s size=%llu window=%d MBps=%.1f\n", op.c_str(),
               static_cast<unsigned long long>(size), window,
               static_cast<double>(total * size) / secs / 1e6);
        fflush(stdout);
      }
    }
  }
  if (join) run_join(maddr, manager.secret(), peer, join_tries);
  LT_free(e, h);
  LT_leave(e);
  close(stop_server);
  waitpid(server, nullptr, 0);
  return 0;
}
