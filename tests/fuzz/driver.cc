// Standalone driver for the fuzz targets (the ctest build; LTIER_LIBFUZZER=ON
// links libFuzzer instead). It runs every seed of the corpus once, then a fixed
// number of deterministic mutations of them: bit flips, interesting bytes,
// length-field edits, truncations, insertions, erasures, duplications, splices
// and cross-overs between seeds. Iteration k depends only on (seed, k) and the
// sorted corpus, so a failure is replayed with --only k. No coverage feedback:
// this is a regression net that runs under the sanitizer builds on every
// `./ltier test`; real exploration is libFuzzer's job (tests/fuzz/README.md).
//
//   fuzz_<name> [-n ITERATIONS] [-s SEED] [-m MAX_LEN] [-t SECONDS]
//               [--only K] [--dump FILE] CORPUS_DIR_OR_FILE...
//
// Every input is run from a heap copy of exactly its size, so a read past its
// end is an ASan report. On a crash the input is written to
// crash-<iteration>.bin in the working directory.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" [[gnu::weak]] int LLVMFuzzerInitialize(int* argc, char*** argv);
// Present when a sanitizer runtime is linked in: called before it exits.
extern "C" [[gnu::weak]] void __sanitizer_set_death_callback(void (*callback)(void));

namespace {

using Bytes = std::vector<uint8_t>;

// The input being run, for the crash hook (which may only make system calls).
const uint8_t* g_data = nullptr;
size_t g_size = 0;
long long g_iteration = -1;  // -1: a corpus seed

void write_str(const char* s) {
  ssize_t r = ::write(STDERR_FILENO, s, std::strlen(s));
  (void)r;
}

// Async-signal-safe: formats the iteration number by hand.
void save_crash_input() {
  if (g_data == nullptr) return;
  char name[64] = "crash-";
  char digits[24];
  int n = 0;
  unsigned long long v = g_iteration < 0 ? 0 : static_cast<unsigned long long>(g_iteration);
  do {
    digits[n++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  size_t at = std::strlen(name);
  if (g_iteration < 0) {
    std::memcpy(name + at, "seed", 4);
    at += 4;
  } else {
    while (n > 0) name[at++] = digits[--n];
  }
  std::memcpy(name + at, ".bin", 5);
  int fd = ::open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ssize_t r = ::write(fd, g_data, g_size);
    (void)r;
    ::close(fd);
  }
  write_str("fuzz driver: the failing input is saved as ");
  write_str(name);
  write_str(" (replay: the same command with that file as the corpus, or --only K)\n");
}

void on_signal(int sig) {
  save_crash_input();
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

bool read_file(const std::string& path, Bytes* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  out->assign(s.begin(), s.end());
  return true;
}

// Files of `path` (a directory: its regular files, sorted by name).
bool load_corpus(const std::string& path, std::vector<Bytes>* corpus,
                 std::vector<std::string>* names) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return false;
  std::vector<std::string> files;
  if (S_ISDIR(st.st_mode)) {
    DIR* d = ::opendir(path.c_str());
    if (d == nullptr) return false;
    while (dirent* e = ::readdir(d)) {
      std::string f = path + "/" + e->d_name;
      struct stat fs {};
      if (e->d_name[0] != '.' && ::stat(f.c_str(), &fs) == 0 && S_ISREG(fs.st_mode)) {
        files.push_back(f);
      }
    }
    ::closedir(d);
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  for (const auto& f : files) {
    Bytes b;
    if (!read_file(f, &b)) return false;
    corpus->push_back(std::move(b));
    names->push_back(f);
  }
  return true;
}

void run_one(const Bytes& input, long long iteration) {
  // An exact-size heap copy: one byte past the end is an ASan report.
  std::unique_ptr<uint8_t[]> copy(new uint8_t[input.size() + (input.empty() ? 1 : 0)]);
  if (!input.empty()) std::memcpy(copy.get(), input.data(), input.size());
  g_data = copy.get();
  g_size = input.size();
  g_iteration = iteration;
  LLVMFuzzerTestOneInput(copy.get(), input.size());
  g_data = nullptr;
}

class Mutator {
 public:
  Mutator(const std::vector<Bytes>& corpus, size_t max_len) : corpus_(corpus), max_len_(max_len) {}

  Bytes make(uint64_t seed, long long iteration) {
    rng_ = seed ^ (static_cast<uint64_t>(iteration) * 0xd1342543de82ef95ull);
    Bytes b = corpus_[below(corpus_.size())];
    int rounds = 1 + static_cast<int>(below(4));
    for (int i = 0; i < rounds; ++i) mutate(&b);
    if (b.size() > max_len_) b.resize(max_len_);
    return b;
  }

 private:
  uint64_t next() { return lt::fuzz::splitmix64(&rng_); }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }

  // A value a length or count field likes to get wrong.
  uint64_t interesting(uint64_t current, size_t width, size_t input_size) {
    const uint64_t max = width >= 8 ? ~uint64_t{0} : (uint64_t{1} << (8 * width)) - 1;
    switch (below(10)) {
      case 0:
        return 0;
      case 1:
        return 1;
      case 2:
        return max;
      case 3:
        return max >> 1;  // the largest signed value
      case 4:
        return (max >> 1) + 1;  // the smallest signed value
      case 5:
        return input_size;
      case 6:
        return input_size - std::min<size_t>(input_size, 16 + below(8));
      case 7:
        return current + 1 + below(16);
      case 8:
        return current - 1 - below(16);
      default:
        return uint64_t{1} << below(8 * width);
    }
  }

  void mutate(Bytes* b) {
    const Bytes& other = corpus_[below(corpus_.size())];
    switch (below(11)) {
      case 0:  // flip a bit
        if (!b->empty()) (*b)[below(b->size())] ^= static_cast<uint8_t>(1u << below(8));
        break;
      case 1: {  // an interesting byte
        static constexpr uint8_t kBytes[] = {0, 1, 0x7f, 0x80, 0xff, 0x10, 0x20, 0x40};
        if (!b->empty()) {
          (*b)[below(b->size())] =
              below(2) == 0 ? kBytes[below(sizeof(kBytes))] : static_cast<uint8_t>(next());
        }
        break;
      }
      case 2:
      case 3: {  // a length field: 1, 2, 4 or 8 bytes, often aligned
        if (b->empty()) break;
        size_t width = size_t{1} << below(4);
        size_t pos = below(b->size());
        if (below(2) == 0) pos &= ~(width - 1);
        if (pos + width > b->size()) break;
        uint64_t v = 0;
        std::memcpy(&v, b->data() + pos, width);
        v = interesting(v, width, b->size());
        std::memcpy(b->data() + pos, &v, width);
        break;
      }
      case 4:  // truncate
        b->resize(below(b->size() + 1));
        break;
      case 5: {  // erase a range
        if (b->empty()) break;
        size_t at = below(b->size());
        size_t n = 1 + below(std::min<size_t>(b->size() - at, 32));
        b->erase(b->begin() + static_cast<long>(at), b->begin() + static_cast<long>(at + n));
        break;
      }
      case 6: {  // insert random bytes
        size_t at = below(b->size() + 1);
        size_t n = 1 + below(16);
        Bytes ins(n);
        for (auto& x : ins) x = static_cast<uint8_t>(next());
        b->insert(b->begin() + static_cast<long>(at), ins.begin(), ins.end());
        break;
      }
      case 7: {  // duplicate a range somewhere else
        if (b->empty()) break;
        size_t from = below(b->size());
        size_t n = 1 + below(std::min<size_t>(b->size() - from, 64));
        Bytes chunk(b->begin() + static_cast<long>(from), b->begin() + static_cast<long>(from + n));
        size_t at = below(b->size() + 1);
        b->insert(b->begin() + static_cast<long>(at), chunk.begin(), chunk.end());
        break;
      }
      case 8: {  // splice: a prefix of this input, a suffix of another
        size_t keep = below(b->size() + 1);
        size_t from = below(other.size() + 1);
        b->resize(keep);
        b->insert(b->end(), other.begin() + static_cast<long>(from), other.end());
        break;
      }
      case 9: {  // cross-over: overwrite a range with another seed's bytes at the same offset
        if (b->empty() || other.empty()) break;
        size_t at = below(std::min(b->size(), other.size()));
        size_t n = 1 + below(std::min(b->size(), other.size()) - at);
        std::memcpy(b->data() + at, other.data() + at, n);
        break;
      }
      default: {  // append: another seed whole, or random bytes
        if (below(2) == 0) {
          b->insert(b->end(), other.begin(), other.end());
        } else {
          size_t n = 1 + below(32);
          for (size_t i = 0; i < n; ++i) b->push_back(static_cast<uint8_t>(next()));
        }
        break;
      }
    }
  }

  const std::vector<Bytes>& corpus_;
  size_t max_len_;
  uint64_t rng_ = 0;
};

int usage() {
  std::fprintf(stderr,
               "usage: fuzz_<name> [-n ITERATIONS] [-s SEED] [-m MAX_LEN] [-t SECONDS] "
               "[--only K] [--dump FILE] CORPUS_DIR_OR_FILE...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  long long iterations = 20000, only = -1;
  uint64_t seed = 1;
  size_t max_len = 4096;
  double max_seconds = 30;
  std::string dump;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "-n" && (v = value())) {
      iterations = std::atoll(v);
    } else if (a == "-s" && (v = value())) {
      seed = std::strtoull(v, nullptr, 0);
    } else if (a == "-m" && (v = value())) {
      max_len = std::strtoull(v, nullptr, 0);
    } else if (a == "-t" && (v = value())) {
      max_seconds = std::atof(v);
    } else if (a == "--only" && (v = value())) {
      only = std::atoll(v);
    } else if (a == "--dump" && (v = value())) {
      dump = v;
    } else if (!a.empty() && a[0] == '-') {
      return usage();
    } else {
      paths.push_back(a);
    }
  }
  std::vector<Bytes> corpus;
  std::vector<std::string> names;
  for (const auto& p : paths) {
    if (!load_corpus(p, &corpus, &names)) {
      std::fprintf(stderr, "fuzz driver: cannot read %s\n", p.c_str());
      return 2;
    }
  }
  if (corpus.empty()) {
    std::fprintf(stderr, "fuzz driver: no corpus files\n");
    return usage();
  }
  if (__sanitizer_set_death_callback != nullptr) {
    __sanitizer_set_death_callback(save_crash_input);
  } else {
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) ::signal(sig, on_signal);
  }
  ::signal(SIGABRT, on_signal);  // FUZZ_CHECK; sanitizers leave SIGABRT alone
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);

  Mutator mutator(corpus, max_len);
  if (only >= 0) {
    Bytes b = mutator.make(seed, only);
    if (!dump.empty()) {
      std::ofstream(dump, std::ios::binary)
          .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
      std::printf("fuzz driver: iteration %lld (%zu bytes) written to %s\n", only, b.size(),
                  dump.c_str());
    }
    run_one(b, only);
    std::printf("fuzz driver: iteration %lld passed\n", only);
    return 0;
  }
  auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < corpus.size(); ++i) run_one(corpus[i], -1);
  std::printf("fuzz driver: %zu seed(s) passed\n", corpus.size());
  long long done = 0;
  for (; done < iterations; ++done) {
    if ((done & 63) == 0) {
      std::chrono::duration<double> t = std::chrono::steady_clock::now() - start;
      if (t.count() > max_seconds) {
        std::printf("fuzz driver: stopped after %lld of %lld mutations (the -t %.0f s budget)\n",
                    done, iterations, max_seconds);
        break;
      }
    }
    run_one(mutator.make(seed, done), done);
  }
  std::chrono::duration<double> t = std::chrono::steady_clock::now() - start;
  std::printf("fuzz driver: %lld mutation(s) of seed %llu passed in %.1f s\n", done,
              static_cast<unsigned long long>(seed), t.count());
  return 0;
}
