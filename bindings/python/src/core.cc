#include "core.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "request.h"
#include "rpc.h"

namespace ltpy {

void set_python_error(const CallError& e) {
  py::object from_call = py::module_::import("ltier.errors").attr("_from_call");
  std::string msg = e.what + ": " + LT_strerror(e.rc);
  py::object exc = from_call(-e.rc, msg, e.needed);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
}

int64_t timeout_us(const py::object& seconds) {
  if (seconds.is_none()) return -1;
  double s = arg_as<double>(seconds, "timeout");
  if (std::isnan(s) || s < 0)
    throw CallError{-LT_ERR_INVAL, "timeout must be None or >= 0 seconds"};
  double us = s * 1e6;
  return us > 9e15 ? int64_t{9'000'000'000'000'000} : static_cast<int64_t>(us);
}

BufferView::BufferView(const py::handle& obj, bool writable) {
  int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) throw py::error_already_set();
}

BufferView::~BufferView() {
  if (view_.obj != nullptr) PyBuffer_Release(&view_);
}

py::bytes new_bytes(size_t n) {
  PyObject* b = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(n));
  if (b == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::bytes>(b);
}

char* bytes_data(const py::bytes& b) { return PyBytes_AS_STRING(b.ptr()); }

// Only for a bytes object nobody else has seen yet (reference count 1).
void shrink_bytes(py::bytes& b, size_t n) {
  PyObject* p = b.release().ptr();
  if (_PyBytes_Resize(&p, static_cast<Py_ssize_t>(n)) != 0) throw py::error_already_set();
  b = py::reinterpret_steal<py::bytes>(p);
}

int wait_interruptible(EngineState& s, lt_engine_t* e, lt_req_t req, int64_t timeout_us, bool keep,
                       bool* in_flight) {
  using Clock = std::chrono::steady_clock;
  const int64_t total = timeout_us < 0 ? s.op_timeout_us() : timeout_us;
  const auto end = Clock::now() + std::chrono::microseconds(total);
  if (in_flight != nullptr) *in_flight = false;
  for (;;) {
    const int64_t left =
        std::chrono::duration_cast<std::chrono::microseconds>(end - Clock::now()).count();
    {
      py::gil_scoped_release nogil;
      int rc = LT_wait(e, req, std::clamp<int64_t>(left, 0, kWaitSliceUs));
      if (rc != -LT_ERR_TIMEDOUT) return rc;
      // The slice ran out, or the operation itself ended in TIMEDOUT (then
      // the request is gone).
      int done = 0;
      int t = LT_test(e, req, &done);
      if (t == -LT_ERR_BAD_HANDLE) return -LT_ERR_TIMEDOUT;
      if (done) return t;
    }
    if (s.closed()) {  // leave() waits for this call: the request must end here
      int c = LT_cancel(e, req);
      return c == -LT_ERR_TIMEDOUT ? -LT_ERR_CLOSED : c;
    }
    if (PyErr_CheckSignals() != 0) {
      if (!keep) (void)LT_cancel(e, req);
      throw py::error_already_set();
    }
    if (left <= 0) {
      if (keep) {
        if (in_flight != nullptr) *in_flight = true;
        return -LT_ERR_TIMEDOUT;
      }
      return LT_cancel(e, req);  // TIMEDOUT, or the status if it completed meanwhile
    }
  }
}

char* scratch(size_t cap) {
  struct Area {
    char* p = nullptr;
    size_t cap = 0;
    ~Area() {
      if (p != nullptr) munmap(p, this->cap);
    }
  };
  thread_local Area a;
  if (cap <= a.cap) return a.p;
  size_t want = std::max<size_t>(cap, 1u << 20);
  void* p = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) throw CallError{-LT_ERR_NO_MEMORY, "receive buffer"};
  if (a.p != nullptr) munmap(a.p, a.cap);
  a.p = static_cast<char*>(p);
  a.cap = want;
  return a.p;
}

EngineState::EngineState(lt_engine_t* e) : e_(e), node_(LT_node_id(e)), max_msg_(64u << 20) {}

EngineState::~EngineState() {
  // The last Python reference went away without leave(): leave now (not
  // from a handler thread, which leave() would have to join).
  if (closed() || in_handler()) return;
  try {
    leave();
  } catch (...) {  // a destructor does not throw
  }
}

EngineState::Use::Use(EngineState& s) : s_(s) {
  if (s.closing_.load(std::memory_order_relaxed))
    throw CallError{-LT_ERR_NOT_JOINED, "the engine has left the cluster"};
  ++s.active_;
}

void EngineState::leave() {
  if (in_handler()) throw CallError{-LT_ERR_INVAL, "leave() from inside an RPC handler"};
  if (closing_.exchange(true)) return;
  std::vector<std::unique_ptr<Dispatcher>> ds;
  std::unique_ptr<Completer> c;
  {
    std::lock_guard<std::mutex> g(mu_);
    ds.swap(dispatchers_);
    c.swap(completer_);
  }
  if (c) c->stop();
  {
    py::gil_scoped_release nogil;
    for (auto& d : ds) d->stop();
  }
  while (active_ != 0) {  // calls other threads have in progress
    py::gil_scoped_release nogil;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  {
    py::gil_scoped_release nogil;
    LT_leave(e_);
  }
  ds.clear();  // Python functions are dropped with the GIL
  c.reset();
}

void EngineState::add_dispatcher(std::unique_ptr<Dispatcher> d) {
  std::lock_guard<std::mutex> g(mu_);
  dispatchers_.push_back(std::move(d));
}

py::object EngineState::local_handler(uint32_t func_id) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto& d : dispatchers_)
    if (d->func_id() == func_id) return d->fn();
  return py::none();
}

Completer& EngineState::completer() {
  std::lock_guard<std::mutex> g(mu_);
  if (closed()) throw CallError{-LT_ERR_NOT_JOINED, "the engine has left the cluster"};
  if (!completer_) completer_ = std::make_unique<Completer>(e_);
  return *completer_;
}

namespace {
std::mutex registry_mu;
std::vector<std::weak_ptr<EngineState>>& registry() {
  static auto* r = new std::vector<std::weak_ptr<EngineState>>();  // outlives exit handlers
  return *r;
}
}  // namespace

void track(const EnginePtr& e) {
  std::lock_guard<std::mutex> g(registry_mu);
  auto& r = registry();
  r.erase(std::remove_if(r.begin(), r.end(), [](auto& w) { return w.expired(); }), r.end());
  r.push_back(e);
}

void leave_all() {
  std::vector<EnginePtr> live;
  {
    std::lock_guard<std::mutex> g(registry_mu);
    for (auto& w : registry())
      if (auto e = w.lock()) live.push_back(std::move(e));
    registry().clear();
  }
  for (auto& e : live) e->leave();
}

}  // namespace ltpy
