// Where a class's threads run: a class may name CPUs (qos.classes[].cpus),
// and a thread whose class names them runs on them. On a host with few
// cores the CPUs are what the classes share most, and RTT feedback cannot
// see that part: a latency caller waiting for a core that a bulk writer
// holds has no operation in flight, so nothing the control law measures
// moves. Giving the classes cores of their own (as Shenango and Caladan
// give latency-critical applications theirs) removes that wait.
//
// A thread keeps the mask it had before its first move (thread-local), and
// gets it back when it changes to a class that names no CPUs.
//
// A thread stays where its class put it after LT_leave: ltier does not
// know what the application wants of it then.
//
// Thread contract: CpuMask is a value; place_thread() acts on the calling
// thread only.
#pragma once

#include <sched.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace lt::qos {

struct CpuMask {
  bool set = false;  // false: the class names no CPUs
  cpu_set_t cpus;

  /// `wanted` (a class's cpus) within `allowed` (where the process may run).
  /// kInvalidArg with *error listing both when none of them is allowed.
  static Status within(const std::vector<uint32_t>& wanted, const cpu_set_t& allowed, CpuMask* out,
                       std::string* error);
};

/// The calling thread's CPUs: `m`'s when it names some, else the ones the
/// thread had before it was first placed. A failed move is logged, and the
/// thread stays where it was.
void place_thread(const CpuMask& m);

/// "0-1,4" for a mask (for messages).
std::string cpu_list(const cpu_set_t& s);

}  // namespace lt::qos
