// ltier-perf's server node (a child process: this program again, with
// --serve-node) and its fresh-process join trials.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>

#include "perf.h"

namespace ltier_perf {

namespace {

int rpc_echo(void*, lt_node_t, const void* in, size_t in_len, void* out, size_t out_cap,
             size_t* out_len) {
  if (in_len > out_cap) return -LT_ERR_TRUNCATED;
  if (in_len) std::memcpy(out, in, in_len);
  *out_len = in_len;
  return 0;
}

// Port 1 echoes each message to the sender's port 2.
void echo_loop(lt_engine_t* e, const std::atomic<bool>& stop) {
  std::unique_ptr<char[]> m(new char[kMaxMsg]);
  while (!stop.load()) {
    lt_node_t src = 0;
    size_t n = 0;
    if (LT_recv(e, 1, m.get(), kMaxMsg, &src, &n, 100000) == 0)
      (void)LT_send(e, src, 2, m.get(), n);
  }
}

// Port 3 is a sink that answers an empty message with an empty message on
// port 4. It keeps kWindow receives posted, as a streaming receiver would,
// all into one buffer as ucx_perftest's tag_bw does (the bytes are not
// looked at; one buffer keeps the comparison like for like).
void sink_loop(lt_engine_t* e, const std::atomic<bool>& stop) {
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
}

// Port 5 takes bursts of kWindow messages with no receive posted ahead
// (each is taken after the one before it), then answers on port 6: most
// arrive before their receive, the common case for a busy server.
void burst_loop(lt_engine_t* e, const std::atomic<bool>& stop) {
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
}

// Function kLoopFunc is an echo served by a server loop: LT_recvRPC, then
// LT_replyRPC with the same bytes.
void rpc_loop_server(lt_engine_t* e, const std::atomic<bool>& stop) {
  std::unique_ptr<char[]> m(new char[kMaxMsg]);
  while (!stop.load()) {
    lt_node_t src = 0;
    size_t n = 0;
    lt_rpc_token_t tok = 0;
    if (LT_recvRPC(e, kLoopFunc, m.get(), kMaxMsg, &src, &n, &tok, 100000) == 0)
      (void)LT_replyRPC(e, tok, m.get(), n, 0);
  }
}

// This binary's path, for the server node's process. readlink, not
// /proc/PID/exe itself: under valgrind --trace-children that names
// valgrind's tool, and the server would not run under the tool.
std::string self_exe() {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "/proc/" + std::to_string(getpid()) + "/exe";
  return std::string(path, static_cast<size_t>(n));
}

}  // namespace

int serve_node_main(const std::string& manager, const std::string& secret, bool loop) {
  lt_engine_t* e;
  lt_join_opts_t o = opts_for(manager, secret);
  int rc = LT_join(&o, &e);
  if (rc != 0) die("server join", rc);
  if ((rc = LT_regRPC(e, kEchoFunc, rpc_echo, nullptr)) != 0) die("server LT_regRPC", rc);
  if (loop && (rc = LT_regRPC_loop(e, kLoopFunc)) != 0) die("server LT_regRPC_loop", rc);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  threads.emplace_back(echo_loop, e, std::cref(stop));
  threads.emplace_back(sink_loop, e, std::cref(stop));
  threads.emplace_back(burst_loop, e, std::cref(stop));
  if (loop) threads.emplace_back(rpc_loop_server, e, std::cref(stop));
  char c;
  while (read(0, &c, 1) > 0) {
  }
  stop.store(true);
  for (auto& t : threads) t.join();
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

pid_t start_server(const std::string& manager, const std::string& secret, bool loop, int* stop_fd) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) exit(1);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[0], 0);
  std::string exe = self_exe();
  std::vector<std::string> args = {exe, "--serve-node", manager, secret};
  if (loop) args.push_back("loop");
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

// A node id this engine sees that is not in `known`, waiting up to 5 s.
lt_node_t wait_for_new_node(lt_engine_t* e, const std::vector<lt_node_t>& known) {
  for (int i = 0; i < 5000; ++i) {
    lt_node_t ids[64];
    size_t n = 0;
    LT_nodes(e, ids, 64, &n);
    for (size_t k = 0; k < n && k < 64; ++k) {
      if (ids[k] != LT_node_id(e) && std::find(known.begin(), known.end(), ids[k]) == known.end()) {
        return ids[k];
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return 0;
}

lt_node_t wait_for_peer(lt_engine_t* e) {
  const lt_node_t n = wait_for_new_node(e, {});
  if (n != 0) return n;
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

// A warm engine's first operation on a node it has never talked to, the
// like-for-like peer of a warm process's new rdma_cm connection: a fresh
// server node starts and joins; once this engine sees it and it has had
// kSettleMs to finish starting (as an rdma_cm server listens before its
// client connects), the first 8 B LT_RPC echo to it is timed, the
// connection to it included. Then the node is stopped.
void run_new_peer(lt_engine_t* e, const std::string& manager, const std::string& secret,
                  int tries) {
  constexpr int kSettleMs = 200;
  std::vector<lt_node_t> known;
  {
    lt_node_t ids[64];
    size_t n = 0;
    LT_nodes(e, ids, 64, &n);
    known.assign(ids, ids + std::min<size_t>(n, 64));
  }
  std::vector<double> first;
  for (int t = 0; t < tries; ++t) {
    int stop_fd = -1;
    pid_t pid = start_server(manager, secret, false, &stop_fd);
    lt_node_t node = wait_for_new_node(e, known);
    if (node == 0) {
      fprintf(stderr, "ltier-perf: a new server node never joined\n");
      close(stop_fd);
      waitpid(pid, nullptr, 0);
      break;
    }
    known.push_back(node);
    std::this_thread::sleep_for(std::chrono::milliseconds(kSettleMs));
    char in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8] = {};
    size_t got = 0;
    auto t0 = Clock::now();
    int rc = LT_RPC(e, node, kEchoFunc, in, sizeof(in), out, sizeof(out), &got);
    const double us = us_since(t0);
    if (rc != 0 || got != sizeof(in) || std::memcmp(in, out, sizeof(in)) != 0) {
      fprintf(stderr, "ltier-perf: first RPC to a new node failed: %d\n", rc);
    } else {
      first.push_back(us);
    }
    close(stop_fd);
    waitpid(pid, nullptr, 0);
  }
  printf("newpeer op=first_rpc tries=%zu p50_us=%.2f p90_us=%.2f\n", first.size(), pct(first, 50),
         pct(first, 90));
}

}  // namespace ltier_perf
