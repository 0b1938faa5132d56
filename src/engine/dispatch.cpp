// Dispatch: a bound problem (inputs, computed variables, outputs) run on the backend the registry
// picks, with device outputs moved through the device that owns their memory (the registry's
// device for the arrays' kind), in named stages (eval_into).
#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>

#include "backend/registry.hpp"
#include "codegen/layout.hpp"
#include "engine/engine_impl.hpp"
#include "tessel/runtime.hpp"

namespace tessel::engine {

namespace {

// The device that owns CUDA arrays' memory, and whether the backend for CUDA arrays keeps its
// results there (writes device outputs in place): asked of the registry by device kind.
DeviceApi& cuda_device() { return BackendRegistry::instance().device_for(DeviceKind::CUDA); }
bool cuda_keeps_results() {
  return BackendRegistry::instance().backend_for(DeviceKind::CUDA).writes_device_outputs();
}

// Calls f(q, off) for each element q of a contiguous (rows, cols) source and its element
// offset `off` in dst, which has the same logical shape and may be strided.
template <class F>
void for_each_offset(int64_t n, const ArrayView& dst, F&& f) {
  const int64_t cols = dst.shape.size() == 2 ? dst.shape[1] : 1;
  for (int64_t q = 0; q < n; ++q) {
    const int64_t r = q / cols, c = q % cols;
    f(q, dst.shape.size() == 2 ? r * dst.stride(0) + c * dst.stride(1) : q * dst.stride(0));
  }
}

// Device outputs go through the device that owns their memory.
void copy_rows(const Array& src, const ArrayView& dst) {
  if (dst.device.kind == DeviceKind::CUDA) return cuda_device().store_rows(src, dst);
  const size_t es = dtype_size(dst.dtype);
  for_each_offset(src.size(), dst, [&](int64_t q, int64_t off) {
    std::memcpy(static_cast<uint8_t*>(dst.data) + off * es,
                static_cast<const uint8_t*>(src.data()) + q * es, es);
  });
}

// dst += src, elementwise over the same logical (rows, dim) shape.
void add_rows(const Array& src, const ArrayView& dst) {
  if (dst.device.kind == DeviceKind::CUDA) {
    // Rare (gradient terms added to an output): through the host.
    Array host = cuda_device().load_rows(dst);
    add_rows(src, host.view());
    return cuda_device().store_rows(host, dst);
  }
  for_each_offset(src.size(), dst, [&](int64_t q, int64_t off) {
    if (dst.dtype == DType::Float32)
      static_cast<float*>(dst.data)[off] += static_cast<float>(src.at(q));
    else
      static_cast<double*>(dst.data)[off] += src.at(q);
  });
}

// Runs p on several GPUs, each on a contiguous share of the outer rows (its outer variables and
// output rows offset to the share), in parallel host threads; the first error is rethrown.
void run_on_gpus(const Problem& p, std::span<const ArrayView> outs, const std::vector<int>& gpus,
                 KernelBackend& backend) {
  const Category outer = p.r->outer();
  const auto shares = split_rows(p.n_outer, static_cast<int>(gpus.size()), 256);
  for (size_t k = 0; k < shares.size(); ++k) cuda_device().open_device(gpus[k]);
  std::vector<std::exception_ptr> errors(shares.size());
  std::vector<std::thread> threads;
  for (size_t k = 0; k < shares.size(); ++k) {
    const auto [b, e] = shares[k];
    Problem q = p;
    q.device = gpus[k];
    q.opt.stream = nullptr;  // a stream belongs to one device: each share runs on its default
    q.n_outer = e - b;
    q.blocks = {RowBlock{0, e - b, {0, p.n_inner}}};
    for (Bound& v : q.vars)
      if (v.cat == outer && v.s_row != 0) {
        v.data = static_cast<const uint8_t*>(v.data) + b * v.s_row * dtype_size(v.dtype);
        v.rows = e - b;
      }
    std::vector<ArrayView> o(outs.begin(), outs.end());
    for (ArrayView& a : o) {
      a.data = static_cast<uint8_t*>(a.data) + b * a.shape[1] * dtype_size(a.dtype);
      a.shape[0] = e - b;
    }
    threads.emplace_back([&backend, &errors, k, q = std::move(q), o = std::move(o)] {
      try {
        backend.run(q, o);
      } catch (...) {
        errors[k] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

// One eval_into call as its stages fill it in: the problem handed to a backend, and what the
// stages after the run need to finish the caller's outputs.
struct Call {
  Call(const ReductionImpl& r, Context& ctx, std::span<const ArrayView> outputs)
      : r(r), ctx(ctx), outputs(outputs) {}
  const ReductionImpl& r;
  Context& ctx;
  std::span<const ArrayView> outputs;
  Problem p;
  bool kmin = false;               // a K-selection (KMin, ArgKMin, ...)
  std::vector<int> device_vars;    // computed variables whose results are device memory
  std::vector<Array> host_inputs;  // host copies of device data (gathers mixing host and device)
  bool device_direct = false;      // device outputs written in place by the backend
  std::vector<Array> tmp;          // host rows of outputs not written in place
  std::vector<DeviceRows> device_tmp;  // device rows of sums over all rows into device outputs
  std::vector<ArrayView> views;        // what the backend writes, one per output
};

void check_input_count(const ReductionImpl& r, const Context& ctx, bool top) {
  const int n_in = r.next_input_index();
  if (static_cast<int>(ctx.inputs.size()) < n_in)
    detail::fail("evaluate", "expected ", n_in, " inputs (variables 0..", n_in - 1, "), got ",
                 ctx.inputs.size());
  if (top && static_cast<int>(ctx.inputs.size()) > n_in)
    detail::fail("evaluate", "expected ", n_in, " inputs (variables 0..", n_in - 1, "), got ",
                 ctx.inputs.size(), ": the reduction does not use the extra ones");
}

// Binds the caller's inputs and learns the dtype and the sizes (rows[k]: the rows of category k,
// given by the call's sizes or learnt here, all inputs of the category agreeing).
void bind_inputs(Call& c, int64_t rows[2]) {
  const char* fn = "evaluate";
  int from[2] = {-1, -1};
  bool have_dtype = false;
  int dtype_from = -1;
  for (const VarSlot& v : c.r.vars) {
    if (v.computed) continue;
    Bound b = bind(v, c.ctx.inputs[v.index], c.ctx.device >= 0);
    if (!have_dtype) {
      c.p.dtype = b.dtype, have_dtype = true, dtype_from = v.index;
    } else if (b.dtype != c.p.dtype) {
      detail::fail_type(fn, "input ", v.index, " has dtype ", dtype_name(b.dtype), " but input ",
                        dtype_from, " has ", dtype_name(c.p.dtype),
                        "; all inputs must share one dtype");
    }
    if (v.cat != Category::Param) {
      const int k = static_cast<int>(v.cat);
      if (from[k] >= 0 && rows[k] != b.rows)
        detail::fail(fn, "input ", v.index, " has ", b.rows, " rows but input ", from[k], " has ",
                     rows[k], "; all ", cat_word(v.cat), " variables must have the same length");
      if (from[k] < 0 && rows[k] >= 0 && rows[k] != b.rows)
        detail::fail(fn, "input ", v.index, " has ", b.rows, " rows but sizes say ", rows[k]);
      rows[k] = b.rows, from[k] = v.index;
    }
    c.p.vars.push_back(b);
  }
  if (!have_dtype) c.p.dtype = c.outputs.empty() ? DType::Float32 : c.outputs[0].dtype;
  if (c.p.dtype == DType::Int64) c.p.dtype = DType::Float32;
}

// The problem's sizes and row blocks from the bound inputs' rows.
void set_sizes(Call& c, const int64_t rows[2]) {
  const ReductionImpl& r = c.r;
  for (int k = 0; k < 2; ++k)
    if (rows[k] < 0)
      detail::fail("evaluate", "cannot tell the number of ", k == 0 ? "i" : "j", " rows: no ",
                   k == 0 ? "Vi" : "Vj", " input; pass their number as ", k == 0 ? "ni" : "nj");
  c.p.n_outer = rows[static_cast<int>(r.outer())];
  c.p.n_inner = rows[static_cast<int>(r.inner())];
  c.p.blocks = row_blocks(r, c.ctx.opt, c.p.n_outer, c.p.n_inner);
  c.kmin = reduction_info(r.op).family == ReductionFamily::KSelect;
  if (c.kmin && r.k > c.p.n_inner)
    detail::fail("evaluate", reduction_name(r.op), ": K = ", r.k, " is larger than the number of ",
                 r.axis == 1 ? "j" : "i", " rows (", c.p.n_inner, ")");
}

// A computed variable's source evaluated on the call's inputs: into device memory when the call
// keeps results on its GPU (no round trip through the host), else into host arrays.
ComputedResult evaluate_source(const ReductionImpl& source, Context& ctx, bool keep_on_device) {
  ComputedResult res;
  if (keep_on_device) {
    const auto [dtype, rows] = result_rows(source, ctx);
    for (int k = 0; k < source.num_outputs(); ++k) {
      res.device.push_back(
          cuda_device().alloc_rows(source.output_is_index(k) ? DType::Int64 : dtype, rows,
                                   source.output_dim(k), ctx.device));
      res.views.push_back(res.device.back().view);
    }
    eval_into(source, ctx, res.views, false);
  } else {
    res.host = eval_impl(source, ctx, false);
    for (const Array& a : res.host) res.views.push_back(a.view());
  }
  return res;
}

// Computed variables: sub-reductions on the same inputs, each evaluated once per call and bound
// beside the inputs (the variables in index order).
void compute_variables(Call& c) {
  Context& ctx = c.ctx;
  // (A GPU call on host arrays keeps them on the host: it may be streamed block by block.)
  const bool keep_on_device =
      ctx.device >= 0 && cuda_keeps_results() &&
      std::any_of(ctx.inputs.begin(), ctx.inputs.end(),
                  [](const ArrayView& a) { return a.device.kind == DeviceKind::CUDA; });
  for (const ComputedVar& cv : c.r.computed) {
    const auto key = std::make_pair(cv.source->hash.lo, cv.source->hash.hi);
    auto it = ctx.computed.find(key);
    if (it == ctx.computed.end())
      it = ctx.computed.emplace(key, evaluate_source(*cv.source, ctx, keep_on_device)).first;
    const ArrayView& a = it->second.views.at(cv.output);
    if (a.device.kind == DeviceKind::CUDA) c.device_vars.push_back(cv.index);
    const VarSlot* v = c.r.find_var(cv.index);
    Bound b;
    b.index = cv.index;
    b.cat = v->cat;
    b.dim = v->dim;
    b.dtype = a.dtype;
    b.data = a.data;
    b.rows = cv.source->full_sum ? 1 : a.shape[0];
    b.s_row = cv.source->full_sum ? 0 : v->dim;
    b.s_col = 1;
    c.p.vars.push_back(b);
  }
  std::sort(c.p.vars.begin(), c.p.vars.end(),
            [](const Bound& a, const Bound& b) { return a.index < b.index; });
}

void check_outputs(const Call& c) {
  const ReductionImpl& r = c.r;
  if (static_cast<int>(c.outputs.size()) != r.num_outputs())
    detail::fail("evaluate", reduction_name(r.op), " has ", r.num_outputs(), " outputs, got ",
                 c.outputs.size());
  const int64_t out_rows = r.full_sum ? 1 : c.p.n_outer;
  for (int k = 0; k < r.num_outputs(); ++k)
    check_output(r, k, c.outputs[k], out_rows, c.p.dtype, c.ctx.device >= 0);
}

// Whether a bound variable's data is device memory: a CUDA input, or a computed variable kept
// on the device.
bool on_device(const Call& c, const Bound& b) {
  const bool user = b.index < static_cast<int>(c.ctx.inputs.size()) &&
                    c.ctx.inputs[b.index].device.kind == DeviceKind::CUDA;
  return user ||
         std::find(c.device_vars.begin(), c.device_vars.end(), b.index) != c.device_vars.end();
}

// Gather/scatter reductions (gradients through Min/Max/KMin) of device data run on the device;
// when some of their data is on the host (a GPU call mixing host and device arrays) they run in
// the interpreter on host copies instead: O(rows) work, as the copies are.
void copy_gather_inputs_to_host(Call& c) {
  if (!reduction_info(c.r.op).is_indexed() || c.ctx.device < 0) return;
  const bool all_on_device =
      cuda_keeps_results() && std::all_of(c.p.vars.begin(), c.p.vars.end(),
                                          [&](const Bound& b) { return on_device(c, b); });
  if (all_on_device) return;
  for (Bound& b : c.p.vars) {
    if (!on_device(c, b)) continue;
    if (b.s_col != 1 && b.dim > 1)
      detail::fail("evaluate", "input ", b.index, " is a CUDA array whose rows are not ",
                   "contiguous (element stride ", b.s_col,
                   "); pass a contiguous array (.contiguous())");
    const int64_t rows = b.s_row == 0 ? 1 : b.rows;  // a broadcast row is read once
    ArrayView v;
    v.data = const_cast<void*>(b.data);
    v.dtype = b.dtype;
    v.shape = {rows, b.dim};
    v.strides = {b.s_row == 0 ? b.dim : b.s_row, 1};
    v.device = Device{DeviceKind::CUDA, c.ctx.device};
    c.host_inputs.push_back(cuda_device().load_rows(v));
    b.data = c.host_inputs.back().data();
    b.s_row = b.s_row == 0 ? 0 : b.dim;
    b.s_col = 1;
  }
  c.p.device = -1;
}

// Outputs written in place: host ones that are contiguous, and device ones when the GPU's
// backend writes its device's memory; the others go through temporaries (copy_back).
bool direct(const Call& c, int k) {
  if (c.r.full_sum || !contiguous(c.outputs[k])) return false;
  return c.outputs[k].device.kind == DeviceKind::CPU || c.device_direct;
}

// A sum over all rows into a device output: the rows computed into device memory, summed there.
bool device_sum(const Call& c, int k) {
  return c.r.full_sum && c.device_direct && c.outputs[k].device.kind == DeviceKind::CUDA &&
         !c.r.output_is_index(k);
}

// What the backend writes: the outputs themselves, or device or host temporaries.
void prepare_outputs(Call& c) {
  const ReductionImpl& r = c.r;
  const Problem& p = c.p;
  c.device_direct = p.device >= 0 && cuda_keeps_results();
  for (int k = 0; k < r.num_outputs(); ++k) {
    const DType t = r.output_is_index(k) ? DType::Int64 : p.dtype;
    if (direct(c, k)) {
      ArrayView v = c.outputs[k];
      v.shape = {p.n_outer, r.output_dim(k)};
      v.strides.clear();
      c.views.push_back(v);
    } else if (device_sum(c, k)) {
      c.device_tmp.push_back(cuda_device().alloc_rows(t, p.n_outer, r.output_dim(k), p.device));
      c.views.push_back(c.device_tmp.back().view);
    } else {
      c.tmp.emplace_back(t, std::vector<int64_t>{p.n_outer, r.output_dim(k)});
      c.views.push_back(c.tmp.back().view());
    }
  }
}

// Runs the problem on the backend the registry's rules choose, handing it to the interpreter
// when that one declines and may; several GPUs (Options::gpu_devices) share a call on host
// arrays by its outer rows.
void run_backend(Call& c) {
  const ReductionImpl& r = c.r;
  const Context& ctx = c.ctx;
  const bool interpret =
      ctx.opt.backend == Backend::Interpreter || reduction_info(r.op).is_indexed();
  const ChosenBackend chosen = backend_for_call(ctx.opt.backend, c.p.device, interpret);
  auto on_host = [](const ArrayView& a) { return a.device.kind == DeviceKind::CPU; };
  if (c.p.device >= 0 && ctx.opt.gpu_devices.size() > 1 && !ctx.opt.ranges &&
      c.device_vars.empty() && std::all_of(ctx.inputs.begin(), ctx.inputs.end(), on_host) &&
      std::all_of(c.views.begin(), c.views.end(), on_host)) {
    return run_on_gpus(c.p, c.views, ctx.opt.gpu_devices, *chosen.first);
  }
  if (chosen.first->run(c.p, c.views)) return;
  if (chosen.fallback == nullptr) {
    // Compiled code was what the rules chose (no device, no interpreter-only reduction).
    const bool compiled = ctx.opt.backend == Backend::Compiled && c.p.device < 0 && !interpret;
    if (compiled && kselect_too_large(r))
      detail::fail("evaluate", "the compiled backend was requested but ", reduction_name(r.op),
                   " with K = ", r.k, " of a formula of dim ", r.f.dim(),
                   " exceeds its limit K * dim <= ", kCompiledMaxK,
                   "; use the default or interpreter backend");
    detail::fail("evaluate", "the ", chosen.first->name(),
                 " backend was requested but cannot run this reduction");
  }
  chosen.fallback->run(c.p, c.views);
}

// The sum over the rows of src, (rows, d), accumulated in double: a (1, d) array of `dtype`.
Array sum_over_rows(const Array& src, int64_t rows, int d, DType dtype) {
  Array total(dtype, {1, d});
  for (int k = 0; k < d; ++k) {
    double s = 0;
    for (int64_t q = 0; q < rows; ++q) s += src.at(q * d + k);
    if (dtype == DType::Float32)
      total.as<float>()[k] = static_cast<float>(s);
    else
      total.as<double>()[k] = s;
  }
  return total;
}

// Copies back what went through temporaries (strided outputs, and sums over all rows).
void copy_back(const Call& c) {
  const ReductionImpl& r = c.r;
  size_t t = 0, dt = 0;
  for (int k = 0; k < r.num_outputs(); ++k) {
    if (direct(c, k)) continue;
    if (device_sum(c, k)) {
      cuda_device().sum_rows_device(c.device_tmp[dt++].view, c.outputs[k]);
      continue;
    }
    const Array& src = c.tmp[t++];
    if (r.full_sum)
      copy_rows(sum_over_rows(src, c.p.n_outer, r.output_dim(k), c.p.dtype), c.outputs[k]);
    else
      copy_rows(src, c.outputs[k]);
  }
}

// Gradient terms added into the first output: on the device when it is a device output the
// backend wrote in place, else through the host.
void add_gradient_terms(const Call& c) {
  const ReductionImpl& r = c.r;
  const ArrayView& out = c.outputs[0];
  const int64_t out_rows = r.full_sum ? 1 : c.p.n_outer;
  for (const auto& a : r.addends) {
    if (out.device.kind == DeviceKind::CUDA && c.device_direct && contiguous(out)) {
      // A gradient term into a device output: evaluated into device memory, added there.
      DeviceRows term = cuda_device().alloc_rows(c.p.dtype, out_rows, r.output_dim(0), c.p.device);
      const ArrayView term_out[1] = {term.view};
      eval_into(*a, c.ctx, term_out, false);
      ArrayView dst = out;  // contiguous (direct)
      dst.shape = {out_rows, r.output_dim(0)};
      dst.strides.clear();
      cuda_device().add_rows_device(term.view, dst);
    } else {
      add_rows(eval_impl(*a, c.ctx, false).at(0), out);
    }
  }
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> split_rows(int64_t n, int parts, int64_t granule) {
  // Whole granules dealt out as evenly as they go: k gets g / parts, one more for the first
  // g % parts.
  const int64_t g = (n + granule - 1) / granule, np = std::max(1, parts);
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t begin = 0;
  for (int64_t k = 0; k < np && begin < n; ++k) {
    const int64_t count = g / np + (k < g % np ? 1 : 0);
    const int64_t end = std::min(n, begin + count * granule);
    if (end > begin) out.emplace_back(begin, end);
    begin = end;
  }
  if (out.empty()) out.emplace_back(0, n);
  return out;
}

// The stages in order: bind the inputs and size the problem, compute the computed variables,
// check the outputs, bring gather inputs to the host when they must run there, prepare what the
// backend writes, run it, copy temporaries back, add gradient terms.
void eval_into(const ReductionImpl& r, Context& ctx, std::span<const ArrayView> outputs, bool top) {
  Call c(r, ctx, outputs);
  c.p.r = &r;
  c.p.opt = ctx.opt;
  c.p.threads = ctx.opt.threads > 0 ? ctx.opt.threads : num_threads();
  check_input_count(r, ctx, top);
  int64_t rows[2] = {ctx.sizes.ni, ctx.sizes.nj};
  bind_inputs(c, rows);
  set_sizes(c, rows);
  c.p.device = ctx.device;
  compute_variables(c);
  check_outputs(c);
  copy_gather_inputs_to_host(c);
  prepare_outputs(c);
  run_backend(c);
  copy_back(c);
  add_gradient_terms(c);
}

std::vector<Array> eval_impl(const ReductionImpl& r, Context& ctx, bool top) {
  const auto [dtype, n] = result_rows(r, ctx);
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

std::pair<DType, int64_t> result_rows(const ReductionImpl& r, const Context& ctx) {
  // The dtype and row counts from the inputs.
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
  return {dtype, r.full_sum ? 1 : std::max<int64_t>(0, rows[static_cast<int>(r.outer())])};
}

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
  // A clear error without a usable GPU, before any output is touched; then the device's default
  // stream ordered after the caller's, so that steps on it see what the caller's stream wrote.
  if (device >= 0) {
    DeviceApi& dev = cuda_device();
    dev.open_device(device);
    if (opt.stream != nullptr) dev.wait_for_stream(device, opt.stream);
  }
  return device;
}

}  // namespace tessel::engine
