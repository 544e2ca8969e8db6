#include "rpc.h"

#include <cstring>

#include "fastcall.h"
#include "request.h"

namespace ltpy {

namespace {
// How often a handler thread idle in LT_recvRPC looks at its stop flag.
constexpr int64_t kStopPollUs = 50'000;
thread_local bool tl_in_handler = false;
}  // namespace

bool in_handler() { return tl_in_handler; }

int status_of(const py::error_already_set& e) {
  py::object error = py::module_::import("ltier.errors").attr("Error");
  py::object v = e.value();
  if (PyObject_IsInstance(v.ptr(), error.ptr()) == 1) {
    int code = py::getattr(v, "code").cast<int>();
    if (code > 0 && code <= LT_ERR_SYS) return -code;
  }
  return -LT_ERR_INTERNAL;
}

Dispatcher::Dispatcher(lt_engine_t* e, uint32_t func_id, py::function fn, int threads)
    : e_(e), func_id_(func_id), fn_(std::move(fn)) {
  for (int i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
}

void Dispatcher::stop() {
  stop_.store(true);
  for (auto& t : threads_)
    if (t.joinable()) t.join();
}

Dispatcher::~Dispatcher() {
  if (!threads_.empty() && threads_.front().joinable()) {
    py::gil_scoped_release nogil;
    stop();
  }
}

int Dispatcher::call(lt_node_t src, const char* in, size_t len, std::vector<char>& reply) {
  py::gil_scoped_acquire gil;
  struct Mark {
    Mark() { tl_in_handler = true; }
    ~Mark() { tl_in_handler = false; }
  } mark;
  try {
    py::object r = fn_(src, py::bytes(in, len));
    reply.clear();
    if (!r.is_none()) {
      BufferView v(r, false);
      reply.assign(static_cast<const char*>(v.data()),
                   static_cast<const char*>(v.data()) + v.size());
    }
    return 0;
  } catch (py::error_already_set& e) {
    int status = status_of(e);
    // The caller sees the status; the traceback goes to this process's stderr.
    e.discard_as_unraisable(py::str("ltier RPC handler for function " + std::to_string(func_id_)));
    return status;
  }
}

// One handler thread: the loop holds no GIL while it waits, and leaves the
// request queued when its buffer is too small (it grows and takes it again).
void Dispatcher::run() {
  std::vector<char> in(64 << 10), reply;
  reply.reserve(64 << 10);
  while (!stop_.load(std::memory_order_relaxed)) {
    lt_node_t src = 0;
    size_t len = 0;
    lt_rpc_token_t token = 0;
    int rc = LT_recvRPC(e_, func_id_, in.data(), in.size(), &src, &len, &token, kStopPollUs);
    if (rc == -LT_ERR_TIMEDOUT) continue;
    if (rc == -LT_ERR_TRUNCATED) {
      in.resize(len);
      continue;
    }
    if (rc < 0) break;  // the engine is closing or was expelled
    int status = call(src, in.data(), len, reply);
    rc = LT_replyRPC(e_, token, reply.data(), status == 0 ? reply.size() : 0, status);
    if (rc == -LT_ERR_INVAL)  // reply above the largest message: the caller gets the error
      (void)LT_replyRPC(e_, token, nullptr, 0, -LT_ERR_INVAL);
  }
}

namespace {

// One request taken from a server-loop queue, answered once.
struct Call {
  EnginePtr eng;
  lt_node_t src = 0;
  py::bytes data;
  lt_rpc_token_t token = 0;
  bool answered = false;

  void answer(const void* p, size_t n, int status) {
    if (answered) throw CallError{-LT_ERR_BAD_HANDLE, "reply: this call was answered already"};
    call(*eng, "reply", [&](lt_engine_t* e) { return LT_replyRPC(e, token, p, n, status); });
    answered = true;
  }
};

struct RpcQueue {
  EnginePtr eng;
  uint32_t func_id;

  Call recv(const py::object& timeout) {
    int64_t us = timeout_us(timeout);
    size_t cap = eng->max_msg();
    char* buf = scratch(cap);
    Call c;
    c.eng = eng;
    size_t len = 0;
    int rc;
    {  // posted with the GIL (it does not block), waited for in slices
      EngineState::Use use(*eng);
      lt_req_t req = 0;
      rc = LT_recvRPC_async(use.e(), func_id, buf, cap, &c.src, &len, &c.token, &req);
      if (rc == 0) rc = wait_interruptible(*eng, use.e(), req, us);
    }
    if (rc == -LT_ERR_TRUNCATED) throw CallError{rc, "recv_call (the request stays queued)", len};
    check(rc, "recv_call");
    c.data = py::bytes(buf, len);
    return c;
  }
};

// A call to a Python handler of this very engine runs it here, in the
// caller's thread, with the same result and errors a remote caller gets.
py::object self_call(const py::object& fn, lt_node_t self, const BufferView& in, size_t cap,
                     const py::object& into) {
  std::vector<char> reply;
  int status = 0;
  try {
    py::object r = fn(self, py::bytes(static_cast<const char*>(in.data()), in.size()));
    if (!r.is_none()) {
      BufferView v(r, false);
      reply.assign(static_cast<const char*>(v.data()),
                   static_cast<const char*>(v.data()) + v.size());
    }
  } catch (py::error_already_set& e) {
    status = status_of(e);
    if (status != -LT_ERR_INTERNAL) throw;  // an ltier.Error: raised as it is
    e.discard_as_unraisable(py::str("ltier RPC handler (called on its own node)"));
    throw CallError{status, "rpc (the handler raised)"};
  }
  if (!into.is_none()) {
    BufferView out(into, true);
    if (reply.size() > out.size())
      throw CallError{-LT_ERR_TRUNCATED, "rpc (reply larger than `into`)", reply.size()};
    std::memcpy(out.data(), reply.data(), reply.size());
    return py::int_(reply.size());
  }
  if (reply.size() > cap)
    throw CallError{-LT_ERR_TRUNCATED, "rpc (reply larger than max_reply)", reply.size()};
  return py::bytes(reply.data(), reply.size());
}

// What rpc() returns: the reply as new bytes, or its length with `into`.
py::object rpc(EngineState& s, lt_node_t node, uint32_t func_id, const py::object& data,
               const py::object& into, const py::object& max_reply) {
  BufferView in(data, false);
  if (node == s.node_id()) {
    py::object fn = s.local_handler(func_id);
    if (!fn.is_none())
      return self_call(fn, node, in, size_arg(max_reply, s.max_msg(), "max_reply"), into);
  }
  size_t len = 0;
  int rc;
  if (!into.is_none()) {
    BufferView out(into, true);
    {
      EngineState::Use use(s);
      py::gil_scoped_release nogil;
      rc = LT_RPC(use.e(), node, func_id, in.data(), in.size(), out.data(), out.size(), &len);
    }
    if (rc == -LT_ERR_TRUNCATED) throw CallError{rc, "rpc (reply larger than `into`)", len};
    check(rc, "rpc");
    return py::int_(len);
  }
  size_t cap = size_arg(max_reply, s.max_msg(), "max_reply");
  char* buf = scratch(cap);
  {
    EngineState::Use use(s);
    py::gil_scoped_release nogil;
    rc = LT_RPC(use.e(), node, func_id, in.data(), in.size(), buf, cap, &len);
  }
  if (rc == -LT_ERR_TRUNCATED) throw CallError{rc, "rpc (reply larger than max_reply)", len};
  check(rc, "rpc");
  return py::bytes(buf, len);
}

// rpc(node, func_id, data[, into]) without pybind11's dispatcher
// (fastcall.h); other shapes decline to it.
PyObject* rpc_fast(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  uint64_t node, func_id;
  if (nargs < 3 || nargs > 4 || !fast::as_uint(args[0], UINT32_MAX, &node) ||
      !fast::as_uint(args[1], UINT32_MAX, &func_id))
    return fast::decline();
  py::object into = nargs == 4 ? py::reinterpret_borrow<py::object>(args[3]) : py::none();
  return fast::guarded([&] {
    return rpc(fast::self_as<EngineState>(self), static_cast<lt_node_t>(node),
               static_cast<uint32_t>(func_id), py::reinterpret_borrow<py::object>(args[2]), into,
               py::none());
  });
}

Request rpc_async(const EnginePtr& s, lt_node_t node, uint32_t func_id, const py::object& data,
                  const py::object& into, const py::object& max_reply) {
  auto p = std::make_shared<Pending>();
  p->kind = Kind::kRpc;
  p->view = std::make_unique<BufferView>(data, false);
  if (node == s->node_id()) {
    // A Python handler of this engine runs now; the request is born complete.
    py::object fn = s->local_handler(func_id);
    if (!fn.is_none()) {
      p->eng = s;
      p->into = !into.is_none();
      int status = 0;
      try {
        py::object r =
            self_call(fn, node, *p->view, size_arg(max_reply, s->max_msg(), "max_reply"), into);
        p->out = p->into ? into : r;
        p->len = p->into ? r.cast<size_t>() : py::len(r);
      } catch (const CallError& e) {
        status = e.rc;
        p->len = e.needed;
      } catch (py::error_already_set& e) {
        status = status_of(e);
      }
      p->finish(status);
      return Request(std::move(p));
    }
  }
  p->keep = data;
  char* dst = nullptr;
  size_t cap = into.is_none() ? size_arg(max_reply, s->max_msg(), "max_reply") : 0;
  p->land(into, &dst, &cap);
  const void* in = p->view->data();
  size_t in_len = p->view->size();
  return start_async(
      s, std::move(p),
      [&](lt_engine_t* e, Pending* q) {
        return LT_RPC_async(e, node, func_id, in, in_len, dst, cap, &q->len, &q->req);
      },
      "rpc");
}

int status_arg(const py::object& error) {
  if (py::isinstance<py::int_>(error)) {
    int c = error.cast<int>();
    return c > 0 ? -c : c;
  }
  if (py::hasattr(error, "code")) return -py::getattr(error, "code").cast<int>();
  throw CallError{-LT_ERR_INVAL, "fail: pass an ltier.Error (class or instance) or an LT_ERR code"};
}

}  // namespace

void bind_rpc(py::module_& m, EngineClass& cls) {
  py::class_<Call>(m, "Call", "One RPC request taken with RpcQueue.recv(); answer it once.")
      .def_readonly("src", &Call::src)
      .def_readonly("data", &Call::data)
      .def(
          "reply",
          [](Call& c, const py::object& data) {
            BufferView v(data, false);
            c.answer(v.data(), v.size(), 0);
          },
          py::arg("data") = py::bytes(), "Sends the reply (any contiguous buffer).")
      .def(
          "fail", [](Call& c, const py::object& error) { c.answer(nullptr, 0, status_arg(error)); },
          py::arg("error"),
          "Answers with an error instead: an ltier.Error class or instance, or an LT_ERR code; "
          "the caller raises the matching ltier.Error.");

  py::class_<RpcQueue>(m, "RpcQueue", "LITE's server loop: requests to one function id, FIFO.")
      .def_readonly("func_id", &RpcQueue::func_id)
      .def("recv", &RpcQueue::recv, py::arg("timeout") = py::none(),
           "The next request (a Call), waiting up to `timeout` s (TimedOutError).");

  cls.def(
         "register_rpc",
         [](const EnginePtr& s, uint32_t func_id, py::function fn, int threads) {
           if (threads < 1 || threads > 64) throw CallError{-LT_ERR_INVAL, "threads: 1..64"};
           call(*s, "register_rpc", [&](lt_engine_t* e) { return LT_regRPC_loop(e, func_id); });
           s->add_dispatcher(
               std::make_unique<Dispatcher>(s->raw(), func_id, std::move(fn), threads));
         },
         py::arg("func_id"), py::arg("handler"), py::arg("threads") = 1,
         "Serves func_id (0..65535) with handler(src, request: bytes) -> reply buffer or None, "
         "run on `threads` threads of the module's own (never the progress thread), with the "
         "GIL. An ltier.Error it raises reaches the caller as that error; any other exception "
         "as InternalError (its traceback is printed here).")
      .def(
          "rpc_queue",
          [](const EnginePtr& s, uint32_t func_id) {
            call(*s, "rpc_queue", [&](lt_engine_t* e) { return LT_regRPC_loop(e, func_id); });
            return RpcQueue{s, func_id};
          },
          py::arg("func_id"), "Registers func_id in the server-loop form and returns its queue.")
      .def("rpc", &rpc, py::arg("node"), py::arg("func_id"), py::arg("data") = py::bytes(),
           py::arg("into") = py::none(), py::arg("max_reply") = py::none(),
           "Calls func_id on `node` and returns the reply (bytes), or its length with `into`.")
      .def("rpc_async", &rpc_async, py::arg("node"), py::arg("func_id"),
           py::arg("data") = py::bytes(), py::arg("into") = py::none(),
           py::arg("max_reply") = py::none(), "rpc as a Request.");
  fast::install<&rpc_fast>(cls, "rpc");
}

}  // namespace ltpy
