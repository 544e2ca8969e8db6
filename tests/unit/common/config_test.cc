#include "common/config.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <set>
#include <string>

namespace lt {
namespace {

// Sets an environment variable for one test and restores the old value, so
// tests stay independent when run in one process.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

TEST(ConfigTest, Defaults) {
  Config c;
  EXPECT_EQ(c.transports, "shm,rc,ud,tcp");
  EXPECT_EQ(c.cluster.manager, "127.0.0.1:7700");
  EXPECT_EQ(c.cluster.join_timeout_ms, 5000u);
  EXPECT_TRUE(c.cluster.node_name.empty());
  EXPECT_EQ(c.tcp.listen, "127.0.0.1:0");
  EXPECT_TRUE(c.tcp.advertise.empty());
  EXPECT_EQ(c.tcp.connect_timeout_ms, 2000u);
  EXPECT_EQ(c.tcp.max_msg_bytes, 64u << 20);
  EXPECT_EQ(c.engine.spin_us, 50u);
  EXPECT_EQ(c.engine.op_timeout_ms, 10000u);
  EXPECT_EQ(c.engine.max_lmr_bytes, 1ull << 34);
  EXPECT_EQ(c.qos.tenant, "default");
  EXPECT_EQ(c.qos.max_outstanding_ops, 4096u);
}

TEST(ConfigTest, EmptyTextKeepsDefaults) {
  Config c;
  std::string err;
  ASSERT_TRUE(load_config_text("", &c, &err).is_ok()) << err;
  EXPECT_EQ(c.cluster.join_timeout_ms, 5000u);
  ASSERT_TRUE(load_config_text("# only a comment\n", &c, &err).is_ok()) << err;
  EXPECT_EQ(c.tcp.listen, "127.0.0.1:0");
}

TEST(ConfigTest, YamlOverridesDefaults) {
  Config c;
  std::string err;
  const char* yaml =
      "transports: tcp\n"
      "cluster:\n"
      "  manager: 10.0.0.1:9000\n"
      "  join_timeout_ms: 50\n"
      "tcp: {listen: '0.0.0.0:7000', max_msg_bytes: 4096}\n"
      "engine:\n"
      "  max_lmr_bytes: 17179869185\n"
      "qos:\n"
      "  tenant: blue\n";
  ASSERT_TRUE(load_config_text(yaml, &c, &err).is_ok()) << err;
  EXPECT_EQ(c.cluster.manager, "10.0.0.1:9000");
  EXPECT_EQ(c.cluster.join_timeout_ms, 50u);
  EXPECT_EQ(c.tcp.listen, "0.0.0.0:7000");
  EXPECT_EQ(c.tcp.max_msg_bytes, 4096u);
  EXPECT_EQ(c.engine.max_lmr_bytes, 17179869185ull);  // above u32
  EXPECT_EQ(c.qos.tenant, "blue");
  // Keys not named keep their defaults.
  EXPECT_EQ(c.tcp.connect_timeout_ms, 2000u);
  EXPECT_EQ(c.engine.spin_us, 50u);
}

TEST(ConfigTest, U32Limits) {
  Config c;
  std::string err;
  ASSERT_TRUE(load_config_text("engine: {spin_us: 4294967295}", &c, &err).is_ok()) << err;
  EXPECT_EQ(c.engine.spin_us, 4294967295u);
  ASSERT_TRUE(load_config_text("engine: {spin_us: 0}", &c, &err).is_ok()) << err;
  EXPECT_EQ(c.engine.spin_us, 0u);
}

TEST(ConfigTest, UnknownKeyIsNamed) {
  Config c;
  std::string err;
  EXPECT_EQ(load_config_text("cluster: {join_timeout_msec: 5}", &c, &err).code(),
            Code::kInvalidArg);
  EXPECT_NE(err.find("cluster.join_timeout_msec"), std::string::npos) << err;
  err.clear();
  EXPECT_EQ(load_config_text("bogus: 1", &c, &err).code(), Code::kInvalidArg);
  EXPECT_NE(err.find("bogus"), std::string::npos) << err;
}

// Found by tests/fuzz/config_fuzz.cc: an alias can make a map contain itself,
// and the loader walked every map whatever its name, so this overflowed the
// stack. Maps are walked only where a section of keys exists.
TEST(ConfigTest, AliasCycleIsRefused) {
  Config c;
  std::string err;
  EXPECT_EQ(load_config_text("tcp: &t\n  listen: *t\n", &c, &err).code(), Code::kInvalidArg);
  EXPECT_NE(err.find("tcp.listen"), std::string::npos) << err;
  EXPECT_EQ(load_config_text("bogus: &b {x: *b}", &c, &err).code(), Code::kInvalidArg);
  EXPECT_NE(err.find("bogus"), std::string::npos) << err;
  EXPECT_EQ(c.tcp.listen, Config{}.tcp.listen);
}

TEST(ConfigTest, UnknownSectionIsNamed) {
  Config c;
  std::string err;
  EXPECT_EQ(load_config_text("tpc: {}", &c, &err).code(), Code::kInvalidArg);
  EXPECT_NE(err.find("tpc"), std::string::npos) << err;
  EXPECT_EQ(load_config_text("tcp: {listen: {x: 1}}", &c, &err).code(), Code::kInvalidArg);
  EXPECT_NE(err.find("tcp.listen"), std::string::npos) << err;
  EXPECT_TRUE(load_config_text("tcp: {}", &c, &err).is_ok()) << err;  // known, empty
}

TEST(ConfigTest, SectionAsScalarIsUnknownKey) {
  Config c;
  std::string err;
  EXPECT_EQ(load_config_text("cluster: 5", &c, &err).code(), Code::kInvalidArg);
  EXPECT_NE(err.find("cluster"), std::string::npos) << err;
}

TEST(ConfigTest, WrongTypeIsInvalid) {
  Config c;
  std::string err;
  EXPECT_EQ(load_config_text("cluster: {join_timeout_ms: abc}", &c, &err).code(),
            Code::kInvalidArg);
  EXPECT_NE(err.find("cluster.join_timeout_ms"), std::string::npos) << err;
  EXPECT_EQ(c.cluster.join_timeout_ms, 5000u);
  EXPECT_EQ(load_config_text("cluster: {join_timeout_ms: 12abc}", &c, &err).code(),
            Code::kInvalidArg);
  EXPECT_EQ(load_config_text("cluster: {join_timeout_ms: ''}", &c, &err).code(), Code::kInvalidArg);
  EXPECT_EQ(load_config_text("cluster: {join_timeout_ms: 1.5}", &c, &err).code(),
            Code::kInvalidArg);
  EXPECT_EQ(load_config_text("cluster: {join_timeout_ms: [1, 2]}", &c, &err).code(),
            Code::kInvalidArg);
  EXPECT_EQ(load_config_text("cluster: {join_timeout_ms: }", &c, &err).code(), Code::kInvalidArg);
  EXPECT_EQ(c.cluster.join_timeout_ms, 5000u);
}

TEST(ConfigTest, TopLevelMustBeAMap) {
  Config c;
  std::string err;
  EXPECT_EQ(load_config_text("[1, 2]", &c, &err).code(), Code::kInvalidArg);
  EXPECT_EQ(load_config_text("just a string", &c, &err).code(), Code::kInvalidArg);
}

TEST(ConfigTest, NegativeNumberIsInvalid) {
  Config c;
  std::string err;
  EXPECT_EQ(load_config_text("engine: {spin_us: -1}", &c, &err).code(), Code::kInvalidArg);
  EXPECT_NE(err.find("engine.spin_us"), std::string::npos) << err;
  EXPECT_EQ(load_config_text("engine: {max_lmr_bytes: -5}", &c, &err).code(), Code::kInvalidArg);
  EXPECT_EQ(c.engine.spin_us, 50u);
  EXPECT_EQ(c.engine.max_lmr_bytes, 1ull << 34);
}

TEST(ConfigTest, NumbersAreDecimalDigitsOnly) {
  Config c;
  std::string err;
  ASSERT_TRUE(load_config_text("engine: {spin_us: 010}", &c, &err).is_ok()) << err;
  EXPECT_EQ(c.engine.spin_us, 10u) << "a leading zero is not octal";
  ASSERT_TRUE(load_config_text("engine: {spin_us: 08}", &c, &err).is_ok()) << err;
  EXPECT_EQ(c.engine.spin_us, 8u);
  // Each of these used to be accepted by strtoull (hex, sign, leading space;
  // " -1" even became UINT64_MAX for a u64 key).
  for (const char* v : {"0x10", "+5", "' 5'", "' -1'", "'5 '", "1e3", "'-0'"}) {
    for (const char* key : {"spin_us", "max_lmr_bytes"}) {
      Config d;
      std::string yaml = std::string("engine: {") + key + ": " + v + "}";
      EXPECT_EQ(load_config_text(yaml, &d, &err).code(), Code::kInvalidArg) << yaml;
      EXPECT_EQ(d.engine.spin_us, 50u) << yaml;
      EXPECT_EQ(d.engine.max_lmr_bytes, 1ull << 34) << yaml;
    }
  }
}

TEST(ConfigTest, U32OverflowIsInvalid) {
  Config c;
  std::string err;
  EXPECT_EQ(load_config_text("engine: {spin_us: 4294967296}", &c, &err).code(), Code::kInvalidArg);
  EXPECT_NE(err.find("engine.spin_us"), std::string::npos) << err;
  EXPECT_EQ(c.engine.spin_us, 50u);
  // u64 fields overflow at 2^64.
  EXPECT_EQ(load_config_text("engine: {max_lmr_bytes: 18446744073709551616}", &c, &err).code(),
            Code::kInvalidArg);
  ASSERT_TRUE(load_config_text("engine: {max_lmr_bytes: 18446744073709551615}", &c, &err).is_ok())
      << err;
  EXPECT_EQ(c.engine.max_lmr_bytes, UINT64_MAX);
}

TEST(ConfigTest, YamlSyntaxErrorIsInvalid) {
  Config c;
  std::string err;
  EXPECT_EQ(load_config_text("a: [", &c, &err).code(), Code::kInvalidArg);
  EXPECT_NE(err.find("YAML"), std::string::npos) << err;
  err.clear();
  EXPECT_EQ(load_config_text("cluster: {join_timeout_ms: 5", &c, &err).code(), Code::kInvalidArg);
  EXPECT_NE(err.find("YAML"), std::string::npos) << err;
}

TEST(ConfigTest, NullErrorPointerIsAllowed) {
  Config c;
  EXPECT_EQ(load_config_text("a: [", &c, nullptr).code(), Code::kInvalidArg);
  EXPECT_EQ(load_config_text("bogus: 1", &c, nullptr).code(), Code::kInvalidArg);
  EXPECT_EQ(load_config_text("engine: {spin_us: x}", &c, nullptr).code(), Code::kInvalidArg);
}

TEST(ConfigTest, FailedLoadLeavesOutputUntouched) {
  Config c;
  std::string err;
  // The valid key comes first: a partial apply would change join_timeout_ms.
  EXPECT_EQ(load_config_text("cluster: {join_timeout_ms: 9}\nbogus: 1\n", &c, &err).code(),
            Code::kInvalidArg);
  EXPECT_EQ(c.cluster.join_timeout_ms, 5000u);
}

TEST(ConfigTest, EnvOverride) {
  ScopedEnv spin("LTIER_SPIN_US", "7");
  ScopedEnv tenant("LTIER_TENANT", "red");
  Config c;
  std::string err;
  ASSERT_TRUE(apply_env(&c, &err).is_ok()) << err;
  EXPECT_EQ(c.engine.spin_us, 7u);
  EXPECT_EQ(c.qos.tenant, "red");
}

TEST(ConfigTest, EnvOverridesYamlFile) {
  ScopedEnv spin("LTIER_SPIN_US", "7");
  Config c;
  std::string err;
  ASSERT_TRUE(load_config_text("engine: {spin_us: 3, op_timeout_ms: 11}", &c, &err).is_ok()) << err;
  EXPECT_EQ(c.engine.spin_us, 3u);  // load_config_text does not read the environment
  ASSERT_TRUE(apply_env(&c, &err).is_ok()) << err;
  EXPECT_EQ(c.engine.spin_us, 7u);
  EXPECT_EQ(c.engine.op_timeout_ms, 11u);
}

TEST(ConfigTest, LoadConfigWithoutFileAppliesEnv) {
  ScopedEnv spin("LTIER_SPIN_US", "9");
  Config c;
  std::string err;
  ASSERT_TRUE(load_config("", &c, &err).is_ok()) << err;
  EXPECT_EQ(c.engine.spin_us, 9u);
}

TEST(ConfigTest, MissingFileIsInvalid) {
  Config c;
  std::string err;
  EXPECT_EQ(load_config("/nonexistent/ltier.yaml", &c, &err).code(), Code::kInvalidArg);
  EXPECT_NE(err.find("/nonexistent/ltier.yaml"), std::string::npos) << err;
}

TEST(ConfigTest, BadEnvValueNamesTheVariable) {
  ScopedEnv spin("LTIER_SPIN_US", "fast");
  Config c;
  std::string err;
  EXPECT_EQ(apply_env(&c, &err).code(), Code::kInvalidArg);
  EXPECT_NE(err.find("LTIER_SPIN_US"), std::string::npos) << err;
  EXPECT_EQ(c.engine.spin_us, 50u);
  EXPECT_EQ(apply_env(&c, nullptr).code(), Code::kInvalidArg);
}

TEST(ConfigTest, EnvValueWithSpaceAndSignIsInvalid) {
  ScopedEnv lmr("LTIER_MAX_LMR_BYTES", " -1");
  Config c;
  std::string err;
  EXPECT_EQ(apply_env(&c, &err).code(), Code::kInvalidArg);
  EXPECT_NE(err.find("LTIER_MAX_LMR_BYTES"), std::string::npos) << err;
  EXPECT_EQ(c.engine.max_lmr_bytes, 1ull << 34);
}

TEST(ConfigTest, NegativeEnvValueIsInvalid) {
  ScopedEnv spin("LTIER_JOIN_TIMEOUT_MS", "-3");
  Config c;
  std::string err;
  EXPECT_EQ(apply_env(&c, &err).code(), Code::kInvalidArg);
  EXPECT_NE(err.find("LTIER_JOIN_TIMEOUT_MS"), std::string::npos) << err;
}

TEST(ConfigTest, KeysHaveHelpAndEnvNames) {
  Config c;
  auto keys = config_keys(c);
  ASSERT_FALSE(keys.empty());
  std::set<std::string> paths, envs;
  for (const auto& k : keys) {
    ASSERT_NE(k.path, nullptr);
    ASSERT_NE(k.env, nullptr) << k.path;
    ASSERT_NE(k.help, nullptr) << k.path;
    EXPECT_GT(std::string(k.help).size(), 0u) << k.path;
    EXPECT_EQ(std::string(k.env).rfind("LTIER_", 0), 0u) << k.env;
    EXPECT_NE(k.field, nullptr) << k.path;
    EXPECT_TRUE(paths.insert(k.path).second) << "duplicate path " << k.path;
    EXPECT_TRUE(envs.insert(k.env).second) << "duplicate env " << k.env;
  }
  EXPECT_TRUE(paths.count("transports"));
  EXPECT_TRUE(envs.count("LTIER_TRANSPORTS"));
}

TEST(ConfigTest, EveryKeyLoadsFromYaml) {
  // Each key in the table is reachable through its YAML path, and
  // config_value reads back what was set.
  Config probe;
  for (const auto& k : config_keys(probe)) {
    std::string path = k.path;
    std::string value = k.type == KeyType::kString ? "v" : "123";
    std::string yaml;
    auto dot = path.find('.');
    if (dot == std::string::npos) {
      yaml = path + ": " + value;
    } else {
      yaml = path.substr(0, dot) + ": {" + path.substr(dot + 1) + ": " + value + "}";
    }
    Config c;
    std::string err;
    ASSERT_TRUE(load_config_text(yaml, &c, &err).is_ok()) << yaml << ": " << err;
    bool found = false;
    for (const auto& kc : config_keys(c)) {
      if (std::string(kc.path) == path) {
        EXPECT_EQ(config_value(kc), value) << path;
        found = true;
      }
    }
    EXPECT_TRUE(found) << path;
  }
}

TEST(ConfigTest, ConfigValueFormatsDefaults) {
  Config c;
  int checked = 0;
  for (const auto& k : config_keys(c)) {
    std::string path = k.path;
    if (path == "cluster.join_timeout_ms") {
      EXPECT_EQ(config_value(k), "5000");
      ++checked;
    } else if (path == "engine.max_lmr_bytes") {
      EXPECT_EQ(config_value(k), "17179869184");
      ++checked;
    } else if (path == "tcp.listen") {
      EXPECT_EQ(config_value(k), "127.0.0.1:0");
      ++checked;
    }
  }
  EXPECT_EQ(checked, 3);
}

TEST(ParseHostPortTest, Good) {
  std::string host;
  uint16_t port = 1;
  ASSERT_TRUE(parse_host_port("127.0.0.1:7700", &host, &port).is_ok());
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 7700);
  ASSERT_TRUE(parse_host_port("node-a:0", &host, &port).is_ok());
  EXPECT_EQ(host, "node-a");
  EXPECT_EQ(port, 0);
  ASSERT_TRUE(parse_host_port("h:65535", &host, &port).is_ok());
  EXPECT_EQ(host, "h");
  EXPECT_EQ(port, 65535);
  // The last colon separates the port.
  ASSERT_TRUE(parse_host_port("a:b:80", &host, &port).is_ok());
  EXPECT_EQ(host, "a:b");
  EXPECT_EQ(port, 80);
}

TEST(ParseHostPortTest, Bad) {
  for (const char* s : {"", "host", ":80", "host:", "host:65536", "host:abc", "host:80x", "host:-1",
                        "host:99999999999999999999999"}) {
    std::string host = "unchanged";
    uint16_t port = 42;
    EXPECT_EQ(parse_host_port(s, &host, &port).code(), Code::kInvalidArg) << "'" << s << "'";
    EXPECT_EQ(host, "unchanged") << s;
    EXPECT_EQ(port, 42) << s;
  }
}

// parse_host_port once read the port with strtoul, which skips spaces and
// takes a sign ("h:-18446744073709551615" wrapped to port 1).
TEST(ParseHostPortTest, PortIsDecimalDigitsOnly) {
  for (const char* s : {"h:+80", "h: 80", "h:-0", "h:-18446744073709551615", "h:80 "}) {
    std::string host = "unchanged";
    uint16_t port = 42;
    EXPECT_EQ(parse_host_port(s, &host, &port).code(), Code::kInvalidArg) << "'" << s << "'";
    EXPECT_EQ(port, 42) << s;
  }
}

}  // namespace
}  // namespace lt
