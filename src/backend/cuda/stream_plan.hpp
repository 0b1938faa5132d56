// Reductions of host arrays larger than a device memory budget: the block plan, and the
// pipeline that runs it (pinned staging buffers, copies on one stream overlapped with kernels on
// another) over an abstract device, so that tests can run it on a fake one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "codegen/layout.hpp"
#include "reduction/reduction_impl.hpp"
#include "tessel/array.hpp"

namespace tessel {

// Bytes per row of what a launch keeps on the device.
struct StreamSizes {
  int64_t n_outer = 0, n_inner = 0;
  size_t outer_row = 0;  // packed outer variables (X)
  size_t inner_row = 0;  // packed inner variables (Y)
  size_t out_row = 0;    // every output of a row
  size_t state_row = 0;  // a row's reduction state, kept between streamed inner blocks
  size_t fixed = 0;      // parameters and the like
};

// Rows per block on each side; one block of each means the problem fits as a whole.
struct StreamPlan {
  int64_t outer_block = 0, inner_block = 0;
  int64_t outer_blocks = 1, inner_blocks = 1;
  size_t device_bytes = 0;  // what running it allocates on the device
  bool streamed() const { return outer_blocks > 1 || inner_blocks > 1; }
};

// The largest blocks whose device memory fits `budget` bytes (0: no budget). Streamed blocks are
// double-buffered (X, Y and outputs), so that the copies of one block overlap the kernels of
// another; the inner side stays whole when it fits beside two outer blocks. Blocks are whole
// multiples of the granules (the kernel's rows per CUDA block, its tile of inner rows) unless
// the side is smaller. A clear error names the budget when not even one granule fits.
StreamPlan plan_stream(const StreamSizes& s, size_t budget, int64_t outer_granule,
                       int64_t inner_granule);

// One variable's columns in a packed row-major block: its host data, strides in elements.
struct PackSource {
  const void* data = nullptr;
  int64_t s_row = 0, s_col = 1;
  int dim = 0;
  int offset = 0;  // first column in the packed row
};
// Packs rows [r0, r1) of `src` into `dst` (rows of `width` elements of `dtype`, float32/64).
void pack_rows(const std::vector<PackSource>& src, int64_t r0, int64_t r1, int width, DType dtype,
               void* dst);

// What the pipeline needs from a device: memory, asynchronous copies and launches on streams,
// events between streams. The driver implements it (launch.cpp), tests a fake.
struct StreamLaunch {
  const void *X = nullptr, *Y = nullptr, *P = nullptr;
  int64_t n_outer = 0, n_inner = 0;
  void *out0 = nullptr, *outi = nullptr, *work = nullptr;
  int flags = 0;         // see cuda_codegen.hpp: 2 keep the state, 1 resume from it
  int64_t j_offset = 0;  // the block's first inner row (index outputs count from 0)
};
class StreamDevice {
 public:
  virtual ~StreamDevice() = default;
  virtual void* alloc(size_t bytes) = 0;       // device memory, freed with the device object
  virtual void* alloc_host(size_t bytes) = 0;  // pinned host memory, likewise
  virtual int stream() = 0;                    // a new stream
  virtual void copy(void* dst, const void* src, size_t bytes, int stream) = 0;
  virtual int record(int stream) = 0;            // an event after the stream's work so far
  virtual void wait(int stream, int event) = 0;  // the stream waits for the event
  virtual void host_wait(int event) = 0;         // the host waits for the event
  virtual void launch(const StreamLaunch& l, int stream) = 0;
  virtual void finish() = 0;  // the host waits for everything
};

// One reduction over host arrays, run block by block on `dev` as `plan` says: outer variables,
// inner variables and parameters packed from `outer`, `inner` and `params` (host), outputs
// (value rows of out_row[0] bytes, index rows of out_row[1]) written into the caller's contiguous
// host buffers out[0], out[1] (null when absent).
struct StreamJob {
  StreamPlan plan;
  int64_t n_outer = 0, n_inner = 0;
  DType dtype = DType::Float32;
  int outer_dim = 0, inner_dim = 0, param_dim = 0;
  std::vector<PackSource> outer, inner, params;
  size_t out_row[2] = {0, 0};
  void* out[2] = {nullptr, nullptr};
  size_t state_row = 0;
};
void run_streamed(const StreamJob& job, StreamDevice& dev);

// The job of reduction `r` (float dtype `t`) under kernel layout `L`: each layout variable packed
// from by_index[its index] (data and strides; dim and offset come from the layout), outputs[k]
// the caller's contiguous host buffer of output k, the state of r's reduction; the plan left
// for plan_stream.
StreamJob stream_job(const ReductionImpl& r, const KernelLayout& L, DType t, int64_t n_outer,
                     int64_t n_inner, const std::vector<PackSource>& by_index,
                     const std::vector<void*>& outputs);
// The sizes plan_stream weighs for `job`.
StreamSizes stream_sizes(const StreamJob& job);

}  // namespace tessel
