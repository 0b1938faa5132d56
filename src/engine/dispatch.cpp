// Dispatch: a bound problem (inputs, computed variables, outputs) run on the backend the registry
// picks, with device outputs moved through the backend that owns their memory.
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

// Device outputs go through the backend that owns their memory (`dev`: the call's CUDA slot).
void copy_rows(const Array& src, const ArrayView& dst, KernelBackend& dev) {
  if (dst.device.kind == DeviceKind::CUDA) return dev.store_rows(src, dst);
  const size_t es = dtype_size(dst.dtype);
  for_each_offset(src.size(), dst, [&](int64_t q, int64_t off) {
    std::memcpy(static_cast<uint8_t*>(dst.data) + off * es,
                static_cast<const uint8_t*>(src.data()) + q * es, es);
  });
}

// dst += src, elementwise over the same logical (rows, dim) shape.
void add_rows(const Array& src, const ArrayView& dst, KernelBackend& dev) {
  if (dst.device.kind == DeviceKind::CUDA) {
    // Rare (gradient terms added to an output): through the host.
    Array host = dev.load_rows(dst);
    add_rows(src, host.view(), dev);
    return dev.store_rows(host, dst);
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
                 KernelBackend& dev) {
  const Category outer = p.r->outer();
  const auto shares = split_rows(p.n_outer, static_cast<int>(gpus.size()), 256);
  for (size_t k = 0; k < shares.size(); ++k) dev.open_device(gpus[k]);
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
    threads.emplace_back([&dev, &errors, k, q = std::move(q), o = std::move(o)] {
      try {
        dev.run(q, o);
      } catch (...) {
        errors[k] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
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
  const bool kmin = reduction_info(r.op).family == ReductionFamily::KSelect;
  if (kmin && r.k > p.n_inner)
    detail::fail(fn, reduction_name(r.op), ": K = ", r.k, " is larger than the number of ",
                 r.axis == 1 ? "j" : "i", " rows (", p.n_inner, ")");
  // Computed variables: sub-reductions on the same inputs, each evaluated once per call; on a GPU
  // whose backend keeps results there, into device memory (no round trip through the host).
  p.device = ctx.device;
  const BackendRegistry& reg = BackendRegistry::instance();
  KernelBackend& dev = reg.get(BackendId::Cuda);  // owns the memory of device arrays
  // (A GPU call on host arrays keeps them on the host: it may be streamed block by block.)
  const bool keep_on_device =
      ctx.device >= 0 && dev.writes_device_outputs() &&
      std::any_of(ctx.inputs.begin(), ctx.inputs.end(),
                  [](const ArrayView& a) { return a.device.kind == DeviceKind::CUDA; });
  std::vector<int> device_vars;  // computed variables whose results are device memory
  for (const ComputedVar& c : r.computed) {
    const auto key = std::make_pair(c.source->hash.lo, c.source->hash.hi);
    auto it = ctx.computed.find(key);
    if (it == ctx.computed.end()) {
      ComputedResult res;
      if (keep_on_device) {
        const auto [dtype, rows] = result_rows(*c.source, ctx);
        for (int k = 0; k < c.source->num_outputs(); ++k) {
          res.device.push_back(dev.alloc_rows(c.source->output_is_index(k) ? DType::Int64 : dtype,
                                              rows, c.source->output_dim(k), ctx.device));
          res.views.push_back(res.device.back().view);
        }
        eval_into(*c.source, ctx, res.views, false);
      } else {
        res.host = eval_impl(*c.source, ctx, false);
        for (const Array& a : res.host) res.views.push_back(a.view());
      }
      it = ctx.computed.emplace(key, std::move(res)).first;
    }
    const ArrayView& a = it->second.views.at(c.output);
    if (a.device.kind == DeviceKind::CUDA) device_vars.push_back(c.index);
    const VarSlot* v = r.find_var(c.index);
    Bound b;
    b.index = c.index;
    b.cat = v->cat;
    b.dim = v->dim;
    b.dtype = a.dtype;
    b.data = a.data;
    b.rows = c.source->full_sum ? 1 : a.shape[0];
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
  // Gather/scatter reductions (gradients through Min/Max/KMin) of device data run on the device;
  // when some of their data is on the host (a GPU call mixing host and device arrays) they run
  // in the interpreter on host copies instead: O(rows) work, as the copies are.
  const bool indexed = reduction_info(r.op).is_indexed();
  auto on_device = [&](const Bound& b) {
    const bool user = b.index < static_cast<int>(ctx.inputs.size()) &&
                      ctx.inputs[b.index].device.kind == DeviceKind::CUDA;
    return user || std::find(device_vars.begin(), device_vars.end(), b.index) != device_vars.end();
  };
  const bool all_on_device =
      dev.writes_device_outputs() && std::all_of(p.vars.begin(), p.vars.end(), on_device);
  std::vector<Array> host_inputs;
  if (indexed && ctx.device >= 0 && !all_on_device) {
    for (Bound& b : p.vars) {
      if (!on_device(b)) continue;
      if (b.s_col != 1 && b.dim > 1)
        detail::fail(fn, "input ", b.index, " is a CUDA array whose rows are not contiguous ",
                     "(element stride ", b.s_col, "); pass a contiguous array (.contiguous())");
      const int64_t rows = b.s_row == 0 ? 1 : b.rows;  // a broadcast row is read once
      ArrayView v;
      v.data = const_cast<void*>(b.data);
      v.dtype = b.dtype;
      v.shape = {rows, b.dim};
      v.strides = {b.s_row == 0 ? b.dim : b.s_row, 1};
      v.device = Device{DeviceKind::CUDA, ctx.device};
      host_inputs.push_back(dev.load_rows(v));
      b.data = host_inputs.back().data();
      b.s_row = b.s_row == 0 ? 0 : b.dim;
      b.s_col = 1;
    }
    p.device = -1;
  }
  // Outputs written in place: host ones that are contiguous, and device ones when the GPU's
  // backend writes its device's memory; the others go through host buffers (copied back below).
  const bool device_direct = p.device >= 0 && dev.writes_device_outputs();
  auto direct = [&](int k) {
    if (r.full_sum || !contiguous(outputs[k])) return false;
    return outputs[k].device.kind == DeviceKind::CPU || device_direct;
  };
  // A sum over all rows into a device output: the rows computed into device memory, summed there.
  auto device_sum = [&](int k) {
    return r.full_sum && device_direct && outputs[k].device.kind == DeviceKind::CUDA &&
           !r.output_is_index(k);
  };

  std::vector<Array> tmp;
  std::vector<DeviceRows> device_tmp;
  std::vector<ArrayView> views;
  for (int k = 0; k < r.num_outputs(); ++k) {
    const DType t = r.output_is_index(k) ? DType::Int64 : p.dtype;
    if (direct(k)) {
      ArrayView v = outputs[k];
      v.shape = {p.n_outer, r.output_dim(k)};
      v.strides.clear();
      views.push_back(v);
    } else if (device_sum(k)) {
      device_tmp.push_back(dev.alloc_rows(t, p.n_outer, r.output_dim(k), p.device));
      views.push_back(device_tmp.back().view);
    } else {
      tmp.emplace_back(t, std::vector<int64_t>{p.n_outer, r.output_dim(k)});
      views.push_back(tmp.back().view());
    }
  }
  const bool interpret = ctx.opt.backend == Backend::Interpreter || indexed;
  const BackendChoice choice = choose_backend(ctx.opt.backend, p.device, interpret);
  // Several GPUs (Options::gpu_devices) share a call on host arrays by its outer rows.
  auto on_host = [](const ArrayView& a) { return a.device.kind == DeviceKind::CPU; };
  if (choice.first == BackendId::Cuda && ctx.opt.gpu_devices.size() > 1 && !ctx.opt.ranges &&
      device_vars.empty() && std::all_of(ctx.inputs.begin(), ctx.inputs.end(), on_host) &&
      std::all_of(views.begin(), views.end(), on_host)) {
    run_on_gpus(p, views, ctx.opt.gpu_devices, dev);
  } else if (!reg.get(choice.first).run(p, views)) {
    if (!choice.interpreter_fallback) {
      if (choice.first == BackendId::Compiled && kmin && r.k > kCompiledMaxK)
        detail::fail(fn, "the compiled backend was requested but ", reduction_name(r.op),
                     " with K = ", r.k, " exceeds its limit K <= ", kCompiledMaxK,
                     "; use the default or interpreter backend");
      detail::fail(fn, "the ", reg.get(choice.first).name(),
                   " backend was requested but cannot run this reduction");
    }
    reg.get(BackendId::Interpreter).run(p, views);
  }
  // Copy back what went through temporaries (strided outputs, and sums over all rows).
  size_t t = 0, dt = 0;
  for (int k = 0; k < r.num_outputs(); ++k) {
    if (direct(k)) continue;
    if (device_sum(k)) {
      dev.sum_rows_device(device_tmp[dt++].view, outputs[k]);
      continue;
    }
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
      copy_rows(total, outputs[k], dev);
    } else {
      copy_rows(src, outputs[k], dev);
    }
  }
  for (const auto& a : r.addends) {
    if (outputs[0].device.kind == DeviceKind::CUDA && device_direct && contiguous(outputs[0])) {
      // A gradient term into a device output: evaluated into device memory, added there.
      DeviceRows term = dev.alloc_rows(p.dtype, out_rows, r.output_dim(0), p.device);
      const ArrayView term_out[1] = {term.view};
      eval_into(*a, ctx, term_out, false);
      ArrayView dst = outputs[0];  // contiguous (direct)
      dst.shape = {out_rows, r.output_dim(0)};
      dst.strides.clear();
      dev.add_rows_device(term.view, dst);
    } else {
      add_rows(eval_impl(*a, ctx, false).at(0), outputs[0], dev);
    }
  }
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
    KernelBackend& dev = BackendRegistry::instance().get(BackendId::Cuda);
    dev.open_device(device);
    if (opt.stream != nullptr) dev.wait_for_stream(device, opt.stream);
  }
  return device;
}

}  // namespace tessel::engine
