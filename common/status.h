// Status codes and Result<T>: how every layer below api/ reports errors.
// Nothing below api/ throws; a Status is one byte-sized code, cheap to copy
// through completions on the hot path. Codes are grouped by what the caller
// does next (docs/STYLE.md section 3); their numeric values are the C API's
// LT_ERR_* values (api/lt.cc static_asserts that).
#pragma once

#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>

namespace lt {

enum class Code : uint8_t {
  kOk = 0,
  // caller bug
  kInvalidArg = 1,
  kBadHandle = 2,
  kOutOfBounds = 3,
  kPerm = 4,
  // fail fast
  kPeerDown = 5,
  kTimedOut = 6,
  // retry after progress
  kNoResource = 7,
  kQuota = 8,
  kUnsupported = 9,
  kMalformed = 10,
  kNotFound = 11,
  kExists = 12,
  kAuth = 13,
  kNoMemory = 14,
  kNotJoined = 15,
  kAlign = 16,
  kNoHandler = 17,
  kTruncated = 18,
  kClosed = 19,
  kInternal = 20,
  kSys = 21,
};
inline constexpr int kNumCodes = 22;

/// Short stable name ("LT_ERR_PEER_DOWN") and a one-line description.
const char* code_name(Code c);
const char* code_text(Code c);

class [[nodiscard]] Status {
 public:
  constexpr Status() = default;
  constexpr Status(Code c) : code_(c) {}  // NOLINT: implicit by design
  static constexpr Status ok() { return Status(); }
  constexpr bool is_ok() const { return code_ == Code::kOk; }
  constexpr Code code() const { return code_; }
  constexpr explicit operator bool() const { return is_ok(); }
  const char* name() const { return code_name(code_); }
  const char* text() const { return code_text(code_); }
  constexpr bool operator==(const Status&) const = default;

 private:
  Code code_ = Code::kOk;
};

/// A value or a non-ok Status. Outputs are set only on success.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T v) : status_(), has_(true) { new (&storage_) T(std::move(v)); }  // NOLINT
  Result(Status s) : status_(s), has_(false) {}                             // NOLINT
  Result(Code c) : status_(c), has_(false) {}                               // NOLINT
  Result(const Result& o) : status_(o.status_), has_(o.has_) {
    if (has_) new (&storage_) T(o.value());
  }
  Result(Result&& o) noexcept : status_(o.status_), has_(o.has_) {
    if (has_) new (&storage_) T(std::move(o.value()));
  }
  Result& operator=(Result o) noexcept {
    reset();
    status_ = o.status_;
    has_ = o.has_;
    if (has_) new (&storage_) T(std::move(o.value()));
    return *this;
  }
  ~Result() { reset(); }

  bool is_ok() const { return has_; }
  explicit operator bool() const { return has_; }
  Status status() const { return status_; }
  T& value() & { return *std::launder(reinterpret_cast<T*>(&storage_)); }
  const T& value() const& { return *std::launder(reinterpret_cast<const T*>(&storage_)); }
  T&& value() && { return std::move(*std::launder(reinterpret_cast<T*>(&storage_))); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }

 private:
  void reset() {
    if (has_) value().~T();
    has_ = false;
  }
  Status status_;
  bool has_;
  alignas(T) unsigned char storage_[sizeof(T)];
};

}  // namespace lt

#define LT_RETURN_IF_ERROR(expr)      \
  do {                                \
    ::lt::Status lt_s_ = (expr);      \
    if (!lt_s_.is_ok()) return lt_s_; \
  } while (0)
