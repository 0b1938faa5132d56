// Reduction spec -> CUDA C++ source for one kernel (compiled by NVRTC at run time).
#pragma once

#include <string>

#include "codegen/cpu_codegen.hpp"

namespace tessel {

// Kernel `tessel_kernel(X, Y, P, n_outer, n_inner, out0, outi)`: X holds the outer rows
// (n_outer × layout.outer_dim), Y the inner rows (n_inner × layout.inner_dim), P the parameters;
// one thread per output row, blockDim.x × inner_dim values of dynamic shared memory.
// Empty when no generated kernel applies (gather/scatter reductions).
std::string generate_cuda_kernel(const ReductionImpl& r, bool f64, KernelLayout& layout);

}  // namespace tessel
