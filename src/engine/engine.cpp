// evaluate(): plans batch dimensions, then binds, validates and dispatches each evaluation.
#include <algorithm>

#include "engine/engine_impl.hpp"
#include "engine/half_io.hpp"
#include "tessel/runtime.hpp"

namespace tessel {

using engine::check_extent;
using engine::Context;
using engine::eval_impl;
using engine::eval_into;
using engine::extent_fits;
using engine::pick_device;

namespace {

// Batch dimensions: variables may carry leading batch dimensions, (B..., n, dim) for i and j
// variables, (B..., dim) for parameters. Batch shapes broadcast as in NumPy and the output gets
// (B..., n, dim); each batch element is one ordinary evaluation on sliced views.
struct BatchPlan {
  bool batched = false;
  std::vector<int64_t> shape;
  int64_t count = 1;
};

int batch_rank(const VarSlot& v, const ArrayView& a) {
  const int core = v.cat == Category::Param ? 1 : 2;
  return std::max(0, static_cast<int>(a.shape.size()) - core);
}

BatchPlan plan_batch(const ReductionImpl& r, std::span<const ArrayView> inputs) {
  BatchPlan plan;
  bool data_batched = false;
  for (const VarSlot& v : r.vars) {
    if (v.computed || v.index >= static_cast<int>(inputs.size())) continue;
    const ArrayView& a = inputs[v.index];
    const int nb = batch_rank(v, a);
    if (nb == 0) continue;
    if (v.cat != Category::Param) data_batched = true;
    if (nb > static_cast<int>(plan.shape.size()))
      plan.shape.insert(plan.shape.begin(), nb - plan.shape.size(), 1);
    const size_t off = plan.shape.size() - nb;
    for (int k = 0; k < nb; ++k) {
      int64_t& have = plan.shape[off + k];
      const int64_t got = a.shape[k];
      if (got == have || got == 1) continue;
      if (have != 1)
        detail::fail("evaluate", "input ", v.index, " has batch size ", got,
                     " where another input has ", have,
                     "; batch dimensions must be equal or 1 (NumPy broadcasting)");
      have = got;
    }
  }
  plan.count = 1;
  for (int64_t d : plan.shape)
    plan.count = detail::checked_mul(plan.count, d, "evaluate", "the number of batch elements");
  // A (1, dim) parameter alone is the plain, unbatched form.
  plan.batched = data_batched || plan.count != 1;
  return plan;
}

// The view of batch element `b` of array `a` whose trailing `core` dims are the element.
ArrayView slice_batch(const ArrayView& a, int core, const BatchPlan& plan, int64_t b) {
  const int nb = std::max(0, static_cast<int>(a.shape.size()) - core);
  ArrayView v = a;
  v.shape.assign(a.shape.end() - std::min<size_t>(a.shape.size(), core), a.shape.end());
  v.strides.clear();
  for (size_t k = a.shape.size() - v.shape.size(); k < a.shape.size(); ++k)
    v.strides.push_back(a.stride(static_cast<int>(k)));
  int64_t offset = 0, rest = b;
  for (int k = static_cast<int>(plan.shape.size()) - 1; k >= 0; --k) {
    const int64_t idx = rest % plan.shape[k];
    rest /= plan.shape[k];
    const int ak = k - (static_cast<int>(plan.shape.size()) - nb);
    if (ak >= 0 && a.shape[ak] != 1) offset += idx * a.stride(ak);
  }
  v.data = static_cast<uint8_t*>(a.data) + offset * static_cast<int64_t>(dtype_size(a.dtype));
  return v;
}

void evaluate_batched(const ReductionImpl& r, std::span<const ArrayView> inputs,
                      std::span<const ArrayView> outputs, const Options& opt, Sizes sizes,
                      const BatchPlan& plan) {
  const int out_core = r.full_sum ? 1 : 2;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const ArrayView& o = outputs[k];
    const bool ok = o.shape.size() == plan.shape.size() + out_core &&
                    std::equal(plan.shape.begin(), plan.shape.end(), o.shape.begin());
    if (!ok) {
      std::string want;
      for (int64_t d : plan.shape) want += std::to_string(d) + ", ";
      detail::fail("evaluate", "output ", k, " must have the batch shape (", want,
                   "...) followed by ", r.full_sum ? "(dim)" : "(n, dim)");
    }
  }
  for (size_t q = 0; q < inputs.size(); ++q)
    if (!extent_fits(inputs[q])) check_extent("evaluate", "input " + std::to_string(q), inputs[q]);
  for (size_t q = 0; q < outputs.size(); ++q)
    if (!extent_fits(outputs[q]))
      check_extent("evaluate", "output " + std::to_string(q), outputs[q]);
  std::vector<ArrayView> in(inputs.size()), out(outputs.size());
  for (int64_t b = 0; b < plan.count; ++b) {
    for (size_t q = 0; q < inputs.size(); ++q) {
      const VarSlot* v = r.find_var(static_cast<int>(q));
      const int core = v && v->cat == Category::Param ? 1 : 2;
      in[q] = inputs[q].shape.empty() ? inputs[q] : slice_batch(inputs[q], core, plan, b);
    }
    for (size_t q = 0; q < outputs.size(); ++q) out[q] = slice_batch(outputs[q], out_core, plan, b);
    Context ctx{in, opt, sizes, {}, pick_device(in, out, opt)};
    eval_into(r, ctx, out, true);
  }
}

int64_t rows_of(const ReductionImpl& r, std::span<const ArrayView> inputs, Category c, Sizes s) {
  for (const VarSlot& v : r.vars) {
    if (v.computed || v.cat != c || v.index >= static_cast<int>(inputs.size())) continue;
    const auto& sh = inputs[v.index].shape;
    if (!sh.empty()) return sh.size() >= 2 ? sh[sh.size() - 2] : sh[0];
  }
  return c == Category::I ? s.ni : s.nj;
}

void check_sizes(Sizes s) {
  for (auto [n, name] : {std::pair{s.ni, "ni"}, std::pair{s.nj, "nj"}})
    if (n < -1)
      detail::fail("evaluate", "Sizes.", name, " = ", n,
                   " is negative; expected a number of rows, or -1 to take it from the inputs");
}

// Sizes that pass every check can still be too large to allocate (scratch buffers, staging
// copies): the caller gets a tessel::Error rather than a standard exception it cannot place.
template <class F>
auto guard_sizes(F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    detail::fail("evaluate", "out of memory: the arrays or sizes given are too large");
  } catch (const std::length_error& e) {
    detail::fail("evaluate", "a size is too large to allocate (", e.what(), ")");
  }
}

