// The stand-in NVRTC's "PTX": a marker line naming the architecture, then the CUDA source, which
// the stand-in driver compiles with the CUDA emulator when a module is loaded.
#pragma once

#include <string>

namespace tessel::standin {

inline constexpr const char* kPtxMarker = "// tessel stand-in PTX for ";

inline std::string standin_ptx(const std::string& arch, const std::string& source) {
  return kPtxMarker + arch + "\n" + source;
}

// The CUDA source of a stand-in PTX; false for anything else (real PTX, cubins, garbage).
inline bool standin_ptx_source(const std::string& ptx, std::string& source) {
  if (ptx.rfind(kPtxMarker, 0) != 0) return false;
  const size_t eol = ptx.find('\n');
  if (eol == std::string::npos) return false;
  source = ptx.substr(eol + 1);
  return true;
}

}  // namespace tessel::standin
