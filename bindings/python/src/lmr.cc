// LMRs as Python objects: one-sided reads and writes, memset, memcpy,
// atomics, their async forms, publish and map.
#include "fastcall.h"
#include "request.h"

namespace ltpy {

namespace {

// A handle on an LMR, with the engine it belongs to. The master frees it; a
// mapped handle is unmapped (close() picks the right one).
struct Lmr {
  EnginePtr eng;
  lt_lmr_t h = 0;
  bool master = false;
  bool released = false;

  uint64_t size() {
    uint64_t n = 0;
    call(*eng, "size", [&](lt_engine_t* e) { return LT_lmr_size(e, h, &n); });
    return n;
  }
  void close() {
    if (released) return;
    call(*eng, master ? "free" : "unmap",
         [&](lt_engine_t* e) { return master ? LT_free(e, h) : LT_unmap(e, h); });
    released = true;
  }
};

// Python ints of either sign as the 64-bit words the atomics work on.
uint64_t word(const py::int_& v) {
  uint64_t w = PyLong_AsUnsignedLongLongMask(v.ptr());
  if (w == static_cast<uint64_t>(-1) && PyErr_Occurred()) throw py::error_already_set();
  return w;
}

// read's length: given, or the `into` buffer's size.
uint64_t read_len(const py::object& length, const BufferView* into) {
  if (!length.is_none()) {
    auto n = arg_as<uint64_t>(length, "length");
    if (into != nullptr && n > into->size())
      throw CallError{-LT_ERR_INVAL, "length is larger than the `into` buffer"};
    return n;
  }
  if (into == nullptr) throw CallError{-LT_ERR_INVAL, "read needs a length or an `into` buffer"};
  return into->size();
}

py::object read(Lmr& l, uint64_t off, const py::object& length, const py::object& into) {
  if (!into.is_none()) {
    BufferView v(into, true);
    uint64_t n = read_len(length, &v);
    call(*l.eng, "read", [&](lt_engine_t* e) { return LT_read(e, l.h, off, v.data(), n); });
    return into;
  }
  uint64_t n = read_len(length, nullptr);
  py::bytes b = new_bytes(n);
  char* p = bytes_data(b);
  call(*l.eng, "read", [&](lt_engine_t* e) { return LT_read(e, l.h, off, p, n); });
  return b;
}

Request read_async(Lmr& l, uint64_t off, const py::object& length, const py::object& into) {
  auto p = std::make_shared<Pending>();
  p->kind = Kind::kRead;
  uint64_t n;
  char* dst;
  if (!into.is_none()) {
    p->out_view = std::make_unique<BufferView>(into, true);
    n = read_len(length, p->out_view.get());
    dst = static_cast<char*>(p->out_view->data());
    p->out = into;
  } else {
    n = read_len(length, nullptr);
    py::bytes b = new_bytes(n);
    dst = bytes_data(b);
    p->out = std::move(b);
  }
  lt_lmr_t h = l.h;
  return start_async(
      l.eng, std::move(p),
      [&](lt_engine_t* e, Pending* q) { return LT_read_async(e, h, off, dst, n, &q->req); },
      "read");
}

void write(Lmr& l, uint64_t off, const py::object& data) {
  BufferView v(data, false);
  call(*l.eng, "write", [&](lt_engine_t* e) { return LT_write(e, l.h, off, v.data(), v.size()); });
}

Request write_async(Lmr& l, uint64_t off, const py::object& data) {
  auto p = std::make_shared<Pending>();
  p->view = std::make_unique<BufferView>(data, false);
  p->keep = data;
  const void* src = p->view->data();
  size_t n = p->view->size();
  lt_lmr_t h = l.h;
  return start_async(
      l.eng, std::move(p),
      [&](lt_engine_t* e, Pending* q) { return LT_write_async(e, h, off, src, n, &q->req); },
      "write");
}

// read(offset[, length[, into]]) and write(offset, data) without pybind11's
// dispatcher (fastcall.h); other shapes decline to it.
PyObject* read_fast(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  uint64_t off;
  if (nargs < 1 || nargs > 3 || !fast::as_uint(args[0], UINT64_MAX, &off)) return fast::decline();
  if (nargs >= 2 && args[1] != Py_None && !PyLong_CheckExact(args[1])) return fast::decline();
  auto arg = [&](Py_ssize_t i) {
    return i < nargs ? py::reinterpret_borrow<py::object>(args[i]) : py::none();
  };
  return fast::guarded([&] { return read(fast::self_as<Lmr>(self), off, arg(1), arg(2)); });
}

PyObject* write_fast(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  uint64_t off;
  if (nargs != 2 || !fast::as_uint(args[0], UINT64_MAX, &off)) return fast::decline();
  return fast::guarded([&] {
    write(fast::self_as<Lmr>(self), off, py::reinterpret_borrow<py::object>(args[1]));
    return py::none();
  });
}

}  // namespace

// Long by nature: one .def per Python method with its docstring, a table read
// top to bottom; the work is in the functions above.
void bind_lmr(py::module_& m, EngineClass& cls) {
  py::class_<Lmr> lmr(m, "Lmr", R"(A handle on a local or remote memory region (LMR).

Offsets and lengths are in bytes and checked against the LMR (OutOfBoundsError);
the rights the handle was made with are checked too (PermissionDeniedError).
Use it as a context manager to free (master) or unmap (mapped) it on exit.)");
  lmr.def_property_readonly("size", &Lmr::size, "The LMR's size in bytes.")
      .def_property_readonly(
          "handle", [](const Lmr& l) { return l.h; }, "The opaque handle value (process-local).")
      .def_property_readonly("is_master", [](const Lmr& l) { return l.master; })
      .def("read", &read, py::arg("offset"), py::arg("length") = py::none(),
           py::arg("into") = py::none(),
           "Reads `length` bytes at `offset`: a new bytes object, or into the writable "
           "contiguous buffer `into` (then length defaults to its size), which is returned.")
      .def("write", &write, py::arg("offset"), py::arg("data"),
           "Writes any contiguous buffer (bytes, bytearray, memoryview, numpy array) at `offset`.")
      .def(
          "memset",
          [](Lmr& l, uint64_t off, int value, uint64_t n) {
            call(*l.eng, "memset",
                 [&](lt_engine_t* e) { return LT_memset(e, l.h, off, value, n); });
          },
          py::arg("offset"), py::arg("value"), py::arg("length"))
      .def(
          "memcpy",
          [](Lmr& dst, uint64_t dst_off, const Lmr& src, uint64_t src_off, uint64_t n) {
            call(*dst.eng, "memcpy",
                 [&](lt_engine_t* e) { return LT_memcpy(e, dst.h, dst_off, src.h, src_off, n); });
          },
          py::arg("offset"), py::arg("src"), py::arg("src_offset"), py::arg("length"),
          "Copies `length` bytes from LMR `src` at `src_offset` to this LMR at `offset`; the two "
          "may live on different nodes, neither need be this one.")
      .def(
          "fetch_add",
          [](Lmr& l, uint64_t off, const py::int_& add) {
            uint64_t a = word(add), old = 0;
            call(*l.eng, "fetch_add",
                 [&](lt_engine_t* e) { return LT_fetch_add(e, l.h, off, a, &old); });
            return old;
          },
          py::arg("offset"), py::arg("add"),
          "Atomically adds `add` (mod 2**64) to the 8-byte word at `offset`; returns the old "
          "value.")
      .def(
          "compare_swap",
          [](Lmr& l, uint64_t off, const py::int_& expected, const py::int_& desired) {
            uint64_t x = word(expected), d = word(desired), old = 0;
            call(*l.eng, "compare_swap",
                 [&](lt_engine_t* e) { return LT_compare_swap(e, l.h, off, x, d, &old); });
            return old;
          },
          py::arg("offset"), py::arg("expected"), py::arg("desired"),
          "Atomically sets the word to `desired` if it equals `expected`; returns the old value "
          "(the swap happened iff it equals `expected`).")
      .def("read_async", &read_async, py::arg("offset"), py::arg("length") = py::none(),
           py::arg("into") = py::none(), "read as a Request; wait() gives the data.")
      .def("write_async", &write_async, py::arg("offset"), py::arg("data"),
           "write as a Request; `data` is kept alive until it completes.")
      .def(
          "memset_async",
          [](Lmr& l, uint64_t off, int value, uint64_t n) {
            lt_lmr_t h = l.h;
            return start_async(
                l.eng, std::make_shared<Pending>(),
                [&](lt_engine_t* e, Pending* q) {
                  return LT_memset_async(e, h, off, value, n, &q->req);
                },
                "memset");
          },
          py::arg("offset"), py::arg("value"), py::arg("length"))
      .def(
          "memcpy_async",
          [](Lmr& dst, uint64_t dst_off, const Lmr& src, uint64_t src_off, uint64_t n) {
            lt_lmr_t d = dst.h, s = src.h;
            return start_async(
                dst.eng, std::make_shared<Pending>(),
                [&](lt_engine_t* e, Pending* q) {
                  return LT_memcpy_async(e, d, dst_off, s, src_off, n, &q->req);
                },
                "memcpy");
          },
          py::arg("offset"), py::arg("src"), py::arg("src_offset"), py::arg("length"))
      .def(
          "fetch_add_async",
          [](Lmr& l, uint64_t off, const py::int_& add) {
            auto p = std::make_shared<Pending>();
            p->kind = Kind::kAtomic;
            uint64_t a = word(add);
            lt_lmr_t h = l.h;
            return start_async(
                l.eng, std::move(p),
                [&](lt_engine_t* e, Pending* q) {
                  return LT_fetch_add_async(e, h, off, a, &q->old, &q->req);
                },
                "fetch_add");
          },
          py::arg("offset"), py::arg("add"))
      .def(
          "compare_swap_async",
          [](Lmr& l, uint64_t off, const py::int_& expected, const py::int_& desired) {
            auto p = std::make_shared<Pending>();
            p->kind = Kind::kAtomic;
            uint64_t x = word(expected), d = word(desired);
            lt_lmr_t h = l.h;
            return start_async(
                l.eng, std::move(p),
                [&](lt_engine_t* e, Pending* q) {
                  return LT_compare_swap_async(e, h, off, x, d, &q->old, &q->req);
                },
                "compare_swap");
          },
          py::arg("offset"), py::arg("expected"), py::arg("desired"))
      .def(
          "publish",
          [](Lmr& l, const std::string& name, uint32_t max_rights) {
            call(*l.eng, "publish",
                 [&](lt_engine_t* e) { return LT_publish(e, l.h, name.c_str(), max_rights); });
          },
          py::arg("name"), py::arg("max_rights") = static_cast<uint32_t>(LT_RW),
          "Master only: lets other nodes map this LMR by `name` with at most `max_rights`.")
      .def("free",
           [](Lmr& l) {
             if (!l.master)
               throw CallError{-LT_ERR_PERM, "free: only the master frees (use unmap)"};
             l.close();
           })
      .def("unmap",
           [](Lmr& l) {
             if (l.master)
               throw CallError{-LT_ERR_PERM, "unmap: the master frees its LMR (use free)"};
             l.close();
           })
      .def("close", &Lmr::close, "free() for the master, unmap() for a mapped handle; idempotent.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](Lmr& l, py::args) { l.close(); })
      .def("__repr__", [](const Lmr& l) {
        return std::string("<ltier.Lmr ") + (l.master ? "master" : "mapped") +
               (l.released ? " (released)>" : ">");
      });
  fast::install<&read_fast>(lmr, "read");
  fast::install<&write_fast>(lmr, "write");

  cls.def(
         "malloc",
         [](const EnginePtr& s, lt_node_t node, uint64_t size, uint32_t rights) {
           lt_lmr_t h = 0;
           call(*s, "malloc", [&](lt_engine_t* e) { return LT_malloc(e, node, size, rights, &h); });
           return Lmr{s, h, true};
         },
         py::arg("node"), py::arg("size"), py::arg("rights") = static_cast<uint32_t>(LT_RW),
         "Allocates `size` zeroed bytes on `node`; this process is the master.")
      .def(
          "map",
          [](const EnginePtr& s, const std::string& name, uint32_t rights) {
            lt_lmr_t h = 0;
            call(*s, "map", [&](lt_engine_t* e) { return LT_map(e, name.c_str(), rights, &h); });
            return Lmr{s, h, false};
          },
          py::arg("name"), py::arg("rights") = static_cast<uint32_t>(LT_RW),
          "A handle on the LMR published as `name`, with `rights` (at most what was published).");
}

}  // namespace ltpy
