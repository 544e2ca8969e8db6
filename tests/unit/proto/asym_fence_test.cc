// AsymFence's registration: a process of one thread registers at once,
// without a thread of its own; a process with more threads registers in the
// background and ends in the same mode. Each case runs in a fresh process (a
// death test re-executed in the threadsafe style), since the registration
// happens once per process.
#include "proto/asym_fence.h"

#include <gtest/gtest.h>
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace lt::proto {
namespace {

// The process's thread count, from /proc/self/status.
int threads_now() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  }
  return -1;
}

// Whether the registration can succeed here at all (the kernel's answer;
// ThreadSanitizer builds never use the barrier).
bool membarrier_usable() {
#if defined(__SANITIZE_THREAD__)
  return false;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
  return false;
#endif
#endif
  long cmds = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  return cmds >= 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0;
}

// Exit codes of the child: 0 as expected, else which check failed.
[[noreturn]] void single_threaded_child() {
  if (threads_now() != 1) _exit(2);  // the premise
  AsymFence::prepare();
  if (threads_now() != 1) _exit(3);                         // no thread was started
  if (AsymFence::ready() != membarrier_usable()) _exit(4);  // already in its final mode
  AsymFence::wait_ready();                                  // returns at once
  _exit(0);
}

[[noreturn]] void multi_threaded_child() {
  std::atomic<bool> stop{false};
  std::thread other([&stop] {
    while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  AsymFence::prepare();
  AsymFence::wait_ready();
  const bool ok = AsymFence::ready() == membarrier_usable();
  AsymFence::heavy();  // usable either way
  stop.store(true);
  other.join();
  _exit(ok ? 0 : 5);
}

class AsymFenceTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(AsymFenceTest, OneThreadRegistersAtOnceWithoutAThread) {
  EXPECT_EXIT(single_threaded_child(), ::testing::ExitedWithCode(0), "");
}

TEST_F(AsymFenceTest, ManyThreadsRegisterInTheBackground) {
  EXPECT_EXIT(multi_threaded_child(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace lt::proto
