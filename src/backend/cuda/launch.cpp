// Runs a validated Problem on a GPU: packs the variables into device buffers, launches the planned
// kernels.
//
// Inputs may live in device memory (on the evaluating GPU) or in host memory (copied in, so
// Backend::Cuda can reduce host arrays); outputs are written to the caller's contiguous buffers,
// host or device (the engine keeps device results on the device: computed variables in memory
// the GPU's device allocates, gradient terms added there, device_api.cpp). The stream is the
// caller's (PyTorch's current stream from Python) and the call returns once the results are in
// place. Device buffers are reused between calls (one workspace per device, grown on demand,
// workspace.hpp) so a repeated call allocates nothing on the device. The backend object owns
// the launch plans; the driver keeps the loaded modules.
// Block-sparse ranges launch one CUDA block per run of rows of one range (cuda_range_table);
// host arrays over Options::gpu_memory_budget run block by block (stream_plan.hpp).
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/driver.hpp"
#include "backend/cuda/plan_table.hpp"
#include "backend/cuda/ptx_cache.hpp"
#include "backend/cuda/stream_plan.hpp"
#include "backend/cuda/workspace.hpp"
#include "codegen/cuda_codegen.hpp"
#include "codegen/cuda_indexed.hpp"
#include "tessel/error.hpp"

