// Test-only CUDA emulator: runs CUDA kernel source on the CPU, one fiber per CUDA thread.
//
// Machines without a GPU can only check that generated CUDA compiles (NVRTC); this checks what it
// computes. The CUDA source gets a host "shim" prepended (the CUDA built-ins as plain C++), is
// compiled by the system compiler into a shared library and run block after block, every thread
// of a block a fiber with its own stack that runs until it waits at a barrier or a warp intrinsic,
// so that __syncthreads is a real barrier. The emulator is strict where CUDA leaves behaviour
// undefined: threads reaching different barriers, exiting while others wait at one, warp
// intrinsics with disagreeing masks, a barrier that can never complete (a deadlock) all
// fail the launch with a message instead of deadlocking or passing by luck. Shared memory starts
// out as NaN bytes, and GuardedBuffer puts inaccessible pages around global arrays, so reads of
// unwritten shared memory and out-of-bounds accesses show up too.
//
// Supported: __global__/__device__/__forceinline__/__restrict__, threadIdx/blockIdx/blockDim/
// gridDim (x, y, z), dynamic `extern __shared__ T s[];` and static __shared__ variables inside
// functions, __syncthreads (and _count/_and/_or), __syncwarp, __shfl{,_up,_down,_xor}_sync,
// __ballot_sync/__any_sync/__all_sync, atomics on int/unsigned/64-bit/float/double, the float
// and double math functions, __int_as_float and friends, printf, assert and __trap, and the
// 16-byte vector types float4 and double2.
// Not emulated: textures, cooperative groups, the other vector types (float2, ...), __activemask,
// cluster/async-copy features, timing. Blocks run one after another, so inter-block races are
// not exercised; a thread switches only at barriers and warp intrinsics, so one that spins on a
// flag another thread of its block sets without a barrier between them never ends (CUDA does not
// promise such a loop ends either, before Volta).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessel::emu {

// A kernel misbehaved in a way CUDA would leave undefined (or hang on): see the message.
class EmulationError : public std::runtime_error {
 public:
  explicit EmulationError(const std::string& what) : std::runtime_error(what) {}
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

struct LaunchConfig {
  Dim3 grid, block;
  size_t dynamic_smem = 0;  // bytes of `extern __shared__` memory per block
  // What a kernel may use without cudaFuncSetAttribute(MaxDynamicSharedMemorySize).
  size_t smem_limit = 48 * 1024;
};

// Why kernels cannot be emulated on this machine (no usable C++ compiler); empty when they can.
std::string unavailable_reason();

// An `extern "C" __global__` function of a module, callable with cuLaunchKernel's argument array
// (one pointer per parameter, each to the argument's value).
struct KernelEntry {
  std::string name;
  unsigned max_threads = 1024;  // its __launch_bounds__, else the hardware's limit
  std::vector<size_t> param_bytes;
  std::vector<bool> param_is_pointer;
  void (*call)(void** args) = nullptr;  // the kernel's body for launch(), on one CUDA thread
};

// One CUDA source compiled for the emulator (cached on disk like the CPU kernels).
class Module {
 public:
  // Throws tessel::Error with the compiler's log when the source does not compile.
  explicit Module(const std::string& cuda_source);

  // The address of an `extern "C"` kernel, to be called from launch()'s body.
  template <class Fn>
  Fn* kernel(const char* name) const {
    return reinterpret_cast<Fn*>(symbol(name));
  }

  // The module's `extern "C" __global__` functions; null when it has none of that name.
  const KernelEntry* find(const std::string& name) const;
  const std::vector<KernelEntry>& kernels() const { return kernels_; }

  // Runs `body` once on every thread of the grid; body calls the kernel with its arguments.
  // Throws EmulationError when the kernel deadlocks, diverges around a barrier or traps.
  void launch(const LaunchConfig& cfg, const std::function<void()>& body) const;

  // The C++ that was compiled, and where the cache keeps it (for failure messages).
  const std::string& host_source() const { return source_; }
  const std::string& source_path() const { return source_path_; }

 private:
  struct Unload {
    void operator()(void* handle) const;  // dlclose
  };
  void* symbol(const char* name) const;
  // The loaded library: unloaded with the Module, or when its constructor throws after loading.
  std::unique_ptr<void, Unload> handle_;
  void (*bind_)(const void*) = nullptr;
  std::string source_, source_path_;
  std::vector<KernelEntry> kernels_;
};

// Host memory standing in for a device array: inaccessible pages lie right after its end and
// before its start, so a kernel that reads or writes out of bounds stops with a message naming
// the buffer (SIGSEGV) instead of silently using a neighbour's data. `align` is the element
// size: the end abuts the guard page up to that rounding.
class GuardedBuffer {
 public:
  GuardedBuffer(size_t bytes, size_t align, std::string name);
  ~GuardedBuffer();
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* base_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0, mapped_ = 0;
  int slot_ = -1;
};

}  // namespace tessel::emu
