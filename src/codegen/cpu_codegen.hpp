// Reduction spec -> C++ source of one CPU kernel (SIMD over j, several i rows in registers).
#pragma once

#include <string>
#include <vector>

#include "codegen/layout.hpp"
#include "reduction/reduction_impl.hpp"

namespace tessel {

// Block summation (and the sums of LogSumExp/SumSoftMaxWeight) adds at most this many terms per
// SIMD lane in the data's precision before folding them into a float64 accumulator: whatever
// the width, a term sees at most kSumBlockLaneTerms - 1 roundings in float32 (the bound stated
// in README, "Accuracy of sums").
constexpr int kSumBlockLaneTerms = 64;

struct CpuKernelSpec {
  const ReductionImpl* r = nullptr;
  bool f64 = false;
  int vbytes = 64;  // vector width in bytes: 64 (AVX-512), 32 (AVX2), 16 (SSE), 8 (scalar)
  SumScheme scheme = SumScheme::Block;
  bool acc_f64 = false;
};

// The argument block shared by the library and every generated kernel (plain C layout).
struct KernelArgs {
  const void* outer;  // n_outer rows × outer_dim, row-major
  const void* inner;  // ceil(n_inner / W) tiles × inner_dim × W lanes
  const void* params;
  long long o_begin, o_end, n_inner;
  void* out[2];         // value output (n_outer × dim) and/or Int64 index output
  const long long* iv;  // the inner intervals [iv[2q], iv[2q+1]) these rows reduce over
  long long n_iv;
  long long chunk;  // inner indices per cache chunk, a multiple of W * kSumBlockLaneTerms; 0: one
  long long j_lo, j_hi;  // the inner indices reduced over: [j_lo, j_hi) within the intervals
  void* state_out;       // non-null: the blocks' states go there (tessel_merge finishes them)
};

// The generated source, or an empty string when the compiled path does not apply.
std::string generate_cpu_kernel(const CpuKernelSpec& spec, KernelLayout& layout);

// About how many bytes generate_cpu_kernel() would write for `spec`, from the variables' and the
// formula's dims alone (a walk of the formula's nodes, nothing generated), so that a kernel far
// too large to compile is sent elsewhere at once rather than after writing a gigabyte of C++.
// Within a small factor of the source's size above a few hundred KiB (it leaves out the fixed
// prelude); 0 when the compiled path does not apply.
size_t estimate_cpu_kernel_bytes(const CpuKernelSpec& spec);
const char* cpu_prelude();
// Lanes per vector for a spec.
inline int lanes(const CpuKernelSpec& s) { return s.vbytes / (s.f64 ? 8 : 4); }

}  // namespace tessel