namespace tessel {

namespace {

constexpr const char* kWho = "evaluate";

// Copies one variable's rows into its columns of a packed row-major device array.
void pack(const Bound& b, int64_t rows, int offset, int width, CuDevicePtr dst, size_t elem,
          CuStream stream, std::vector<std::vector<unsigned char>>& staging) {
  if (rows == 0) return;
  const void* src = b.data;
  const size_t row_bytes = static_cast<size_t>(b.dim) * elem;
  // One row (a parameter) has no pitch of its own: the driver wants one no smaller than the row.
  size_t src_pitch = rows == 1 ? row_bytes : static_cast<size_t>(b.s_row) * elem;
  const bool broadcast = b.s_row == 0 && rows > 1;  // one row read by every row
  const bool strided = b.s_col != 1 && b.dim > 1;
  if (strided && !broadcast && cuda_pointer_device(b.data) >= 0) {
    // Device rows with strided components (a transposed or sliced tensor): one 2-D copy per
    // component, its element of every row into its column of the packed array, on the device.
    for (int c = 0; c < b.dim; ++c)
      cuda_copy_2d(reinterpret_cast<void*>(dst + (offset + c) * elem), width * elem,
                   static_cast<const unsigned char*>(b.data) + c * b.s_col * elem,
                   rows == 1 ? elem : static_cast<size_t>(b.s_row) * elem, elem,
                   static_cast<size_t>(rows), stream);
    return;
  }
  if (strided || broadcast) {
    // Strided host columns or a repeated row cannot be a 2-D copy: gather them on the host first
    // (a repeated row of device memory is fetched once: it is a single row).
    const bool on_device = cuda_pointer_device(b.data) >= 0;
    std::vector<unsigned char> row(row_bytes);
    auto& tmp = staging.emplace_back(static_cast<size_t>(rows) * row_bytes);
    for (int64_t r = 0; r < rows; ++r) {
      if (r == 0 || !broadcast) {
        const auto* at =
            static_cast<const unsigned char*>(b.data) + (broadcast ? 0 : r * b.s_row) * elem;
        if (on_device) {
          for (int c = 0; c < (strided ? b.dim : 1); ++c)  // a strided row, element by element
            cuda_copy_2d(row.data() + c * elem, row_bytes, at + c * b.s_col * elem, row_bytes,
                         strided ? elem : row_bytes, 1, stream);
          cuda_synchronize(stream);
        } else {
          for (int c = 0; c < b.dim; ++c)
            std::memcpy(row.data() + c * elem, at + c * b.s_col * elem, elem);
        }
      }
      std::memcpy(tmp.data() + r * row_bytes, row.data(), row_bytes);
    }
    src = tmp.data();
    src_pitch = row_bytes;
  }
  cuda_copy_2d(reinterpret_cast<void*>(dst + offset * elem), width * elem, src, src_pitch,
               row_bytes, static_cast<size_t>(rows), stream);
}

// Waits for a stream when a call leaves early (an error), without throwing: work queued on the
// workspace must end before the next call may reuse it. A call that ends normally waits itself,
// reporting errors, and disarms it.
struct StreamDrain {
  CuStream stream;
  bool armed = true;
  ~StreamDrain() {
    if (!armed) return;
    try {
      cuda_synchronize(stream);
    } catch (...) {
    }
  }
};

// The pipeline's device (stream_plan.hpp) on the driver: buffers, pinned staging, streams and
// events of one streamed call, all released with it.
class DriverStreamDevice final : public StreamDevice {
 public:
  DriverStreamDevice(int device, CuFunction kernel, const CudaKernelPlan& plan)
      : device_(device), kernel_(kernel), plan_(plan) {}
  ~DriverStreamDevice() override {
    for (CuStream s : streams_) {
      try {  // a failed call already threw; the rest is released regardless
        cuda_synchronize(s);
      } catch (...) {
      }
    }
    for (CuEvent e : events_) cuda_event_destroy(e);
    for (CuStream s : streams_) cuda_stream_destroy(s);
    for (void* h : host_) cuda_host_free(h);
  }
  void* alloc(size_t bytes) override {
    buffers_.emplace_back(device_, bytes);
    return reinterpret_cast<void*>(buffers_.back().ptr());
  }
  void* alloc_host(size_t bytes) override { return host_.emplace_back(cuda_host_alloc(bytes)); }
  int stream() override {
    streams_.push_back(cuda_stream_create());
    return static_cast<int>(streams_.size()) - 1;
  }
  void copy(void* dst, const void* src, size_t bytes, int stream) override {
    cuda_copy_2d(dst, bytes, src, bytes, bytes, 1, streams_[stream]);
  }
  int record(int stream) override {
    events_.push_back(cuda_event_record(streams_[stream]));
    return static_cast<int>(events_.size()) - 1;
  }
  void wait(int stream, int event) override { cuda_stream_wait(streams_[stream], events_[event]); }
  void host_wait(int event) override { cuda_event_sync(events_[event]); }
  void launch(const StreamLaunch& l, int stream) override {
    long long n_outer = l.n_outer, n_inner = l.n_inner, chunk = l.n_inner;
    const void* null = nullptr;
    int flags = l.flags;
    long long j_offset = l.j_offset;
    void* args[] = {(void*)&l.X,    (void*)&l.Y,    (void*)&l.P,    &n_outer, &n_inner,
                    (void*)&l.out0, (void*)&l.outi, (void*)&l.work, &chunk,   (void*)&null,
                    (void*)&null,   &flags,         &j_offset};
    const int64_t per_block = int64_t{plan_.block} * plan_.rows_per_thread;
    cuda_launch(kernel_, static_cast<unsigned>((l.n_outer + per_block - 1) / per_block), 1,
                static_cast<unsigned>(plan_.block), static_cast<unsigned>(plan_.shared_bytes),
                streams_[stream], args);
  }
  void finish() override {
    for (CuStream s : streams_) cuda_synchronize(s);
  }

 private:
  int device_;
  CuFunction kernel_;
  const CudaKernelPlan& plan_;
  std::vector<CudaBuffer> buffers_;
  std::vector<void*> host_;
  std::vector<CuStream> streams_;
  std::vector<CuEvent> events_;
};

class CudaBackend final : public KernelBackend {
 public:
  const char* name() const override { return "cuda"; }
  bool run(const Problem& p, std::span<const ArrayView> outs) override;
  void forget_loaded() override {
    plans_.clear();
    cuda_ptx_forget_loaded();
  }
  DeviceApi* device() override { return &cuda_device_api(); }
  bool writes_device_outputs() const override { return true; }

 private:
  // Gather/scatter reductions (gradients through Min/Max/KMin) of device arrays.
  bool run_indexed(const Problem& p, std::span<const ArrayView> outs);

