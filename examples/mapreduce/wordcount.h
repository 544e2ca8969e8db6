// Word count's local parts, shared by the distributed job (wordcount.cc) and
// the single-process reference (wordcount_ref.cc): the tokenizer, a counting
// hash table keyed by views into memory that outlives it, the split of a
// corpus into line-aligned ranges, the shuffle's record format, and an
// order-independent digest of a result.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

namespace wc {

/// 64-bit hash of a word (FNV-1a, then a finalizer that spreads the low bits).
inline uint64_t hash_word(std::string_view w) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : w) h = (h ^ c) * 1099511628211ull;
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 33);
}

/// Calls f(word) for every maximal run of non-whitespace bytes in [b, e).
template <typename F>
void tokenize(const char* b, const char* e, F&& f) {
  const char* p = b;
  while (p < e) {
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r')) ++p;
    const char* s = p;
    while (p < e && *p != ' ' && *p != '\n' && *p != '\t' && *p != '\r') ++p;
    if (p > s) f(std::string_view(s, static_cast<size_t>(p - s)));
  }
}

/// word -> count, open addressing. A slot is half a cache line and holds
/// words of up to 15 bytes itself, so finding a word already counted touches
/// only its slot (comparing against the word's first occurrence in the corpus
/// would be a cache miss per word); longer words point at their bytes, which
/// must outlive the table.
class Counts {
 public:
  explicit Counts(size_t expect = 1 << 16) {
    size_t n = 16;
    while (n * 3 < expect * 4) n <<= 1;
    slots_.resize(n);
  }
  void add(std::string_view w, uint64_t n = 1) { add(w, hash_word(w), n); }
  void add(std::string_view w, uint64_t h, uint64_t n) {
    if ((used_ + 1) * 4 > slots_.size() * 3) grow();
    size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      Slot& s = slots_[i];
      if (s.count == 0) {
        s.set(w, h, n);
        ++used_;
        return;
      }
      if (s.hash == h && s.word() == w) {
        s.count += n;
        return;
      }
    }
  }
  /// Starts loading the slot a word with hash h probes first.
  void prefetch(uint64_t h) const { __builtin_prefetch(&slots_[h & (slots_.size() - 1)]); }
  size_t size() const { return used_; }
  /// f(word, hash, count) for every word.
  template <typename F>
  void each(F&& f) const {
    for (const Slot& s : slots_)
      if (s.count != 0) f(s.word(), s.hash, s.count);
  }

 private:
  static constexpr size_t kInline = 15;
  static constexpr uint8_t kFar = 0xff;
  // raw[0]: the length of a word held in raw[1..16), or kFar for a longer
  // one, whose length is at raw[4..8) and address at raw[8..16).
  struct Slot {
    uint64_t hash = 0;
    uint64_t count = 0;  // 0: empty
    char raw[16];
    std::string_view word() const {
      auto len = static_cast<uint8_t>(raw[0]);
      if (len != kFar) return std::string_view(raw + 1, len);
      uint32_t n;
      const char* p;
      std::memcpy(&n, raw + 4, 4);
      std::memcpy(&p, raw + 8, 8);
      return std::string_view(p, n);
    }
    void set(std::string_view w, uint64_t h, uint64_t n) {
      hash = h;
      count = n;
      if (w.size() <= kInline) {
        raw[0] = static_cast<char>(w.size());
        std::memcpy(raw + 1, w.data(), w.size());
      } else {
        raw[0] = static_cast<char>(kFar);
        auto len = static_cast<uint32_t>(w.size());
        const char* p = w.data();
        std::memcpy(raw + 4, &len, 4);
        std::memcpy(raw + 8, &p, 8);
      }
    }
  };
  static_assert(sizeof(Slot) == 32);
  void grow() {
    std::vector<Slot> old(slots_.size() * 2);
    old.swap(slots_);
    used_ = 0;
    for (const Slot& s : old)
      if (s.count != 0) add(s.word(), s.hash, s.count);
  }
  std::vector<Slot> slots_;
  size_t used_ = 0;
};

/// Counts every word of [b, e) into c. Words are hashed a batch ahead and
/// their slots prefetched, so the table's cache misses (most distinct words
/// are rare, and the table is larger than the caches) overlap instead of
/// stalling one word at a time.
inline void count_words(const char* b, const char* e, Counts* c) {
  constexpr int kBatch = 16;
  std::string_view w[kBatch];
  uint64_t h[kBatch];
  int n = 0;
  tokenize(b, e, [&](std::string_view x) {
    h[n] = hash_word(x);
    c->prefetch(h[n]);
    w[n] = x;
    if (++n == kBatch) {
      for (int i = 0; i < kBatch; ++i) c->add(w[i], h[i], 1);
      n = 0;
    }
  });
  for (int i = 0; i < n; ++i) c->add(w[i], h[i], 1);
}

/// Rank r's share of a corpus of `size` bytes split n ways: [*b, *e), moved
/// forward to line starts so that no line is cut.
inline void share(const char* data, uint64_t size, int r, int n, uint64_t* b, uint64_t* e) {
  auto line_start = [&](uint64_t at) {
    if (at == 0 || at >= size) return at >= size ? size : uint64_t{0};
    const void* nl = std::memchr(data + at - 1, '\n', size - (at - 1));
    return nl ? static_cast<uint64_t>(static_cast<const char*>(nl) - data) + 1 : size;
  };
  *b = line_start(size * static_cast<uint64_t>(r) / static_cast<uint64_t>(n));
  *e = line_start(size * static_cast<uint64_t>(r + 1) / static_cast<uint64_t>(n));
}

/// Shuffle records: [u32 length][u64 count][length bytes], packed.
inline void put_record(std::vector<char>& out, std::string_view w, uint64_t count) {
  uint32_t len = static_cast<uint32_t>(w.size());
  size_t at = out.size();
  out.resize(at + 12 + len);
  std::memcpy(out.data() + at, &len, 4);
  std::memcpy(out.data() + at + 4, &count, 8);
  std::memcpy(out.data() + at + 12, w.data(), len);
}
template <typename F>
void each_record(const char* b, const char* e, F&& f) {
  while (b + 12 <= e) {
    uint32_t len;
    uint64_t count;
    std::memcpy(&len, b, 4);
    std::memcpy(&count, b + 4, 8);
    if (b + 12 + len > e) return;
    f(std::string_view(b + 12, len), count);
    b += 12 + len;
  }
}

/// What a word count is compared by: distinct words, total words, and a
/// commutative sum over (word, count), so partial digests add up.
struct Digest {
  uint64_t distinct = 0, total = 0, sum = 0;
  void add(uint64_t word_hash, uint64_t count) {
    ++distinct;
    total += count;
    uint64_t x = word_hash ^ (count * 0x9e3779b97f4a7c15ull);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    sum += x ^ (x >> 29);
  }
  bool operator==(const Digest& o) const {
    return distinct == o.distinct && total == o.total && sum == o.sum;
  }
};

/// The whole count, one process: the reference the distributed job is checked against.
inline Digest count_all(const char* data, uint64_t size, Counts* out) {
  count_words(data, data + size, out);
  Digest d;
  out->each([&](std::string_view, uint64_t h, uint64_t n) { d.add(h, n); });
  return d;
}

}  // namespace wc
