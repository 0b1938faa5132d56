// Reduction spec -> C++ source of one CPU kernel (SIMD over j, several i rows in registers).
#pragma once

#include <string>
#include <vector>

#include "reduction/reduction_impl.hpp"

namespace tessel {

// Where each variable sits in the packed arrays the kernel reads.
struct KernelLayout {
  struct Entry {
    int index;
    Category cat;  // as seen by the kernel: I = outer rows, J = inner tiles, Param
    int dim;
    int offset;  // component offset within its packed array
  };
  std::vector<Entry> vars;
  int outer_dim = 0, inner_dim = 0, param_dim = 0;  // components per row / per tile lane / total
};

// Block summation (and the sums of LogSumExp/SumSoftMaxWeight) adds at most this many terms per
// SIMD lane in the data's precision before folding them into a float64 accumulator: whatever
// the width, a term sees at most kSumBlockLaneTerms - 1 roundings in float32 (the bound stated
// in README, "Accuracy of sums").
constexpr int kSumBlockLaneTerms = 64;

// The generated kernels keep each row's K best terms in fixed arrays (the CPU kernel's stack, a
// CUDA thread's registers and local memory) and insert in O(K): a large K would overflow the
// stack and compile to huge unrolled loops. Past this K, KMin runs in the CPU interpreter (heap
// storage) and CUDA refuses it with an error.
constexpr int kCompiledMaxK = 1024;

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
  void* out[2];          // value output (n_outer × dim) and/or Int64 index output
  const long long* iv;   // the inner intervals [iv[2q], iv[2q+1]) these rows reduce over
  long long n_iv;
};

// Places the variables a reduction's formulas use; false when no generated kernel applies
// (gather/scatter reductions, index variables, K > kCompiledMaxK).
bool kernel_layout(const ReductionImpl& r, KernelLayout& layout);

// The generated source, or an empty string when the compiled path does not apply.
std::string generate_cpu_kernel(const CpuKernelSpec& spec, KernelLayout& layout);
const char* cpu_prelude();
// Lanes per vector for a spec.
inline int lanes(const CpuKernelSpec& s) { return s.vbytes / (s.f64 ? 8 : 4); }

}  // namespace tessel
