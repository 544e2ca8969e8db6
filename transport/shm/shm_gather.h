// Gather: the bytes of a message as the shm producer copies them into its
// ring, from a work request's sges or from a backlog copy of them.
#pragma once

#include <algorithm>
#include <cstddef>

#include "common/small_copy.h"
#include "transport/transport.h"

namespace lt::transport::shm {

// Part of a message: sges (or a backlog copy) seen as one byte string whose
// first byte is message offset `base`.
struct Gather {
  const std::byte* p[kMaxSge] = {};
  size_t n[kMaxSge] = {};
  int k = 0;
  size_t base = 0;

  void copy(std::byte* dst, size_t off, size_t len) const {
    off -= base;
    for (int i = 0; i < k && len > 0; ++i) {
      if (off >= n[i]) {
        off -= n[i];
        continue;
      }
      size_t m = std::min(len, n[i] - off);
      copy_small(dst, p[i] + off, m);
      dst += m;
      len -= m;
      off = 0;
    }
  }
};

inline Gather gather_of(const WorkRequest& wr) {
  Gather g;
  for (int i = 0; i < wr.num_sge; ++i) {
    if (wr.sge[i].len == 0) continue;
    g.p[g.k] = wr.sge[i].addr;
    g.n[g.k] = wr.sge[i].len;
    ++g.k;
  }
  return g;
}

}  // namespace lt::transport::shm
