#include "proto/asym_fence.h"

#include <fcntl.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

namespace lt::proto {

namespace {

#if defined(__SANITIZE_THREAD__)
constexpr bool kSanitizingThreads = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
constexpr bool kSanitizingThreads = true;
#else
constexpr bool kSanitizingThreads = false;
#endif
#else
constexpr bool kSanitizingThreads = false;
#endif

// Whether membarrier(PRIVATE_EXPEDITED) is there, and registers for it.
bool detect() {
  if (kSanitizingThreads) return false;
  long cmds = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (cmds < 0 || (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
  return syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
}

// Whether this process runs one thread (field 20 of /proc/self/stat, after
// the parenthesised command name). False when it cannot tell.
bool single_threaded() {
  int fd = ::open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');
  // After ") ": state, then fields 4..19, then num_threads.
  for (int field = 2; p != nullptr && field < 20; ++field) p = std::strchr(p + 1, ' ');
  return p != nullptr && std::strtol(p + 1, nullptr, 10) == 1;
}

// The registration: started once, waited for by wait_ready().
struct Detection {
  std::once_flag started;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};
Detection& detection() {
  static Detection* d = new Detection;  // leaked: the thread may outlive statics
  return *d;
}

}  // namespace

std::atomic<bool> AsymFence::ready_{false};

void AsymFence::prepare() {
  Detection& d = detection();
  std::call_once(d.started, [&d] {
    auto run = [&d] {
      const bool yes = detect();
      std::lock_guard<std::mutex> g(d.mu);
      // Under the lock wait_ready() takes: a thread that saw `done` also
      // sees the mode the hot sides now use.
      ready_.store(yes, std::memory_order_seq_cst);
      d.done = true;
      d.cv.notify_all();
    };
    // The kernel skips the grace period for a process of one thread, so
    // there the registration is two quick system calls, cheaper than the
    // thread that would hide it (a thread's start cost 150 us on a VM
    // whose page faults exit to the hypervisor).
    if (single_threaded()) {
      run();
    } else {
      std::thread(run).detach();
    }
  });
}

void AsymFence::wait_ready() {
  prepare();
  Detection& d = detection();
  std::unique_lock<std::mutex> g(d.mu);
  d.cv.wait(g, [&d] { return d.done; });
}

void AsymFence::heavy() {
  if (ready()) {
    syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
    return;
  }
#if defined(__SANITIZE_THREAD__)
  // TSan has no model of fences (gcc refuses atomic_thread_fence under it):
  // a seq_cst read-modify-write, a full barrier on x86 as the fence is.
  static std::atomic<uint32_t> line{0};
  line.fetch_add(0, std::memory_order_seq_cst);
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

}  // namespace lt::proto
