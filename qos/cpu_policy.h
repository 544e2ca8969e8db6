// How the kernel schedules a class's threads: a class may name a CPU policy
// (qos.classes[].cpu_policy), and a thread whose class names one runs under
// it. On a host with fewer cores than busy threads, the rate limits of the
// control law act only on what a class sends; a bulk class's copies still
// take the cores the latency class's threads wake up to run on, and that
// wait has no operation in flight for any RTT to show. Under SCHED_IDLE
// (idle) the kernel runs such a thread only on CPU time no normal thread
// wants, so a latency caller that wakes takes its core at once; SCHED_BATCH
// (batch) only stops the thread preempting others when it wakes.
//
// A thread keeps the policy it had before its first change (thread-local)
// and gets it back when it changes to a class that names none. Leaving
// SCHED_IDLE needs CAP_SYS_NICE or an RLIMIT_NICE that allows nice 0;
// without either the thread stays idle, and this is logged once.
//
// A thread running idle never polls the transports: it does not spin in
// its waits (Engine::wait_impl), and Engine::progress() on it only asks
// for a pass (unparking the progress thread). Polling holds the engine's
// progress token, and an idle thread preempted while it held the token
// would hold up every other thread of the engine until the CPU is free.
//
// Thread contract: acts on and reads the calling thread only.
#pragma once

#include "common/qos_config.h"
#include "common/spinlock.h"

namespace lt::qos {

/// Runs the calling thread under `p`; kUnset restores the policy it had
/// before its first change. A failed change is logged, and the thread
/// keeps the policy it has.
void set_thread_cpu_policy(QosCpuPolicy p);

/// Whether ltier put the calling thread under SCHED_IDLE (on every
/// progress pass: one load off the thread pointer). Only the thread it
/// changed: threads it starts inherit the policy, not this. The same flag
/// makes the SpinLocks this thread holds put their waiters to sleep.
inline bool thread_runs_idle() { return tl_may_stall; }

}  // namespace lt::qos
