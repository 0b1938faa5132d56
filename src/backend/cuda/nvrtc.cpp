// NVRTC through dlopen: the library is optional, so a missing or mismatched one is a message.
#include "backend/cuda/nvrtc.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include "tessel/error.hpp"
#include "tessel/runtime.hpp"

namespace tessel {

namespace {

// The few entry points we use, with NVRTC's C ABI (nvrtcResult is an int, a program a pointer).
struct Api {
  void* lib = nullptr;
  const char* (*get_error_string)(int) = nullptr;
  int (*version)(int*, int*) = nullptr;
  int (*create_program)(void**, const char*, const char*, int, const char* const*,
                        const char* const*) = nullptr;
  int (*destroy_program)(void**) = nullptr;
  int (*compile_program)(void*, int, const char* const*) = nullptr;
  int (*get_ptx_size)(void*, size_t*) = nullptr;
  int (*get_ptx)(void*, char*) = nullptr;
  int (*get_log_size)(void*, size_t*) = nullptr;
  int (*get_log)(void*, char*) = nullptr;
};

struct Loaded {
  Api api;
  NvrtcInfo info;
};

template <class F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

Loaded load() {
  Loaded l;
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("TESSEL_NVRTC"); env && *env) candidates.push_back(env);
  for (const char* n : {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12",
                        "/usr/local/cuda/lib64/libnvrtc.so", "/usr/local/cuda/lib/libnvrtc.so"})
    candidates.push_back(n);
  std::string tried;
  for (const std::string& c : candidates) {
    void* lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      tried += (tried.empty() ? "" : ", ") + c;
      continue;
    }
    Api& a = l.api;
    a.lib = lib;
    const bool ok =
        bind(lib, "nvrtcGetErrorString", a.get_error_string) &&
        bind(lib, "nvrtcVersion", a.version) && bind(lib, "nvrtcCreateProgram", a.create_program) &&
        bind(lib, "nvrtcDestroyProgram", a.destroy_program) &&
        bind(lib, "nvrtcCompileProgram", a.compile_program) &&
        bind(lib, "nvrtcGetPTXSize", a.get_ptx_size) && bind(lib, "nvrtcGetPTX", a.get_ptx) &&
        bind(lib, "nvrtcGetProgramLogSize", a.get_log_size) &&
        bind(lib, "nvrtcGetProgramLog", a.get_log);
    l.info.path = c;
    if (!ok) {
      l.info.problem = c + " lacks NVRTC entry points (not an NVRTC library?)";
      return l;
    }
    int major = 0, minor = 0;
    a.version(&major, &minor);
    l.info.version = std::to_string(major) + "." + std::to_string(minor);
    l.info.usable = true;
    return l;
  }
  l.info.problem = "NVRTC not found (tried " + tried +
                   "); install the CUDA toolkit's NVRTC or set TESSEL_NVRTC to libnvrtc.so";
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const NvrtcInfo& nvrtc_info() { return loaded().info; }

std::string nvrtc_status() {
  const NvrtcInfo& i = nvrtc_info();
  return i.usable ? "NVRTC " + i.version + " (" + i.path + ")" : i.problem;
}

std::string nvrtc_compile(const std::string& source, const std::string& name,
                          const std::string& arch, const std::vector<std::string>& options) {
  const Loaded& l = loaded();
  if (!l.info.usable) detail::fail("nvrtc_compile", l.info.problem);
  const Api& a = l.api;
  auto check = [&](int rc, const char* call) {
    if (rc != 0) detail::fail("nvrtc_compile", call, " failed: ", a.get_error_string(rc));
  };
  void* prog = nullptr;
  check(a.create_program(&prog, source.c_str(), name.c_str(), 0, nullptr, nullptr),
        "nvrtcCreateProgram");
  std::vector<std::string> opts = {"--gpu-architecture=" + arch, "--std=c++17"};
  opts.insert(opts.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());
  const int rc = a.compile_program(prog, static_cast<int>(argv.size()), argv.data());
  size_t log_size = 0;
  a.get_log_size(prog, &log_size);
  std::string log(log_size, '\0');
  if (log_size > 1) a.get_log(prog, log.data());
  if (rc != 0) {
    a.destroy_program(&prog);
    detail::fail("nvrtc_compile", "NVRTC could not compile ", name, " for ", arch, " (",
                 a.get_error_string(rc), "):\n", log);
  }
  size_t ptx_size = 0;
  check(a.get_ptx_size(prog, &ptx_size), "nvrtcGetPTXSize");
  std::string ptx(ptx_size, '\0');
  check(a.get_ptx(prog, ptx.data()), "nvrtcGetPTX");
  a.destroy_program(&prog);
  if (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  return ptx;
}

}  // namespace tessel