void evaluate_unguarded(const Reduction& r, std::span<const ArrayView> inputs,
                        std::span<const ArrayView> outputs, const Options& opt, Sizes sizes) {
  const BatchPlan plan = plan_batch(r.impl(), inputs);
  if (plan.batched && opt.ranges)
    detail::fail("evaluate", "block-sparse ranges with batch dimensions are not supported");
  if (plan.batched) return evaluate_batched(r.impl(), inputs, outputs, opt, sizes, plan);
  Context ctx{inputs, opt, sizes, {}, pick_device(inputs, outputs, opt)};
  eval_into(r.impl(), ctx, outputs, true);
}

// The allocating evaluate's outputs: (n, dim) unbatched ((1, dim) for a sum over all rows),
// (B..., n, dim) or (B..., dim) batched; the inputs' float dtype, int64 for indices.
std::vector<OutputSpec> specs_of(const ReductionImpl& R, std::span<const ArrayView> inputs,
                                 Sizes sizes, const BatchPlan& plan) {
  DType dtype = DType::Float32;
  for (const VarSlot& v : R.vars)
    if (!v.computed && v.index < static_cast<int>(inputs.size())) dtype = inputs[v.index].dtype;
  if (dtype == DType::Int64) dtype = DType::Float32;
  const int64_t n = std::max<int64_t>(0, rows_of(R, inputs, R.outer(), sizes));
  std::vector<OutputSpec> specs;
  for (int k = 0; k < R.num_outputs(); ++k) {
    OutputSpec s{plan.shape, R.output_is_index(k) ? DType::Int64 : dtype};
    if (!plan.batched)
      s.shape = {R.full_sum ? 1 : n};
    else if (!R.full_sum)
      s.shape.push_back(n);
    s.shape.push_back(R.output_dim(k));
    specs.push_back(s);
  }
  return specs;
}

