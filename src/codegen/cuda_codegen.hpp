// Reduction spec -> CUDA C++ source (compiled by NVRTC at run time) and the plan to launch it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "codegen/cpu_codegen.hpp"

namespace tessel {

// Kernel `tessel_kernel(X, Y, P, n_outer, n_inner, out0, outi)`: X holds the outer rows
// (n_outer × layout.outer_dim), Y the inner rows (n_inner × layout.inner_dim), P the parameters;
// one thread per output row, blockDim.x × inner_dim values of dynamic shared memory.
// Index outputs (ArgMin, ArgKMin, ...) go to `outi`, values to `out0`, both row-major
// (n_outer × output dim). Empty when no generated kernel applies (gather/scatter reductions).
std::string generate_cuda_kernel(const ReductionImpl& r, bool f64, KernelLayout& layout);

// What the launcher needs to know about the device.
struct CudaDeviceCaps {
  int sm_count = 132;
  size_t max_shared_per_block = 227 * 1024;  // opt-in maximum, bytes
};

// How to launch one reduction: the source's kernels, the grid and the shared memory. The
// launcher runs `tessel_kernel` on a grid of (ceil(n_outer / (block * rows_per_thread)), split_j)
// blocks of `block` threads with `shared_bytes` of dynamic shared memory, its arguments being
// (X, Y, P, n_outer, n_inner, out0, outi, work, chunk). With split_j == 1, work is null and chunk
// is n_inner. With split_j > 1 (too few outer rows to fill the GPU), block row y reduces the
// inner rows [y * chunk, min((y + 1) * chunk, n_inner)), chunk = ceil(n_inner / split_j), into
// partial states in `work` (workspace_bytes, allocated by the launcher, uninitialised), and
// `tessel_combine(work, n_outer, split_j, out0, outi)` then runs on ceil(n_outer / block) blocks
// of `block` threads (no shared memory) to merge them into the outputs.
struct CudaKernelPlan {
  std::string source;  // empty: no CUDA kernel for this reduction
  KernelLayout layout;
  int block = 128;
  int rows_per_thread = 1;
  size_t shared_bytes = 0;
  int split_j = 1;
  size_t workspace_bytes = 0;
};

CudaKernelPlan plan_cuda_kernel(const ReductionImpl& r, bool f64, int64_t n_outer,
                                int64_t n_inner, const CudaDeviceCaps& caps);

}  // namespace tessel
