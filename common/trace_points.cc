#include "common/trace_points.h"

#ifdef LTIER_TRACE_POINTS

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace lt::trace_points {
namespace {

struct Record {
  uint64_t ns;  // CLOCK_MONOTONIC
  uint32_t letter;
  uint32_t tid;
};
constexpr size_t kFileBytes = size_t{32} << 20;
constexpr uint32_t kRecords = kFileBytes / sizeof(Record);

Record* open_file() {
  const char* dir = std::getenv("LTIER_TRACE_DIR");
  if (dir == nullptr) return nullptr;
  char path[512];
  std::snprintf(path, sizeof(path), "%s/trace.%d", dir, static_cast<int>(getpid()));
  const int fd = ::open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  void* m = ::ftruncate(fd, kFileBytes) == 0
                ? ::mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  ::close(fd);
  return m == MAP_FAILED ? nullptr : static_cast<Record*>(m);
}

}  // namespace

void record(char letter) {
  static Record* const records = open_file();
  static std::atomic<uint32_t> next{0};
  if (records == nullptr) return;
  thread_local const uint32_t tid = static_cast<uint32_t>(::syscall(SYS_gettid));
  const uint32_t i = next.fetch_add(1, std::memory_order_relaxed);
  if (i >= kRecords) return;
  timespec t;
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  records[i] =
      Record{static_cast<uint64_t>(t.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(t.tv_nsec),
             static_cast<uint32_t>(static_cast<unsigned char>(letter)), tid};
}

}  // namespace lt::trace_points

#endif
