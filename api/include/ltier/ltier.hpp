// ltier C++ API: a thin, header-only layer over the C API in lt.h.
//
// Errors are values, never exceptions: every call returns ltier::Status or
// ltier::Result<T>. Ownership: an Engine leaves the cluster when destroyed;
// Lmr is a plain handle value (free it with Engine::free, or unmap it);
// Request must be waited on (or tested to completion) exactly once.
// Thread-safety is that of the C API: all calls may come from any thread,
// except that an Engine must not be destroyed while other threads use it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ltier/lt.h"

namespace ltier {

/// 0 or a negative LT_ERR_* code.
class [[nodiscard]] Status {
 public:
  Status() = default;
  explicit Status(int rc) : rc_(rc) {}
  bool ok() const { return rc_ == 0; }
  explicit operator bool() const { return ok(); }
  int code() const { return rc_; }
  const char* name() const { return LT_errname(rc_); }      // "LT_ERR_PEER_DOWN"
  const char* message() const { return LT_strerror(rc_); }  // "peer node is down ..."
  bool operator==(int rc) const { return rc_ == rc; }

 private:
  int rc_ = 0;
};

/// A value or the Status saying why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T v) : value_(std::move(v)) {}  // NOLINT: implicit by design
  Result(Status s) : status_(s) {}       // NOLINT
  bool ok() const { return status_.ok(); }
  explicit operator bool() const { return ok(); }
  Status status() const { return status_; }
  T& value() { return value_; }
  const T& value() const { return value_; }
  T* operator->() { return &value_; }
  T& operator*() { return value_; }

 private:
  Status status_;
  T value_{};
};

enum Rights : uint32_t {
  kRead = LT_READ,
  kWrite = LT_WRITE,
  kAtomic = LT_ATOMIC,
  kRW = LT_RW,
  kAll = LT_READ | LT_WRITE | LT_ATOMIC
};

/// A handle on a local or remote memory region; copyable, process-local.
struct Lmr {
  lt_lmr_t handle = 0;
};

/// An operation in flight.
class [[nodiscard]] Request {
 public:
  Request() = default;
  Request(lt_engine_t* e, lt_req_t r) : e_(e), r_(r) {}
  /// The operation's status; LT_ERR_TIMEDOUT leaves it in flight.
  Status wait(std::chrono::microseconds timeout = std::chrono::microseconds(-1)) {
    return Status(LT_wait(e_, r_, timeout.count()));
  }
  /// true once complete (then *result holds the operation's status).
  bool test(Status* result) {
    int done = 0;
    int rc = LT_test(e_, r_, &done);
    if (done) *result = Status(rc);
    return done != 0;
  }

 private:
  lt_engine_t* e_ = nullptr;
  lt_req_t r_ = 0;
};

struct JoinOptions {
  std::string config_path;  // empty: $LTIER_CONFIG or none
  std::string manager;      // empty: config / $LTIER_MANAGER
  std::string secret;
  std::string tenant;
  std::string listen;
};

class Engine {
 public:
  /// Joins the cluster (see LT_join).
  static Result<std::unique_ptr<Engine>> join(const JoinOptions& o = {}) {
    lt_join_opts_t c{};
    auto opt = [](const std::string& s) { return s.empty() ? nullptr : s.c_str(); };
    c.config_path = opt(o.config_path);
    c.manager = opt(o.manager);
    c.secret = opt(o.secret);
    c.tenant = opt(o.tenant);
    c.listen = opt(o.listen);
    lt_engine_t* e = nullptr;
    int rc = LT_join(&c, &e);
    if (rc != 0) return Status(rc);
    return std::unique_ptr<Engine>(new Engine(e));
  }
  ~Engine() { LT_leave(e_); }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  lt_node_t id() const { return LT_node_id(e_); }
  std::vector<lt_node_t> nodes() const {
    std::vector<lt_node_t> ids(64);
    size_t n = 0;
    while (LT_nodes(e_, ids.data(), ids.size(), &n) == 0 && n > ids.size()) ids.resize(n);
    ids.resize(n < ids.size() ? n : ids.size());
    return ids;
  }

  Result<Lmr> malloc(lt_node_t node, uint64_t size, uint32_t rights = kRW) {
    Lmr l;
    int rc = LT_malloc(e_, node, size, rights, &l.handle);
    return rc ? Result<Lmr>(Status(rc)) : Result<Lmr>(l);
  }
  Status free(Lmr l) { return Status(LT_free(e_, l.handle)); }
  Status publish(Lmr l, const std::string& name, uint32_t max_rights) {
    return Status(LT_publish(e_, l.handle, name.c_str(), max_rights));
  }
  Result<Lmr> map(const std::string& name, uint32_t rights) {
    Lmr l;
    int rc = LT_map(e_, name.c_str(), rights, &l.handle);
    return rc ? Result<Lmr>(Status(rc)) : Result<Lmr>(l);
  }
  Status unmap(Lmr l) { return Status(LT_unmap(e_, l.handle)); }
  Result<uint64_t> size(Lmr l) const {
    uint64_t s = 0;
    int rc = LT_lmr_size(e_, l.handle, &s);
    return rc ? Result<uint64_t>(Status(rc)) : Result<uint64_t>(s);
  }

  Status read(Lmr l, uint64_t off, void* buf, uint64_t len) {
    return Status(LT_read(e_, l.handle, off, buf, len));
  }
  Status write(Lmr l, uint64_t off, const void* buf, uint64_t len) {
    return Status(LT_write(e_, l.handle, off, buf, len));
  }
  Status memset(Lmr l, uint64_t off, int value, uint64_t len) {
    return Status(LT_memset(e_, l.handle, off, value, len));
  }
  Status memcpy(Lmr dst, uint64_t dst_off, Lmr src, uint64_t src_off, uint64_t len) {
    return Status(LT_memcpy(e_, dst.handle, dst_off, src.handle, src_off, len));
  }

  /// 64-bit atomics on an 8-byte aligned word; the prior value on success.
  Result<uint64_t> fetch_add(Lmr l, uint64_t off, uint64_t add) {
    uint64_t old = 0;
    int rc = LT_fetch_add(e_, l.handle, off, add, &old);
    return rc ? Result<uint64_t>(Status(rc)) : Result<uint64_t>(old);
  }
  Result<uint64_t> compare_swap(Lmr l, uint64_t off, uint64_t expected, uint64_t desired) {
    uint64_t old = 0;
    int rc = LT_compare_swap(e_, l.handle, off, expected, desired, &old);
    return rc ? Result<uint64_t>(Status(rc)) : Result<uint64_t>(old);
  }

  Result<Request> read_async(Lmr l, uint64_t off, void* buf, uint64_t len) {
    lt_req_t r;
    int rc = LT_read_async(e_, l.handle, off, buf, len, &r);
    return rc ? Result<Request>(Status(rc)) : Result<Request>(Request(e_, r));
  }
  Result<Request> write_async(Lmr l, uint64_t off, const void* buf, uint64_t len) {
    lt_req_t r;
    int rc = LT_write_async(e_, l.handle, off, buf, len, &r);
    return rc ? Result<Request>(Status(rc)) : Result<Request>(Request(e_, r));
  }

  /// The C engine, for calls this header does not wrap.
  lt_engine_t* c_engine() const { return e_; }

 private:
  explicit Engine(lt_engine_t* e) : e_(e) {}
  lt_engine_t* e_;
};

}  // namespace ltier
