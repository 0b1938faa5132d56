// The Python extension tessel._core: formulas, reductions and zero-copy evaluation on any DLPack
// array or PyTorch tensor, bound one concern a file (see bindings.hpp).
//
// Arrays cross without copies: the core reads them through their strides. Outputs are either
// allocated here (NumPy) or by the front end (PyTorch's CUDA tensors). The GIL is released while
// a reduction runs, so Python threads keep going.

#include "bindings.hpp"

namespace nb = nanobind;
using namespace tessel;

NB_MODULE(_core, m) {
  m.doc() = "tessel core: compiled, differentiable kernel reductions";
  // Library warnings (fallback to the interpreter, unsafe cache folder, a long lock wait) become
  // Python RuntimeWarnings, which users can filter or log; if that fails they go to stderr.
  set_warning_handler([](const std::string& message) {
    if (!Py_IsInitialized()) throw std::runtime_error("the Python interpreter is gone");
    nb::gil_scoped_acquire gil;
    if (PyErr_WarnEx(PyExc_RuntimeWarning, ("tessel: " + message).c_str(), 1) != 0) {
      PyErr_Clear();
      throw std::runtime_error("the warning was turned into an error");
    }
  });
  // User errors become TypeError or ValueError by their kind; a broken internal invariant becomes
  // tessel.InternalError (a RuntimeError), which no `except ValueError` mistakes for bad input.
  nb::exception<InternalError>(m, "InternalError", PyExc_RuntimeError).attr("__doc__") =
      "A broken internal invariant: a bug in tessel, never a mistake of the "
      "caller.\n\nThe message names the function and asks for a report; "
      "bad input raises ValueError or TypeError instead.";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      PyErr_SetString(e.kind() == ErrorKind::Type ? PyExc_TypeError : PyExc_ValueError, e.what());
    }
  });
  // Each tier as Python sees it, for the tests (no user input reaches an InternalError).
  m.def("_raise", [](const std::string& tier) {
    if (tier == "type") detail::fail_type("_raise", "a type error");
    TESSEL_ASSERT(tier != "internal", "an internal error");
    detail::fail("_raise", "a value error");
  });

  py::bind_formulas(m);
  py::bind_reductions(m);
  py::bind_solve(m);
  py::bind_gp(m);
  py::bind_ot(m);
  py::bind_loops(m);
  // After the Error translator: tried before it (an option of the wrong type is a TypeError).
  py::bind_options(m);
}
