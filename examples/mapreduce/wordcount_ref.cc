// The single-process word count the distributed job is measured and checked
// against: the same tokenizer and table, one pass over the whole file.
//
//   build/examples/mapreduce/wordcount_ref CORPUS
#include <chrono>
#include <cstdio>

#include "mapped_file.h"
#include "wordcount.h"

int main(int argc, char** argv) {
  if (argc != 2) return fprintf(stderr, "usage: wordcount_ref CORPUS\n"), 2;
  MappedFile f(argv[1]);
  if (!f.ok()) return fprintf(stderr, "wordcount_ref: cannot read %s\n", argv[1]), 1;
  auto t0 = std::chrono::steady_clock::now();
  wc::Counts counts(1 << 18);
  wc::Digest d = wc::count_all(f.data(), f.size(), &counts);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("wordcount_ref: %.1f MB, %llu words, %llu distinct: %.3f s, %.0f MB/s (digest %016llx)\n",
         f.size() / 1e6, static_cast<unsigned long long>(d.total),
         static_cast<unsigned long long>(d.distinct), s, f.size() / 1e6 / s,
         static_cast<unsigned long long>(d.sum));
  return 0;
}