  // Host inputs and outputs whose device footprint exceeds Options::gpu_memory_budget: run
  // block by block (stream_plan.hpp). False when the call fits, or is not all on the host.
  bool run_streamed_if_needed(const Problem& p, std::span<const ArrayView> outs,
                              const CudaKernelPlan& plan, CuFunction kernel);

  CudaPlanTable plans_;
};

bool CudaBackend::run_streamed_if_needed(const Problem& p, std::span<const ArrayView> outs,
                                         const CudaKernelPlan& plan, CuFunction kernel) {
  const ReductionImpl& r = *p.r;
  if (p.opt.ranges) return false;
  for (const Bound& b : p.vars)
    if (cuda_pointer_device(b.data) >= 0) return false;  // device data is already resident
  for (const ArrayView& o : outs)
    if (cuda_pointer_device(o.data) >= 0) return false;
  std::vector<PackSource> by_index;
  for (const Bound& b : p.vars) {
    if (static_cast<int>(by_index.size()) <= b.index) by_index.resize(b.index + 1);
    by_index[b.index] = PackSource{b.data, b.s_row, b.s_col};
  }
  std::vector<void*> out_ptrs;
  for (const ArrayView& o : outs) out_ptrs.push_back(o.data);
  StreamJob job = stream_job(r, plan.layout, p.dtype, p.n_outer, p.n_inner, by_index, out_ptrs);
  job.plan = plan_stream(stream_sizes(job), static_cast<size_t>(p.opt.gpu_memory_budget),
                         int64_t{plan.block} * plan.rows_per_thread, plan.block);
  if (!job.plan.streamed()) return false;
  DriverStreamDevice dev(p.device, kernel, plan);
  run_streamed(job, dev);
  return true;
}

bool CudaBackend::run_indexed(const Problem& p, std::span<const ArrayView> outs) {
  const ReductionImpl& r = *p.r;
  const int device = p.device;
  const CudaDevice& dev = cuda_device(device, kWho);
  const CudaContextScope scope(device);
  const bool f64 = p.dtype == DType::Float64, gather = r.op == ReductionOp::GatherSum;
  // The table of pointers and strides; the engine sends only problems whose data is all here.
  std::vector<unsigned long long> table;
  for (const int index : cuda_indexed_vars(r)) {
    const Bound& b = p.var(index);
    if (cuda_pointer_device(b.data) != device && b.rows > 0)
      detail::fail(kWho, "internal: ", reduction_name(r.op), " variable ", index,
                   " is not in device ", device, "'s memory");
    if ((index == r.index_var) != (b.dtype == DType::Int64) ||
        (b.dtype != DType::Int64 && b.dtype != p.dtype))
      detail::fail(kWho, "internal: ", reduction_name(r.op), " variable ", index, " has dtype ",
                   dtype_name(b.dtype));
    table.insert(table.end(), {reinterpret_cast<unsigned long long>(b.data),
                               static_cast<unsigned long long>(b.s_row),
                               static_cast<unsigned long long>(b.s_col)});
  }
  const std::string ptx = cuda_ptx(cuda_indexed_source(r, f64), dev.arch());
  CuFunction kernel = cuda_function(device, ptx, "tessel_indexed");
  const int D = r.f.dim();
  const int64_t n_anchor = gather ? p.n_outer : p.n_inner;
  const int64_t n_partner = gather ? p.n_inner : p.n_outer;
  const size_t elem = f64 ? 8 : 4, values = static_cast<size_t>(p.n_outer) * D;
  Workspace& ws = cuda_workspace(device);
  std::lock_guard lk(ws.mu);
  auto stream = static_cast<CuStream>(p.opt.stream);
  StreamDrain drain{stream};  // the workspace is free again only once the stream is idle
  const size_t tb = std::max<size_t>(8, table.size() * 8);
  const CuDevicePtr vt = ws.get(device, 9, tb);
  const CuDevicePtr out = ws.get(device, 3, std::max<size_t>(1, values * elem));
  const CuDevicePtr acc = gather ? 0 : ws.get(device, 10, std::max<size_t>(8, values * 8));
  if (!table.empty())
    cuda_copy_2d(reinterpret_cast<void*>(vt), tb, table.data(), tb, table.size() * 8, 1, stream);
  if (!gather && values > 0) cuda_memset(acc, values * 8, stream);
  long long na = n_anchor, np = n_partner;
  void* args[] = {const_cast<CuDevicePtr*>(&vt), &na, &np, const_cast<CuDevicePtr*>(&out),
                  const_cast<CuDevicePtr*>(&acc)};
  constexpr unsigned kBlock = 128;
  if (n_anchor > 0)
    cuda_launch(kernel, static_cast<unsigned>((n_anchor + kBlock - 1) / kBlock), 1, kBlock, 0,
                stream, args);
  cuda_synchronize(stream);
  drain.armed = false;
  if (!gather) {  // the double sums rounded into the output's dtype
    ArrayView a, o;
    a.data = reinterpret_cast<void*>(acc);
    a.dtype = DType::Float64;
    a.shape = {static_cast<int64_t>(values)};
    a.device = o.device = Device{DeviceKind::CUDA, device};
    o = a;
    o.data = reinterpret_cast<void*>(out);
    o.dtype = p.dtype;
    cuda_device_api().axpby_device(1, a, 0, o);
  }
  const size_t row = D * elem;
  if (values > 0)
    cuda_copy_2d(outs[0].data, row, reinterpret_cast<const void*>(out), row, row,
                 static_cast<size_t>(p.n_outer), nullptr);
  cuda_synchronize(nullptr);
  return true;
}

bool CudaBackend::run(const Problem& p, std::span<const ArrayView> outs) {
  const int device = p.device;
  const CudaDevice& dev = cuda_device(device, kWho);
  const CudaContextScope scope(device);
  const ReductionImpl& r = *p.r;
  if (reduction_info(r.op).is_indexed()) return run_indexed(p, outs);
  if (kselect_too_large(r))
    detail::fail(kWho, reduction_name(r.op), " with K = ", r.k, " of a formula of dim ", r.f.dim(),
                 " exceeds the CUDA limit K * dim <= ", kCompiledMaxK,
                 "; evaluate it on CPU arrays");
  const bool f64 = p.dtype == DType::Float64;
  const auto plan_ptr =
      plans_.get(r, f64, p.n_outer, p.n_inner,
                 CudaSumMode{p.opt.sum_scheme, p.opt.accumulate_f64 && !f64}, dev);
  const CudaKernelPlan& plan = *plan_ptr;
  if (plan.source.empty())
    detail::fail(kWho, "no CUDA kernel for ", reduction_name(r.op), " (", r.f.str(), ")");
  const KernelLayout& L = plan.layout;
  const size_t elem = p.dtype == DType::Float64 ? 8 : 4;
  const std::string ptx = cuda_ptx(plan.source, dev.arch());
  CuFunction kernel = cuda_function(device, ptx, "tessel_kernel");
  CuFunction combine = plan.split_j > 1 ? cuda_function(device, ptx, "tessel_combine") : nullptr;

  if (p.opt.gpu_memory_budget > 0 && run_streamed_if_needed(p, outs, plan, kernel)) return true;
  Workspace& ws = cuda_workspace(device);
  std::lock_guard lk(ws.mu);
  auto stream = static_cast<CuStream>(p.opt.stream);
  StreamDrain drain{stream};  // the workspace is free again only once the stream is idle
  const int64_t no = p.n_outer, ni = p.n_inner;
  const CuDevicePtr X = ws.get(device, 0, std::max<size_t>(1, no * L.outer_dim * elem));
  const CuDevicePtr Y = ws.get(device, 1, std::max<size_t>(1, ni * L.inner_dim * elem));
  const CuDevicePtr P = ws.get(device, 2, std::max<size_t>(1, L.param_dim * elem));
  std::vector<std::vector<unsigned char>> staging;
  for (const auto& e : L.vars) {
    const Bound& b = p.var(e.index);
    if (e.cat == Category::Param)
      pack(b, 1, e.offset, std::max(1, L.param_dim), P, elem, stream, staging);
    else if (e.cat == Category::I)
      pack(b, no, e.offset, L.outer_dim, X, elem, stream, staging);
    else
      pack(b, ni, e.offset, L.inner_dim, Y, elem, stream, staging);
  }
  // Value and index outputs, row-major, in device memory; copied to the caller's buffers below.
  CuDevicePtr out[2] = {0, 0};
  size_t out_bytes[2] = {0, 0};
  int value_slot = -1, index_slot = -1;
  for (int k = 0; k < r.num_outputs(); ++k) {
    const bool idx = r.output_is_index(k);
    (idx ? index_slot : value_slot) = k;
    out_bytes[idx] = std::max<size_t>(1, no * r.output_dim(k) * (idx ? 8 : elem));
    out[idx] = ws.get(device, 3 + idx, out_bytes[idx]);
  }
  // Block-sparse: one CUDA block per run of rows of one range, its intervals from the table;
  // the inner rows are never split (each block reduces over its own intervals only).
  const bool sparse = p.opt.ranges != nullptr;
  const int split = sparse ? 1 : plan.split_j;
  const int64_t per_block = static_cast<int64_t>(plan.block) * plan.rows_per_thread;
  CudaRangeTable table;
  CuDevicePtr tab = 0, ivs = 0;
  if (sparse) {
    std::vector<CudaRowRange> rr;
    for (const RowBlock& b : p.blocks) rr.push_back({b.begin, b.end, &b.iv});
    table = cuda_range_table(rr, no, per_block);
    const size_t tb = table.blocks.size() * 8, ib = std::max<size_t>(8, table.ivs.size() * 8);
    tab = ws.get(device, 6, std::max<size_t>(8, tb));
    ivs = ws.get(device, 7, ib);
    if (tb > 0)
      cuda_copy_2d(reinterpret_cast<void*>(tab), tb, table.blocks.data(), tb, tb, 1, stream);
    if (!table.ivs.empty())
      cuda_copy_2d(reinterpret_cast<void*>(ivs), ib, table.ivs.data(), ib, table.ivs.size() * 8, 1,
                   stream);
  }
  const CuDevicePtr work = split > 1 ? ws.get(device, 5, plan.workspace_bytes) : 0;
  long long n_outer = no, n_inner = ni;
  long long chunk = split > 1 ? (ni + split - 1) / split : ni;
  int flags = 0;
  long long j_offset = 0;
  void* args[] = {(void*)&X,    (void*)&Y, (void*)&P,   &n_outer,    &n_inner, &out[0],  &out[1],
                  (void*)&work, &chunk,    (void*)&tab, (void*)&ivs, &flags,   &j_offset};
  const auto grid =
      static_cast<unsigned>(sparse ? table.blocks.size() / 4 : (no + per_block - 1) / per_block);
  if (grid > 0) {
    cuda_launch(kernel, grid, static_cast<unsigned>(split), static_cast<unsigned>(plan.block),
                static_cast<unsigned>(plan.shared_bytes), stream, args);
    if (combine && split > 1) {
      int n_split = split;
      void* cargs[] = {(void*)&work, &n_outer, &n_split, &out[0], &out[1]};
      cuda_launch(combine, static_cast<unsigned>((no + plan.block - 1) / plan.block), 1,
                  static_cast<unsigned>(plan.block), 0, stream, cargs);
    }
  }
  for (int slot : {value_slot, index_slot}) {
    if (slot < 0) continue;
    const bool idx = r.output_is_index(slot);
    const size_t row = r.output_dim(slot) * (idx ? 8 : elem);
    cuda_copy_2d(outs[slot].data, row, reinterpret_cast<const void*>(out[idx]), row, row,
                 static_cast<size_t>(no), stream);
  }
  cuda_synchronize(stream);
  drain.armed = false;
  return true;
}

}  // namespace

KernelBackend& cuda_backend() {
  static CudaBackend* b = new CudaBackend();  // device buffers are reused for the process
  return *b;
}

}  // namespace tessel
