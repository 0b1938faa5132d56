// The test stand-in for NVRTC: "compiles" CUDA source into a marked text carrying the source
// (standin_ptx.hpp), which the stand-in driver loads through the CUDA emulator.
//
// The source is compiled by the emulator here already, so that a kernel that does not compile
// fails in nvrtcCompileProgram with the compiler's log, as it would under NVRTC (the emulator
// caches the build, so the driver's load does not compile it again). nvrtcResult values and the
// C ABI are NVRTC's.
#include <cstring>
#include <set>
#include <string>

#include "cuda_emulator.hpp"
#include "standin_ptx.hpp"

#define STANDIN_API extern "C" __attribute__((visibility("default"))) int

namespace {

enum : int {
  kSuccess = 0,
  kInvalidInput = 3,
  kInvalidProgram = 4,
  kInvalidOption = 5,
  kCompilation = 6,
};

struct Program {
  std::string source, name, ptx, log;
  bool compiled = false;
};

std::mutex g_mu;
std::set<Program*>& programs() {
  static auto* p = new std::set<Program*>();
  return *p;
}

Program* program_of(void* h) {
  std::lock_guard lk(g_mu);
  return programs().count(static_cast<Program*>(h)) ? static_cast<Program*>(h) : nullptr;
}

// Copies a string out with its terminating NUL, as nvrtcGetPTX and nvrtcGetProgramLog do.
int copy_out(const std::string& s, char* out) {
  if (!out) return kInvalidInput;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return kSuccess;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const char* nvrtcGetErrorString(int rc) {
  switch (rc) {
    case kSuccess:
      return "NVRTC_SUCCESS";
    case kInvalidInput:
      return "NVRTC_ERROR_INVALID_INPUT";
    case kInvalidProgram:
      return "NVRTC_ERROR_INVALID_PROGRAM";
    case kInvalidOption:
      return "NVRTC_ERROR_INVALID_OPTION";
    case kCompilation:
      return "NVRTC_ERROR_COMPILATION";
    default:
      return "NVRTC_ERROR unknown";
  }
}

STANDIN_API nvrtcVersion(int* major, int* minor) {
  if (!major || !minor) return kInvalidInput;
  *major = 12;
  *minor = 8;
  return kSuccess;
}

STANDIN_API nvrtcCreateProgram(void** prog, const char* src, const char* name, int n_headers,
                               const char* const* headers, const char* const* include_names) {
  if (!prog || !src) return kInvalidInput;
  if (n_headers < 0 || (n_headers > 0 && (!headers || !include_names))) return kInvalidInput;
  if (n_headers > 0) return kInvalidInput;  // not emulated: tessel's kernels include nothing
  auto* p = new Program{src, name ? name : "default_program", {}, {}, false};
  std::lock_guard lk(g_mu);
  programs().insert(p);
  *prog = p;
  return kSuccess;
}

STANDIN_API nvrtcDestroyProgram(void** prog) {
  if (!prog) return kInvalidInput;
  std::lock_guard lk(g_mu);
  if (!programs().erase(static_cast<Program*>(*prog))) return kInvalidProgram;
  delete static_cast<Program*>(*prog);
  *prog = nullptr;
  return kSuccess;
}

STANDIN_API nvrtcCompileProgram(void* prog, int n_opts, const char* const* opts) {
  Program* p = program_of(prog);
  if (!p) return kInvalidProgram;
  if (n_opts < 0 || (n_opts > 0 && !opts)) return kInvalidInput;
  std::string arch;
  for (int k = 0; k < n_opts; ++k) {
    const std::string o = opts[k] ? opts[k] : "";
    if (o.empty() || o[0] != '-') {
      p->log = "nvrtc: error: invalid option '" + o + "'\n";
      return kInvalidOption;
    }
    if (o.rfind("--gpu-architecture=", 0) == 0) arch = o.substr(19);
    if (o.rfind("-arch=", 0) == 0) arch = o.substr(6);
  }
  if (!arch.empty() && arch.rfind("compute_", 0) != 0 && arch.rfind("sm_", 0) != 0) {
    p->log = "nvrtc: error: invalid value for --gpu-architecture (-arch)\n";
    return kInvalidOption;
  }
  try {
    const tessel::emu::Module module(p->source);  // the build is cached for the driver's load
  } catch (const std::exception& e) {
    p->log = p->name + ": " + e.what() + "\n";
    return kCompilation;
  }
  p->ptx = tessel::standin::standin_ptx(arch.empty() ? "compute_52" : arch, p->source);
  p->log.clear();
  p->compiled = true;
  return kSuccess;
}

STANDIN_API nvrtcGetPTXSize(void* prog, size_t* size) {
  Program* p = program_of(prog);
  if (!p || !size) return p ? kInvalidInput : kInvalidProgram;
  if (!p->compiled) return kInvalidProgram;
  *size = p->ptx.size() + 1;
  return kSuccess;
}

STANDIN_API nvrtcGetPTX(void* prog, char* out) {
  Program* p = program_of(prog);
  if (!p) return kInvalidProgram;
  if (!p->compiled) return kInvalidProgram;
  return copy_out(p->ptx, out);
}

STANDIN_API nvrtcGetProgramLogSize(void* prog, size_t* size) {
  Program* p = program_of(prog);
  if (!p || !size) return p ? kInvalidInput : kInvalidProgram;
  *size = p->log.size() + 1;
  return kSuccess;
}

STANDIN_API nvrtcGetProgramLog(void* prog, char* out) {
  Program* p = program_of(prog);
  return p ? copy_out(p->log, out) : kInvalidProgram;
}
