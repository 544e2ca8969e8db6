// Class CPUs: a thread runs on its class's CPUs, gets its own back when its
// class names none, and a class whose CPUs the process may not use is
// refused at start.
#include "qos/cpu_placement.h"

#include <gtest/gtest.h>

#include <thread>

#include "qos/scheduler.h"

namespace lt::qos {
namespace {

cpu_set_t mine() {
  cpu_set_t s;
  CPU_ZERO(&s);
  EXPECT_EQ(sched_getaffinity(0, sizeof(s), &s), 0);
  return s;
}

// The first two CPUs this thread may run on, or false with fewer than two.
bool two_cpus(uint32_t* a, uint32_t* b) {
  const cpu_set_t s = mine();
  int found = 0;
  for (uint32_t c = 0; c < CPU_SETSIZE && found < 2; ++c) {
    if (!CPU_ISSET(c, &s)) continue;
    (found++ == 0 ? *a : *b) = c;
  }
  return found == 2;
}

// latency on CPU a, bulk on CPU b, batch anywhere; the process's class is
// `process_class`.
QosConfig placed(uint32_t a, uint32_t b, const std::string& process_class) {
  QosConfig q;
  q.tenant = "t";
  q.board = "none";
  q.default_class = process_class;
  QosClass hi, lo, any;
  hi.name = "latency";
  hi.cpus = {a};
  lo.name = "bulk";
  lo.priority = 1;
  lo.cpus = {b};
  any.name = "batch";
  any.priority = 2;
  q.policy.classes = {hi, lo, any};
  QosTenant t;
  t.name = "t";
  t.classes = {"latency", "bulk", "batch"};
  t.default_class = "batch";
  q.policy.tenants = {t};
  return q;
}

TEST(CpuPlacement, AThreadRunsOnItsClassesCpus) {
  uint32_t a = 0, b = 0;
  if (!two_cpus(&a, &b)) GTEST_SKIP() << "needs two CPUs this process may run on";
  // In a thread of its own: the test's thread keeps its CPUs.
  std::thread([&] {
    const cpu_set_t before = mine();
    Scheduler s(placed(a, b, "bulk"));
    std::string error;
    ASSERT_TRUE(s.start(&error).is_ok()) << error;
    cpu_set_t now = mine();
    EXPECT_EQ(CPU_COUNT(&now), 1);
    EXPECT_TRUE(CPU_ISSET(b, &now)) << "start() did not place the joining thread";
    ASSERT_TRUE(s.set_thread_class("latency").is_ok());
    now = mine();
    EXPECT_EQ(CPU_COUNT(&now), 1);
    EXPECT_TRUE(CPU_ISSET(a, &now));
    cpu_set_t inherited;
    std::thread([&] { inherited = mine(); }).join();
    EXPECT_TRUE(CPU_EQUAL(&inherited, &now)) << "a thread started now runs where its parent does";
    ASSERT_TRUE(s.set_thread_class("batch").is_ok());  // names no CPUs: the thread's own again
    now = mine();
    EXPECT_TRUE(CPU_EQUAL(&now, &before)) << cpu_list(now) << " vs " << cpu_list(before);
    ASSERT_TRUE(s.set_thread_class("").is_ok());  // the process's class: bulk's CPU
    now = mine();
    EXPECT_TRUE(CPU_ISSET(b, &now));
    EXPECT_EQ(CPU_COUNT(&now), 1);
    EXPECT_EQ(s.set_thread_class("gold").code(), Code::kNotFound);  // a refusal moves nothing
    now = mine();
    EXPECT_TRUE(CPU_ISSET(b, &now));
  }).join();
}

TEST(CpuPlacement, CpusTheProcessMayNotUseAreRefusedAtStart) {
  const cpu_set_t allowed = mine();
  uint32_t outside = CPU_SETSIZE - 1;
  while (outside > 0 && CPU_ISSET(outside, &allowed)) --outside;
  ASSERT_FALSE(CPU_ISSET(outside, &allowed));
  QosConfig q = placed(0, outside, "latency");
  q.policy.classes[0].cpus.clear();
  q.policy.classes[1].line = 7;
  Scheduler s(q);
  std::string error;
  EXPECT_EQ(s.start(&error).code(), Code::kInvalidArg);
  EXPECT_NE(error.find("qos.classes 'bulk' (line 7): cpus " + std::to_string(outside) +
                       ": this process may run on none of them (it may run on " +
                       cpu_list(allowed) + ")"),
            std::string::npos)
      << error;
  const cpu_set_t after = mine();
  EXPECT_TRUE(CPU_EQUAL(&after, &allowed)) << "a refused start moved the thread";
}

TEST(CpuPlacement, CpuListsForMessages) {
  cpu_set_t s;
  CPU_ZERO(&s);
  EXPECT_EQ(cpu_list(s), "none");
  for (int c : {0, 1, 2, 5, 7, 8}) CPU_SET(c, &s);
  EXPECT_EQ(cpu_list(s), "0-2,5,7-8");
}

}  // namespace
}  // namespace lt::qos
