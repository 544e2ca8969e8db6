// Logging. The level comes from LTIER_LOG (error, warn, info, debug, trace;
// off logs nothing; default warn) and is read once per process: logging is the
// one piece of process-wide state (a later node daemon hosts one Engine per
// process too).
// Log where an error is first named; above that, propagate the Status.
#pragma once

#include <cstdarg>

namespace lt::log {

enum class Level : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

Level level();
bool enabled(Level l);
[[gnu::format(printf, 2, 3)]] void emit(Level l, const char* fmt, ...);

}  // namespace lt::log

#define LT_LOG(lvl, ...)                                   \
  do {                                                     \
    if (::lt::log::enabled(::lt::log::Level::lvl))         \
      ::lt::log::emit(::lt::log::Level::lvl, __VA_ARGS__); \
  } while (0)
#define LT_ERROR(...) LT_LOG(kError, __VA_ARGS__)
#define LT_WARN(...) LT_LOG(kWarn, __VA_ARGS__)
#define LT_INFO(...) LT_LOG(kInfo, __VA_ARGS__)
#define LT_DEBUG(...) LT_LOG(kDebug, __VA_ARGS__)

#ifdef NDEBUG
#define LT_ASSERT(cond) ((void)0)
#else
#include <cassert>
#define LT_ASSERT(cond) assert(cond)
#endif
