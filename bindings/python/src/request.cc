#include "request.h"

#include <chrono>

namespace ltpy {

namespace {
// How long the completion thread sleeps in LT_wait on its oldest request
// before it tests the others again: a newer request that finished first
// waits at most this much for its callback.
constexpr int64_t kOldestSliceUs = 200;
}  // namespace

Pending::~Pending() {
  if (!done && req != 0 && eng && !eng->closed()) {
    EngineState::Use use(*eng);
    py::gil_scoped_release nogil;
    (void)LT_cancel(use.e(), req);
  }
}

void Pending::land(const py::object& into_obj, char** dst, size_t* cap) {
  if (!into_obj.is_none()) {
    out_view = std::make_unique<BufferView>(into_obj, true);
    into = true;
    out = into_obj;
    *dst = static_cast<char*>(out_view->data());
    *cap = out_view->size();
    return;
  }
  py::bytes b = new_bytes(*cap);
  *dst = bytes_data(b);
  out = std::move(b);
}

void Pending::finish(int rc) {
  status = rc;
  done = true;
  view.reset();
  out_view.reset();
}

// Cuts the result bytes to what arrived; they are still ours alone here.
void Pending::shrink_out() {
  if (static_cast<size_t>(PyBytes_GET_SIZE(out.ptr())) == len) return;
  auto b = py::reinterpret_steal<py::bytes>(out.release());
  shrink_bytes(b, len);
  out = std::move(b);
}

py::object Pending::result() {
  if (status < 0) {
    CallError err{status, "request", 0};
    if (status == -LT_ERR_TRUNCATED) err.needed = len;
    throw err;
  }
  switch (kind) {
    case Kind::kNone:
      return py::none();
    case Kind::kRead:
      return out;
    case Kind::kAtomic:
      return py::int_(old);
    case Kind::kRecv:
      if (into) return py::make_tuple(src, len);
      shrink_out();
      return py::make_tuple(src, out);
    case Kind::kRpc:
      if (into) return py::int_(len);
      shrink_out();
      return out;
  }
  return py::none();
}

namespace {
// Marks a request busy for one LT_wait/LT_test (the C API allows one thread
// at a time on a request).
class Busy {
 public:
  explicit Busy(Pending& p) : p_(p) {
    if (p.awaited) throw CallError{-LT_ERR_INVAL, "request is being awaited"};
    if (p.busy.exchange(true)) throw CallError{-LT_ERR_INVAL, "request waited on by two threads"};
  }
  ~Busy() { p_.busy.store(false); }

