// ltier-perf's measurements, one function per operation; each prints its
// machine-readable lines (see ltier_perf.cc).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "perf.h"

namespace ltier_perf {

namespace {

// avg_us is ucx_perftest's "average" column: the tail's weight, which a
// percentile of a run with rare long stalls (a CPU hog's time slices) hides.
// With --dump, the samples also go to PREFIX.OP.SIZE, one per line in the
// order they were taken: where in a run the slow ones fall (every 250 us,
// say) is what names their cause.
void print_lat(const Run& r, const char* op, uint64_t size, int n, const Laps& laps) {
  const std::vector<double>& v = laps.lat();
  double sum = 0;
  for (double x : v) sum += x;
  if (!r.dump.empty()) {
    const std::string path = r.dump + "." + op + "." + std::to_string(size);
    FILE* f = fopen(path.c_str(), "w");
    if (f != nullptr) {
      for (double x : v) fprintf(f, "%.3f\n", x);
    }
    if (f == nullptr || fclose(f) != 0) {
      fprintf(stderr, "ltier-perf: cannot write %s: %s\n", path.c_str(), strerror(errno));
      exit(1);
    }
  }
  printf("lat op=%s size=%llu iters=%d p50_us=%.2f p99_us=%.2f p999_us=%.2f avg_us=%.2f\n", op,
         static_cast<unsigned long long>(size), n, pct(v, 50), pct(v, 99), pct(v, 99.9),
         v.empty() ? 0.0 : sum / static_cast<double>(v.size()));
  fflush(stdout);
}

// LT_RPC round trips of `size` bytes each way to function `func`.
void rpc_lat(const Run& r, const char* op, uint32_t func) {
  for (uint64_t size : r.sizes) {
    const int n = r.iters_for(size), w = r.warmup_for(n);
    std::vector<char> rep(size);
    Laps laps(n);
    for (int i = 0; i < w + n; ++i) {
      size_t got = 0;
      int rc = LT_RPC(r.e, r.peer, func, r.buf->data(), size, rep.data(), size, &got);
      if (rc != 0) die(op, rc);
      laps.lap(i >= w);
    }
    print_lat(r, op, size, n, laps);
  }
}

// Calls per second to `func`, 8 bytes each way, with `win` calls outstanding.
void rpc_rate(const Run& r, const char* op, uint32_t func, int win) {
  std::vector<lt_req_t> ids(win);
  std::vector<size_t> lens(win);
  std::vector<uint64_t> reps(win);
  uint64_t total = static_cast<uint64_t>(r.iters) * 4, issued = 0, done = 0;
  auto t0 = Clock::now();
  while (done < total) {
    if (issued < total && issued - done < static_cast<uint64_t>(win)) {
      size_t k = issued % win;
      int rc = LT_RPC_async(r.e, r.peer, func, r.buf->data(), 8, &reps[k], 8, &lens[k], &ids[k]);
      if (rc != 0) die("rpc_async", rc);
      ++issued;
      continue;
    }
    if (int rc = LT_wait(r.e, ids[done % win], -1); rc != 0) die("rpc wait", rc);
    ++done;
  }
  printf("rate op=%s size=8 window=%d calls_per_s=%.0f\n", op, win,
         static_cast<double>(total) / (us_since(t0) / 1e6));
  fflush(stdout);
}

// Streaming, as ucx_perftest tag_bw does it: up to kWindow sends in flight
// (rendezvous ones keep their buffer until they complete); an empty message
// closes the run and is answered once all arrived. About 2 GiB per run
// (within 200 and 20 x iters messages): at 512 MiB a 1 MiB run over tcp
// lasted 0.1 s and its figure moved by half between runs.
void send_bw(const Run& r, uint64_t size) {
  const char* buf = r.buf->data();
  uint64_t total = std::min<uint64_t>(static_cast<uint64_t>(r.iters) * 20,
                                      std::max<uint64_t>(200, (2048ull << 20) / size));
  std::vector<lt_req_t> ids(kWindow);
  uint64_t issued = 0, done = 0;
  auto t0 = Clock::now();
  while (done < total) {
    if (issued < total && issued - done < static_cast<uint64_t>(kWindow)) {
      int rc = LT_send_async(r.e, r.peer, 3, buf, size, &ids[issued % kWindow]);
      if (rc == 0) {
        ++issued;
        continue;
      }
      if (rc != -LT_ERR_AGAIN) die("LT_send_async", rc);
      if (issued == done) {  // out of credits, nothing to wait for: block for one
        if ((rc = LT_send(r.e, r.peer, 3, buf, size)) != 0) die("LT_send", rc);
        ++issued;
        ++done;
        continue;
      }
    }
    if (int rc = LT_wait(r.e, ids[done % kWindow], -1); rc != 0) die("send wait", rc);
    ++done;
  }
  lt_node_t src = 0;
  size_t got = 0;
  char z;
  if (int rc = LT_send(r.e, r.peer, 3, nullptr, 0); rc != 0) die("send", rc);
  if (int rc = LT_recv(r.e, 4, &z, 1, &src, &got, -1); rc != 0) die("recv", rc);
  double secs = us_since(t0) / 1e6;
  printf("bw op=send size=%llu window=%d MBps=%.1f msgs_per_s=%.0f\n",
         static_cast<unsigned long long>(size), kWindow,
         static_cast<double>(total * size) / secs / 1e6, static_cast<double>(total) / secs);
  fflush(stdout);
}

}  // namespace

int Run::iters_for(uint64_t size) const {
  int n = size > 4096 ? std::max(200, static_cast<int>(iters * 4096.0 / size)) : iters;
  return std::min(n, iters);
}

void op_fetch_add(const Run& r) {
  // One LT_fetch_add round trip on a word of the server's LMR.
  const int w = r.warmup_for(r.iters);
  Laps laps(r.iters);
  for (int i = 0; i < w + r.iters; ++i) {
    uint64_t old;
    if (int rc = LT_fetch_add(r.e, r.h, 0, 1, &old); rc != 0) die("fetch_add", rc);
    laps.lap(i >= w);
  }
  print_lat(r, "fetch_add", 8, r.iters, laps);
}

void op_rpc(const Run& r) { rpc_lat(r, "rpc", kEchoFunc); }

void op_rpc_rate(const Run& r) {
  for (int win : {1, 32}) rpc_rate(r, "rpc", kEchoFunc, win);
}

void op_rpc_loop(const Run& r) {
  rpc_lat(r, "rpc_loop", kLoopFunc);
  for (int win : {1, 32}) rpc_rate(r, "rpc_loop", kLoopFunc, win);
}

void op_send(const Run& r) {
  // Message ping-pong (round trip: LT_send there, LT_recv of the echo).
  for (uint64_t size : r.sizes) {
    const int n = r.iters_for(size), w = r.warmup_for(n);
    std::vector<char> back(size + 1);
    Laps laps(n);
    for (int i = 0; i < w + n; ++i) {
      lt_node_t src = 0;
      size_t got = 0;
      int rc = LT_send(r.e, r.peer, 1, r.buf->data(), size);
      if (rc == 0) rc = LT_recv(r.e, 2, back.data(), back.size(), &src, &got, -1);
      if (rc != 0) die("send/recv", rc);
      laps.lap(i >= w);
    }
    print_lat(r, "send", size, n, laps);
  }
  if (r.bw) {
    for (uint64_t size : r.sizes) send_bw(r, size);
  }
}

void op_burst(const Run& r) {
  // kWindow back-to-back LT_send of 8 bytes, then the server's one answer:
  // messages per second when receives are not posted ahead.
  uint64_t rounds = std::max<uint64_t>(1, static_cast<uint64_t>(r.iters) / kWindow);
  auto t0 = Clock::now();
  for (uint64_t n = 0; n < rounds; ++n) {
    for (int k = 0; k < kWindow; ++k) {
      if (int rc = LT_send(r.e, r.peer, 5, r.buf->data(), 8); rc != 0) die("burst send", rc);
    }
    lt_node_t src = 0;
    size_t got = 0;
    char z;
    if (int rc = LT_recv(r.e, 6, &z, 1, &src, &got, -1); rc != 0) die("burst recv", rc);
  }
  printf("rate op=burst size=8 window=%d msgs_per_s=%.0f\n", kWindow,
         static_cast<double>(rounds * kWindow) / (us_since(t0) / 1e6));
  fflush(stdout);
}

void op_rma(const Run& r, bool is_read) {
  const char* op = is_read ? "read" : "write";
  char* buf = r.buf->data();
  for (uint64_t size : r.sizes) {
    const int n = r.iters_for(size), w = r.warmup_for(n);
    Laps laps(n);
    for (int i = 0; i < w + n; ++i) {
      int rc = is_read ? LT_read(r.e, r.h, 0, buf, size) : LT_write(r.e, r.h, 0, buf, size);
      if (rc != 0) die(op, rc);
      laps.lap(i >= w);
    }
    print_lat(r, op, size, n, laps);
  }
}

void op_rma_bw(const Run& r, bool is_read) {
  const char* op = is_read ? "read" : "write";
  const int window = r.window;
  for (uint64_t size : r.sizes) {
    if (size < 65536) continue;
    // About 2 GiB per run (within 200 and 20 x iters ops), as send_bw: at
    // 256 MiB a 1 MiB run over tcp lasted 0.1-0.2 s and its figure moved by
    // a third between runs. Window W in flight.
    uint64_t total = std::min<uint64_t>(static_cast<uint64_t>(r.iters) * 20,
                                        std::max<uint64_t>(200, (2048ull << 20) / size));
    std::vector<lt_req_t> reqs(static_cast<size_t>(window));
    auto t0 = Clock::now();
    uint64_t issued = 0, done = 0;
    while (done < total) {
      if (issued < total && issued - done < static_cast<uint64_t>(window)) {
        char* p = r.buf->data() + (issued % window) * size;
        uint64_t off = (issued % window) * size;
        int rc = is_read ? LT_read_async(r.e, r.h, off, p, size, &reqs[issued % window])
                         : LT_write_async(r.e, r.h, off, p, size, &reqs[issued % window]);
        if (rc != 0) die(op, rc);
        ++issued;
        continue;
      }
      if (int rc = LT_wait(r.e, reqs[done % window], -1); rc != 0) die("wait", rc);
      ++done;
    }
    double secs = us_since(t0) / 1e6;
    printf("bw op=%s size=%llu window=%d MBps=%.1f\n", op, static_cast<unsigned long long>(size),
           window, static_cast<double>(total * size) / secs / 1e6);
    fflush(stdout);
  }
}

}  // namespace ltier_perf
