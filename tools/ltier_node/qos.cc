// QoS commands: the class of this node's command thread, and the classes'
// live figures.
#include "node.h"

namespace ltier_node {

std::string cmd_class(lt_engine_t* e, Args& a) {
  std::string name = a.word();
  return ok_or_err(LT_set_class(e, name == "-" ? nullptr : name.c_str()));
}

std::string cmd_qos(lt_engine_t* e, Args&) {
  lt_class_stats_t cs[16];
  size_t n = 0;
  if (int rc = LT_class_stats(e, cs, 16, &n); rc != 0) return err(rc);
  std::string s = "ok";
  for (size_t i = 0; i < n && i < 16; ++i) {
    const lt_class_stats_t& c = cs[i];
    s += std::string(" ") + c.name + ":prio=" + std::to_string(c.priority) +
         ",ops=" + std::to_string(c.ops) + ",bytes=" + std::to_string(c.bytes) +
         ",in_flight=" + std::to_string(c.in_flight) + ",delayed=" + std::to_string(c.delayed) +
         ",throttles=" + std::to_string(c.throttles) + ",p50_ns=" + std::to_string(c.rtt_p50_ns) +
         ",p99_ns=" + std::to_string(c.rtt_p99_ns) +
         ",throttled_peers=" + std::to_string(c.throttled_peers);
  }
  return s;
}

std::string cmd_metrics(lt_engine_t* e, Args&) {
  char addr[128];
  if (int rc = LT_metrics_address(e, addr, sizeof(addr)); rc != 0) return err(rc);
  return std::string("ok ") + addr;
}

}  // namespace ltier_node
