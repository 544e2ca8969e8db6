// The QoS policy in the YAML config: the lists read, and every way a broken
// file is refused with the key and its line.
#include "common/qos_config.h"

#include <gtest/gtest.h>

#include <string>

#include "common/config.h"

namespace lt {
namespace {

const char* kGood = R"(qos:
  tenant: kv
  classes:
    - name: latency
      priority: 0
      target_rtt: 200us
    - name: bulk
      priority: 1
      weight: 2
      max_bytes_per_s: 2GiB
      floor_percent: 10
      cpus: 1-2, 0
      cpu_policy: idle
    - name: batch
      priority: 1
  tenants:
    - name: kv
      classes: [latency, bulk]
      default_class: bulk
      max_ops_in_flight: 128
      max_lmr_bytes: 64MiB
      max_lmrs: 16
      max_msg_credits: 256
      max_rpc_credits: 32
    - name: etl
      classes: [bulk, batch]
)";

// The error of loading `text`, or "" when it loads.
std::string load_error(const std::string& text) {
  Config c;
  std::string error;
  Status s = load_config_text(text, &c, &error);
  if (s.is_ok()) return "";
  EXPECT_EQ(s.code(), Code::kInvalidArg);
  return error.empty() ? "(no message)" : error;
}

TEST(QosConfigTest, ReadsClassesAndTenants) {
  Config c;
  std::string error;
  ASSERT_TRUE(load_config_text(kGood, &c, &error).is_ok()) << error;
  const QosPolicy& p = c.qos.policy;
  ASSERT_TRUE(p.enabled());
  ASSERT_EQ(p.classes.size(), 3u);
  EXPECT_EQ(p.classes[0].name, "latency");
  EXPECT_EQ(p.classes[0].priority, 0u);
  EXPECT_EQ(p.classes[0].target_rtt_ns, 200'000u);
  EXPECT_EQ(p.classes[0].line, 4);
  EXPECT_EQ(p.classes[1].weight, 2u);
  EXPECT_EQ(p.classes[1].max_bytes_per_s, 2ull << 30);
  EXPECT_EQ(p.classes[1].floor_percent, 10u);
  EXPECT_EQ(p.classes[1].target_rtt_ns, 0u);  // auto
  EXPECT_EQ(p.classes[1].cpus, (std::vector<uint32_t>{0, 1, 2}));
  EXPECT_TRUE(p.classes[0].cpus.empty());  // not placed
  EXPECT_EQ(p.classes[1].cpu_policy, QosCpuPolicy::kIdle);
  EXPECT_EQ(p.classes[0].cpu_policy, QosCpuPolicy::kUnset);  // left as it is
  ASSERT_EQ(p.tenants.size(), 2u);
  const QosTenant* kv = p.find_tenant("kv");
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->classes, (std::vector<std::string>{"latency", "bulk"}));
  EXPECT_EQ(kv->default_class, "bulk");
  EXPECT_EQ(kv->max_ops_in_flight, 128u);
  EXPECT_EQ(kv->max_lmr_bytes, 64ull << 20);
  EXPECT_EQ(kv->max_lmrs, 16u);
  EXPECT_EQ(kv->max_msg_credits, 256u);
  EXPECT_EQ(kv->max_rpc_credits, 32u);
  EXPECT_EQ(p.find_tenant("etl")->max_msg_credits, 0u);    // no cap
  EXPECT_EQ(p.find_tenant("etl")->default_class, "bulk");  // the first of its classes
  EXPECT_EQ(c.qos.tenant, "kv");
  EXPECT_TRUE(check_qos_tenant(p, "etl", &error).is_ok());
}

// The example the docs and ./ltier demo use loads as it is.
TEST(QosConfigTest, TheExampleFileLoads) {
  Config c;
  std::string error;
  ASSERT_TRUE(load_config(LTIER_SOURCE_DIR "/examples/qos.yaml", &c, &error).is_ok()) << error;
  EXPECT_EQ(c.qos.policy.classes.size(), 3u);
  EXPECT_EQ(c.qos.policy.tenants.size(), 2u);
  EXPECT_TRUE(check_qos_tenant(c.qos.policy, "kv", &error).is_ok());
}

TEST(QosConfigTest, NoPolicyMeansQosOff) {
  Config c;
  std::string error;
  ASSERT_TRUE(load_config_text("qos:\n  tenant: anyone\n", &c, &error).is_ok()) << error;
  EXPECT_FALSE(c.qos.policy.enabled());
  EXPECT_TRUE(check_qos_tenant(c.qos.policy, "anyone", &error).is_ok());
}

TEST(QosConfigTest, UnknownTenantIsNamedWithTheConfiguredOnes) {
  Config c;
  std::string error;
  ASSERT_TRUE(load_config_text(kGood, &c, &error).is_ok()) << error;
  Status s = check_qos_tenant(c.qos.policy, "nobody", &error);
  EXPECT_EQ(s.code(), Code::kInvalidArg);
  EXPECT_NE(error.find("qos.tenant"), std::string::npos) << error;
  EXPECT_NE(error.find("'nobody'"), std::string::npos) << error;
  EXPECT_NE(error.find("kv, etl"), std::string::npos) << error;
}

struct BadCase {
  const char* what;
  const char* yaml;
  const char* expect;  // a piece of the message
};

TEST(QosConfigTest, EveryBrokenPolicyIsRefusedWithKeyAndLine) {
  const BadCase cases[] = {
      {"classes not a list", "qos:\n  classes: latency\n", "qos.classes (line 2): expected a list"},
      {"class not a map", "qos:\n  classes:\n    - latency\n",
       "qos.classes[0] (line 3): expected a map"},
      {"unknown class key",
       "qos:\n  classes:\n    - name: a\n      priority: 0\n      colour: red\n",
       "qos.classes[0].colour (line 5): unknown class key"},
      {"no name", "qos:\n  classes:\n    - priority: 0\n", "needs a name"},
      {"no priority", "qos:\n  classes:\n    - name: a\n", "class 'a' needs a priority"},
      {"priority not a number", "qos:\n  classes:\n    - name: a\n      priority: high\n",
       "qos.classes[0].priority (line 4): expected a whole number, got 'high'"},
      {"weight zero", "qos:\n  classes:\n    - {name: a, priority: 0, weight: 0}\n",
       "weight (line 3): must be at least 1"},
      {"bad byte unit", "qos:\n  classes:\n    - {name: a, priority: 0, max_bytes_per_s: 2GB/s}\n",
       "max_bytes_per_s (line 3): expected a size"},
      {"rtt without unit", "qos:\n  classes:\n    - {name: a, priority: 0, target_rtt: 200}\n",
       "target_rtt (line 3): expected a duration"},
      {"rtt bad unit", "qos:\n  classes:\n    - {name: a, priority: 0, target_rtt: 2 fortnights}\n",
       "target_rtt (line 3)"},
      {"floor above 100", "qos:\n  classes:\n    - {name: a, priority: 0, floor_percent: 120}\n",
       "floor_percent (line 3): must be 1 to 100"},
      {"cpus backwards", "qos:\n  classes:\n    - name: a\n      priority: 0\n      cpus: 3-1\n",
       "qos.classes[0].cpus (line 5): expected a CPU list such as 0-3,8, got '3-1'"},
      {"unknown cpu policy", "qos:\n  classes:\n    - {name: a, priority: 0, cpu_policy: low}\n",
       "qos.classes[0].cpu_policy (line 3): expected normal, batch or idle, got 'low'"},
      {"cpus not a list", "qos:\n  classes:\n    - {name: a, priority: 0, cpus: all}\n",
       "cpus (line 3): expected a CPU list"},
      {"duplicate class",
       "qos:\n  classes:\n    - {name: a, priority: 0}\n    - {name: a, priority: 1}\n",
       "class 'a' is defined twice"},
      {"bad class name", "qos:\n  classes:\n    - {name: 'a b', priority: 0}\n",
       "class name 'a b' must be"},
      {"tenant names an unknown class",
       "qos:\n  classes:\n    - {name: a, priority: 0}\n  tenants:\n    - {name: t, classes: [a, "
       "zz]}\n",
       "qos.tenants (line 5): tenant 't' names class 'zz', which qos.classes does not define"},
      {"default class not allowed",
       "qos:\n  classes:\n    - {name: a, priority: 0}\n    - {name: b, priority: 1}\n  tenants:\n "
       "   "
       "- {name: t, classes: [a], default_class: b}\n",
       "default_class 'b' is not one of its classes"},
      {"tenant without classes",
       "qos:\n  classes:\n    - {name: a, priority: 0}\n  tenants:\n    - {name: t}\n",
       "tenant 't' needs classes"},
      {"tenant classes empty",
       "qos:\n  classes:\n    - {name: a, priority: 0}\n  tenants:\n    - {name: t, classes: []}\n",
       "qos.tenants[0].classes (line 5): expected a list of class names"},
      {"unknown tenant key",
       "qos:\n  classes:\n    - {name: a, priority: 0}\n  tenants:\n    - {name: t, classes: [a], "
       "max_cpus: 3}\n",
       "qos.tenants[0].max_cpus (line 5): unknown tenant key"},
      {"credit quota not a number",
       "qos:\n  classes:\n    - {name: a, priority: 0}\n  tenants:\n    - {name: t, classes: [a], "
       "max_msg_credits: lots}\n",
       "qos.tenants[0].max_msg_credits (line 5): expected a whole number, got 'lots'"},
      {"rpc credit quota negative",
       "qos:\n  classes:\n    - {name: a, priority: 0}\n  tenants:\n    - {name: t, classes: [a], "
       "max_rpc_credits: -1}\n",
       "qos.tenants[0].max_rpc_credits (line 5): expected a whole number"},
      {"tenants but no classes", "qos:\n  tenants:\n    - {name: t, classes: [a]}\n",
       "tenants need classes"},
      {"duplicate tenant",
       "qos:\n  classes:\n    - {name: a, priority: 0}\n  tenants:\n    - {name: t, classes: "
       "[a]}\n "
       "   - {name: t, classes: [a]}\n",
       "tenant 't' is defined twice"},
      {"bad quota size",
       "qos:\n  classes:\n    - {name: a, priority: 0}\n  tenants:\n    - {name: t, classes: [a], "
       "max_lmr_bytes: lots}\n",
       "max_lmr_bytes (line 5): expected a size"},
      {"broken YAML", "qos:\n  classes: [\n", "YAML"},
  };
  for (const BadCase& c : cases) {
    std::string error = load_error(c.yaml);
    EXPECT_NE(error.find(c.expect), std::string::npos)
        << c.what << ": got '" << error << "', wanted '" << c.expect << "'";
  }
}

TEST(QosConfigTest, ARefusedFileLeavesTheConfigUntouched) {
  Config c;
  c.qos.tenant = "before";
  std::string error;
  EXPECT_FALSE(
      load_config_text("qos:\n  tenant: after\n  classes:\n    - {name: a}\n", &c, &error).is_ok());
  EXPECT_EQ(c.qos.tenant, "before");
  EXPECT_FALSE(c.qos.policy.enabled());
}

TEST(QosConfigTest, SizesAndDurations) {
  uint64_t v = 0;
  EXPECT_TRUE(parse_size("4096", &v));
  EXPECT_EQ(v, 4096u);
  EXPECT_TRUE(parse_size("64KiB", &v));
  EXPECT_EQ(v, 65536u);
  EXPECT_TRUE(parse_size("1.5 GiB", &v));
  EXPECT_EQ(v, 3ull << 29);
  EXPECT_TRUE(parse_size("10k", &v));
  EXPECT_EQ(v, 10000u);
  EXPECT_TRUE(parse_size("2M", &v));
  EXPECT_EQ(v, 2000000u);
  EXPECT_FALSE(parse_size("", &v));
  EXPECT_FALSE(parse_size("KiB", &v));
  EXPECT_FALSE(parse_size("1.2.3", &v));
  EXPECT_FALSE(parse_size("-5", &v));
  EXPECT_FALSE(parse_size("0.5", &v));  // half a byte
  EXPECT_FALSE(parse_size("1e30", &v));
  EXPECT_FALSE(parse_size("99999999999 TiB", &v));
  EXPECT_TRUE(parse_duration_ns("200us", &v));
  EXPECT_EQ(v, 200'000u);
  EXPECT_TRUE(parse_duration_ns("1.5ms", &v));
  EXPECT_EQ(v, 1'500'000u);
  EXPECT_TRUE(parse_duration_ns("2s", &v));
  EXPECT_EQ(v, 2'000'000'000u);
  EXPECT_TRUE(parse_duration_ns("750ns", &v));
  EXPECT_EQ(v, 750u);
  EXPECT_FALSE(parse_duration_ns("200", &v));
  EXPECT_FALSE(parse_duration_ns("3 h", &v));
}

TEST(QosConfigTest, CpuLists) {
  std::vector<uint32_t> c;
  EXPECT_TRUE(parse_cpu_list("3", &c));
  EXPECT_EQ(c, (std::vector<uint32_t>{3}));
  EXPECT_TRUE(parse_cpu_list("4-6, 0,5", &c));  // sorted, each once
  EXPECT_EQ(c, (std::vector<uint32_t>{0, 4, 5, 6}));
  EXPECT_TRUE(parse_cpu_list("1023", &c));
  for (const char* bad :
       {"", ",", "1,", ",1", "1-", "-1", "3-1", "a", "1..2", "1024", "0-1024", "99999", "1 2"}) {
    EXPECT_FALSE(parse_cpu_list(bad, &c)) << "'" << bad << "'";
  }
}

}  // namespace
}  // namespace lt
