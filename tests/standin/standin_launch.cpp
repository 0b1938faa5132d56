// The stand-in driver's modules and launches (run by the CUDA emulator), its launch log, the
// error names, and the faults tests inject.
//
// A module is the stand-in NVRTC's "PTX": a marker line, then the CUDA source, which the emulator
// compiles with the host compiler. A launch is checked against the device's limits and the
// kernel's declared parameters, logged, and queued on its stream; pointer arguments into device
// memory are handed to the kernel as the alias the stand-in can access.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "cuda_emulator.hpp"
#include "standin.hpp"
#include "standin_ptx.hpp"

#define STANDIN_API extern "C" __attribute__((visibility("default"))) int

namespace tessel::standin {

namespace {

struct Function {
  const emu::Module* module = nullptr;
  const emu::KernelEntry* kernel = nullptr;
  int device = 0;
  std::atomic<int> max_dynamic_shared{48 * 1024};
};

struct State {
  std::mutex mu;
  std::set<const emu::Module*> modules;  // kept for the process, as tessel keeps its functions
  std::set<Function*> functions;
  std::string log;
  // Fault injection: the call of each kind that fails (counted from the last arming), 0: none.
  long fail_at[3] = {0, 0, 0}, seen[3] = {0, 0, 0};
};
State& state() {
  static State* s = [] {
    auto* st = new State();
    // TESSEL_STANDIN_FAIL="alloc:3,copy:1,launch:2": that call of each kind fails.
    if (const char* e = std::getenv("TESSEL_STANDIN_FAIL")) {
      std::stringstream in(e);
      std::string item;
      while (std::getline(in, item, ',')) {
        const size_t colon = item.find(':');
        const std::string kind = item.substr(0, colon);
        const long n = colon == std::string::npos ? 1 : std::atol(item.c_str() + colon + 1);
        const int k = kind == "alloc" ? 0 : kind == "copy" ? 1 : kind == "launch" ? 2 : -1;
        if (k < 0) {
          std::fprintf(stderr, "TESSEL_STANDIN_FAIL: unknown kind '%s' (alloc, copy, launch)\n",
                       kind.c_str());
          std::abort();
        }
        st->fail_at[k] = n;
      }
    }
    return st;
  }();
  return *s;
}

Function* function_of(void* h) {
  State& s = state();
  std::lock_guard lk(s.mu);
  return s.functions.count(static_cast<Function*>(h)) ? static_cast<Function*>(h) : nullptr;
}

// The launch's arguments, copied now (as cuLaunchKernel copies them) and with each pointer into
// device memory replaced by its alias. A pointer to host memory that is not pinned is a kernel
// fault on a real GPU: reported as CUDA_ERROR_ILLEGAL_ADDRESS by the launch's synchronisation.
struct Args {
  std::vector<std::vector<char>> values;
  std::string bad;  // why the kernel would fault
};
Args copy_args(const emu::KernelEntry& k, void** params, int device) {
  Args a;
  for (size_t i = 0; i < k.param_bytes.size(); ++i) {
    auto& v = a.values.emplace_back(k.param_bytes[i]);
    std::memcpy(v.data(), params[i], v.size());
    if (!k.param_is_pointer[i] || v.size() != sizeof(uintptr_t)) continue;
    uintptr_t p = 0;
    std::memcpy(&p, v.data(), sizeof p);
    if (p == 0) continue;
    const Region r = classify(reinterpret_cast<const void*>(p));
    if (r.kind == Kind::Device && r.device != device && a.bad.empty())
      a.bad = "argument " + std::to_string(i) + " points into device " + std::to_string(r.device) +
              "'s memory";
    if (r.kind == Kind::Pageable && a.bad.empty())
      a.bad = "argument " + std::to_string(i) + " points to pageable host memory";
    if (r.kind != Kind::Device) continue;
    const uintptr_t alias = reinterpret_cast<uintptr_t>(r.host + (p - r.begin));
    std::memcpy(v.data(), &alias, sizeof alias);
  }
  return a;
}

std::string json_line(const Function& f, const emu::LaunchConfig& c, void* stream) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"kernel\": \"%s\", \"device\": %d, \"grid\": [%u, %u, %u], \"block\": [%u, %u, "
                "%u], \"shared\": %zu, \"stream\": \"%s\"}\n",
                f.kernel->name.c_str(), f.device, c.grid.x, c.grid.y, c.grid.z, c.block.x,
                c.block.y, c.block.z, c.dynamic_smem,
                stream == nullptr || stream == reinterpret_cast<void*>(1) ? "legacy" : "created");
  return buf;
}

}  // namespace

