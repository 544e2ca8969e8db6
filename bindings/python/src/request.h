// Operations in flight (LT_*_async) as Python Request objects, and the one
// thread per engine that completes the ones awaited from asyncio.
#pragma once

#include <memory>
#include <optional>

#include "core.h"

namespace ltpy {

/// What a completed request gives back.
enum class Kind { kNone, kRead, kAtomic, kRecv, kRpc };

/// One lt_req_t and everything it writes into, at a stable address until it
/// ends. Destroyed only with the GIL held (it owns Python references); an
/// unfinished one is cancelled first, so no buffer it names is freed early.
struct Pending {
  EnginePtr eng;
  lt_req_t req = 0;
  Kind kind = Kind::kNone;
  uint64_t old = 0;  // atomics
  lt_node_t src = 0;
  size_t len = 0;                    // recv and rpc
  py::object keep;                   // the caller's input buffer object
  std::unique_ptr<BufferView> view;  // and its view, held until the end
  py::object out;                    // result bytes, or the caller's `into`
  std::unique_ptr<BufferView> out_view;
  bool into = false;
  std::atomic<bool> busy{false};  // a thread is in LT_wait/LT_test on it
  bool awaited = false;           // owned by the Completer from now on
  std::atomic<bool> done{false};
  int status = 0;      // written before done is set
  py::object on_done;  // asyncio's callback, called once with the GIL

  ~Pending();
  /// Where a recv or rpc lands: the caller's writable `into` (held until the
  /// end), else a new bytes object of `cap` bytes. Sets *dst and *cap.
  void land(const py::object& into, char** dst, size_t* cap);
  /// Records the final status; drops the views (the GIL is held).
  void finish(int rc);
  /// The value or the exception, once done.
  py::object result();

 private:
  void shrink_out();
};

using PendingPtr = std::shared_ptr<Pending>;

/// Completes awaited requests: tests them round-robin, sleeps in LT_wait on
/// the oldest (which spins briefly, then blocks) when none is ready, and runs
/// their callbacks with the GIL. One thread per engine, not one per call.
class Completer {
 public:
  explicit Completer(lt_engine_t* e);
  ~Completer();
  /// GIL held.
  void add(PendingPtr p);
  /// Cancels what is left (ClosedError) and joins; GIL held, released inside.
  void stop();

 private:
  void run();
  void settle(std::vector<PendingPtr>& ready);
  lt_engine_t* e_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<PendingPtr> inbox_;
  bool stop_ = false;
  std::thread thread_;
};

/// The Python-facing request.
class Request {
 public:
  explicit Request(PendingPtr p) : p_(std::move(p)) {}
  py::object wait(const py::object& timeout);
  bool test();
  void watch(py::object cb);
  bool done() const { return p_->done; }

 private:
  PendingPtr p_;
};

/// Starts an async operation: `start` gets the engine and the lt_req_t to fill
/// and is called with the GIL released. Returns the Request for Python.
template <typename F>
Request start_async(const EnginePtr& eng, PendingPtr p, F&& start, const char* what) {
  p->eng = eng;
  int rc;
  {
    EngineState::Use use(*eng);
    py::gil_scoped_release nogil;
    rc = start(use.e(), p.get());
  }
  if (rc < 0) {
    p->done = true;  // nothing in flight to cancel
    throw CallError{rc, what};
  }
  // Complete at the call (an eager send): done now, so wait() and await
  // return at once, with no hop through the completion thread.
  if (p->req == LT_REQ_DONE) p->finish(0);
  return Request(std::move(p));
}

}  // namespace ltpy
