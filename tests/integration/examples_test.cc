// LITE's applications on the public API, run as a user would with ltier-run.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "cluster.h"

namespace lt::itest {
namespace {

// Runs argv to its end; returns its exit status and appends its output.
int run(const std::vector<std::string>& argv, std::string* out) {
  Proc p(argv, {});
  std::string line;
  while ((line = p.read_line(240000)) != "EOF" && line != "TIMEOUT") *out += line + "\n";
  return p.wait_exit(10000);
}

std::string example(const std::string& name) {
  return std::string(LTIER_EXAMPLES_DIR) + "/" + name;
}

TEST(Examples, AtomicLogAndKvStoreUnderLtierRun) {
  for (const char* ex : {"atomic_log", "kv_store"}) {
    std::string out;
    EXPECT_EQ(
        run({Cluster::bin("ltier-run"), "-n", "3", "--timeout", "90", "--", example(ex)}, &out), 0)
        << ex << " printed:\n"
        << out;
  }
}

// Word count on 3 ranks over a small generated corpus (the benchmark's
// generator, Debian's word list), checked against a single-process count.
TEST(Examples, MapReduceWordCountMatchesASingleProcessCount) {
  char dir[] = "/tmp/ltier-wc-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string corpus = std::string(dir) + "/corpus.txt", out;
  ASSERT_EQ(run({example("mapreduce/gen_corpus"), "--seed", "7", corpus, "3000000"}, &out), 0)
      << out;
  int rc = run({Cluster::bin("ltier-run"), "-n", "3", "--timeout", "180", "--",
                example("mapreduce/wordcount"), corpus, "--check"},
               &out);
  unlink(corpus.c_str());
  rmdir(dir);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("matches the single-process count"), std::string::npos) << out;
}

// PageRank on 2 and 3 ranks over a small R-MAT graph, checked against a
// single-process run of the same iterations (to 1e-6, L1 and relative).
TEST(Examples, PageRankMatchesASingleProcessRun) {
  char dir[] = "/tmp/ltier-pr-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string graph = std::string(dir) + "/graph.bin", out;
  ASSERT_EQ(run({example("pagerank/gen_graph"), "--seed", "3", graph, "12"}, &out), 0) << out;
  for (const char* n : {"2", "3"}) {
    std::string got;
    int rc = run({Cluster::bin("ltier-run"), "-n", n, "--timeout", "180", "--",
                  example("pagerank/pagerank"), graph, "--iters", "20", "--check"},
                 &got);
    EXPECT_EQ(rc, 0) << n << " ranks:\n" << got;
    EXPECT_NE(got.find(": matches"), std::string::npos) << n << " ranks:\n" << got;
  }
  unlink(graph.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace lt::itest
