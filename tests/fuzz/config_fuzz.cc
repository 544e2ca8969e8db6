// common/config: load_config_text (YAML), apply_env's integer parsing and
// parse_host_port.
//
// Input: YAML text. Broken YAML, unknown keys and wrong types must give
// kInvalidArg with a non-empty message and leave the Config untouched; an
// accepted text must round-trip: the values it set, written back as YAML by
// this file, load again to the same values. The same bytes (up to a NUL) are
// also an LTIER_* value for a string, a u32 and a u64 key, checked against a
// decimal parser written out here, and a "host:port" for parse_host_port.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/config.h"
#include "tests/fuzz/fuzz_util.h"

namespace lt {
namespace {

std::vector<std::string> values(Config& c) {
  std::vector<std::string> v;
  for (const auto& k : config_keys(c)) v.push_back(config_value(k));
  return v;
}

// A YAML double-quoted scalar for printable ASCII; false for anything else
// (YAML would read other bytes back as different text).
bool quote(const std::string& s, std::string* out) {
  *out = "\"";
  for (char ch : s) {
    if (ch < 0x20 || ch > 0x7e) return false;
    if (ch == '"' || ch == '\\') out->push_back('\\');
    out->push_back(ch);
  }
  out->push_back('"');
  return true;
}

void check_round_trip(Config& c) {
  // Nested sections, as a config file has them ("tcp:\n  listen: ...").
  std::string yaml, section;
  for (const auto& k : config_keys(c)) {
    std::string v = config_value(k);
    std::string quoted;
    if (k.type == KeyType::kString) {
      if (!quote(v, &quoted)) return;
      v = quoted;
    }
    std::string path = k.path;
    size_t dot = path.find('.');
    std::string sec = dot == std::string::npos ? "" : path.substr(0, dot);
    if (sec != section && !sec.empty()) yaml += sec + ":\n";
    section = sec;
    yaml += (sec.empty() ? "" : "  ") + path.substr(dot + 1) + ": " + v + "\n";
  }
  Config again;
  std::string error;
  Status s = load_config_text(yaml, &again, &error);
  FUZZ_CHECK(s.is_ok(), "own output refused: " + error + "\n" + yaml);
  FUZZ_CHECK(values(again) == values(c), "round trip changed a value:\n" + yaml);
}

// Decimal digits only, at most 20 of them, within the key's width.
bool decimal(const std::string& v, uint64_t max, uint64_t* out) {
  if (v.empty() || v.size() > 20) return false;
  uint64_t n = 0;
  for (char ch : v) {
    if (ch < '0' || ch > '9') return false;
    uint64_t d = static_cast<uint64_t>(ch - '0');
    if (n > (UINT64_MAX - d) / 10) return false;
    n = n * 10 + d;
  }
  if (n > max) return false;
  *out = n;
  return true;
}

void check_env(const std::string& v) {
  struct Case {
    const char* env;
    int which;  // 0: tcp.listen (string), 1: tcp.max_msg_bytes (u32), 2: engine.max_lmr_bytes
  };
  for (Case k : {Case{"LTIER_TCP_LISTEN", 0}, Case{"LTIER_TCP_MAX_MSG_BYTES", 1},
                 Case{"LTIER_MAX_LMR_BYTES", 2}}) {
    setenv(k.env, v.c_str(), 1);
    Config c;
    const std::vector<std::string> before = values(c);
    std::string error;
    Status s = apply_env(&c, &error);
    unsetenv(k.env);
    uint64_t n = 0;
    bool want = k.which == 0 || decimal(v, k.which == 1 ? UINT32_MAX : UINT64_MAX, &n);
    FUZZ_CHECK(s.is_ok() == want, std::string(k.env) + "='" + v + "': " + s.name());
    if (!s.is_ok()) {
      FUZZ_CHECK(s.code() == Code::kInvalidArg && !error.empty(), "no message for a bad value");
      FUZZ_CHECK(values(c) == before, "a refused value changed the config");
      continue;
    }
    if (k.which == 0) FUZZ_CHECK(c.tcp.listen == v, "string value");
    if (k.which == 1) FUZZ_CHECK(c.tcp.max_msg_bytes == n, "u32 value");
    if (k.which == 2) FUZZ_CHECK(c.engine.max_lmr_bytes == n, "u64 value");
  }
}

void check_host_port(const std::string& v) {
  std::string host = "unset";
  uint16_t port = 7;
  Status s = parse_host_port(v, &host, &port);
  size_t colon = v.rfind(':');
  uint64_t n = 0;
  bool want = colon != std::string::npos && colon != 0 && v.size() - colon - 1 <= 5 &&
              decimal(v.substr(colon + 1), 65535, &n);
  FUZZ_CHECK(s.is_ok() == want, "'" + v + "': " + s.name());
  if (!s.is_ok()) {
    FUZZ_CHECK(host == "unset" && port == 7, "output set on failure");
    return;
  }
  FUZZ_CHECK(host == v.substr(0, colon) && port == n, "host:port parts");
}

}  // namespace
}  // namespace lt

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lt;
  std::string text(reinterpret_cast<const char*>(data), size);
  Config c;
  c.tcp.listen = "sentinel:1";  // a value that is not a default: untouched on failure
  const std::vector<std::string> before = values(c);
  std::string error;
  Status s = load_config_text(text, &c, &error);
  if (s.is_ok()) {
    check_round_trip(c);
  } else {
    FUZZ_CHECK(s.code() == Code::kInvalidArg, s.name());
    FUZZ_CHECK(!error.empty(), "a refused config without a message");
    FUZZ_CHECK(values(c) == before, "a refused config changed the output");
  }
  std::string value = text.substr(0, text.find('\0'));
  if (value.size() <= 64) {
    check_env(value);
    check_host_port(value);
  }
  return 0;
}
