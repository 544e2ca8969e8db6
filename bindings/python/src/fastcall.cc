#include "fastcall.h"

#include <string>
#include <vector>

namespace ltpy::fast {

bool as_uint(PyObject* o, uint64_t max, uint64_t* out) {
  if (!PyLong_CheckExact(o)) return false;
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
  if (overflow != 0 || v < 0 || static_cast<uint64_t>(v) > max) {
    PyErr_Clear();  // the general path raises the error pybind11 would
    return false;
  }
  *out = static_cast<uint64_t>(v);
  return true;
}

PyObject* forward(PyObject* general, PyObject* self, PyObject* const* args, size_t nargsf,
                  PyObject* kwnames) {
  Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  Py_ssize_t nkw = kwnames == nullptr ? 0 : PyTuple_GET_SIZE(kwnames);
  std::vector<PyObject*> all;
  all.reserve(static_cast<size_t>(1 + nargs + nkw));
  all.push_back(self);
  all.insert(all.end(), args, args + nargs + nkw);
  return PyObject_Vectorcall(general, all.data(), static_cast<size_t>(nargs + 1), kwnames);
}

PyObject* take_general(py::handle cls, const char* name, const char** doc) {
  PyObject* dict = reinterpret_cast<PyTypeObject*>(cls.ptr())->tp_dict;
  PyObject* m = PyDict_GetItemString(dict, name);  // borrowed
  if (m == nullptr) throw std::logic_error(std::string("no method to speed up: ") + name);
  // pybind11 wraps a method's function in an instancemethod.
  PyObject* f = PyInstanceMethod_Check(m) ? PyInstanceMethod_GET_FUNCTION(m) : m;
  Py_INCREF(f);  // kept for the life of the process, as the type keeps its methods
  py::object d = py::handle(f).attr("__doc__");
  *doc = d.is_none() ? nullptr : (new std::string(d.cast<std::string>()))->c_str();
  return f;
}

void put_fast(py::handle cls, const char* name, PyMethodDef* def) {
  py::object descr = py::reinterpret_steal<py::object>(
      PyDescr_NewMethod(reinterpret_cast<PyTypeObject*>(cls.ptr()), def));
  if (!descr) throw py::error_already_set();
  py::setattr(cls, name, descr);
}

}  // namespace ltpy::fast
