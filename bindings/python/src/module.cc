// The extension module ltier._ltier; the package ltier (ltier/__init__.py)
// re-exports it with the error classes and the asyncio layer.
#include "core.h"

namespace ltpy {
namespace {

void translate(std::exception_ptr p) {
  try {
    if (p) std::rethrow_exception(p);
  } catch (const CallError& e) {
    set_python_error(e);
  }
}

}  // namespace
}  // namespace ltpy

PYBIND11_MODULE(_ltier, m) {
  namespace py = pybind11;
  using namespace ltpy;
  m.doc() = "ltier: remote memory, messaging, RPC and atomics over a cluster (C++ core).";
  py::register_exception_translator(&translate);

  m.attr("READ") = static_cast<uint32_t>(LT_READ);
  m.attr("WRITE") = static_cast<uint32_t>(LT_WRITE);
  m.attr("ATOMIC") = static_cast<uint32_t>(LT_ATOMIC);
  m.attr("RW") = static_cast<uint32_t>(LT_RW);
  m.attr("ALL") = static_cast<uint32_t>(LT_READ | LT_WRITE | LT_ATOMIC);
  m.def(
      "strerror", [](int code) { return std::string(LT_strerror(code)); }, py::arg("code"));
  m.def(
      "errname", [](int code) { return std::string(LT_errname(code)); }, py::arg("code"));

  EngineClass cls(m, "Engine", R"(A node of the cluster, from ltier.join().

Every call releases the GIL while it runs; blocking calls wait at most their
timeout (seconds; None: the engine's op timeout) and raise TimedOutError.
Leaving (leave() or the end of a `with` block) is idempotent.)");
  bind_request(m);
  bind_engine(m, cls);
  bind_lmr(m, cls);
  bind_messaging(m, cls);
  bind_rpc(m, cls);
}
