// NVRTC loaded at run time: CUDA source -> PTX with no CUDA at link time and no GPU needed.
#pragma once

#include <string>
#include <vector>

namespace tessel {

struct NvrtcInfo {
  bool usable = false;
  std::string path;     // the library that was loaded
  std::string version;  // e.g. "13.0"
  std::string problem;  // why it is not usable, in plain words
};

// Looks for libnvrtc (TESSEL_NVRTC, then the usual names and CUDA folders) once per process.
const NvrtcInfo& nvrtc_info();

// Compiles `source` for `arch` (e.g. "compute_90") and returns PTX. A compile error throws
// tessel::Error with NVRTC's log; `name` labels the source in messages.
std::string nvrtc_compile(const std::string& source, const std::string& name,
                          const std::string& arch, const std::vector<std::string>& options = {});

}  // namespace tessel
