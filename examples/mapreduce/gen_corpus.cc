// The word-count corpus: lines of words drawn from a real word list by a
// seeded Zipf sampler (the word of rank k comes with probability ~ 1/k^s),
// the list shuffled first (same seed) so that the frequent words are not the
// list's first ones. Same arguments, same bytes.
//
//   gen_corpus [--words FILE] [--seed N] [--zipf S] OUT BYTES
//   (default word list: /usr/share/dict/american-english-huge, Debian's
//    wamerican-huge; S default 1.0)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

// Vose's alias method: one uniform index and one coin per sample, O(1).
class Alias {
 public:
  explicit Alias(const std::vector<double>& w) : prob_(w.size()), alias_(w.size()) {
    double sum = 0;
    for (double x : w) sum += x;
    size_t n = w.size();
    std::vector<double> p(n);
    std::vector<uint32_t> small, large;
    for (size_t i = 0; i < n; ++i) {
      p[i] = w[i] * static_cast<double>(n) / sum;
      (p[i] < 1.0 ? small : large).push_back(static_cast<uint32_t>(i));
    }
    while (!small.empty() && !large.empty()) {
      uint32_t s = small.back(), l = large.back();
      small.pop_back();
      prob_[s] = p[s];
      alias_[s] = l;
      p[l] -= 1.0 - p[s];
      if (p[l] < 1.0) {
        large.pop_back();
        small.push_back(l);
      }
    }
    for (uint32_t i : large) prob_[i] = 1.0;
    for (uint32_t i : small) prob_[i] = 1.0;
  }
  template <typename R>
  uint32_t operator()(R& rng) const {
    uint64_t x = rng();
    uint32_t i = static_cast<uint32_t>((x >> 32) * prob_.size() >> 32);
    double coin = static_cast<double>(x & 0xffffffffu) / 4294967296.0;
    return coin < prob_[i] ? i : alias_[i];
  }

 private:
  std::vector<double> prob_;
  std::vector<uint32_t> alias_;
};

}  // namespace

int main(int argc, char** argv) {
  std::string words_path = "/usr/share/dict/american-english-huge";
  uint64_t seed = 42;
  double s = 1.0;
  int i = 1;
  for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
    if (!std::strcmp(argv[i], "--words"))
      words_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--seed"))
      seed = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--zipf"))
      s = std::strtod(argv[i + 1], nullptr);
    else
      break;
  }
  if (argc - i != 2) {
    fprintf(stderr, "usage: gen_corpus [--words FILE] [--seed N] [--zipf S] OUT BYTES\n");
    return 2;
  }
  const char* out_path = argv[i];
  uint64_t bytes = std::strtoull(argv[i + 1], nullptr, 10);
  std::vector<std::string> words;
  std::ifstream in(words_path);
  for (std::string w; std::getline(in, w);)
    if (!w.empty()) words.push_back(w);
  if (words.empty()) {
    fprintf(stderr, "gen_corpus: no words in %s (Debian: apt-get install wamerican-huge)\n",
            words_path.c_str());
    return 1;
  }
  std::mt19937_64 rng(seed);
  std::shuffle(words.begin(), words.end(), rng);
  std::vector<double> weight(words.size());
  for (size_t k = 0; k < words.size(); ++k)
    weight[k] = 1.0 / std::pow(static_cast<double>(k + 1), s);
  Alias pick(weight);

  FILE* out = fopen(out_path, "wb");
  if (out == nullptr) return perror(out_path), 1;
  std::string buf;
  buf.reserve(1 << 20);
  uint64_t written = 0;
  int in_line = 0;
  while (written + buf.size() < bytes) {
    const std::string& w = words[pick(rng)];
    buf += w;
    buf += ++in_line == 12 ? '\n' : ' ';
    if (in_line == 12) in_line = 0;
    if (buf.size() >= (1 << 20) - 256) {
      fwrite(buf.data(), 1, buf.size(), out);
      written += buf.size();
      buf.clear();
    }
  }
  if (!buf.empty() && buf.back() != '\n') buf.back() = '\n';
  fwrite(buf.data(), 1, buf.size(), out);
  written += buf.size();
  if (fclose(out) != 0) return perror(out_path), 1;
  printf("gen_corpus: %s, %llu bytes, %zu-word list, zipf %.2f, seed %llu\n", out_path,
         static_cast<unsigned long long>(written), words.size(), s,
         static_cast<unsigned long long>(seed));
  return 0;
}
