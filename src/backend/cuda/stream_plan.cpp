// Block plans for reductions larger than a device memory budget, and the pipeline running them.
#include "backend/cuda/stream_plan.hpp"

#include <algorithm>
#include <cstring>

#include "codegen/cuda_reduce.hpp"
#include "tessel/error.hpp"

namespace tessel {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// `rows` rounded down to whole granules, or the whole side when that is smaller.
int64_t fit(int64_t rows, int64_t granule, int64_t side) {
  if (rows >= side) return side;
  return rows / granule * granule;
}

}  // namespace

StreamPlan plan_stream(const StreamSizes& s, size_t budget, int64_t outer_granule,
                       int64_t inner_granule) {
  const int64_t no = std::max<int64_t>(1, s.n_outer), ni = std::max<int64_t>(1, s.n_inner);
  const int64_t og = std::max<int64_t>(1, outer_granule), ig = std::max<int64_t>(1, inner_granule);
  const size_t per_outer = s.outer_row + s.out_row;
  StreamPlan p;
  p.outer_block = no;
  p.inner_block = ni;
  p.device_bytes = no * per_outer + ni * s.inner_row + s.fixed;
  if (budget == 0 || p.device_bytes <= budget || s.n_outer == 0 || s.n_inner == 0) return p;
  const size_t room = budget > s.fixed ? budget - s.fixed : 0;
  // The inner side whole (uploaded once), the outer side in double-buffered blocks.
  const size_t whole_inner = ni * s.inner_row;
  if (room > whole_inner) {
    const int64_t ob = fit(static_cast<int64_t>((room - whole_inner) / (2 * per_outer)), og, no);
    if (ob > 0) {
      p.outer_block = ob;
      p.outer_blocks = ceil_div(no, ob);
      p.device_bytes = 2 * ob * per_outer + whole_inner + s.fixed;
      return p;
    }
  }
  // Both sides in blocks, about half the room each (the outer side also keeps its rows'
  // states); a side that gets less than a granule that way gets one granule, the other the rest.
  const size_t per_o = 2 * per_outer + s.state_row, per_i = 2 * s.inner_row;
  const int64_t go = std::min(og, no), gi = std::min(ig, ni);
  if (room < go * per_o + gi * per_i)
    detail::fail("evaluate", "gpu_memory_budget = ", budget, " bytes is too small: blocks of ", go,
                 " outer and ", gi, " inner rows need ", s.fixed + go * per_o + gi * per_i,
                 " bytes on the device");
  int64_t ob = fit(static_cast<int64_t>(room / 2 / per_o), og, no);
  int64_t ib = fit(static_cast<int64_t>(room / 2 / per_i), ig, ni);
  if (ob < go) {
    ob = go;
    ib = fit(static_cast<int64_t>((room - go * per_o) / per_i), ig, ni);
  } else if (ib < gi) {
    ib = gi;
    ob = fit(static_cast<int64_t>((room - gi * per_i) / per_o), og, no);
  }
  p.outer_block = ob;
  p.inner_block = ib;
  p.outer_blocks = ceil_div(no, ob);
  p.inner_blocks = ceil_div(ni, ib);
  p.device_bytes = 2 * ob * per_outer + (p.inner_blocks > 1 ? ob * s.state_row : 0) +
                   2 * ib * s.inner_row + s.fixed;
  return p;
}

void pack_rows(const std::vector<PackSource>& src, int64_t r0, int64_t r1, int width, DType dtype,
               void* dst) {
  const size_t elem = dtype_size(dtype);
  auto* out = static_cast<unsigned char*>(dst);
  for (const PackSource& v : src)
    for (int64_t r = r0; r < r1; ++r)
      for (int c = 0; c < v.dim; ++c)
        std::memcpy(out + ((r - r0) * width + v.offset + c) * elem,
                    static_cast<const unsigned char*>(v.data) + (r * v.s_row + c * v.s_col) * elem,
                    elem);
}

StreamJob stream_job(const ReductionImpl& r, const KernelLayout& L, DType t, int64_t n_outer,
                     int64_t n_inner, const std::vector<PackSource>& by_index,
                     const std::vector<void*>& outputs) {
  StreamJob job;
  job.dtype = t;
  job.n_outer = n_outer;
  job.n_inner = n_inner;
  job.outer_dim = L.outer_dim;
  job.inner_dim = L.inner_dim;
  job.param_dim = L.param_dim;
  for (const auto& e : L.vars) {
    PackSource src = by_index.at(e.index);
    src.dim = e.dim;
    src.offset = e.offset;
    (e.cat == Category::Param ? job.params
     : e.cat == Category::I   ? job.outer
                              : job.inner)
        .push_back(src);
  }
  for (int k = 0; k < r.num_outputs(); ++k) {
    const bool idx = r.output_is_index(k);
    job.out_row[idx] = r.output_dim(k) * (idx ? 8 : dtype_size(t));
    job.out[idx] = outputs.at(k);
  }
  job.state_row = static_cast<size_t>(cuda_gen::ReduceCode(r).slots()) * 8;
  return job;
}

StreamSizes stream_sizes(const StreamJob& job) {
  const size_t elem = dtype_size(job.dtype);
  return {job.n_outer,
          job.n_inner,
          job.outer_dim * elem,
          job.inner_dim * elem,
          job.out_row[0] + job.out_row[1],
          job.state_row,
          std::max(1, job.param_dim) * elem};
}

