// shm_floor: what two processes on this host can do with shared memory and
// nothing else, the floor the shm transport is compared against.
//
//   lat op=cacheline size=8 iters=N p50_us=X p99_us=Y   round trip of a
//       ping-pong on one cache line between two processes, both busy-polling
//       (one-way latency is half)
//   bw op=memcpy size=S MBps=X                          single-core memcpy of
//       S bytes from a shared mapping into private memory, repeated
//
//   shm_floor [--iters N] [--sizes 8,1048576]
//
// The ping-pong needs both cores; under a CPU hog it measures the scheduler.
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p / 100.0 * static_cast<double>(v.size() - 1));
  return v[i];
}

inline void relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}

// Round trips on one 64-byte line: the parent writes an odd sequence number,
// the child answers with the next even one.
void cacheline(int iters) {
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  auto* seq = new (p) std::atomic<uint64_t>(0);
  const int warm = iters / 10 + 1;
  pid_t child = fork();
  if (child < 0) {
    perror("fork");
    exit(1);
  }
  if (child == 0) {
    for (uint64_t i = 1; i <= 2ull * static_cast<uint64_t>(warm + iters); i += 2) {
      while (seq->load(std::memory_order_acquire) != i) relax();
      seq->store(i + 1, std::memory_order_release);
    }
    _exit(0);
  }
  std::vector<double> lat;
  lat.reserve(static_cast<size_t>(iters));
  uint64_t s = 1;
  for (int i = 0; i < warm + iters; ++i, s += 2) {
    auto t0 = Clock::now();
    seq->store(s, std::memory_order_release);
    while (seq->load(std::memory_order_acquire) != s + 1) relax();
    if (i >= warm)
      lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  waitpid(child, nullptr, 0);
  printf("lat op=cacheline size=8 iters=%d p50_us=%.3f p99_us=%.3f\n", iters, pct(lat, 50),
         pct(lat, 99));
  munmap(p, 4096);
}

void memcpy_bw(size_t size) {
  void* src = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (src == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  std::memset(src, 7, size);
  std::vector<char> dst(size, 1);
  uint64_t total = std::max<uint64_t>(64, (4ull << 30) / size);
  for (int i = 0; i < 8; ++i) std::memcpy(dst.data(), src, size);  // warm
  auto t0 = Clock::now();
  for (uint64_t i = 0; i < total; ++i) {
    std::memcpy(dst.data(), src, size);
    asm volatile("" : : "r"(dst.data()) : "memory");  // keep every copy
  }
  double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  printf("bw op=memcpy size=%zu window=1 MBps=%.1f\n", size,
         static_cast<double>(total * size) / secs / 1e6);
  munmap(src, size);
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 100000;
  std::vector<size_t> sizes = {8, 1048576};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--iters" && i + 1 < argc) {
      iters = std::max(1, atoi(argv[++i]));
    } else if (a == "--sizes" && i + 1 < argc) {
      sizes.clear();
      std::string l = argv[++i];
      for (size_t p = 0; p < l.size();) {
        size_t q = l.find(',', p);
        if (q == std::string::npos) q = l.size();
        sizes.push_back(std::strtoull(l.substr(p, q - p).c_str(), nullptr, 10));
        p = q + 1;
      }
    } else {
      fprintf(stderr, "usage: shm_floor [--iters N] [--sizes a,b]\n");
      return 2;
    }
  }
  cacheline(iters);
  for (size_t s : sizes) {
    if (s >= 4096) memcpy_bw(s);
  }
  return 0;
}
