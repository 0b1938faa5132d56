// PTX for generated CUDA source, compiled once per (source, arch, NVRTC version, options): memory,
// then disk.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessel {

// The PTX of `source` for `arch` (e.g. "compute_90"). The disk entry lives in the cache folder
// beside the CPU kernels (<cache>/cuda/<key>.ptx, with the .cu source kept for debugging), keyed
// by a 128-bit hash of the source, the architecture, NVRTC's version and the options; two
// processes compiling the same kernel build it once. A compile error throws with NVRTC's log and
// the path of the saved source.
std::string cuda_ptx(const std::string& source, const std::string& arch,
                     const std::vector<std::string>& options = {});

// Counters for tests: NVRTC compiles, disk hits and memory hits since the process started.
struct PtxCacheStats {
  int64_t compiles = 0, disk_hits = 0, memory_hits = 0;
};
PtxCacheStats cuda_ptx_stats();
void cuda_ptx_forget_loaded();  // drop the in-memory table (the disk cache stays)

}  // namespace tessel
