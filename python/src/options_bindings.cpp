// Keyword options: the core's one normaliser for every front end, and Settings, the normalised
// options a reduction is built with (declared once, in the core's option table).
#include <nanobind/stl/pair.h>

#include <algorithm>

#include "bindings.hpp"

namespace tessel::py {

namespace {

// A Python keyword value as the core's option normaliser reads it.
OptionValue option_value(nb::handle v) {
  OptionValue o;
  PyObject* p = v.ptr();
  if (v.is_none()) return o;
  const std::string_view type = Py_TYPE(p)->tp_name;
  if (PyBool_Check(p) || type == "numpy.bool_" || type == "numpy.bool") {
    o.kind = OptionValue::Kind::Bool;
    o.b = PyObject_IsTrue(p) == 1;
  } else if (PyFloat_Check(p) ||
             (type.starts_with("numpy.") && !PyIndex_Check(p) && Py_TYPE(p)->tp_as_number &&
              Py_TYPE(p)->tp_as_number->nb_float)) {  // NumPy floats too
    o.kind = OptionValue::Kind::Float;
    o.f = PyFloat_AsDouble(p);
  } else if (PyUnicode_Check(p)) {
    o.kind = OptionValue::Kind::Str;
    o.s = nb::cast<std::string>(v);
  } else if (PyLong_Check(p) || PyIndex_Check(p)) {  // NumPy integers have __index__
    nb::object i = nb::steal(PyNumber_Index(p));
    int overflow = 0;
    const long long x = i.is_valid() ? PyLong_AsLongLongAndOverflow(i.ptr(), &overflow) : 0;
    if (!i.is_valid() || PyErr_Occurred()) {
      PyErr_Clear();
      o.kind = OptionValue::Kind::Other;
    } else {
      o.kind = OptionValue::Kind::Int;
      o.i = overflow ? 0 : x;
      o.too_large = overflow != 0;
    }
  } else {  // arrays, dicts, dtypes: named by their type only (their repr may be long)
    o.kind = OptionValue::Kind::Other;
    o.s = o.repr = o.type_name = type;
    return o;
  }
  // Messages show the value as Python does: "str '3'", "float 3.0", "int 9223372036854775808".
  o.repr = nb::cast<std::string>(nb::repr(v));
  if (o.repr.size() > 60) o.repr = o.repr.substr(0, 57) + "...";
  o.type_name = type;
  return o;
}

// The normalised options as Python reads them: canonical names and values.
nb::dict as_dict(const NormalizedOptions& n) {
  nb::dict out;
  if (n.backend) out["backend"] = backend_name(*n.backend);
  if (n.sum_scheme) out["sum_scheme"] = sum_scheme_name(*n.sum_scheme);
  if (n.accumulate_f64) out["accumulate_f64"] = *n.accumulate_f64;
  if (n.gpu_memory_budget) out["gpu_memory_budget"] = *n.gpu_memory_budget;
  if (n.ni) out["ni"] = *n.ni;
  if (n.nj) out["nj"] = *n.nj;
  if (n.maxiter) out["maxiter"] = *n.maxiter;
  if (n.alpha) out["alpha"] = *n.alpha;
  if (n.tol) out["tol"] = *n.tol;
  if (n.atol) out["atol"] = *n.atol;
  if (n.eps) out["eps"] = *n.eps;
  if (n.on_nonconvergence) out["on_nonconvergence"] = *n.on_nonconvergence;
  return out;
}

// Several GPUs sharing a call on host arrays: distinct indices >= 0.
std::vector<int> gpu_devices(const std::string& who, nb::handle value) {
  std::vector<int> out;
  const std::string want = who + ": gpu_devices must be a list of distinct GPU indices >= 0";
  if (!nb::isinstance<nb::list>(value) && !nb::isinstance<nb::tuple>(value))
    throw nb::type_error((want + ", got " + nb::str(value.type().attr("__name__")).c_str())
                             .c_str());
  for (nb::handle v : value) {
    int d = -1;
    if (PyBool_Check(v.ptr()) || !nb::try_cast(v, d, false) || d < 0 ||
        std::count(out.begin(), out.end(), d))
      throw nb::value_error((want + ", got " + nb::repr(value).c_str()).c_str());
    out.push_back(d);
  }
  return out;
}

Settings make_settings(const std::string& who, nb::dict options, unsigned scope,
                       std::optional<std::string> reduction) {
  Settings s;
  s.given = normalize_dict(who, options, scope, reduction);
  s.eval.backend = s.given.backend.value_or(Backend::Auto);
  s.eval.sum_scheme = s.given.sum_scheme.value_or(SumScheme::Block);
  s.eval.accumulate_f64 = s.given.accumulate_f64.value_or(false);
  s.eval.gpu_memory_budget = s.given.gpu_memory_budget.value_or(0);
  if (std::count(s.given.passed.begin(), s.given.passed.end(), "gpu_devices"))
    s.eval.gpu_devices = gpu_devices(who, options["gpu_devices"]);
  return s;
}

}  // namespace

NormalizedOptions normalize_dict(const std::string& who, nb::dict options, unsigned scope,
                                 std::optional<std::string> reduction) {
  std::vector<std::pair<std::string, OptionValue>> in;
  for (auto [k, v] : options) {
    if (!PyUnicode_Check(k.ptr()))
      throw nb::type_error((who + ": option names must be strings").c_str());
    in.emplace_back(nb::cast<std::string>(k), option_value(v));
  }
  std::optional<ReductionOp> op;
  if (reduction) op = reduction_from_name(*reduction);
  return normalize_options(who, scope, in, op);
}

void bind_options(nb::module_& m) {
  // Registered after the Error translator, so tried before it: a wrong type is a TypeError.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const OptionTypeError& e) {
      PyErr_SetString(PyExc_TypeError, e.what());
    }
  });
  m.attr("BUILD_OPTIONS") = static_cast<int>(kBuildOptions);
  m.attr("CALL_OPTIONS") = static_cast<int>(kCallOptions);
  m.attr("SOLVE_OPTIONS") = static_cast<int>(kSolveOptions);
  m.def(
      "normalize_options",
      [](const std::string& who, nb::dict options, unsigned scope,
         std::optional<std::string> reduction) {
        const NormalizedOptions n = normalize_dict(who, options, scope, reduction);
        nb::dict out = as_dict(n);
        for (const std::string& k : n.passed) out[k.c_str()] = options[k.c_str()];
        return out;
      },
      nb::arg("who"), nb::arg("options"), nb::arg("scope"), nb::arg("reduction") = nb::none(),
      "The keyword options of `who` checked and in canonical form: backend ('auto', 'compiled', "
      "'interpreter', 'cuda'), sum_scheme ('block', 'kahan', 'direct'), accumulate_f64, ni, nj, "
      "alpha, tol, atol, eps, maxiter, on_nonconvergence; ranges / out / stats as given. Keys "
      "given as None and ignored pykeops options are left out. TypeError for an unknown key or a "
      "wrong type, ValueError for a wrong value.");
  m.def("ignored_options", &ignored_options,
        "(name, reason) of each pykeops option tessel accepts and ignores.");

  nb::class_<Settings>(m, "Settings")
      .def(
          "__init__",
          [](Settings* self, const std::string& who, nb::dict options, unsigned scope,
             std::optional<std::string> reduction) {
            new (self) Settings(make_settings(who, options, scope, reduction));
          },
          nb::arg("who"), nb::arg("options"), nb::arg("scope") = static_cast<int>(kBuildOptions),
          nb::arg("reduction") = nb::none(),
          "The options of a reduction, checked by the core's normaliser once: calls take this "
          "object.")
      .def(
          "as_dict", [](const Settings& s) { return as_dict(s.given); },
          "The options given, in canonical form (as normalize_options returns them).")
      .def_prop_ro("backend", [](const Settings& s) { return backend_name(s.eval.backend); })
      .def_prop_ro("gpu_devices", [](const Settings& s) { return s.eval.gpu_devices; })
      .def("__repr__", [](const Settings& s) {
        return "tessel.Settings(" + nb::cast<std::string>(nb::repr(as_dict(s.given))) + ")";
      });
}

}  // namespace tessel::py
