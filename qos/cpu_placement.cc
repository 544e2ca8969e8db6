#include "qos/cpu_placement.h"

#include <cerrno>
#include <cstring>

#include "common/log.h"

namespace lt::qos {

namespace {

struct Saved {
  bool have = false;
  cpu_set_t cpus;
};
thread_local Saved saved;

bool move_to(const cpu_set_t& s) {
  if (sched_setaffinity(0, sizeof(s), &s) == 0) return true;
  LT_WARN("qos: cannot move this thread to CPUs %s: %s", cpu_list(s).c_str(), strerror(errno));
  return false;
}

}  // namespace

Status CpuMask::within(const std::vector<uint32_t>& wanted, const cpu_set_t& allowed, CpuMask* out,
                       std::string* error) {
  out->set = !wanted.empty();
  CPU_ZERO(&out->cpus);
  if (wanted.empty()) return Status::ok();
  cpu_set_t all;
  CPU_ZERO(&all);
  for (uint32_t c : wanted) {
    if (c >= CPU_SETSIZE) continue;
    CPU_SET(c, &all);
    if (CPU_ISSET(c, &allowed)) CPU_SET(c, &out->cpus);
  }
  if (CPU_COUNT(&out->cpus) != 0) return Status::ok();
  if (error) {
    *error = "cpus " + cpu_list(all) + ": this process may run on none of them (it may run on " +
             cpu_list(allowed) + ")";
  }
  return Code::kInvalidArg;
}

void place_thread(const CpuMask& m) {
  if (m.set) {
    if (!saved.have) {
      if (sched_getaffinity(0, sizeof(saved.cpus), &saved.cpus) != 0) return;
      saved.have = true;
    }
    move_to(m.cpus);
  } else if (saved.have) {
    if (move_to(saved.cpus)) saved.have = false;
  }
}

std::string cpu_list(const cpu_set_t& s) {
  std::string out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &s)) continue;
    int last = c;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &s)) ++last;
    if (!out.empty()) out += ',';
    out += std::to_string(c);
    if (last > c) out += "-" + std::to_string(last);
    c = last;
  }
  return out.empty() ? "none" : out;
}

}  // namespace lt::qos
