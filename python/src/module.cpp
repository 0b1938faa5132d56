// The Python extension tessel._core: formulas, reductions and zero-copy evaluation on any DLPack
// array.
//
// Arrays cross as nanobind ndarrays (NumPy arrays, PyTorch tensors, anything with DLPack) without
// copies: the core reads them through their strides. Outputs are either allocated here (NumPy)
// or passed in by the caller (PyTorch allocates its own tensors). The GIL is released while a
// reduction runs, so Python threads keep going.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "tessel/checkpoint.hpp"
#include "tessel/online_checkpoint.hpp"
#include "tessel/options.hpp"
#include "tessel/solve.hpp"
#include "tessel/tessel.hpp"

namespace nb = nanobind;
using namespace tessel;

namespace {

// Inputs are read-only (broadcast views and read-only NumPy arrays are fine); outputs are written.
// Any device: CUDA arrays (PyTorch CUDA tensors) run on their GPU.
using InArray = nb::ndarray<nb::ro>;
using OutArray = nb::ndarray<>;

template <class A>
DType dtype_of(const A& a, const char* what, size_t k) {
  const nb::dlpack::dtype t = a.dtype();
  if (t == nb::dtype<float>()) return DType::Float32;
  if (t == nb::dtype<double>()) return DType::Float64;
  if (t == nb::dtype<int64_t>()) return DType::Int64;
  if (t.bits == 16 && t.lanes == 1) {
    if (t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float)) return DType::Float16;
    if (t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat)) return DType::BFloat16;
  }
  throw nb::type_error(("tessel: " + std::string(what) + " " + std::to_string(k) +
                        " has an unsupported dtype; expected float32, float64, float16 or "
                        "bfloat16")
                           .c_str());
}

template <class A>
ArrayView view_of(const A& a, const char* what, size_t k) {
  ArrayView v;
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));  // inputs are never written
  v.dtype = dtype_of(a, what, k);
  for (size_t d = 0; d < a.ndim(); ++d) {
    v.shape.push_back(static_cast<int64_t>(a.shape(d)));
    v.strides.push_back(static_cast<int64_t>(a.stride(d)));
  }
  if (a.device_type() == nb::device::cuda::value) {
    v.device = Device{DeviceKind::CUDA, a.device_id()};
  } else if (a.device_type() != nb::device::cpu::value) {
    throw nb::type_error(("tessel: " + std::string(what) + " " + std::to_string(k) +
                          " lives on an unsupported device (DLPack device type " +
                          std::to_string(a.device_type()) + "); expected CPU or CUDA memory")
                             .c_str());
  }
  return v;
}

using RangesArg = std::optional<std::vector<std::vector<int64_t>>>;

using DevicesArg = std::optional<std::vector<int>>;

Options options(const std::string& backend, const std::string& sum_scheme, bool acc_f64,
                int threads, const RangesArg& ranges, uintptr_t stream = 0, int device = 0,
                int64_t gpu_memory_budget = 0, const DevicesArg& gpu_devices = std::nullopt) {
  Options o;
  o.stream = reinterpret_cast<void*>(stream);
  o.device = device;
  o.gpu_memory_budget = gpu_memory_budget;
  if (gpu_devices) {
    for (size_t k = 0; k < gpu_devices->size(); ++k) {
      const int d = (*gpu_devices)[k];
      if (d < 0 || std::count(gpu_devices->begin(), gpu_devices->begin() + k, d))
        throw nb::value_error(("tessel: gpu_devices must list distinct GPU indices >= 0, got " +
                               std::to_string(d) + " at position " + std::to_string(k))
                                  .c_str());
    }
    o.gpu_devices = *gpu_devices;
  }
  if (ranges) {
    if (ranges->size() != 6)
      throw nb::value_error(("tessel: ranges must hold 6 arrays (ranges_i, slices_i, redranges_j, "
                             "ranges_j, slices_j, redranges_i), got " +
                             std::to_string(ranges->size()))
                                .c_str());
    auto br = std::make_shared<BlockRanges>();
    br->ranges_i = (*ranges)[0];
    br->slices_i = (*ranges)[1];
    br->redranges_j = (*ranges)[2];
    br->ranges_j = (*ranges)[3];
    br->slices_j = (*ranges)[4];
    br->redranges_i = (*ranges)[5];
    o.ranges = br;
  }
  o.backend = backend_from_name(backend, "tessel");
  o.sum_scheme = sum_scheme_from_name(sum_scheme, "tessel");
  o.accumulate_f64 = acc_f64;
  o.threads = threads;
  return o;
}