std::vector<Array> evaluate_unguarded(const Reduction& r, std::span<const ArrayView> inputs,
                                      const Options& opt, Sizes sizes) {
  const ReductionImpl& R = r.impl();
  const BatchPlan plan = plan_batch(R, inputs);
  if (plan.batched && opt.ranges)
    detail::fail("evaluate", "block-sparse ranges with batch dimensions are not supported");
  if (!plan.batched) {
    // Outputs allocated here are host arrays; CUDA inputs are read on their device.
    Context ctx{inputs, opt, sizes, {}, pick_device(inputs, {}, opt)};
    return eval_impl(R, ctx, true);
  }
  std::vector<Array> outs;
  std::vector<ArrayView> views;
  for (const OutputSpec& s : specs_of(R, inputs, sizes, plan)) {
    outs.emplace_back(s.dtype, s.shape);
    views.push_back(outs.back().view());
  }
  evaluate_batched(R, inputs, views, opt, sizes, plan);
  return outs;
}

}  // namespace

void evaluate(const Reduction& r, std::span<const ArrayView> inputs,
              std::span<const ArrayView> outputs, const Options& opt, Sizes sizes) {
  check_sizes(sizes);
  guard_sizes([&] {
    if (!engine::any_half(inputs, outputs))
      return evaluate_unguarded(r, inputs, outputs, opt, sizes);
    // Half arrays: float32 copies in, float32 results rounded into the half outputs (on the
    // device for device arrays when the GPU's backend keeps results there).
    const int device = pick_device(inputs, outputs, opt);
    engine::HalfInputs h = engine::convert_half_inputs(inputs, opt, device);
    if (!h.have_dtype)  // no float input (a formula reading no array): the outputs' dtype
      for (const ArrayView& o : outputs)
        if (is_half(o.dtype)) h.dtype = o.dtype;
    engine::check_half_outputs(outputs, h.dtype);
    const engine::HalfOutputs outs(outputs, device);
    evaluate_unguarded(r, h.views, outs.views(), h.opt, sizes);
    outs.finish();
  });
}

std::vector<Array> evaluate(const Reduction& r, std::span<const ArrayView> inputs,
                            const Options& opt, Sizes sizes) {
  check_sizes(sizes);
  return guard_sizes([&] {
    if (!engine::any_half(inputs, {})) return evaluate_unguarded(r, inputs, opt, sizes);
    const engine::HalfInputs h =
        engine::convert_half_inputs(inputs, opt, pick_device(inputs, {}, opt));
    std::vector<Array> outs = evaluate_unguarded(r, h.views, h.opt, sizes);
    for (Array& o : outs) o = engine::round_to_half(o, h.dtype);
    return outs;
  });
}

std::vector<OutputSpec> output_specs(const Reduction& r, std::span<const ArrayView> inputs,
                                     Sizes sizes) {
  check_sizes(sizes);
  return specs_of(r.impl(), inputs, sizes, plan_batch(r.impl(), inputs));
}

std::vector<Array> evaluate(const Reduction& r, const std::vector<Array>& inputs,
                            const Options& opt, Sizes sizes) {
  std::vector<ArrayView> views;
  for (const Array& a : inputs) views.push_back(a.view());
  return evaluate(r, std::span<const ArrayView>(views), opt, sizes);
}

}  // namespace tessel