bool inject(Fault kind) {
  State& s = state();
  std::lock_guard lk(s.mu);
  const int k = static_cast<int>(kind);
  return s.fail_at[k] > 0 && ++s.seen[k] == s.fail_at[k];
}

const char* result_name(int rc) {
  switch (rc) {
    case kSuccess:
      return "CUDA_SUCCESS";
    case kInvalidValue:
      return "CUDA_ERROR_INVALID_VALUE";
    case kOutOfMemory:
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case kNotInitialized:
      return "CUDA_ERROR_NOT_INITIALIZED";
    case kNoDevice:
      return "CUDA_ERROR_NO_DEVICE";
    case kInvalidDevice:
      return "CUDA_ERROR_INVALID_DEVICE";
    case kInvalidImage:
      return "CUDA_ERROR_INVALID_IMAGE";
    case kInvalidContext:
      return "CUDA_ERROR_INVALID_CONTEXT";
    case kInvalidHandle:
      return "CUDA_ERROR_INVALID_HANDLE";
    case kNotFound:
      return "CUDA_ERROR_NOT_FOUND";
    case kIllegalAddress:
      return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case kLaunchOutOfResources:
      return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case kLaunchFailed:
      return "CUDA_ERROR_LAUNCH_FAILED";
    default:
      return nullptr;
  }
}

const char* result_text(int rc) {
  switch (rc) {
    case kSuccess:
      return "no error";
    case kInvalidValue:
      return "invalid argument";
    case kOutOfMemory:
      return "out of memory";
    case kNotInitialized:
      return "initialization error";
    case kNoDevice:
      return "no CUDA-capable device is detected";
    case kInvalidDevice:
      return "invalid device ordinal";
    case kInvalidImage:
      return "device kernel image is invalid";
    case kInvalidContext:
      return "invalid device context";
    case kInvalidHandle:
      return "invalid resource handle";
    case kNotFound:
      return "named symbol not found";
    case kIllegalAddress:
      return "an illegal memory access was encountered";
    case kLaunchOutOfResources:
      return "too many resources requested for launch";
    case kLaunchFailed:
      return "unspecified launch failure";
    default:
      return nullptr;
  }
}

}  // namespace tessel::standin

using namespace tessel;
using namespace tessel::standin;

STANDIN_API cuModuleLoadDataEx(void** module, const void* image, unsigned n_opts, int* opts,
                               void** vals) {
  if (!module || !image) return kInvalidValue;
  if (!current_context()) return kInvalidContext;
  // The JIT's error log, where the caller gave one (CU_JIT_ERROR_LOG_BUFFER, ..._SIZE_BYTES).
  char* log = nullptr;
  size_t log_size = 0;
  for (unsigned k = 0; k < n_opts; ++k) {
    if (opts[k] == 5) log = static_cast<char*>(vals[k]);
    if (opts[k] == 6) log_size = reinterpret_cast<uintptr_t>(vals[k]);
  }
  auto fail = [&](int rc, const std::string& why) {
    if (log && log_size) std::snprintf(log, log_size, "%s", why.c_str());
    return rc;
  };
  const std::string ptx = static_cast<const char*>(image);
  std::string source;
  if (!standin_ptx_source(ptx, source))
    return fail(kInvalidImage, "the stand-in driver loads only the stand-in NVRTC's output");
  try {
    auto* m = new emu::Module(source);
    State& s = state();
    std::lock_guard lk(s.mu);
    s.modules.insert(m);
    *module = const_cast<emu::Module*>(m);
  } catch (const std::exception& e) {
    return fail(kInvalidImage, e.what());
  }
  return kSuccess;
}

STANDIN_API cuModuleGetFunction(void** fn, void* module, const char* name) {
  if (!fn || !name) return kInvalidValue;
  if (!current_context()) return kInvalidContext;
  State& s = state();
  std::lock_guard lk(s.mu);
  auto* m = static_cast<const emu::Module*>(module);
  if (!s.modules.count(m)) return kInvalidHandle;
  const emu::KernelEntry* k = m->find(name);
  if (!k) return kNotFound;
  auto* f = new Function();
  f->module = m;
  f->kernel = k;
  f->device = current_context()->device;
  s.functions.insert(f);
  *fn = f;
  return kSuccess;
}

