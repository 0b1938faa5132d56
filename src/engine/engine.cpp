// evaluate(): validates inputs and outputs, fills computed variables, and dispatches to a backend.
#include <algorithm>
#include <cstring>
#include <map>

#include "backend/problem.hpp"
#include "backend/cuda/driver.hpp"
#include "codegen/cpu_codegen.hpp"
#include "tessel/runtime.hpp"

namespace tessel {

namespace {

const char* cat_word(Category c) {
  return c == Category::I ? "Vi" : c == Category::J ? "Vj" : "Pm";
}

// Checks that every element offset of `a`, in bytes, fits in 64 bits: the kernels index with
// row * stride products, which would otherwise wrap (a huge or broadcast shape).
// Whether every element offset of `a`, in bytes, fits in 64 bits. Checked on every call, so it
// allocates nothing; check_extent builds the message only when this fails.
bool extent_fits(const ArrayView& a) {
  for (int64_t s : a.shape)
    if (s <= 0) return true;
  int64_t last = 0, t = 0;
  for (size_t k = 0; k < a.shape.size(); ++k) {
    const int64_t st = a.stride(static_cast<int>(k));
    if (st == INT64_MIN || __builtin_mul_overflow(a.shape[k] - 1, st < 0 ? -st : st, &t) ||
        __builtin_add_overflow(last, t, &last))
      return false;
  }
  return !__builtin_add_overflow(last, 1, &last) &&
         !__builtin_mul_overflow(last, static_cast<int64_t>(dtype_size(a.dtype)), &t);
}

void check_extent(const char* fn, const std::string& who, const ArrayView& a) {
  if (extent_fits(a)) return;
  for (int64_t s : a.shape)
    if (s <= 0) return;  // nothing is read or written (negative sizes are reported elsewhere)
  const std::string what = who + "'s extent";
  int64_t last = 0;
  for (size_t k = 0; k < a.shape.size(); ++k) {
    const int64_t st = a.stride(static_cast<int>(k));
    if (st == INT64_MIN) detail::fail(fn, who, " has stride ", st, "; its magnitude is too large");
    last = detail::checked_add(
        last, detail::checked_mul(a.shape[k] - 1, st < 0 ? -st : st, fn, what.c_str()), fn,
        what.c_str());
  }
  detail::checked_mul(detail::checked_add(last, 1, fn, what.c_str()),
                      static_cast<int64_t>(dtype_size(a.dtype)), fn, what.c_str());
}

// Checks one input against its slot and returns its rows × dim view.
Bound bind(const VarSlot& v, const ArrayView& a, bool cuda) {
  const char* fn = "evaluate";
  Bound b;
  b.index = v.index;
  b.cat = v.cat;
  b.dim = v.dim;
  b.dtype = a.dtype;
  b.data = a.data;
  const std::string who = std::string("input ") + std::to_string(v.index) + " (" + cat_word(v.cat) +
                          "(" + std::to_string(v.index) + "," + std::to_string(v.dim) + "))";
  if (a.device.kind != DeviceKind::CPU && !cuda)
    detail::fail(fn, who, " is on a CUDA device but the CPU backend was requested");
  if (a.dtype != DType::Float32 && a.dtype != DType::Float64)
    detail::fail_type(fn, who, " has dtype ", dtype_name(a.dtype), "; expected float32 or float64");
  if (!a.strides.empty() && a.strides.size() != a.shape.size())
    detail::fail(fn, who, " has ", a.strides.size(), " strides for ", a.shape.size(), " dims");
  for (int64_t s : a.shape)
    if (s < 0) detail::fail(fn, who, " has a negative size in its shape");
  if (v.cat == Category::Param) {
    const bool ok = (a.shape.size() == 1 && a.shape[0] == v.dim) ||
                    (a.shape.size() == 2 && a.shape[0] == 1 && a.shape[1] == v.dim);
    if (!ok) detail::fail(fn, who, " must have shape (", v.dim, ") or (1, ", v.dim, ")");
    b.rows = 1;
    b.s_row = 0;
    b.s_col = a.stride(static_cast<int>(a.shape.size()) - 1);
  } else if (a.shape.size() == 2 && a.shape[1] == v.dim) {
    b.rows = a.shape[0];
    b.s_row = a.stride(0);
    b.s_col = a.stride(1);
  } else if (a.shape.size() == 1 && v.dim == 1) {
    b.rows = a.shape[0];
    b.s_row = a.stride(0);
    b.s_col = 1;
  } else {
    std::string got = "(";
    for (size_t k = 0; k < a.shape.size(); ++k) got += (k ? ", " : "") + std::to_string(a.shape[k]);
    detail::fail(fn, who, " has shape ", got, "); expected (n, ", v.dim, ")",
                 v.dim == 1 ? " or (n)" : "");
  }
  if (a.data == nullptr && b.rows > 0) detail::fail(fn, who, " has a null data pointer");
  check_extent(fn, who, a);
  return b;
}

void check_output(const ReductionImpl& r, int k, const ArrayView& o, int64_t rows, DType dtype,
                  bool cuda) {
  const char* fn = "evaluate";
  const int dim = r.output_dim(k);
  const DType want = r.output_is_index(k) ? DType::Int64 : dtype;
  const std::string who = "output " + std::to_string(k);
  if (o.device.kind != DeviceKind::CPU && !cuda)
    detail::fail(fn, who, " is on a CUDA device but the CPU backend was requested");
  if (o.dtype != want)
    detail::fail_type(fn, who, " has dtype ", dtype_name(o.dtype), "; expected ", dtype_name(want));
  const bool ok = (o.shape.size() == 2 && o.shape[0] == rows && o.shape[1] == dim) ||
                  (o.shape.size() == 1 &&
                   ((dim == 1 && o.shape[0] == rows) || (rows == 1 && o.shape[0] == dim)));
  if (!ok) detail::fail(fn, who, " must have shape (", rows, ", ", dim, ")");
  if (o.data == nullptr && rows > 0 && dim > 0) detail::fail(fn, who, " has a null data pointer");
  check_extent(fn, who, o);
}

bool contiguous(const ArrayView& a) {
  if (a.strides.empty()) return true;
  int64_t expect = 1;
  for (int k = static_cast<int>(a.shape.size()) - 1; k >= 0; --k) {
    if (a.shape[k] != 1 && a.strides[k] != expect) return false;
    if (__builtin_mul_overflow(expect, a.shape[k], &expect)) return false;
  }
  return true;
}

// A CUDA output's rows as a 2-D copy: its components must be contiguous within a row.
void device_rows(const ArrayView& dst, int64_t& rows, int64_t& cols, size_t& pitch) {
  cols = dst.shape.size() == 2 ? dst.shape[1] : 1;
  rows = dst.shape.empty() ? 1 : dst.shape[0];
  if (dst.shape.size() == 2 && cols > 1 && dst.stride(1) != 1)
    detail::fail("evaluate", "a CUDA output must be contiguous along its last dimension");
  pitch = static_cast<size_t>(dst.shape.size() == 2 || cols == 1 ? dst.stride(0) : 1) *
          dtype_size(dst.dtype);
}

void copy_rows(const Array& src, const ArrayView& dst) {
  if (dst.device.kind == DeviceKind::CUDA) {
    int64_t rows = 0, cols = 0;
    size_t pitch = 0;
    device_rows(dst, rows, cols, pitch);
    const size_t row = static_cast<size_t>(cols) * dtype_size(dst.dtype);
    cuda_copy_2d(dst.data, pitch, src.data(), row, row, static_cast<size_t>(rows), nullptr);
    cuda_synchronize(nullptr);
    return;
  }
  // dst may be strided; src is contiguous with the same logical shape.
  const int64_t n = src.size();
  const int64_t cols = dst.shape.size() == 2 ? dst.shape[1] : 1;
  for (int64_t q = 0; q < n; ++q) {
    const int64_t r = q / cols, c = q % cols;
    const int64_t off =
        dst.shape.size() == 2 ? r * dst.stride(0) + c * dst.stride(1) : q * dst.stride(0);
    const size_t es = dtype_size(dst.dtype);
    std::memcpy(static_cast<uint8_t*>(dst.data) + off * es,
                static_cast<const uint8_t*>(src.data()) + q * es, es);
  }
}

// dst += src, elementwise over the same logical (rows, dim) shape; dst may be strided.
void add_rows(const Array& src, const ArrayView& dst) {
  if (dst.device.kind == DeviceKind::CUDA) {
    // Rare (gradient terms added to an output): through the host.
    int64_t rows = 0, cols = 0;
    size_t pitch = 0;
    device_rows(dst, rows, cols, pitch);
    Array host(dst.dtype, {rows, cols});
    const size_t row = static_cast<size_t>(cols) * dtype_size(dst.dtype);
    cuda_copy_2d(host.data(), row, dst.data, pitch, row, static_cast<size_t>(rows), nullptr);
    cuda_synchronize(nullptr);
    add_rows(src, host.view());
    copy_rows(host, dst);
    return;
  }
  const int64_t n = src.size();
  const int64_t cols = dst.shape.size() == 2 ? dst.shape[1] : 1;
  for (int64_t q = 0; q < n; ++q) {
    const int64_t r = q / cols, c = q % cols;
    const int64_t off =
        dst.shape.size() == 2 ? r * dst.stride(0) + c * dst.stride(1) : q * dst.stride(0);
    if (dst.dtype == DType::Float32)
      static_cast<float*>(dst.data)[off] += static_cast<float>(src.at(q));
    else
      static_cast<double*>(dst.data)[off] += src.at(q);
  }
}

// The row blocks of a reduction: all rows over [0, n_inner), or the block-sparse ranges checked
// and completed with empty blocks for the rows they leave out.
std::vector<RowBlock> row_blocks(const ReductionImpl& r, const Options& opt, int64_t n_outer,
                                 int64_t n_inner) {
  const char* fn = "evaluate";
  if (!opt.ranges || r.op == ReductionOp::GatherSum || r.op == ReductionOp::ScatterSum)
    return {RowBlock{0, n_outer, {0, n_inner}}};
  const BlockRanges& br = *opt.ranges;
  const bool over_j = r.axis == 1;
  const auto& ranges = over_j ? br.ranges_i : br.ranges_j;
  const auto& slices = over_j ? br.slices_i : br.slices_j;
  const auto& red = over_j ? br.redranges_j : br.redranges_i;
  const char* rn = over_j ? "ranges_i" : "ranges_j";
  const char* sn = over_j ? "slices_i" : "slices_j";
  const char* dn = over_j ? "redranges_j" : "redranges_i";
  if (ranges.size() % 2 || red.size() % 2)
    detail::fail(fn, rn, " and ", dn, " must hold (start, end) pairs");
  if (slices.size() * 2 != ranges.size())
    detail::fail(fn, sn, " has ", slices.size(), " entries; expected one per block of ", rn, " (",
                 ranges.size() / 2, ")");
  std::vector<RowBlock> blocks;
  int64_t prev_slice = 0, covered = 0;
  for (size_t c = 0; c < slices.size(); ++c) {
    const int64_t b = ranges[2 * c], e = ranges[2 * c + 1], s = slices[c];
    if (b < covered || e < b || e > n_outer)
      detail::fail(fn, rn, " block ", c, " = [", b, ", ", e, ") is not increasing and within [0, ",
                   n_outer, ")");
    if (s < prev_slice || s > static_cast<int64_t>(red.size() / 2))
      detail::fail(fn, sn, "[", c, "] = ", s, " is not non-decreasing and within the ",
                   red.size() / 2, " intervals of ", dn);
    if (b > covered) blocks.push_back(RowBlock{covered, b, {}});
    RowBlock blk{b, e, {}};
    for (int64_t q = prev_slice; q < s; ++q) {
      const int64_t js = red[2 * q], je = red[2 * q + 1];
      if (js < 0 || je < js || je > n_inner)
        detail::fail(fn, dn, " interval ", q, " = [", js, ", ", je, ") is not within [0, ", n_inner,
                     ")");
      blk.iv.insert(blk.iv.end(), {js, je});
    }
    blocks.push_back(std::move(blk));
    prev_slice = s;
    covered = e;
  }
  if (covered < n_outer) blocks.push_back(RowBlock{covered, n_outer, {}});
  return blocks;
}

struct Context {
  std::span<const ArrayView> inputs;
  Options opt;
  Sizes sizes;
  std::map<std::pair<uint64_t, uint64_t>, std::vector<Array>> computed;  // by source hash
  int device = -1;  // the CUDA device evaluating, or -1 for the CPU
};

std::vector<Array> eval_impl(const ReductionImpl& r, Context& ctx, bool top);
int pick_device(std::span<const ArrayView> inputs, std::span<const ArrayView> outputs,
                const Options& opt);

void eval_into(const ReductionImpl& r, Context& ctx, std::span<const ArrayView> outputs, bool top) {
  const char* fn = "evaluate";
  Problem p;
  p.r = &r;
  p.opt = ctx.opt;
  p.threads = ctx.opt.threads > 0 ? ctx.opt.threads : num_threads();
  const int n_in = r.next_input_index();
  if (static_cast<int>(ctx.inputs.size()) < n_in)
    detail::fail(fn, "expected ", n_in, " inputs (variables 0..", n_in - 1, "), got ",
                 ctx.inputs.size());
  if (top && static_cast<int>(ctx.inputs.size()) > n_in)
    detail::fail(fn, "expected ", n_in, " inputs (variables 0..", n_in - 1, "), got ",
                 ctx.inputs.size(), ": the reduction does not use the extra ones");
  // Bind the caller's inputs and learn the sizes and the dtype.
  int64_t rows[2] = {ctx.sizes.ni, ctx.sizes.nj};
  int from[2] = {-1, -1};
  bool have_dtype = false;
  int dtype_from = -1;
  for (const VarSlot& v : r.vars) {
    if (v.computed) continue;
    Bound b = bind(v, ctx.inputs[v.index], ctx.device >= 0);
    if (!have_dtype) {
      p.dtype = b.dtype, have_dtype = true, dtype_from = v.index;
    } else if (b.dtype != p.dtype) {
      detail::fail_type(fn, "input ", v.index, " has dtype ", dtype_name(b.dtype), " but input ",
                        dtype_from, " has ", dtype_name(p.dtype),
                        "; all inputs must share one dtype");
    }
    if (v.cat != Category::Param) {
      const int c = static_cast<int>(v.cat);
      if (from[c] >= 0 && rows[c] != b.rows)
        detail::fail(fn, "input ", v.index, " has ", b.rows, " rows but input ", from[c], " has ",
                     rows[c], "; all ", cat_word(v.cat), " variables must have the same length");
      if (from[c] < 0 && rows[c] >= 0 && rows[c] != b.rows)
        detail::fail(fn, "input ", v.index, " has ", b.rows, " rows but sizes say ", rows[c]);
      rows[c] = b.rows, from[c] = v.index;
    }
    p.vars.push_back(b);
  }
  if (!have_dtype) p.dtype = outputs.empty() ? DType::Float32 : outputs[0].dtype;
  if (p.dtype == DType::Int64) p.dtype = DType::Float32;
  for (int c = 0; c < 2; ++c)
    if (rows[c] < 0)
      detail::fail(fn, "cannot tell the number of ", c == 0 ? "i" : "j", " rows: no ",
                   c == 0 ? "Vi" : "Vj", " input; pass their number as ", c == 0 ? "ni" : "nj");
  p.n_outer = rows[static_cast<int>(r.outer())];
  p.n_inner = rows[static_cast<int>(r.inner())];
  p.blocks = row_blocks(r, ctx.opt, p.n_outer, p.n_inner);
  const bool kmin = r.op == ReductionOp::KMin || r.op == ReductionOp::ArgKMin ||
                    r.op == ReductionOp::KMinArgKMin;
  if (kmin && r.k > p.n_inner)
    detail::fail(fn, reduction_name(r.op), ": K = ", r.k, " is larger than the number of ",
                 r.axis == 1 ? "j" : "i", " rows (", p.n_inner, ")");
  // Computed variables: sub-reductions on the same inputs, each evaluated once per call.
  for (const ComputedVar& c : r.computed) {
    const auto key = std::make_pair(c.source->hash.lo, c.source->hash.hi);
    auto it = ctx.computed.find(key);
    if (it == ctx.computed.end())
      it = ctx.computed.emplace(key, eval_impl(*c.source, ctx, false)).first;
    const Array& a = it->second.at(c.output);
    const VarSlot* v = r.find_var(c.index);
    Bound b;
    b.index = c.index;
    b.cat = v->cat;
    b.dim = v->dim;
    b.dtype = a.dtype();
    b.data = a.data();
    b.rows = c.source->full_sum ? 1 : a.shape()[0];
    b.s_row = c.source->full_sum ? 0 : v->dim;
    b.s_col = 1;
    p.vars.push_back(b);
  }
  std::sort(p.vars.begin(), p.vars.end(),
            [](const Bound& a, const Bound& b) { return a.index < b.index; });
  // Outputs: checked, then computed into contiguous row-major buffers.
  const int64_t out_rows = r.full_sum ? 1 : p.n_outer;
  if (static_cast<int>(outputs.size()) != r.num_outputs())
    detail::fail(fn, reduction_name(r.op), " has ", r.num_outputs(), " outputs, got ",
                 outputs.size());
  for (int k = 0; k < r.num_outputs(); ++k)
    check_output(r, k, outputs[k], out_rows, p.dtype, ctx.device >= 0);
  // Device outputs are filled from host staging buffers (see launch.cpp).
  auto direct = [&](int k) {
    return !r.full_sum && contiguous(outputs[k]) && outputs[k].device.kind == DeviceKind::CPU;
  };

  std::vector<Array> tmp;
  std::vector<ArrayView> views;
  for (int k = 0; k < r.num_outputs(); ++k) {
    const DType t = r.output_is_index(k) ? DType::Int64 : p.dtype;
    if (direct(k)) {
      ArrayView v = outputs[k];
      v.shape = {p.n_outer, r.output_dim(k)};
      v.strides.clear();
      views.push_back(v);
    } else {
      tmp.emplace_back(t, std::vector<int64_t>{p.n_outer, r.output_dim(k)});
      views.push_back(tmp.back().view());
    }
  }
  const bool interpret = ctx.opt.backend == Backend::Interpreter ||
                         r.op == ReductionOp::GatherSum || r.op == ReductionOp::ScatterSum;
  if (ctx.device >= 0) {
    run_cuda(p, ctx.device, views);
  } else if (interpret || !run_compiled(p, views)) {
    if (ctx.opt.backend == Backend::Compiled && !interpret) {
      if (kmin && r.k > kCompiledMaxK)
        detail::fail(fn, "the compiled backend was requested but ", reduction_name(r.op),
                     " with K = ", r.k, " exceeds its limit K <= ", kCompiledMaxK,
                     "; use the default or interpreter backend");
      detail::fail(fn, "the compiled backend was requested but cannot run this reduction");
    }
    run_interpreter(p, views);
  }
  // Copy back what went through temporaries (strided outputs, and sums over all rows).
  size_t t = 0;
  for (int k = 0; k < r.num_outputs(); ++k) {
    if (direct(k)) continue;
    const Array& src = tmp[t++];
    if (r.full_sum) {
      const int d = r.output_dim(k);
      Array total(p.dtype, {1, d});
      for (int c = 0; c < d; ++c) {
        double s = 0;
        for (int64_t q = 0; q < p.n_outer; ++q) s += src.at(q * d + c);
        if (p.dtype == DType::Float32)
          total.as<float>()[c] = static_cast<float>(s);
        else
          total.as<double>()[c] = s;
      }
      copy_rows(total, outputs[k]);
    } else {
      copy_rows(src, outputs[k]);
    }
  }
  for (const auto& a : r.addends) add_rows(eval_impl(*a, ctx, false).at(0), outputs[0]);
}

std::vector<Array> eval_impl(const ReductionImpl& r, Context& ctx, bool top) {
  // Learn the dtype and row counts from the inputs, allocate, and evaluate.
  DType dtype = DType::Float32;
  int64_t rows[2] = {ctx.sizes.ni, ctx.sizes.nj};
  for (const VarSlot& v : r.vars) {
    if (v.computed || v.index >= static_cast<int>(ctx.inputs.size())) continue;
    const ArrayView& a = ctx.inputs[v.index];
    dtype = a.dtype;
    if (v.cat != Category::Param && !a.shape.empty())
      rows[static_cast<int>(v.cat)] =
          a.shape.size() >= 2 ? a.shape[a.shape.size() - 2] : a.shape[0];
  }
  if (dtype == DType::Int64) dtype = DType::Float32;
  const int64_t n = r.full_sum ? 1 : std::max<int64_t>(0, rows[static_cast<int>(r.outer())]);
  std::vector<Array> outs;
  std::vector<ArrayView> views;
  for (int k = 0; k < r.num_outputs(); ++k) {
    outs.emplace_back(r.output_is_index(k) ? DType::Int64 : dtype,
                      std::vector<int64_t>{n, r.output_dim(k)});
    views.push_back(outs.back().view());
  }
  eval_into(r, ctx, views, top);
  return outs;
}

// ---- batch dimensions
// ---------------------------------------------------------------------------- Variables may carry
// leading batch dimensions: (B..., n, dim) for i and j variables, (B..., dim) for parameters. Batch
// shapes broadcast as in NumPy and the output gets (B..., n, dim); each batch element is one
// ordinary evaluation on sliced views.
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

// Where a call runs: the CUDA device of its CUDA arrays (all on one device), the GPU asked for
// with Backend::Cuda, or the CPU (-1).
int pick_device(std::span<const ArrayView> inputs, std::span<const ArrayView> outputs,
                const Options& opt) {
  int device = -1;
  std::string first;
  auto visit = [&](const ArrayView& a, const std::string& who) {
    if (a.device.kind != DeviceKind::CUDA) return;
    if (opt.backend == Backend::Compiled || opt.backend == Backend::Interpreter)
      detail::fail("evaluate", who, " is on CUDA device ", a.device.index,
                   " but a CPU backend was requested");
    if (device >= 0 && a.device.index != device)
      detail::fail("evaluate", who, " is on CUDA device ", a.device.index, " but ", first,
                   " is on CUDA device ", device, "; all CUDA arrays must be on one device");
    if (device < 0) device = a.device.index, first = who;
  };
  for (size_t k = 0; k < inputs.size(); ++k) visit(inputs[k], "input " + std::to_string(k));
  for (size_t k = 0; k < outputs.size(); ++k) visit(outputs[k], "output " + std::to_string(k));
  if (device < 0 && opt.backend == Backend::Cuda) device = opt.device;
  if (device >= 0) cuda_device(device, "evaluate");  // a clear error without a usable GPU
  return device;
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
  DType dtype = DType::Float32;
  for (const VarSlot& v : R.vars)
    if (!v.computed && v.index < static_cast<int>(inputs.size())) dtype = inputs[v.index].dtype;
  if (dtype == DType::Int64) dtype = DType::Float32;
  const int64_t n = std::max<int64_t>(0, rows_of(R, inputs, R.outer(), sizes));
  std::vector<Array> outs;
  std::vector<ArrayView> views;
  for (int k = 0; k < R.num_outputs(); ++k) {
    std::vector<int64_t> shape = plan.shape;
    if (!R.full_sum) shape.push_back(n);
    shape.push_back(R.output_dim(k));
    outs.emplace_back(R.output_is_index(k) ? DType::Int64 : dtype, shape);
    views.push_back(outs.back().view());
  }
  evaluate_batched(R, inputs, views, opt, sizes, plan);
  return outs;
}

}  // namespace

void evaluate(const Reduction& r, std::span<const ArrayView> inputs,
              std::span<const ArrayView> outputs, const Options& opt, Sizes sizes) {
  check_sizes(sizes);
  guard_sizes([&] { evaluate_unguarded(r, inputs, outputs, opt, sizes); });
}

std::vector<Array> evaluate(const Reduction& r, std::span<const ArrayView> inputs,
                            const Options& opt, Sizes sizes) {
  check_sizes(sizes);
  return guard_sizes([&] { return evaluate_unguarded(r, inputs, opt, sizes); });
}

std::vector<Array> evaluate(const Reduction& r, const std::vector<Array>& inputs,
                            const Options& opt, Sizes sizes) {
  std::vector<ArrayView> views;
  for (const Array& a : inputs) views.push_back(a.view());
  return evaluate(r, std::span<const ArrayView>(views), opt, sizes);
}

}  // namespace tessel