template <class A>
std::vector<ArrayView> views(const std::vector<A>& arrays, const char* what) {
  std::vector<ArrayView> v;
  for (size_t k = 0; k < arrays.size(); ++k) v.push_back(view_of(arrays[k], what, k));
  return v;
}

// An Array's storage handed to NumPy: the capsule keeps the shared buffer alive.
nb::object to_numpy(const Array& a) {
  auto* keep = new Array(a);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Array*>(p); });
  std::vector<size_t> shape(a.shape().begin(), a.shape().end());
  switch (a.dtype()) {
    case DType::Float32:
      return nb::cast(
          nb::ndarray<nb::numpy, float>(keep->as<float>(), shape.size(), shape.data(), owner));
    case DType::Float64:
      return nb::cast(
          nb::ndarray<nb::numpy, double>(keep->as<double>(), shape.size(), shape.data(), owner));
    case DType::Int64:
      return nb::cast(
          nb::ndarray<nb::numpy, int64_t>(keep->as<int64_t>(), shape.size(), shape.data(), owner));
    case DType::Float16:
      return nb::cast(nb::ndarray<nb::numpy>(
          keep->data(), shape.size(), shape.data(), owner, nullptr,
          nb::dlpack::dtype{static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 16, 1}));
    case DType::BFloat16:  // NumPy has no bfloat16: the bits as int16, viewed as bfloat16 by torch
      return nb::cast(
          nb::ndarray<nb::numpy, int16_t>(keep->as<int16_t>(), shape.size(), shape.data(), owner));
  }
  return nb::none();
}

Reduction make_reduction(const std::string& op, const Formula& f, int axis, int k,
                         std::optional<Formula> weight) {
  return Reduction(reduction_from_name(op), f, axis, k, weight ? *weight : Formula{});
}

