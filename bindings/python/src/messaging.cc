// send/recv to (node, port), blocking and async.
#include <algorithm>
#include <cstring>

#include "fastcall.h"
#include "request.h"

namespace ltpy {

namespace {

size_t cap_of(EngineState& s, const py::object& max_bytes) {
  return size_arg(max_bytes, s.max_msg(), "max_bytes");
}

// A receive too small for its message consumed it; the error says how big
// it was.
void check_recv(int rc, size_t len) {
  if (rc == -LT_ERR_TRUNCATED) throw CallError{rc, "recv (the message is consumed)", len};
  check(rc, "recv");
}

// Receives into [buf, buf + cap) with LT_recv, in slices with the GIL
// released, so that leave() on another thread and signals such as Ctrl-C end
// the wait (as wait_interruptible does for requests); a slice that times out
// has consumed nothing.
int recv_into(EngineState& s, uint32_t port, void* buf, size_t cap, int64_t us, lt_node_t* src,
              size_t* len) {
  EngineState::Use use(s);
  for (int64_t left = us < 0 ? s.op_timeout_us() : us;;) {
    const int64_t slice = std::min(left, kWaitSliceUs);
    int rc;
    {
      py::gil_scoped_release nogil;
      rc = LT_recv(use.e(), port, buf, cap, src, len, slice);
    }
    left -= slice;
    if (rc != -LT_ERR_TIMEDOUT || left <= 0) return rc;
    if (s.closed()) return -LT_ERR_CLOSED;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

py::tuple recv(EngineState& s, uint32_t port, const py::object& timeout, const py::object& into,
               const py::object& max_bytes) {
  int64_t us = timeout_us(timeout);
  lt_node_t src = 0;
  size_t len = 0;
  if (!into.is_none()) {
    BufferView v(into, true);
    int rc = recv_into(s, port, v.data(), v.size(), us, &src, &len);
    check_recv(rc, len);  // after the call: it sets len
    return py::make_tuple(src, len);
  }
  size_t cap = cap_of(s, max_bytes);
  char* buf = scratch(cap);
  int rc = recv_into(s, port, buf, cap, us, &src, &len);
  check_recv(rc, len);
  py::bytes b = new_bytes(len);
  std::memcpy(bytes_data(b), buf, len);
  return py::make_tuple(src, std::move(b));
}

Request recv_async(const EnginePtr& s, uint32_t port, const py::object& into,
                   const py::object& max_bytes) {
  auto p = std::make_shared<Pending>();
  p->kind = Kind::kRecv;
  char* dst = nullptr;
  size_t cap = into.is_none() ? cap_of(*s, max_bytes) : 0;
  p->land(into, &dst, &cap);
  return start_async(
      s, std::move(p),
      [&](lt_engine_t* e, Pending* q) {
        return LT_recv_async(e, port, dst, cap, &q->src, &q->len, &q->req);
      },
      "recv");
}

void send(EngineState& s, lt_node_t node, uint32_t port, const py::object& data) {
  BufferView v(data, false);
  call(s, "send", [&](lt_engine_t* e) { return LT_send(e, node, port, v.data(), v.size()); });
}

// send(node, port, data) and recv(port[, timeout[, into]]) without pybind11's
// dispatcher (fastcall.h); other shapes decline to it.
PyObject* send_fast(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  uint64_t node, port;
  if (nargs != 3 || !fast::as_uint(args[0], UINT32_MAX, &node) ||
      !fast::as_uint(args[1], UINT32_MAX, &port))
    return fast::decline();
  return fast::guarded([&] {
    send(fast::self_as<EngineState>(self), static_cast<lt_node_t>(node),
         static_cast<uint32_t>(port), py::reinterpret_borrow<py::object>(args[2]));
    return py::none();
  });
}

PyObject* recv_fast(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  uint64_t port;
  if (nargs < 1 || nargs > 3 || !fast::as_uint(args[0], UINT32_MAX, &port)) return fast::decline();
  auto arg = [&](Py_ssize_t i) {
    return i < nargs ? py::reinterpret_borrow<py::object>(args[i]) : py::none();
  };
  return fast::guarded([&] {
    return recv(fast::self_as<EngineState>(self), static_cast<uint32_t>(port), arg(1), arg(2),
                py::none());
  });
}

}  // namespace

void bind_messaging(py::module_&, EngineClass& cls) {
  cls.def("send", &send, py::arg("node"), py::arg("port"), py::arg("data"),
          "Sends a message (any contiguous buffer) to (node, port); returns when the buffer may be "
          "reused. Order is kept per (source, port).")
      .def(
          "send_async",
          [](const EnginePtr& s, lt_node_t node, uint32_t port, const py::object& data) {
            auto p = std::make_shared<Pending>();
            p->view = std::make_unique<BufferView>(data, false);
            p->keep = data;
            const void* src = p->view->data();
            size_t n = p->view->size();
            return start_async(
                s, std::move(p),
                [&](lt_engine_t* e, Pending* q) {
                  return LT_send_async(e, node, port, src, n, &q->req);
                },
                "send");
          },
          py::arg("node"), py::arg("port"), py::arg("data"),
          "send as a Request; `data` is kept alive until it completes. AgainError when the "
          "receiver's credits are used up (nothing was sent).")
      .def("recv", &recv, py::arg("port"), py::arg("timeout") = py::none(),
           py::arg("into") = py::none(), py::arg("max_bytes") = py::none(),
           "Receives the next message on `port` from any node: (src, bytes), or (src, length) "
           "with `into`. Waits up to `timeout` s (None: the engine's op timeout). A message "
           "above max_bytes (default: the largest any transport carries) or the `into` buffer "
           "raises TruncatedError with .needed set; it is consumed.")
      .def("recv_async", &recv_async, py::arg("port"), py::arg("into") = py::none(),
           py::arg("max_bytes") = py::none(), "recv as a Request.");
  fast::install<&send_fast>(cls, "send");
  fast::install<&recv_fast>(cls, "recv");
}

}  // namespace ltpy
