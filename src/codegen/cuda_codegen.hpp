// Reduction spec -> CUDA C++ source (compiled by NVRTC at run time) and the plan to launch it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "codegen/layout.hpp"
#include "reduction/reduction_impl.hpp"

namespace tessel {

// How Sum reductions add (Options::sum_scheme, Options::accumulate_f64): part of the source.
struct CudaSumMode {
  SumScheme scheme = SumScheme::Block;
  bool acc_f64 = false;  // float32 data: double partial sums
};

// The CUDA source of a reduction: `tessel_kernel` and `tessel_combine` (see CudaKernelPlan).
// `rows_per_thread` 0 picks the plan's choice, which depends on the formula alone, so that one
// source (one NVRTC compile) serves every size. Empty when no generated kernel applies
// (gather/scatter reductions).
std::string generate_cuda_kernel(const ReductionImpl& r, bool f64, KernelLayout& layout,
                                 int rows_per_thread = 0, CudaSumMode sum = {});
// The rows per thread plan_cuda_kernel picks for r.
int cuda_rows_per_thread(const ReductionImpl& r, bool f64, CudaSumMode sum = {});

// The scalar prelude every generated CUDA kernel starts with (after `#define TESSEL_F64 0|1`):
// the types T and V and the ops' device functions.
const std::string& cuda_prelude();

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
//
// Parameter types (T: float, or double for float64):
//   tessel_kernel(const T* X, const T* Y, const T* P, long long n_outer, long long n_inner,
//                 T* out0, long long* outi, void* work, long long chunk,
//                 const long long* tab, const long long* ivs, int flags, long long j_offset)
//   tessel_combine(const void* work, long long n_outer, int split_j, T* out0, long long* outi)
// X holds the outer rows (n_outer × layout.outer_dim), Y the inner rows (n_inner ×
// layout.inner_dim), P the parameters, all packed row-major; index outputs (ArgMin, ArgKMin, ...)
// go to `outi`, values to `out0`, both row-major (n_outer × output dim). Both kernels are
// compiled for at most 256 threads per block (__launch_bounds__). Shared memory above 48 KiB
// needs cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES) before the launch. tab and ivs are
// null for a dense reduction; block-sparse ones pass a CudaRangeTable's arrays instead (below).
// flags (0 normally): inner rows streamed in blocks, one launch per block with split_j 1 and Y
// holding that block only; bit 0 resumes each row from the state in `work` (row i's state at
// slot i, as tessel_combine reads split states with split_j 1), bit 1 leaves the state there
// instead of finishing: the first block passes 2, the middle ones 3, the last one 1. `work` then
// holds n_outer states (workspace_bytes of split_j 1: state_bytes(r) * n_outer). j_offset (0
// normally): the first inner row's index in the whole problem, added to every index output.
struct CudaKernelPlan {
  std::string source;  // empty: no CUDA kernel for this reduction
  KernelLayout layout;
  int block = 128;
  int rows_per_thread = 1;  // outer rows per thread (baked into the source)
  size_t shared_bytes = 0;
  int split_j = 1;
  size_t workspace_bytes = 0;  // split_j × n_outer × (8-byte words per row state); 0 if unsplit
};

// Test-only: forces the plan's choices (0 keeps the heuristic's), so that tests can run the
// combine pass, odd block sizes and every rows-per-thread on small inputs.
struct CudaPlanOverrides {
  int block = 0;
  int rows_per_thread = 0;
  int split_j = 0;
};

// Block-sparse launches (KeOps ranges): rows [begin, end) reduce over the inner intervals
// iv = {s0, e0, s1, e1, ...}. The table gives each CUDA block (grid (blocks.size() / 4, 1), the
// plan's block and shared memory, no split, no tessel_combine) its rows and intervals: blocks
// holds {row begin, row end, first interval, end interval} per CUDA block, at most
// rows_per_block rows of one range each, and ivs the non-empty intervals. Rows no range covers
// get blocks with no interval (the reduction's identity), so that every output row is written.
struct CudaRowRange {
  int64_t begin = 0, end = 0;
  const std::vector<int64_t>* iv = nullptr;
};
struct CudaRangeTable {
  std::vector<int64_t> blocks, ivs;
};
CudaRangeTable cuda_range_table(const std::vector<CudaRowRange>& ranges, int64_t n_outer,
                                int64_t rows_per_block);

CudaKernelPlan plan_cuda_kernel(const ReductionImpl& r, bool f64, int64_t n_outer, int64_t n_inner,
                                const CudaDeviceCaps& caps, const CudaPlanOverrides& force = {},
                                CudaSumMode sum = {});

}  // namespace tessel
