// What every part of the Python module shares: the engine a Python object
// holds on to, the guard that keeps it alive across a call made without the
// GIL, errors as C++ exceptions on their way to ltier.Error, and buffers.
//
// Threads: every LT_* call runs with the GIL released; the GIL is taken back
// only to build results and to run Python handlers and callbacks.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "ltier/lt.h"

namespace ltpy {

namespace py = pybind11;

/// An LT_* call failed: the module's exception translator raises the
/// ltier.Error subclass named after `rc` (errors.py). `needed` is the size a
/// truncated message or reply needed, 0 otherwise.
struct CallError {
  int rc;
  std::string what;
  uint64_t needed = 0;
};

/// Raises the ltier.Error subclass errors.py maps e.rc to (sets the Python
/// error indicator), built as Error(code, message, needed).
void set_python_error(const CallError& e);

/// Throws CallError for a negative rc.
inline void check(int rc, const char* what) {
  if (rc < 0) throw CallError{rc, what};
}

/// An argument taken as a Python object (an optional one, most often) as T,
/// or TypeError naming it; pybind11's own failure would be a RuntimeError.
template <typename T>
T arg_as(const py::handle& o, const char* name) {
  try {
    return o.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error(std::string(name) + ": not " +
                         (std::is_floating_point_v<T> ? "a number" : "a non-negative int") +
                         " but " + Py_TYPE(o.ptr())->tp_name);
  }
}

/// A size argument: `dflt` for None.
inline size_t size_arg(const py::handle& o, size_t dflt, const char* name) {
  return o.is_none() ? dflt : arg_as<size_t>(o, name);
}

/// Seconds from Python (None: the engine's default) to the C API's
/// microseconds (negative: the default; 0: look once).
int64_t timeout_us(const py::object& seconds);

/// A contiguous view of a Python buffer (bytes, bytearray, memoryview, numpy
/// array), held while the GIL is released: the exporter cannot resize or free
/// it meanwhile. Non-contiguous buffers raise BufferError.
class BufferView {
 public:
  BufferView(const py::handle& obj, bool writable);
  ~BufferView();
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;
  void* data() const { return view_.buf; }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_{};
};

/// A bytes object of `n` bytes whose storage the C API fills in place (no
/// second copy); `shrink` cuts it to what arrived.
py::bytes new_bytes(size_t n);
char* bytes_data(const py::bytes& b);
void shrink_bytes(py::bytes& b, size_t n);

class EngineState;

/// How long a blocking call waits without looking at leave() and signals:
/// short against a user's patience, long against the cost of one more call.
constexpr int64_t kWaitSliceUs = 50'000;

/// Waits for `req` as LT_wait would (timeout_us negative: the engine's op
/// timeout), in slices with the GIL released, so that what happens meanwhile
/// ends the wait: leave() on another thread (the request is cancelled;
/// -LT_ERR_CLOSED) or a signal such as Ctrl-C (its Python exception is
/// raised). With `keep` false the request is cancelled on a signal and on the
/// timeout too (its buffers are free when this returns); with `keep` true it
/// stays in flight then, and *in_flight says so on a timeout. Call with the
/// GIL held and the engine pinned (EngineState::Use).
int wait_interruptible(EngineState& s, lt_engine_t* e, lt_req_t req, int64_t timeout_us,
                       bool keep = false, bool* in_flight = nullptr);

/// Per-thread landing area for messages and replies whose size is known only
/// once they arrive: reserved address space (MAP_NORESERVE), so a 64 MiB
/// capacity costs only the pages a message touches, and reused call after call.
char* scratch(size_t cap);

class Dispatcher;
class Completer;

/// One joined engine, shared by the Python objects made from it (Engine,
/// Lmr, Request, handlers). leave() may run while other threads are inside
/// calls: it closes the door, stops the handler and completion threads, waits
/// for calls in progress (each bounded by its timeout) and then leaves.
class EngineState : public std::enable_shared_from_this<EngineState> {
 public:
  explicit EngineState(lt_engine_t* e);
  ~EngineState();

  /// Pins the engine for one call: throws NotJoinedError once leave() began.
  /// Made and dropped with the GIL held (before releasing it, after taking it
  /// back), so the count needs no atomic instruction: the GIL orders it.
  class Use {
   public:
    explicit Use(EngineState& s);
    ~Use() { --s_.active_; }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    lt_engine_t* e() const { return s_.e_; }

   private:
    EngineState& s_;
  };

  /// Idempotent; called with the GIL held (released inside).
  void leave();
  bool closed() const { return closing_.load(std::memory_order_acquire); }
  /// The largest message any of this engine's transports accepts.
  size_t max_msg() const { return max_msg_; }
  /// engine.op_timeout_ms, in microseconds.
  int64_t op_timeout_us() const { return op_timeout_us_; }
  void set_limits(size_t max_msg, int64_t op_timeout_us) {
    max_msg_ = max_msg;
    op_timeout_us_ = op_timeout_us;
  }
  lt_node_t node_id() const { return node_; }
  /// The engine for code that stops before leave() calls LT_leave (the
  /// handler and completion threads); everything else goes through Use.
  lt_engine_t* raw() const { return e_; }

  /// Python handlers for func_id run on `threads` threads of their own.
  void add_dispatcher(std::unique_ptr<Dispatcher> d);
  /// The Python handler registered for func_id on this engine, or None
  /// (a call to this node runs it in the caller's thread, as the C API does
  /// for its own handlers). GIL held.
  py::object local_handler(uint32_t func_id);
  /// The asyncio completion thread, started at the first await.
  Completer& completer();

 private:
  lt_engine_t* e_;
  lt_node_t node_;
  size_t max_msg_;
  int64_t op_timeout_us_ = 10'000'000;
  int active_ = 0;  // calls in progress; read and written with the GIL held
  std::atomic<bool> closing_{false};
  std::mutex mu_;  // guards dispatchers_ and completer_
  std::vector<std::unique_ptr<Dispatcher>> dispatchers_;
  std::unique_ptr<Completer> completer_;
};

using EnginePtr = std::shared_ptr<EngineState>;

/// Runs f(lt_engine_t*) with the engine pinned and the GIL released; throws
/// CallError(what) for a negative result, which it returns otherwise.
template <typename F>
int call(EngineState& s, const char* what, F&& f) {
  int rc;
  {
    EngineState::Use use(s);
    py::gil_scoped_release nogil;
    rc = f(use.e());
  }
  check(rc, what);
  return rc;
}

/// Every engine still joined, for the interpreter's exit (ltier/__init__.py
/// registers leave_all with atexit).
void track(const EnginePtr& e);
void leave_all();

/// The parts of the module, defined in one file each; the Engine class gets
/// its methods from several of them.
using EngineClass = py::class_<EngineState, EnginePtr>;
void bind_engine(py::module_& m, EngineClass& cls);
void bind_lmr(py::module_& m, EngineClass& cls);
void bind_request(py::module_& m);
void bind_messaging(py::module_& m, EngineClass& cls);
void bind_rpc(py::module_& m, EngineClass& cls);

}  // namespace ltpy