// A Python keyword value as the core's option normaliser reads it.
OptionValue option_value(nb::handle v) {
  OptionValue o;
  PyObject* p = v.ptr();
  if (v.is_none()) return o;
  const std::string_view type = Py_TYPE(p)->tp_name;
  if (PyBool_Check(p) || type == "numpy.bool_" || type == "numpy.bool") {
    o.kind = OptionValue::Kind::Bool;
    o.b = PyObject_IsTrue(p) == 1;
  } else if (PyFloat_Check(p) || (type.starts_with("numpy.") &&
                                    !PyIndex_Check(p) && Py_TYPE(p)->tp_as_number &&
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

}  // namespace

// For the bindings that live in their own files.
ArrayView bound_view(const nb::ndarray<nb::ro>& a, const char* what) { return view_of(a, what, 0); }
ArrayView bound_out_view(const nb::ndarray<>& a, const char* what) { return view_of(a, what, 0); }
nb::object bound_numpy(const Array& a) { return to_numpy(a); }
void bind_ot(nb::module_& m);

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
  nb::exception<InternalError>(m, "InternalError", PyExc_RuntimeError);
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

  // Formulas are built here through the op table (make, var, constant, ...), never from text on
  // a front end's hot path; their printed text is their pickled state, which parses back to the
  // same hash.
  nb::class_<Formula>(m, "Formula")
      .def_prop_ro("dim", &Formula::dim)
      .def_prop_ro("hash", [](const Formula& f) { return f.hash().hex(); })
      .def("__str__", &Formula::str)
      .def("__repr__", [](const Formula& f) { return "tessel.Formula(" + f.str() + ")"; })
      // Hash-consing: equal formulas are one node, so equality is identity and hashing is cheap.
      .def(
          "__eq__", [](const Formula& a, const Formula& b) { return a.same(b); }, nb::is_operator())
      .def(
          "__ne__", [](const Formula& a, const Formula& b) { return !a.same(b); },
          nb::is_operator())
      .def("__hash__", [](const Formula& f) { return static_cast<size_t>(f.hash().lo); })
      .def("__getstate__", [](const Formula& f) { return std::make_tuple(f.str()); })
      .def("__setstate__",
           [](Formula& f, const std::tuple<std::string>& state) {
             new (&f) Formula(parse(std::get<0>(state)));
           })
      .def(
          "variables",
          [](const Formula& f) {
            std::vector<std::tuple<int, int, int>> v;
            for (const AliasInfo& a : variable_info(f))
              v.emplace_back(a.index, static_cast<int>(a.cat), a.dim);
            return v;
          },
          "(index, category, dim) of each variable that occurs, by index: category 0 = i, 1 = j, "
          "2 = parameter.")
      .def("substitute", &substitute, nb::arg("variables"), nb::arg("replacements"),
           "Every variable leaf variables[k] replaced by replacements[k] (same dims).")
      .def("relabel", &relabel, nb::arg("index_map") = std::vector<int>{},
           nb::arg("swap_ij") = false,
           "Variable k renumbered to index_map[k] (empty: unchanged); swap_ij exchanges the i "
           "and j categories (the transpose).");
  m.def("make", &make_op, nb::arg("op"), nb::arg("args"),
        nb::arg("params") = std::vector<int64_t>{},
        "Op `op` (a name of op_table()) on formulas `args` and integer `params`, with its dim "
        "checks and simplifications.");
  m.def(
      "var",
      [](int index, int dim, int cat) {
        if (cat < 0 || cat > 2)
          throw nb::value_error(("tessel.var: category must be 0 (i), 1 (j) or 2 (parameter), "
                                 "got " +
                                 std::to_string(cat))
                                    .c_str());
        return var(index, dim, static_cast<Category>(cat));
      },
      nb::arg("index"), nb::arg("dim"), nb::arg("cat"),
      "Variable `index` of dim `dim`, "
      "category 0 = i, 1 = j, 2 = parameter.");
  m.def("constant", &constant, nb::arg("value"), "A floating constant (finite).");
  m.def("int_cst", &int_cst, nb::arg("value"), "An integer constant, IntCst(n).");
  m.def("weighted_sqnorm", &weighted_sqnorm, nb::arg("s"), nb::arg("a"),
        "a^T S a with S of dim 1 (isotropic), dim(a) (diagonal) or dim(a)^2 (full, row-major).");
  m.def("weighted_sqdist", &weighted_sqdist, nb::arg("s"), nb::arg("a"), nb::arg("b"));
  m.def("tensordot", &tensordot, nb::arg("a"), nb::arg("b"), nb::arg("dims_a"), nb::arg("dims_b"),
        nb::arg("contr_a"), nb::arg("contr_b"), nb::arg("perm") = std::vector<int>{},
        "KeOps TensorDot of row-major tensors.");
  m.def("kron", &kron, nb::arg("a"), nb::arg("b"), nb::arg("dims_a"), nb::arg("dims_b"),
        "KeOps Kron: numpy.kron of row-major tensors of equal ranks, flattened.");
  m.def("parse", &parse, nb::arg("text"), nb::arg("aliases") = std::vector<std::string>{},
        "Parse KeOps formula syntax with aliases such as 'X = Vi(3)'.");
  m.def(
      "op_table",
      [] {
        std::vector<std::tuple<std::string, int, int, std::string, std::string, std::string>> v;
        for (const OpSummary& o : op_table())
          v.emplace_back(o.name, o.arity, o.n_int_params, o.infix, o.dim_rule, o.method);
        return v;
      },
      "Every op of the core: (name, arity, integer parameters, infix symbol or '', dim rule: "
      "'elementwise', 'to_scalar', 'same_to_scalar' or 'custom', LazyTensor method name or '' for "
      "none).");
  m.def(
      "parse_aliases",
      [](const std::vector<std::string>& aliases) {
        std::vector<std::tuple<std::string, int, int, int>> v;
        for (const AliasInfo& a : parse_aliases(aliases))
          v.emplace_back(a.name, a.index, a.dim, static_cast<int>(a.cat));
        return v;
      },
      nb::arg("aliases"),
      "The aliases as parse() reads them: (name, index, dim, category) each, name '' when "
      "unnamed, category 0 = i, 1 = j, 2 = parameter.");
  m.def(
      "named_variables",
      [](const std::string& text, const std::vector<std::string>& aliases) {
        std::vector<std::tuple<int, int, int>> v;
        for (const AliasInfo& a : named_variables(text, aliases))
          v.emplace_back(a.index, a.dim, static_cast<int>(a.cat));
        return v;
      },
      nb::arg("text"), nb::arg("aliases") = std::vector<std::string>{},
      "(index, dim, category) of each variable the formula text names, simplified away or not.");
  m.def("grad_formula",
        [](const Formula& f, const Formula& v, const Formula& e) { return grad(f, v, e); });
  m.def("grad_matrix", &grad_matrix, nb::arg("f"), nb::arg("v"));
  m.def("diff", &diff, nb::arg("f"), nb::arg("v"), nb::arg("u"));
  m.def("divergence", &divergence, nb::arg("f"), nb::arg("v"));
  m.def("laplacian", &laplacian, nb::arg("f"), nb::arg("v"));
  m.def("trace_operator", &trace_operator, nb::arg("f"), nb::arg("v"));

  m.def(
      "reduction_name",
      [](const std::string& name) { return std::string(reduction_name(reduction_from_name(name))); },
      nb::arg("name"), "tessel's name of a reduction given by any of its KeOps spellings.");
  m.def(
      "reduction_table",
      [] {
        nb::list v;
        for (const ReductionSummary& r : reduction_table()) {
          nb::dict d;
          d["name"] = r.name;
          d["spellings"] = r.spellings;
          d["by_name"] = r.by_name;
          d["family"] = r.family;
          d["is_max"] = r.is_max;
          d["outputs"] = r.outputs;
          d["dim_rule"] = r.dim_rule;
          d["weight"] = r.weight;
          d["scalar_formula"] = r.scalar_formula;
          d["uses_k"] = r.uses_k;
          d["identity"] = r.identity;
          d["index_op"] = r.index_op;
          d["grad"] = r.grad;
          d["forward_mode"] = r.forward_mode;
          d["summary"] = r.summary;
          v.append(d);
        }
        return v;
      },
      "Every reduction of the core, as dicts: name, spellings (other KeOps names), by_name (False: "
      "made by differentiation only), family, is_max, outputs ('value', 'index', 'value,index'), "
      "dim_rule ('formula', 'k', 'weight_or_1'), weight ('none', 'optional', 'required'), "
      "scalar_formula, uses_k, identity, index_op, grad, forward_mode, summary.");

  nb::class_<Reduction>(m, "Reduction")
      .def(nb::init<>())
      .def(
          "__init__",
          [](Reduction* self, const std::string& op, const Formula& f, int axis, int k,
             std::optional<Formula> weight) {
            new (self) Reduction(make_reduction(op, f, axis, k, weight));
          },
          nb::arg("op"), nb::arg("formula"), nb::arg("axis") = 1, nb::arg("k") = 0,
          nb::arg("weight") = nb::none())
      .def_prop_ro("op", [](const Reduction& r) { return std::string(reduction_name(r.op())); })
      .def_prop_ro("axis", &Reduction::axis)
      .def_prop_ro("k", &Reduction::k)
      .def_prop_ro("formula", &Reduction::formula)
      .def_prop_ro("num_outputs", &Reduction::num_outputs)
      .def_prop_ro("full_sum", &Reduction::full_sum)
      .def_prop_ro("hash", [](const Reduction& r) { return r.hash().hex(); })
      .def("output_dim", &Reduction::output_dim)
      .def("output_is_index", &Reduction::output_is_index)
      .def(
          "inputs",
          [](const Reduction& r) {
            std::vector<std::tuple<int, int, int>> v;
            for (const VarSlot& s : r.inputs())
              v.emplace_back(s.index, static_cast<int>(s.cat), s.dim);
            return v;
          },
          "(index, category, dim) of each input: category 0 = i, 1 = j, 2 = parameter")
      .def(
          "grad", [](const Reduction& r, int var) { return grad(r, var); }, nb::arg("var"))
      .def(
          "jvp", [](const Reduction& r, int var) { return jvp(r, var); }, nb::arg("var"))
      .def("__str__", &Reduction::str);

  m.def(
      "evaluate",
      [](const Reduction& r, const std::vector<InArray>& inputs, const std::string& backend,
         const std::string& sum_scheme, bool acc_f64, int threads, int64_t ni, int64_t nj,
         const RangesArg& ranges, uintptr_t stream, int device, int64_t budget,
         const DevicesArg& gpus) {
        const std::vector<ArrayView> in = views(inputs, "input");
        const Options o =
            options(backend, sum_scheme, acc_f64, threads, ranges, stream, device, budget, gpus);
        std::vector<Array> out;
        {
          nb::gil_scoped_release release;
          out = evaluate(r, std::span<const ArrayView>(in), o, Sizes{ni, nj});
        }
        nb::list res;
        for (const Array& a : out) res.append(to_numpy(a));
        return res;
      },
      nb::arg("reduction"), nb::arg("inputs"), nb::arg("backend") = "auto",
      nb::arg("sum_scheme") = "block", nb::arg("accumulate_f64") = false, nb::arg("threads") = 0,
      nb::arg("ni") = -1, nb::arg("nj") = -1, nb::arg("ranges") = nb::none(), nb::arg("stream") = 0,
      nb::arg("device") = 0, nb::arg("gpu_memory_budget") = 0, nb::arg("gpu_devices") = nb::none(),
      "Evaluate; returns freshly allocated NumPy arrays. `ranges`: KeOps block-sparse ranges.");

  m.def(
      "evaluate_into",
      [](const Reduction& r, const std::vector<InArray>& inputs,
         const std::vector<OutArray>& outputs, const std::string& backend,
         const std::string& sum_scheme, bool acc_f64, int threads, int64_t ni, int64_t nj,
         const RangesArg& ranges, uintptr_t stream, int device, int64_t budget,
         const DevicesArg& gpus) {
        const std::vector<ArrayView> in = views(inputs, "input");
        const std::vector<ArrayView> out = views(outputs, "output");
        const Options o =
            options(backend, sum_scheme, acc_f64, threads, ranges, stream, device, budget, gpus);
        nb::gil_scoped_release release;
        evaluate(r, std::span<const ArrayView>(in), std::span<const ArrayView>(out), o,
                 Sizes{ni, nj});
      },
      nb::arg("reduction"), nb::arg("inputs"), nb::arg("outputs"), nb::arg("backend") = "auto",
      nb::arg("sum_scheme") = "block", nb::arg("accumulate_f64") = false, nb::arg("threads") = 0,
      nb::arg("ni") = -1, nb::arg("nj") = -1, nb::arg("ranges") = nb::none(), nb::arg("stream") = 0,
      nb::arg("device") = 0, nb::arg("gpu_memory_budget") = 0, nb::arg("gpu_devices") = nb::none(),
      "Evaluate into caller-allocated outputs (any DLPack arrays, e.g. torch tensors, CPU or "
      "CUDA); `stream`: the CUDA stream (an integer handle) to run on.");

  m.def(
      "output_specs",
      [](const Reduction& r, const std::vector<InArray>& inputs, int64_t ni, int64_t nj) {
        const std::vector<ArrayView> in = views(inputs, "input");
        nb::list res;
        for (const OutputSpec& s : output_specs(r, std::span<const ArrayView>(in), Sizes{ni, nj}))
          res.append(
              nb::make_tuple(nb::tuple(nb::cast(s.shape)), std::string(dtype_name(s.dtype))));
        return res;
      },
      nb::arg("reduction"), nb::arg("inputs"), nb::arg("ni") = -1, nb::arg("nj") = -1,
      "The (shape, dtype name) of each output `evaluate` would return for these inputs.");

  // Kernel CG solves and their gradient, driven by tessel's KernelSolve and LazyTensor.solve.
  auto solve_options = [](double alpha, double tol, double atol, int64_t maxiter, bool raise,
                          const std::string& backend, const std::string& sum_scheme, bool acc_f64,
                          int threads, const RangesArg& ranges, int64_t budget,
                          const DevicesArg& gpus) {
    SolveOptions s;
    s.alpha = alpha;
    s.tol = tol;
    s.atol = atol;
    s.maxiter = maxiter;
    s.raise_on_nonconvergence = raise;
    s.eval = options(backend, sum_scheme, acc_f64, threads, ranges, 0, 0, budget, gpus);
    return s;
  };
  m.def(
      "kernel_solve",
      [solve_options](const Reduction& r, int var, const std::vector<InArray>& inputs, OutArray x,
                      double alpha, double tol, double atol, int64_t maxiter, bool raise,
                      const std::string& backend, const std::string& sum_scheme, bool acc_f64,
                      int threads, const RangesArg& ranges, int64_t budget,
                      const DevicesArg& gpus) {
        const std::vector<ArrayView> in = views(inputs, "input");
        const ArrayView xv = view_of(x, "output", 0);
        const SolveOptions s = solve_options(alpha, tol, atol, maxiter, raise, backend, sum_scheme,
                                             acc_f64, threads, ranges, budget, gpus);
        nb::gil_scoped_release release;
        const SolveReport rep = kernel_solve(r, var, std::span<const ArrayView>(in), xv, s);
        return std::make_tuple(rep.iterations, rep.residual, rep.converged);
      },
      nb::arg("reduction"), nb::arg("var"), nb::arg("inputs"), nb::arg("x"), nb::arg("alpha") = 0.0,
      nb::arg("tol") = 1e-6, nb::arg("atol") = 0.0, nb::arg("maxiter") = 0,
      nb::arg("raise_on_nonconvergence") = false, nb::arg("backend") = "auto",
      nb::arg("sum_scheme") = "block", nb::arg("accumulate_f64") = false, nb::arg("threads") = 0,
      nb::arg("ranges") = nb::none(), nb::arg("gpu_memory_budget") = 0,
      nb::arg("gpu_devices") = nb::none(),
      "Solve (alpha I + K) x = b (b = inputs[var]) into x; returns (iterations, residual, "
      "converged).");
  m.def(
      "kernel_solve_grad",
      [solve_options](const Reduction& r, int var, const std::vector<InArray>& inputs, InArray x,
                      InArray grad_x, const std::vector<int>& wrt,
                      const std::vector<OutArray>& grads, double alpha, double tol, double atol,
                      int64_t maxiter, bool raise, const std::string& backend,
                      const std::string& sum_scheme, bool acc_f64, int threads,
                      const RangesArg& ranges, int64_t budget, const DevicesArg& gpus) {
        const std::vector<ArrayView> in = views(inputs, "input");
        const std::vector<ArrayView> out = views(grads, "gradient");
        const ArrayView xv = view_of(x, "x", 0), gv = view_of(grad_x, "grad_x", 0);
        const SolveOptions s = solve_options(alpha, tol, atol, maxiter, raise, backend, sum_scheme,
                                             acc_f64, threads, ranges, budget, gpus);
        double grad_alpha = 0;
        nb::gil_scoped_release release;
        const SolveReport rep = kernel_solve_grad(r, var, std::span<const ArrayView>(in), xv, gv,
                                                  std::span<const int>(wrt),
                                                  std::span<const ArrayView>(out), s, &grad_alpha);
        return std::make_tuple(rep.iterations, rep.residual, rep.converged, grad_alpha);
      },
      nb::arg("reduction"), nb::arg("var"), nb::arg("inputs"), nb::arg("x"), nb::arg("grad_x"),
      nb::arg("wrt"), nb::arg("grads"), nb::arg("alpha") = 0.0, nb::arg("tol") = 1e-6,
      nb::arg("atol") = 0.0, nb::arg("maxiter") = 0, nb::arg("raise_on_nonconvergence") = false,
      nb::arg("backend") = "auto", nb::arg("sum_scheme") = "block",
      nb::arg("accumulate_f64") = false, nb::arg("threads") = 0, nb::arg("ranges") = nb::none(),
      nb::arg("gpu_memory_budget") = 0, nb::arg("gpu_devices") = nb::none(),
      "Gradient of a kernel solve: grads[m] for variable wrt[m]; returns (iterations, residual, "
      "converged, grad_alpha).");

  bind_ot(m);

  // Revolve checkpointing schedules, driven by tessel.checkpoint.checkpoint_loop.
  m.def(
      "revolve_schedule",
      [](int64_t n, int s) {
        std::vector<std::tuple<std::string, int64_t, int64_t, int>> v;
        for (const CheckpointStep& a : revolve_schedule(n, s))
          v.emplace_back(checkpoint_action_name(a.action), a.from, a.to, a.slot);
        return v;
      },
      nb::arg("n"), nb::arg("s"),
      "The optimal schedule reversing n steps with s stored states: (action, from, to, slot).");
  m.def("revolve_optimal_recomputations", &revolve_optimal_recomputations, nb::arg("n"),
        nb::arg("s"), "t*n - C(s+t, t-1): the step evaluations of the schedule's Advance actions.");
  m.def("revolve_forward_steps", &revolve_forward_steps, nb::arg("n"), nb::arg("s"),
        "All step evaluations of the schedule: the advances plus one per reversed step.");

  // Online checkpointing (loops of unknown length), driven by tessel.checkpoint_while.
  nb::class_<OnlineCheckpointer>(m, "OnlineCheckpointer")
      .def(nb::init<int>(), nb::arg("snapshots"))
      .def("observe", &OnlineCheckpointer::observe, nb::arg("k"),
           "Slot to store x_k in (the loop runs past step k+1), or -1.")
      .def(
          "reversal",
          [](const OnlineCheckpointer& cp, int64_t n) {
            std::vector<std::tuple<std::string, int64_t, int64_t, int>> v;
            for (const CheckpointStep& a : cp.reversal(n))
              v.emplace_back(checkpoint_action_name(a.action), a.from, a.to, a.slot);
            return v;
          },
          nb::arg("n"), "The backward schedule once the loop stopped at n steps.")
      .def("recomputations", &OnlineCheckpointer::recomputations, nb::arg("n"))
      .def_prop_ro("slot_steps", &OnlineCheckpointer::slot_steps);
  m.def("online_recomputations", &online_recomputations, nb::arg("n"), nb::arg("s"),
        "Untaped step evaluations of the online schedule for a loop that stops at n steps.");
  m.def("online_recomputations_table", &online_recomputations_table, nb::arg("max_n"), nb::arg("s"),
        "online_recomputations(n, s) for n = 0 .. max_n.");

  m.def("simd_level", &simd_level);
  m.def("cuda_status", &cuda_status);
  m.def("cuda_available", &cuda_available);
  m.def("num_threads", &num_threads);
  m.def("cache_dir", &cache_dir);
  m.def("compiler", [] {
    const CompilerInfo c = compiler_info();
    return std::make_tuple(c.usable, c.path, c.version, c.problem);
  });

  // ---- keyword options: one normaliser for every front end (tessel/options.hpp) --------------
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
        std::vector<std::pair<std::string, OptionValue>> in;
        for (auto [k, v] : options) {
          if (!PyUnicode_Check(k.ptr()))
            throw nb::type_error((who + ": option names must be strings").c_str());
          in.emplace_back(nb::cast<std::string>(k), option_value(v));
        }
        std::optional<ReductionOp> op;
        if (reduction) op = reduction_from_name(*reduction);
        const NormalizedOptions n = normalize_options(who, scope, in, op);
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
}
