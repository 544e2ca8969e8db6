// LMR memory is raced by design, as RDMA memory is: a remote LT_write may
// land while the owner (or another peer) reads the same bytes, and the
// result is whatever the bytes were (no tearing guarantee beyond 8-byte
// atomics). ThreadSanitizer would report every such copy as a data race in
// the library; accesses inside a RacyAccess scope are hidden from it. Use it
// only around copies of LMR bytes, never around engine state.
#pragma once

#include <cstring>

#if defined(__SANITIZE_THREAD__)
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace lt {

class RacyAccess {
 public:
#if defined(__SANITIZE_THREAD__)
  RacyAccess() {
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  }
  ~RacyAccess() {
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  }
#else
  RacyAccess() {}  // user-provided: a scope object is not "unused"
#endif
  RacyAccess(const RacyAccess&) = delete;
  RacyAccess& operator=(const RacyAccess&) = delete;
};

/// memcpy/memmove/memset of LMR bytes (see above).
inline void lmr_copy(void* dst, const void* src, size_t n) {
  RacyAccess racy;
  std::memmove(dst, src, n);
}
inline void lmr_fill(void* dst, int value, size_t n) {
  RacyAccess racy;
  std::memset(dst, value, n);
}

}  // namespace lt
