#include "common/qos_config.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <set>

namespace lt {

namespace {

std::string at_line(int line) { return line > 0 ? " (line " + std::to_string(line) + ")" : ""; }

bool good_name(const std::string& s) {
  if (s.empty() || s.size() > 64) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

// A number with an optional fraction, then a unit from `units` (case as
// written): the value times the unit's factor, whole, at most 2^63.
struct Unit {
  const char* name;
  double factor;
};
template <size_t N>
bool parse_with_units(const std::string& text, const Unit (&units)[N], bool bare_ok,
                      uint64_t* out) {
  std::string s;
  for (char c : text) {
    if (c != ' ') s.push_back(c);
  }
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0 || s.find('.') != s.rfind('.')) return false;
  const std::string num = s.substr(0, i), unit = s.substr(i);
  char* end = nullptr;
  double v = std::strtod(num.c_str(), &end);
  if (end == nullptr || *end != 0 || !std::isfinite(v)) return false;
  double factor = 0;
  if (unit.empty()) {
    if (!bare_ok) return false;
    factor = 1;
  }
  for (const Unit& u : units) {
    if (unit == u.name) factor = u.factor;
  }
  if (factor == 0) return false;
  const double r = v * factor;
  if (r >= 9.2e18 || r != std::floor(r)) return false;  // a fraction of a byte or a ns
  *out = static_cast<uint64_t>(r);
  return true;
}

}  // namespace

const QosClass* QosPolicy::find_class(const std::string& name) const {
  for (const auto& c : classes) {
    if (c.name == name) return &c;
  }
  return nullptr;
}

const QosTenant* QosPolicy::find_tenant(const std::string& name) const {
  for (const auto& t : tenants) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Status validate_qos_policy(const QosPolicy& p, std::string* error) {
  auto fail = [&](const std::string& what) {
    if (error) *error = what;
    return Status(Code::kInvalidArg);
  };
  std::set<std::string> seen;
  for (const auto& c : p.classes) {
    if (!good_name(c.name)) {
      return fail("qos.classes" + at_line(c.line) + ": class name '" + c.name +
                  "' must be 1-64 letters, digits, '_', '-' or '.'");
    }
    if (!seen.insert(c.name).second) {
      return fail("qos.classes" + at_line(c.line) + ": class '" + c.name + "' is defined twice");
    }
  }
  if (!p.tenants.empty() && p.classes.empty()) {
    return fail("qos.tenants" + at_line(p.tenants.front().line) +
                ": tenants need classes (qos.classes is empty)");
  }
  seen.clear();
  for (const auto& t : p.tenants) {
    if (!good_name(t.name)) {
      return fail("qos.tenants" + at_line(t.line) + ": tenant name '" + t.name +
                  "' must be 1-64 letters, digits, '_', '-' or '.'");
    }
    if (!seen.insert(t.name).second) {
      return fail("qos.tenants" + at_line(t.line) + ": tenant '" + t.name + "' is defined twice");
    }
    for (const auto& c : t.classes) {
      if (p.find_class(c) == nullptr) {
        return fail("qos.tenants" + at_line(t.line) + ": tenant '" + t.name + "' names class '" +
                    c + "', which qos.classes does not define");
      }
    }
    bool allowed = false;
    for (const auto& c : t.classes) allowed = allowed || c == t.default_class;
    if (!allowed) {
      return fail("qos.tenants" + at_line(t.line) + ": tenant '" + t.name + "' default_class '" +
                  t.default_class + "' is not one of its classes");
    }
  }
  return Status::ok();
}

Status check_qos_tenant(const QosPolicy& p, const std::string& tenant, std::string* error) {
  if (p.tenants.empty() || p.find_tenant(tenant) != nullptr) return Status::ok();
  if (error) {
    std::string names;
    for (const auto& t : p.tenants) names += (names.empty() ? "" : ", ") + t.name;
    *error = "qos.tenant (LTIER_TENANT) '" + tenant + "' is not a configured tenant (" + names +
             "; qos.tenants" + at_line(p.tenants.front().line) + ")";
  }
  return Code::kInvalidArg;
}

bool parse_size(const std::string& s, uint64_t* out) {
  static const Unit units[] = {{"k", 1e3},
                               {"K", 1e3},
                               {"M", 1e6},
                               {"G", 1e9},
                               {"KiB", 1024.0},
                               {"MiB", 1048576.0},
                               {"GiB", 1073741824.0},
                               {"KB", 1e3},
                               {"MB", 1e6},
                               {"GB", 1e9},
                               {"TiB", 1099511627776.0}};
  return parse_with_units(s, units, true, out);
}

bool parse_cpu_list(const std::string& text, std::vector<uint32_t>* out) {
  std::set<uint32_t> cpus;
  // One CPU number, digits only, below kMaxCpu.
  auto number = [](const std::string& t, uint32_t* n) {
    if (t.empty() || t.size() > 4 || t.find_first_not_of("0123456789") != std::string::npos) {
      return false;
    }
    *n = static_cast<uint32_t>(std::strtoul(t.c_str(), nullptr, 10));
    return *n < kMaxCpu;
  };
  size_t at = 0;
  for (;;) {  // items "N" or "N-M", split by commas, blanks around them allowed
    const size_t comma = std::min(text.find(',', at), text.size());
    std::string item = text.substr(at, comma - at);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    const size_t dash = item.find('-');
    uint32_t lo = 0, hi = 0;
    if (!number(item.substr(0, dash), &lo)) return false;
    hi = lo;
    if (dash != std::string::npos && (!number(item.substr(dash + 1), &hi) || hi < lo)) return false;
    for (uint32_t c = lo; c <= hi; ++c) cpus.insert(c);
    if (comma == text.size()) break;
    at = comma + 1;
  }
  out->assign(cpus.begin(), cpus.end());
  return true;
}

bool parse_duration_ns(const std::string& s, uint64_t* out) {
  static const Unit units[] = {{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
  return parse_with_units(s, units, false, out);
}

}  // namespace lt