void run_streamed(const StreamJob& job, StreamDevice& dev) {
  const StreamPlan& p = job.plan;
  const size_t elem = dtype_size(job.dtype);
  const int64_t ob = p.outer_block, ib = p.inner_block;
  const size_t x_bytes = std::max<size_t>(1, ob * job.outer_dim * elem);
  const size_t y_bytes = std::max<size_t>(1, ib * job.inner_dim * elem);
  const bool split_inner = p.inner_blocks > 1;
  const int compute = dev.stream(), copier = dev.stream();
  // Double buffers: device X, Y and outputs, and the pinned staging they come from or go to.
  void *dx[2], *hx[2], *dy[2] = {nullptr, nullptr}, *hy[2] = {nullptr, nullptr};
  void* dout[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};
  void* hout[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};
  for (int k = 0; k < 2; ++k) {
    dx[k] = dev.alloc(x_bytes);
    hx[k] = dev.alloc_host(x_bytes);
    if (k == 0 || split_inner) {
      dy[k] = dev.alloc(y_bytes);
      hy[k] = dev.alloc_host(y_bytes);
    }
    for (int o = 0; o < 2; ++o)
      if (job.out[o]) {
        dout[k][o] = dev.alloc(std::max<size_t>(1, ob * job.out_row[o]));
        hout[k][o] = dev.alloc_host(std::max<size_t>(1, ob * job.out_row[o]));
      }
  }
  void* state = split_inner ? dev.alloc(std::max<size_t>(1, ob * job.state_row)) : nullptr;
  const size_t p_bytes = std::max<size_t>(1, job.param_dim * elem);
  void* dp = dev.alloc(p_bytes);
  void* hp = dev.alloc_host(p_bytes);
  pack_rows(job.params, 0, 1, job.param_dim, job.dtype, hp);
  dev.copy(dp, hp, p_bytes, copier);
  dev.wait(compute, dev.record(copier));

  // Events (-1: none yet) guarding each buffer's reuse: a staging buffer is refilled once its
  // copy ran, a device buffer once the kernels (or the download) reading it ran.
  int x_copied[2] = {-1, -1}, x_read[2] = {-1, -1}, y_copied[2] = {-1, -1}, y_read[2] = {-1, -1};
  int out_copied[2] = {-1, -1};
  auto upload = [&](void* staging, void* device, int& copied, int read, const auto& pack,
                    size_t bytes) {
    if (copied >= 0) dev.host_wait(copied);
    pack(staging);
    if (read >= 0) dev.wait(copier, read);
    dev.copy(device, staging, bytes, copier);
    copied = dev.record(copier);
  };
  auto inner_block = [&](int slot, int64_t j0, int64_t j1) {
    upload(
        hy[slot], dy[slot], y_copied[slot], y_read[slot],
        [&](void* h) { pack_rows(job.inner, j0, j1, job.inner_dim, job.dtype, h); },
        (j1 - j0) * job.inner_dim * elem);
  };
  // Block b's outputs reach the caller while block b + 1 runs.
  auto deliver = [&](int64_t b) {
    const int slot = static_cast<int>(b % 2);
    const int64_t r0 = b * ob, rows = std::min(ob, job.n_outer - r0);
    dev.host_wait(out_copied[slot]);
    for (int o = 0; o < 2; ++o)
      if (job.out[o])
        std::memcpy(static_cast<unsigned char*>(job.out[o]) + r0 * job.out_row[o], hout[slot][o],
                    rows * job.out_row[o]);
  };
  if (!split_inner) inner_block(0, 0, job.n_inner);
  int64_t step = 0;
  for (int64_t b = 0; b < p.outer_blocks; ++b) {
    const int xs = static_cast<int>(b % 2);
    const int64_t r0 = b * ob, r1 = std::min(r0 + ob, job.n_outer);
    upload(
        hx[xs], dx[xs], x_copied[xs], x_read[xs],
        [&](void* h) { pack_rows(job.outer, r0, r1, job.outer_dim, job.dtype, h); },
        (r1 - r0) * job.outer_dim * elem);
    dev.wait(compute, x_copied[xs]);
    if (out_copied[xs] >= 0) dev.wait(compute, out_copied[xs]);  // block b - 2 left dout[xs]
    for (int64_t k = 0; k < p.inner_blocks; ++k, ++step) {
      const int ys = split_inner ? static_cast<int>(step % 2) : 0;
      const int64_t j0 = k * ib, j1 = std::min(j0 + ib, job.n_inner);
      if (split_inner) inner_block(ys, j0, j1);
      dev.wait(compute, y_copied[ys]);
      StreamLaunch l;
      l.X = dx[xs];
      l.Y = dy[ys];
      l.P = dp;
      l.n_outer = r1 - r0;
      l.n_inner = j1 - j0;
      l.out0 = dout[xs][0];
      l.outi = dout[xs][1];
      l.work = state;
      l.flags = split_inner ? (k > 0 ? 1 : 0) | (k + 1 < p.inner_blocks ? 2 : 0) : 0;
      l.j_offset = j0;
      dev.launch(l, compute);
      y_read[ys] = dev.record(compute);
    }
    x_read[xs] = dev.record(compute);
    dev.wait(copier, x_read[xs]);
    for (int o = 0; o < 2; ++o)
      if (job.out[o]) dev.copy(hout[xs][o], dout[xs][o], (r1 - r0) * job.out_row[o], copier);
    out_copied[xs] = dev.record(copier);
    if (b > 0) deliver(b - 1);
  }
  deliver(p.outer_blocks - 1);
  dev.finish();
}

}  // namespace tessel
