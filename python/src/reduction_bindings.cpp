// Reductions and their evaluation: the Reduction object, the reduction table, and Bound, the
// reduction a front end built with its options, called with arrays in one crossing.

#include <algorithm>

#include "bindings.hpp"

namespace tessel::py {

namespace {

// A reduction with the options it was built with and the words its front end uses in errors.
// Everything text (formula, aliases, options) was read when it was made; a call reads arrays.
struct Bound {
  Reduction reduction;
  std::shared_ptr<const Settings> settings;
  std::string who;
  ArrayKind kind = ArrayKind::Any;
  // CUDA results are allocated by the front end (PyTorch's allocator, on its current stream):
  // alloc(shape, dtype name, device) returns an array, stream(device) the stream handle.
  nb::object alloc, stream;

  Bound derive(const Reduction& r) const {
    Bound b = *this;
    b.reduction = r;
    return b;
  }
};

// What a front end promises its users of one call's arrays: one dtype, and CUDA arrays on one
// device (the core checks the rest: shapes, strides, sizes).
void check_call(const Bound& b, const std::vector<ArrayView>& in) {
  if (b.kind != ArrayKind::Torch) return;
  for (size_t k = 1; k < in.size(); ++k) {
    if (in[k].dtype != in[0].dtype)
      throw nb::type_error((b.who + ": argument " + std::to_string(k) + " has dtype torch." +
                            dtype_name(in[k].dtype) + " but argument 0 has torch." +
                            dtype_name(in[0].dtype) + "; all arguments must share one dtype")
                               .c_str());
  }
  const ArrayView* cuda = nullptr;
  for (size_t k = 0; k < in.size(); ++k) {
    if (in[k].device.kind != DeviceKind::CUDA) continue;
    if (cuda && cuda->device.index != in[k].device.index)
      throw nb::value_error(
          (b.who + ": argument " + std::to_string(k) +
           " is on cuda:" + std::to_string(in[k].device.index) +
           " but an earlier argument is on cuda:" + std::to_string(cuda->device.index) +
           "; all CUDA tensors must be on one device")
              .c_str());
    cuda = &in[k];
  }
}

// Evaluates into arrays the front end allocates on the inputs' GPU, on its current stream, so
// that results never pass through host memory.
nb::list call_on_gpu(const Bound& b, const std::vector<ArrayView>& in, Options& o, Sizes sizes,
                     int device) {
  o.device = device;
  o.stream = reinterpret_cast<void*>(nb::cast<uintptr_t>(b.stream(device)));
  nb::list res;
  std::vector<OutArray> held;
  std::vector<ArrayView> out;
  for (const OutputSpec& s : output_specs(b.reduction, in, sizes)) {
    nb::object a = b.alloc(nb::tuple(nb::cast(s.shape)), dtype_name(s.dtype), device);
    res.append(a);
    held.push_back(nb::cast<OutArray>(a));
    out.push_back(view_of(held.back(), "output", held.size() - 1));
  }
  nb::gil_scoped_release release;
  evaluate(b.reduction, std::span<const ArrayView>(in), std::span<const ArrayView>(out), o, sizes);
  return res;
}

nb::list call(const Bound& b, nb::sequence args, int64_t ni, int64_t nj, const RangesArg& ranges,
              std::optional<std::string> backend) {
  std::vector<ArrayView> in;
  const size_t n = nb::len(args);
  in.reserve(n);
  for (size_t k = 0; k < n; ++k) in.push_back(read_argument(args[k], b.who, k, b.kind));
  check_call(b, in);
  Options o = b.settings->eval;
  if (backend) o.backend = backend_from_name(*backend, b.who);
  o.ranges = block_ranges(ranges);
  const Sizes sizes{ni, nj};
  auto cuda = std::find_if(in.begin(), in.end(),
                           [](const ArrayView& v) { return v.device.kind == DeviceKind::CUDA; });
  // Without an allocator (NumPy-style callers) CUDA inputs give host results.
  if (cuda != in.end() && b.alloc.is_valid() && !b.alloc.is_none())
    return call_on_gpu(b, in, o, sizes, cuda->device.index);
  std::vector<Array> out;
  {
    nb::gil_scoped_release release;
    out = evaluate(b.reduction, std::span<const ArrayView>(in), o, sizes);
  }
  nb::list res;
  for (const Array& a : out) res.append(to_numpy(a));
  return res;
}

ArrayKind kind_from_name(const std::string& kind) {
  if (kind == "torch") return ArrayKind::Torch;
  if (kind == "numpy") return ArrayKind::Numpy;
  if (kind == "any") return ArrayKind::Any;
  throw nb::value_error(
      ("tessel.Bound: kind must be 'torch', 'numpy' or 'any', got '" + kind + "'").c_str());
}

nb::list reduction_table_dicts() {
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
}

void bind_reduction_class(nb::module_& m) {
  nb::class_<Reduction>(m, "Reduction",
                        R"doc(A reduction of a formula over j (axis=1) or i (axis=0).

The core's object behind Genred: ``grad(var)`` and ``jvp(var)`` return the derivative as
another Reduction (its extra last input is the cotangent, or the tangent), ``inputs()`` its
(index, category, dim) inputs, ``num_outputs`` 2 for the value-and-index reductions.

Parameters
----------
op : str
    Sum, Min, Max, ArgMin, ArgMax, Min_ArgMin, Max_ArgMax, KMin, ArgKMin, KMin_ArgKMin,
    LogSumExp or SumSoftMaxWeight.
formula : Formula
    The reduced formula.
axis : {0, 1}, default 1
    The reduced index.
k : int, default 0
    K of the KMin family.
weight : Formula, optional
    The weights of SumSoftMaxWeight or of a weighted LogSumExp.

Raises
------
ValueError
    An unknown op, a K missing or not wanted, or a weight the op does not take.

Examples
--------
>>> import tessel
>>> f = tessel.parse("Exp(-SqDist(X,Y)) * B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)"])
>>> r = tessel.Reduction("Sum", f)
>>> r.op, r.axis, r.output_dim(0)
('Sum', 1, 1)
>>> r.grad(0).inputs()[-1]          # the cotangent: an i-variable of the output's dim
(3, 0, 1)
)doc")
      .def(nb::init<>())
      .def(
          "__init__",
          [](Reduction* self, const std::string& op, const Formula& f, int axis, int k,
             std::optional<Formula> weight) {
            new (self) Reduction(reduction_from_name(op), f, axis, k, weight ? *weight : Formula{});
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
}

void bind_bound_class(nb::module_& m) {
  nb::class_<Bound>(m, "Bound")
      .def(
          "__init__",
          [](Bound* self, const Reduction& r, const Settings& s, const std::string& who,
             const std::string& kind, nb::object alloc, nb::object stream) {
            new (self) Bound{r,
                             std::make_shared<const Settings>(s),
                             who,
                             kind_from_name(kind),
                             std::move(alloc),
                             std::move(stream)};
          },
          nb::arg("reduction"), nb::arg("settings"), nb::arg("who") = "Genred",
          nb::arg("kind") = "any", nb::arg("alloc") = nb::none(), nb::arg("stream") = nb::none(),
          "`reduction` with its `settings`, called with arrays of `kind` ('torch', 'numpy', "
          "'any'); `who` names the caller in errors. CUDA inputs: alloc(shape, dtype, device) "
          "allocates each result, stream(device) gives the stream to run on.")
      .def_prop_ro("reduction", [](const Bound& b) { return b.reduction; })
      .def_prop_ro("settings", [](const Bound& b) { return *b.settings; })
      .def("derive", &Bound::derive, nb::arg("reduction"),
           "Another reduction (a gradient, say) with these settings.")
      .def("__str__", [](const Bound& b) { return b.reduction.str(); })
      .def("__repr__", [](const Bound& b) { return "tessel.Bound(" + b.reduction.str() + ")"; })
      .def("__call__", &call, nb::arg("args"), nb::arg("ni") = -1, nb::arg("nj") = -1,
           nb::arg("ranges") = nb::none(), nb::arg("backend") = nb::none(),
           "Evaluates on `args` (one array per input the reduction reads, by index); returns "
           "the results: NumPy arrays for host inputs, front-end arrays for CUDA inputs.");
}

}  // namespace

void bind_reductions(nb::module_& m) {
  m.def(
      "reduction_name",
      [](const std::string& name) {
        return std::string(reduction_name(reduction_from_name(name)));
      },
      nb::arg("name"), "tessel's name of a reduction given by any of its KeOps spellings.");
  m.def("reduction_table", &reduction_table_dicts,
        "Every reduction of the core, as dicts: name, spellings (other KeOps names), by_name "
        "(False: made by differentiation only), family, is_max, outputs ('value', 'index', "
        "'value,index'), dim_rule ('formula', 'k_times_formula', 'weight_or_1'), weight ('none', "
        "'optional', 'required'), scalar_formula, uses_k, identity, index_op, grad, forward_mode, summary.");
  bind_reduction_class(m);
  bind_bound_class(m);
  m.def(
      "evaluate",
      [](const Reduction& r, nb::sequence inputs, std::optional<Settings> settings, int64_t ni,
         int64_t nj, const RangesArg& ranges,
         std::optional<std::vector<OutArray>> outputs) -> nb::object {
        const Bound b{r, std::make_shared<const Settings>(settings.value_or(Settings{})),
                      "evaluate"};
        if (!outputs) return call(b, inputs, ni, nj, ranges, std::nullopt);
        std::vector<ArrayView> in, out;
        for (size_t k = 0; k < nb::len(inputs); ++k)
          in.push_back(read_argument(inputs[k], b.who, k, ArrayKind::Any));
        for (size_t k = 0; k < outputs->size(); ++k)
          out.push_back(view_of((*outputs)[k], "output", k));
        Options o = b.settings->eval;
        o.ranges = block_ranges(ranges);
        nb::gil_scoped_release release;
        evaluate(r, std::span<const ArrayView>(in), std::span<const ArrayView>(out), o,
                 Sizes{ni, nj});
        return nb::none();
      },
      nb::arg("reduction"), nb::arg("inputs"), nb::arg("settings") = nb::none(), nb::arg("ni") = -1,
      nb::arg("nj") = -1, nb::arg("ranges") = nb::none(), nb::arg("outputs") = nb::none(),
      "Evaluates with `settings` (default: the core's defaults): into `outputs` (arrays on the "
      "inputs' device, shaped as output_specs says), else into freshly allocated NumPy arrays, "
      "which it returns. `ranges`: KeOps block-sparse ranges.");
  m.def(
      "output_specs",
      [](const Reduction& r, const std::vector<InArray>& inputs, int64_t ni, int64_t nj) {
        std::vector<ArrayView> in;
        for (size_t k = 0; k < inputs.size(); ++k) in.push_back(view_of(inputs[k], "input", k));
        nb::list res;
        for (const OutputSpec& s : output_specs(r, std::span<const ArrayView>(in), Sizes{ni, nj}))
          res.append(nb::make_tuple(nb::tuple(nb::cast(s.shape)), dtype_name(s.dtype)));
        return res;
      },
      nb::arg("reduction"), nb::arg("inputs"), nb::arg("ni") = -1, nb::arg("nj") = -1,
      "The (shape, dtype name) of each output `evaluate` would return for these inputs.");
}

}  // namespace tessel::py