 private:
  Pending& p_;
};
}  // namespace

py::object Request::wait(const py::object& timeout) {
  Pending& p = *p_;
  if (p.done) return p.result();
  Busy busy(p);
  int64_t us = timeout_us(timeout);
  int rc;
  bool in_flight = false;
  if (p.eng->closed()) {
    rc = -LT_ERR_CLOSED;  // LT_leave failed it; nothing to wait for
  } else {
    EngineState::Use use(*p.eng);
    rc = wait_interruptible(*p.eng, use.e(), p.req, us, /*keep=*/true, &in_flight);
  }
  if (in_flight) throw CallError{-LT_ERR_TIMEDOUT, "wait (the request is still in flight)"};
  p.finish(rc);
  return p.result();
}

bool Request::test() {
  Pending& p = *p_;
  if (p.done) return true;
  Busy busy(p);
  if (p.eng->closed()) {
    p.finish(-LT_ERR_CLOSED);
    return true;
  }
  int done = 0, rc;
  {
    EngineState::Use use(*p.eng);
    py::gil_scoped_release nogil;
    rc = LT_test(use.e(), p.req, &done);
  }
  if (done) p.finish(rc);
  return done != 0;
}

void Request::watch(py::object cb) {
  Pending& p = *p_;
  if (p.awaited) throw CallError{-LT_ERR_INVAL, "request already awaited"};
  if (p.busy.load()) throw CallError{-LT_ERR_INVAL, "request waited on by another thread"};
  p.on_done = std::move(cb);
  if (p.done) {
    py::object f = std::move(p.on_done);
    f();
    return;
  }
  p.awaited = true;
  p.eng->completer().add(p_);
}

Completer::Completer(lt_engine_t* e) : e_(e), thread_([this] { run(); }) {}

Completer::~Completer() {
  if (thread_.joinable()) thread_.join();
}

void Completer::add(PendingPtr p) {
  {
    std::lock_guard<std::mutex> g(mu_);
    inbox_.push_back(std::move(p));
  }
  cv_.notify_one();
}

void Completer::settle(std::vector<PendingPtr>& ready) {
  py::gil_scoped_acquire gil;
  for (auto& p : ready) {
    p->view.reset();
    p->out_view.reset();
    py::object f = std::move(p->on_done);
    if (!f) continue;
    try {
      f();
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("ltier: asyncio completion callback");
    }
  }
  ready.clear();  // Pending references go with the GIL held
}

// The loop owns `live` and runs without the GIL; `finish` touches only C++
// state, and Python objects are dropped in settle() under the GIL.
void Completer::run() {
  std::vector<PendingPtr> live, ready;
  for (;;) {
    {
      std::unique_lock<std::mutex> g(mu_);
      if (live.empty()) cv_.wait(g, [&] { return stop_ || !inbox_.empty(); });
      if (stop_) break;
      for (auto& p : inbox_) live.push_back(std::move(p));
      inbox_.clear();
    }
    for (size_t i = 0; i < live.size();) {
      int done = 0;
      int rc = LT_test(e_, live[i]->req, &done);
      if (done || rc == -LT_ERR_BAD_HANDLE) {
        live[i]->status = rc;
        live[i]->done = true;
        ready.push_back(std::move(live[i]));
        live[i] = std::move(live.back());
        live.pop_back();
      } else {
        ++i;
      }
    }
    if (!ready.empty()) {
      settle(ready);
      continue;
    }
    if (live.empty()) continue;
    int rc = LT_wait(e_, live.front()->req, kOldestSliceUs);
    if (rc != -LT_ERR_TIMEDOUT) {
      live.front()->status = rc;
      live.front()->done = true;
      ready.push_back(std::move(live.front()));
      live.erase(live.begin());
      settle(ready);
    }
  }
  // Closing: what is left never completes; its buffers are released here.
  for (auto& p : live) {
    (void)LT_cancel(e_, p->req);
    p->status = -LT_ERR_CLOSED;
    p->done = true;
    ready.push_back(std::move(p));
  }
  live.clear();
  {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& p : inbox_) {
      (void)LT_cancel(e_, p->req);
      p->status = -LT_ERR_CLOSED;
      p->done = true;
      ready.push_back(std::move(p));
    }
    inbox_.clear();
  }
  if (!ready.empty()) settle(ready);
}

void Completer::stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  py::gil_scoped_release nogil;
  if (thread_.joinable()) thread_.join();
}

void bind_request(py::module_& m) {
  py::class_<Request>(m, "Request", R"(An operation in flight, from one of the *_async calls.

wait(timeout=None) returns its result (or raises its error) once it
completes; test() says whether it has; `await request` does the same from
asyncio without a thread per call. Dropping an unfinished request cancels it.)")
      .def("wait", &Request::wait, py::arg("timeout") = py::none(),
           "Waits up to `timeout` seconds (None: the engine's op timeout) and returns the "
           "result. TimedOutError leaves the request in flight.")
      .def("test", &Request::test, "True once the request has completed (never blocks).")
      .def_property_readonly("done", &Request::done)
      .def("_watch", &Request::watch)
      .def("__await__", [](py::object self) {
        return py::module_::import("ltier.aio").attr("_await")(self).attr("__await__")();
      });
}

}  // namespace ltpy
