// A second way into the hottest methods (send, recv, rpc, Lmr.read and
// Lmr.write): CPython's vectorcall protocol (METH_FASTCALL) straight to the
// C++ function, in front of pybind11's dispatcher.
//
// pybind11 2.10 spends 0.1-0.2 us per call before the function runs: it
// builds a function_call with two vectors, tries each argument's caster, and
// looks up keyword names by string. A ping-pong makes four such calls per
// round trip, which is where a Python send/recv loses to mpi4py's Cython.
//
// The fast entry takes only the plain positional shapes (exact ints, the
// arguments the C++ function takes) and declines everything else: keywords,
// other types, missing or extra arguments go on to the pybind11 method it
// replaced, unchanged, so conversions, errors and docstrings stay the ones
// pybind11 gives.
#pragma once

#include <array>
#include <exception>

#include "core.h"

namespace ltpy::fast {

/// What a fast entry returns to hand the call to the general (pybind11) path.
inline PyObject* decline() { return Py_NotImplemented; }

/// A fast entry: positional arguments only. Returns a new reference, nullptr
/// with a Python error set, or decline().
using Entry = PyObject* (*)(PyObject* self, PyObject* const* args, Py_ssize_t nargs);

/// An exact Python int within [0, max], or false (nothing raised).
bool as_uint(PyObject* o, uint64_t max, uint64_t* out);

/// The C++ object behind a pybind11 instance of T's class.
template <typename T>
T& self_as(PyObject* self) {
  return py::handle(self).cast<T&>();
}

/// Runs f (which returns a py::object) and hands its result to CPython, or
/// turns what it threw into a Python error, as the module's translator does.
template <typename F>
PyObject* guarded(F&& f) {
  try {
    return f().release().ptr();
  } catch (const CallError& e) {
    set_python_error(e);
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

/// Calls the pybind11 function `general` as a bound method of self.
PyObject* forward(PyObject* general, PyObject* self, PyObject* const* args, size_t nargsf,
                  PyObject* kwnames);

/// Detaches the function pybind11 stored as cls.name; the fast entry takes
/// its place, with its docstring.
PyObject* take_general(py::handle cls, const char* name, const char** doc);
void put_fast(py::handle cls, const char* name, PyMethodDef* def);

/// One general function per fast entry: F names it.
template <Entry F>
PyObject*& general_of() {
  static PyObject* general = nullptr;
  return general;
}

template <Entry F>
PyObject* entry(PyObject* self, PyObject* const* args, Py_ssize_t nargsf, PyObject* kwnames) {
  if (kwnames == nullptr) {
    PyObject* r = F(self, args, PyVectorcall_NARGS(nargsf));
    if (r != decline()) return r;
  }
  return forward(general_of<F>(), self, args, static_cast<size_t>(nargsf), kwnames);
}

/// Puts F in front of the method `name` that pybind11 already defined on cls.
template <Entry F>
void install(py::handle cls, const char* name) {
  static PyMethodDef def{};
  const char* doc = nullptr;
  general_of<F>() = take_general(cls, name, &doc);
  def.ml_name = name;
  def.ml_meth = reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&entry<F>));
  def.ml_flags = METH_FASTCALL | METH_KEYWORDS;
  def.ml_doc = doc;
  put_fast(cls, name, &def);
}

}  // namespace ltpy::fast
