// What both code generators (CPU and CUDA) share: where variables sit in the packed kernel inputs.
#pragma once

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

// The generated kernels keep each row's K best terms of every formula component in fixed arrays
// (the CPU kernel's stack, a CUDA thread's registers and local memory) and insert in O(K): a
// large K would overflow the stack and compile to huge unrolled loops. Past this many list
// entries (K times the formula's dim), KMin runs in the CPU interpreter (heap storage) and CUDA
// refuses it with an error.
constexpr int kCompiledMaxK = 1024;

// Whether a K-selection keeps more list entries than the generated kernels hold.
inline bool kselect_too_large(const ReductionImpl& r) {
  return reduction_info(r.op).family == ReductionFamily::KSelect &&
         static_cast<int64_t>(r.k) * r.f.dim() > kCompiledMaxK;
}

// Places the variables a reduction's formulas use; false when no generated kernel applies
// (gather/scatter reductions, index variables, kselect_too_large). Defined in cpu_codegen.cpp.
bool kernel_layout(const ReductionImpl& r, KernelLayout& layout);

}  // namespace tessel
