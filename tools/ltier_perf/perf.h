// ltier-perf's parts: the server node and the join trials (server.cc), the
// measurements, one function per operation (ops.cc), and what they share.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "ltier/lt.h"

namespace ltier_perf {

using Clock = std::chrono::steady_clock;

inline constexpr int kWindow = 16;           // messages in flight when streaming (ucx_perftest -O)
inline constexpr size_t kMaxMsg = 8u << 20;  // largest message the perf server receives
inline constexpr uint32_t kEchoFunc = 1;     // the server's echo handler (LT_regRPC)
inline constexpr uint32_t kLoopFunc = 2;     // its echo served by a server loop (LT_recvRPC)

double us_since(Clock::time_point t0);

// Per-iteration latencies: lap() at the end of each iteration records the
// time since the previous lap (one clock read per iteration). The clock is
// the time-stamp counter where it runs at a constant rate, as ucx_perftest
// reads it (about 9 ns on a VM, against 21 for clock_gettime, which a
// whole 8 B one-sided op over shm took twice over), converted to time
// against steady_clock over the whole run; elsewhere steady_clock itself.
class Laps {
 public:
  explicit Laps(int n);
  void lap(bool keep) {
    const uint64_t now = ticks();
    if (keep) ticks_.push_back(now - prev_);
    prev_ = now;
  }
  /// The kept laps in µs (converted at the first call; lap() no more after).
  const std::vector<double>& lat() const;

 private:
  uint64_t ticks() const;
  bool tsc_ = false;
  uint64_t prev_ = 0, tsc0_ = 0;
  Clock::time_point t0_;
  std::vector<uint64_t> ticks_;
  mutable std::vector<double> lat_;
};

double pct(std::vector<double> v, double p);
[[noreturn]] void die(const char* what, int rc);
lt_join_opts_t opts_for(const std::string& manager, const std::string& secret);

// ---- server.cc
// Child processes are this program started again (not forks: this process
// already has threads). "--serve-node MANAGER SECRET [loop]" serves until
// its stdin closes (with "loop", a server-loop thread for kLoopFunc too);
// "--join-trial MANAGER SECRET NODE" prints its join timings.
int serve_node_main(const std::string& manager, const std::string& secret, bool loop);
int join_trial_main(const std::string& manager, const std::string& secret, lt_node_t server);
/// Starts the server node with a pipe on its stdin; closing *stop_fd (at
/// exit or explicitly) stops it.
pid_t start_server(const std::string& manager, const std::string& secret, bool loop, int* stop_fd);
lt_node_t wait_for_peer(lt_engine_t* e);
void run_join(const std::string& manager, const std::string& secret, lt_node_t server, int tries);
/// `tries` fresh nodes, each started, seen by `e`, called once (an 8 B LT_RPC
/// echo, timed: the first operation on a new peer), and stopped.
void run_new_peer(lt_engine_t* e, const std::string& manager, const std::string& secret, int tries);

// ---- ops.cc
/// What every measurement gets: the engine, the server node, an LMR of
/// `window` x the largest size on it, a local buffer as large, and the
/// command line's settings.
struct Run {
  lt_engine_t* e = nullptr;
  lt_node_t peer = 0;
  lt_lmr_t h = 0;
  std::vector<char>* buf = nullptr;
  std::vector<uint64_t> sizes;
  int iters = 10000, warmup = -1, window = 16;
  bool bw = false;
  std::string dump;  // --dump: PREFIX.OP.SIZE gets every latency, in order

  /// Iterations for a latency run of `size`: fewer for large sizes.
  int iters_for(uint64_t size) const;
  int warmup_for(int n) const { return warmup >= 0 ? warmup : n / 10 + 1; }
};

void op_fetch_add(const Run& r);
void op_rpc(const Run& r);       // LT_RPC to the handler, per size
void op_rpc_loop(const Run& r);  // LT_RPC to the server loop: round trip and rate
void op_rpc_rate(const Run& r);
void op_send(const Run& r);  // ping-pong, and streaming with --bw
void op_burst(const Run& r);
void op_rma(const Run& r, bool is_read);     // LT_read / LT_write round trips
void op_rma_bw(const Run& r, bool is_read);  // with --bw: `window` in flight

}  // namespace ltier_perf
