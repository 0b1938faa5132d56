// What the compiled CPU backend builds for a problem (spec, vector width, compiler flags), for
// tools that read the generated code as it is compiled (`tessel bench --asm`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/problem.hpp"
#include "codegen/cpu_codegen.hpp"

namespace tessel {

struct CpuKernelTarget {
  int vbytes = 0;  // vector width in bytes at the current simd_level()
  std::vector<std::string>
      flags;  // compiler flags of the kernel library (-O2, -march=..., -shared)
};

// The target the compiled backend uses now (it reads simd_level(), so TESSEL_SIMD applies).
CpuKernelTarget cpu_kernel_target(bool f64);
// Sets the bytes of packed inner data per cache chunk of the compiled kernels (default 256 KiB)
// and returns the previous value; for tests (tiny chunks exercise the chunk loop at small sizes)
// and for tuning measurements.
int64_t set_cpu_chunk_bytes(int64_t bytes);
// The kernel spec the compiled backend generates for p at vector width `vbytes`.
CpuKernelSpec cpu_kernel_spec(const Problem& p, int vbytes);

}  // namespace tessel
