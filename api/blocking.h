// How the C API's blocking calls are built over the engine's async ones:
// deadlines, a call and its wait, the chunked pipeline of long transfers, and
// the retry of calls refused for want of credits. Private to api/lt.cc.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>

#include "api/internal.h"

namespace lt::api {

inline lt::Deadline deadline(lt_engine_t* e) { return e->core.default_deadline(); }

// When a caller's timeout starts counting. At the wait's first clock read
// (Deadline::lazy_us) an op that completes within its first polls reads no
// clock at all; lock and barrier always cost a round trip to the manager, so
// there is no read to spare and they count from the call.
enum class TimeoutStart { kFirstRead, kNow };

// The Deadline of a caller's timeout_us; negative means engine.op_timeout_ms.
inline lt::Deadline user_deadline(lt_engine_t* e, int64_t timeout_us,
                                  TimeoutStart start = TimeoutStart::kFirstRead) {
  if (timeout_us < 0) return deadline(e);
  auto us = static_cast<uint64_t>(timeout_us);
  return start == TimeoutStart::kFirstRead ? lt::Deadline::lazy_us(us) : lt::Deadline::after_us(us);
}

template <typename F>
int blocking(lt_engine_t* e, F&& submit) {
  auto r = submit();
  if (!r.is_ok()) return rc(r.status());
  return rc(e->core.wait_or_cancel(r.value(), deadline(e)));
}

// A blocking read/write/memcpy longer than one request carries runs as a
// pipeline of chunks, kWindow in flight. Each chunk has the op timeout; on the
// first error no more are sent, the rest are waited for (or cancelled), and
// the first error is returned.
template <typename Submit>
int chunked(lt_engine_t* e, uint64_t len, Submit&& submit) {
  constexpr uint64_t kChunk = 16ull << 20;
  constexpr int kWindow = 4;
  // Smaller pieces while a higher QoS class is active (each passes the gate).
  uint64_t chunk =
      e->core.scheduler().chunk_bytes(std::min<uint64_t>(kChunk, e->core.max_op_bytes()));
  if (len <= chunk) return blocking(e, [&] { return submit(0, len); });
  lt::proto::ReqId inflight[kWindow];
  int head = 0, count = 0, first = 0;
  uint64_t off = 0;
  while (count > 0 || (first == 0 && off < len)) {
    if (first == 0 && off < len && count < kWindow) {
      uint64_t n = std::min(chunk, len - off);
      auto r = submit(off, n);
      if (!r.is_ok()) {
        first = rc(r.status());
      } else {
        inflight[(head + count) % kWindow] = r.value();
        ++count;
        off += n;
      }
      continue;
    }
    int s = rc(e->core.wait_or_cancel(inflight[head], deadline(e)));
    head = (head + 1) % kWindow;
    --count;
    if (s != 0 && first == 0) first = s;
  }
  return first;
}

// One try of a call that needs credits: `rc` is the call's result when it
// could submit; otherwise `refused` says why not.
struct Try {
  lt::Status refused;
  int rc = 0;
};

// Tries with `attempt` (returning a Try) until it stops being refused for
// want of credits (a receiver has not consumed enough messages, or too many
// RPC replies are outstanding) or `d` expires.
//
// Out of credits, the call makes a CreditWatch, tries again (credits that
// came back before the watch are seen), then waits for the epoch to move
// (spin, then sleep). Returned credits move the epoch only while a watch
// exists; the epoch is read before each try, so a return too late for the
// try moves it and wait_credits() does not sleep through it.
template <typename Attempt>
int retry_on_credits(lt_engine_t* e, const lt::Deadline& d, Attempt&& attempt) {
  std::optional<lt::proto::Engine::CreditWatch> watch;
  for (;;) {
    uint32_t epoch = e->core.credit_epoch();
    Try t = attempt();
    if (t.refused.is_ok()) return t.rc;
    if (t.refused.code() != lt::Code::kNoResource || d.expired()) return rc(t.refused);
    if (!watch) {
      watch.emplace(e->core);
      continue;
    }
    if (!e->core.wait_credits(epoch, d).is_ok()) return rc(t.refused);
  }
}

}  // namespace lt::api
