#include "common/qos_yaml.h"

#include <cmath>
#include <cstdlib>
#include <utility>

namespace lt {

namespace {

int line_of(const YAML::Node& n) { return n.Mark().line >= 0 ? n.Mark().line + 1 : 0; }

// "qos.classes[1].priority (line 7)"
std::string where(const std::string& path, const YAML::Node& n) {
  int l = line_of(n);
  return l > 0 ? path + " (line " + std::to_string(l) + ")" : path;
}

Status fail(std::string* error, const std::string& what) {
  if (error) *error = what;
  return Code::kInvalidArg;
}

bool scalar(const YAML::Node& n, std::string* out) {
  if (!n.IsScalar()) return false;
  *out = n.Scalar();
  return true;
}

bool whole_number(const std::string& s, uint64_t* out) {
  if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *out = std::strtoull(s.c_str(), nullptr, 10);
  return true;
}

// Reads one field of an entry; `set` parses the scalar and says whether it was good.
template <typename Set>
Status field(const std::string& key, const YAML::Node& v, const char* expect, std::string* error,
             Set&& set) {
  std::string s;
  if (!scalar(v, &s) || !set(s)) {
    return fail(error,
                where(key, v) + ": expected " + expect + (s.empty() ? "" : ", got '" + s + "'"));
  }
  return Status::ok();
}

Status read_u32(const std::string& key, const YAML::Node& v, uint32_t* out, std::string* error) {
  return field(key, v, "a whole number", error, [&](const std::string& s) {
    uint64_t n = 0;
    if (!whole_number(s, &n) || n > UINT32_MAX) return false;
    *out = static_cast<uint32_t>(n);
    return true;
  });
}

Status read_size(const std::string& key, const YAML::Node& v, uint64_t* out, std::string* error) {
  return field(key, v, "a size such as 4096, 64KiB or 2GiB", error,
               [&](const std::string& s) { return parse_size(s, out); });
}

// A non-empty string: a name, a class name.
Status read_name(const std::string& key, const YAML::Node& v, const char* expect, std::string* out,
                 std::string* error) {
  return field(key, v, expect, error, [&](const std::string& s) {
    *out = s;
    return !s.empty();
  });
}

Status read_class(const YAML::Node& e, const std::string& path, QosClass* c, std::string* error) {
  if (!e.IsMap()) return fail(error, where(path, e) + ": expected a map (name, priority, ...)");
  c->line = line_of(e);
  bool has_priority = false;
  for (const auto& kv : e) {
    const std::string k = kv.first.Scalar();
    const std::string key = path + "." + k;
    const YAML::Node& v = kv.second;
    if (k == "name") {
      LT_RETURN_IF_ERROR(read_name(key, v, "a name", &c->name, error));
    } else if (k == "priority") {
      LT_RETURN_IF_ERROR(read_u32(key, v, &c->priority, error));
      has_priority = true;
    } else if (k == "weight") {
      LT_RETURN_IF_ERROR(read_u32(key, v, &c->weight, error));
      if (c->weight == 0) return fail(error, where(key, v) + ": must be at least 1");
    } else if (k == "max_ops_per_s") {
      LT_RETURN_IF_ERROR(read_size(key, v, &c->max_ops_per_s, error));
    } else if (k == "max_bytes_per_s") {
      LT_RETURN_IF_ERROR(read_size(key, v, &c->max_bytes_per_s, error));
    } else if (k == "target_rtt") {
      LT_RETURN_IF_ERROR(field(
          key, v, "a duration such as 200us or 1ms, or auto", error, [&](const std::string& s) {
            if (s == "auto") {
              c->target_rtt_ns = 0;
              return true;
            }
            return parse_duration_ns(s, &c->target_rtt_ns) && c->target_rtt_ns > 0;
          }));
    } else if (k == "floor_percent") {
      LT_RETURN_IF_ERROR(read_u32(key, v, &c->floor_percent, error));
      if (c->floor_percent == 0 || c->floor_percent > 100) {
        return fail(error, where(key, v) + ": must be 1 to 100");
      }
    } else if (k == "cpus") {
      LT_RETURN_IF_ERROR(field(key, v, "a CPU list such as 0-3,8", error,
                               [&](const std::string& s) { return parse_cpu_list(s, &c->cpus); }));
    } else if (k == "cpu_policy") {
      LT_RETURN_IF_ERROR(field(key, v, "normal, batch or idle", error, [&](const std::string& s) {
        static const std::pair<const char*, QosCpuPolicy> kNames[] = {
            {"normal", QosCpuPolicy::kNormal},
            {"batch", QosCpuPolicy::kBatch},
            {"idle", QosCpuPolicy::kIdle}};
        for (const auto& [name, policy] : kNames) {
          if (s == name) {
            c->cpu_policy = policy;
            return true;
          }
        }
        return false;
      }));
    } else {
      return fail(error, where(key, kv.first) +
                             ": unknown class key (name, priority, weight, max_ops_per_s, "
                             "max_bytes_per_s, target_rtt, floor_percent, cpus, cpu_policy)");
    }
  }
  if (c->name.empty()) return fail(error, where(path, e) + ": a class needs a name");
  if (!has_priority)
    return fail(error, where(path, e) + ": class '" + c->name + "' needs a priority");
  return Status::ok();
}

Status read_tenant(const YAML::Node& e, const std::string& path, QosTenant* t, std::string* error) {
  if (!e.IsMap()) return fail(error, where(path, e) + ": expected a map (name, classes, ...)");
  t->line = line_of(e);
  for (const auto& kv : e) {
    const std::string k = kv.first.Scalar();
    const std::string key = path + "." + k;
    const YAML::Node& v = kv.second;
    if (k == "name") {
      LT_RETURN_IF_ERROR(read_name(key, v, "a name", &t->name, error));
    } else if (k == "classes") {
      if (!v.IsSequence() || v.size() == 0) {
        return fail(error,
                    where(key, v) + ": expected a list of class names, such as [latency, bulk]");
      }
      for (size_t i = 0; i < v.size(); ++i) {
        std::string s;
        if (!scalar(v[i], &s) || s.empty()) {
          return fail(error,
                      where(key + "[" + std::to_string(i) + "]", v[i]) + ": expected a class name");
        }
        t->classes.push_back(s);
      }
    } else if (k == "default_class") {
      LT_RETURN_IF_ERROR(read_name(key, v, "a class name", &t->default_class, error));
    } else if (k == "max_ops_in_flight") {
      LT_RETURN_IF_ERROR(read_u32(key, v, &t->max_ops_in_flight, error));
    } else if (k == "max_lmr_bytes") {
      LT_RETURN_IF_ERROR(read_size(key, v, &t->max_lmr_bytes, error));
    } else if (k == "max_lmrs") {
      LT_RETURN_IF_ERROR(read_u32(key, v, &t->max_lmrs, error));
    } else if (k == "max_msg_credits") {
      LT_RETURN_IF_ERROR(read_u32(key, v, &t->max_msg_credits, error));
    } else if (k == "max_rpc_credits") {
      LT_RETURN_IF_ERROR(read_u32(key, v, &t->max_rpc_credits, error));
    } else {
      return fail(error, where(key, kv.first) +
                             ": unknown tenant key (name, classes, default_class, "
                             "max_ops_in_flight, max_lmr_bytes, max_lmrs, max_msg_credits, "
                             "max_rpc_credits)");
    }
  }
  if (t->name.empty()) return fail(error, where(path, e) + ": a tenant needs a name");
  if (t->classes.empty()) {
    return fail(error, where(path, e) + ": tenant '" + t->name + "' needs classes");
  }
  if (t->default_class.empty()) t->default_class = t->classes.front();
  return Status::ok();
}

}  // namespace

bool is_qos_list(const std::string& path) { return path == "qos.classes" || path == "qos.tenants"; }

Status parse_qos_list(const YAML::Node& node, const std::string& path, QosPolicy* p,
                      std::string* error) {
  if (!node.IsSequence()) return fail(error, where(path, node) + ": expected a list");
  const bool classes = path == "qos.classes";
  if (classes) {
    p->classes.clear();
  } else {
    p->tenants.clear();
  }
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    if (classes) {
      QosClass c;
      LT_RETURN_IF_ERROR(read_class(node[i], at, &c, error));
      p->classes.push_back(std::move(c));
    } else {
      QosTenant t;
      LT_RETURN_IF_ERROR(read_tenant(node[i], at, &t, error));
      p->tenants.push_back(std::move(t));
    }
  }
  return Status::ok();
}

}  // namespace lt
