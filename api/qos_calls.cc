// QoS calls: the calling thread's class, and the classes' live figures.
#include <cstdio>
#include <cstring>

#include "api/internal.h"
#include "ltier/lt.h"

int LT_set_class(lt_engine_t* e, const char* name) {
  if (e == nullptr) return -LT_ERR_INVAL;
  lt::Status s = e->core.scheduler().set_thread_class(name != nullptr ? name : "");
  return lt::api::rc(s);
}

int LT_class_stats(lt_engine_t* e, lt_class_stats_t* out, size_t cap, size_t* n) {
  if (e == nullptr || n == nullptr || (out == nullptr && cap != 0)) return -LT_ERR_INVAL;
  const lt::qos::Scheduler& sched = e->core.scheduler();
  if (!sched.enabled()) return -LT_ERR_UNSUPPORTED;
  const auto all = sched.class_stats();
  *n = all.size();
  for (size_t i = 0; i < all.size() && i < cap; ++i) {
    const auto& c = all[i];
    lt_class_stats_t& o = out[i];
    std::memset(&o, 0, sizeof(o));
    std::snprintf(o.name, sizeof(o.name), "%s", c.name.c_str());
    o.priority = c.priority;
    o.ops = c.ops;
    o.bytes = c.bytes;
    o.in_flight = c.in_flight;
    o.waiting = c.waiting;
    o.delayed = c.delayed;
    o.throttles = c.throttles;
    o.rtt_p50_ns = c.rtt_p50_ns;
    o.rtt_p99_ns = c.rtt_p99_ns;
    o.target_rtt_ns = c.target_rtt_ns;
    o.rate = c.rate;
    o.throttled_peers = c.throttled_peers;
  }
  return 0;
}