STANDIN_API cuFuncSetAttribute(void* fn, int attr, int value) {
  Function* f = function_of(fn);
  if (!f) return kInvalidHandle;
  if (attr != 8) return kInvalidValue;  // only CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
  if (value < 0 || value > devices()[f->device].shared_optin) return kInvalidValue;
  f->max_dynamic_shared = value;
  return kSuccess;
}

STANDIN_API cuLaunchKernel(void* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                           unsigned by, unsigned bz, unsigned shared, void* stream, void** params,
                           void** extra) {
  if (!current_context()) return kInvalidContext;
  Function* f = function_of(fn);
  Stream* s = stream_of(stream);
  if (!f || !s) return kInvalidHandle;
  if (f->device != current_context()->device) return kInvalidContext;
  const uint64_t threads = uint64_t{bx} * by * bz;
  if (gx == 0 || gy == 0 || gz == 0 || gx > 0x7fffffffu || gy > 65535 || gz > 65535)
    return kInvalidValue;
  if (threads == 0 || bx > 1024 || by > 1024 || bz > 64 || threads > 1024) return kInvalidValue;
  if (threads > f->kernel->max_threads) return kLaunchOutOfResources;  // __launch_bounds__
  if (shared > static_cast<unsigned>(f->max_dynamic_shared)) return kInvalidValue;
  if (extra || (!params && !f->kernel->param_bytes.empty())) return kInvalidValue;
  if (inject(Fault::Launch)) return kLaunchOutOfResources;
  emu::LaunchConfig cfg;
  cfg.grid = {gx, gy, gz};
  cfg.block = {bx, by, bz};
  cfg.dynamic_smem = shared;
  cfg.smem_limit = static_cast<size_t>(f->max_dynamic_shared);
  auto args = std::make_shared<Args>(copy_args(*f->kernel, params, f->device));
  {
    State& st = state();
    std::lock_guard lk(st.mu);
    st.log += json_line(*f, cfg, stream);
  }
  install_fault_handler();
  enqueue(
      s,
      [f, cfg, args]() -> int {
        if (!args->bad.empty()) {
          std::fprintf(stderr, "[stand-in driver] kernel %s: %s\n", f->kernel->name.c_str(),
                       args->bad.c_str());
          return kIllegalAddress;
        }
        std::vector<void*> ptrs;
        for (auto& v : args->values) ptrs.push_back(v.data());
        int rc = kSuccess;
        try {
          f->module->launch(cfg, [&] {
            set_in_kernel(true);
            f->kernel->call(ptrs.data());
            set_in_kernel(false);
          });
        } catch (const std::exception& e) {
          std::fprintf(stderr, "[stand-in driver] kernel %s failed: %s\n", f->kernel->name.c_str(),
                       e.what());
          rc = kLaunchFailed;
        }
        // The kernel's threads are fibers of this stream's thread: one that failed left the
        // flag set, and the host code that runs here next must not open device views.
        set_in_kernel(false);
        close_opened_views();
        return rc;
      },
      "launch");
  return kSuccess;
}

// ---- control calls for tests ----

// The launch log since the last reset, one JSON object a line; the string stays valid until the
// next call of either.
extern "C" __attribute__((visibility("default"))) const char* tessel_standin_launches() {
  thread_local std::string copy;
  State& s = state();
  std::lock_guard lk(s.mu);
  copy = s.log;
  return copy.c_str();
}

STANDIN_API tessel_standin_reset_log() {
  State& s = state();
  std::lock_guard lk(s.mu);
  s.log.clear();
  return kSuccess;
}

// Arms a fault: the n-th call of `kind` ("alloc", "copy", "launch") from now fails; n = 0 disarms.
STANDIN_API tessel_standin_fail(const char* kind, int n) {
  const std::string k = kind ? kind : "";
  const int i = k == "alloc" ? 0 : k == "copy" ? 1 : k == "launch" ? 2 : -1;
  if (i < 0 || n < 0) return kInvalidValue;
  State& s = state();
  std::lock_guard lk(s.mu);
  s.fail_at[i] = n;
  s.seen[i] = 0;
  return kSuccess;
}
