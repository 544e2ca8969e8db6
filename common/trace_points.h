// Timestamped trace points for latency breakdowns across processes (a
// developer's tool, like UCX's UCS_PROFILE): LT_TRACE_POINT('p') records
// the time (the time-stamp counter on x86, else the monotonic clock in ns),
// the point's letter and the thread. Built only with -DLTIER_TRACE_POINTS=ON;
// otherwise every point compiles to nothing.
//
// At run time LTIER_TRACE_DIR names a directory; each process then maps
// DIR/trace.<pid> (32 MiB, 16-byte records, zeros after the last) and
// writes into it without locks or system calls, so a killed process keeps
// what it wrote. The first record, letter '#', holds the ticks per second.
// bench/rpc_timeline.py and bench/msg_timeline.py merge the files of a run.
//
// The points and their letters:
//   B, E  LT_RPC entered and returning (api/lt.cc)
//   p, q  an rc post begins and returns (ibv_post_send: on Soft-RoCE the
//         whole send, up to the peer's acknowledgement, runs inside it)
//   r, e  an rc receive poll that found completions, or none
//   s, a  the progress thread goes to sleep on the transports, and wakes
//   k, K  the progress thread parks while callers poll, and unparks
// and along a message (bench/msg_timeline.py):
//   M, Z  LT_send entered, LT_recv returning (api/lt.cc)
//   n     send_impl: the peer's endpoint found and the message credit taken
//   t, u  an shm post entered, and returning (its bell rung, if asked)
//   w     shm: the record written and stamped (published to the peer)
//   d     shm: a poll found a message record
//   v     proto: the message reached arrive() (port matching)
//   f     proto: the eager message copied into its receive, which is done
//   g     a waiter's spin ended (wait_impl), its request done or not
#pragma once

#ifdef LTIER_TRACE_POINTS

#include <cstdint>

namespace lt::trace_points {
/// Records point `letter` now (when LTIER_TRACE_DIR is set).
void record(char letter);
}  // namespace lt::trace_points

#define LT_TRACE_POINT(letter) ::lt::trace_points::record(letter)

#else

#define LT_TRACE_POINT(letter) ((void)0)

#endif
