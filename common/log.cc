#include "common/log.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace lt::log {
namespace {
Level parse_level() {
  const char* v = std::getenv("LTIER_LOG");
  if (v == nullptr) return Level::kWarn;
  // Below every level: nothing is logged (the fuzz targets drop peers by the thousand).
  if (strcasecmp(v, "off") == 0) return static_cast<Level>(-1);
  static constexpr const char* kNames[] = {"error", "warn", "info", "debug", "trace"};
  for (int i = 0; i < 5; ++i) {
    if (strcasecmp(v, kNames[i]) == 0) return static_cast<Level>(i);
  }
  return Level::kWarn;
}
}  // namespace

Level level() {
  static const Level kLevel = parse_level();
  return kLevel;
}

bool enabled(Level l) { return static_cast<int>(l) <= static_cast<int>(level()); }

void emit(Level l, const char* fmt, ...) {
  static constexpr const char* kTags[] = {"E", "W", "I", "D", "T"};
  char buf[1024];
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int n = snprintf(buf, sizeof(buf), "[ltier %s %ld.%06ld pid %d] ", kTags[static_cast<int>(l)],
                   static_cast<long>(ts.tv_sec), ts.tv_nsec / 1000, static_cast<int>(getpid()));
  va_list ap;
  va_start(ap, fmt);
  int m = vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : static_cast<size_t>(m));
  if (len > sizeof(buf) - 2) len = sizeof(buf) - 2;
  buf[len++] = '\n';
  // One write(2) keeps lines from concurrent threads and processes whole.
  ssize_t w = write(STDERR_FILENO, buf, len);
  (void)w;
}

}  // namespace lt::log
