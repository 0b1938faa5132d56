// The one interface every backend implements (compiled CPU, interpreter, CUDA, null): the engine
// binds and validates the arrays, plans, and hands a Problem to the backend the registry picks.
#pragma once

#include <cstdint>
#include <span>

#include "backend/device.hpp"
#include "backend/problem.hpp"
#include "tessel/array.hpp"

namespace tessel {

// The registry's slots. The user's Backend option maps onto them (choose_backend); the null
// backend has no id of its own: tests put it into a slot (BackendRegistry::replace).
enum class BackendId : uint8_t { Compiled, Interpreter, Cuda };
constexpr int kBackendSlots = 3;

class KernelBackend {
 public:
  virtual ~KernelBackend() = default;
  virtual const char* name() const = 0;

  // Evaluates p into `outs`: C-contiguous (n_outer, dim) host arrays of p.dtype, Int64 for index
  // outputs. Returns false when this backend has no kernel for p, before writing anything, so
  // that the engine may give p to another backend; errors throw.
  virtual bool run(const Problem& p, std::span<const ArrayView> outs) = 0;

  // Drops the kernels held in memory (the disk cache stays), so that the next call loads from
  // disk: lets tests measure disk hits and the bench measure first calls.
  virtual void forget_loaded() {}

  // The device whose arrays this backend computes on (device.hpp: their memory, streams and
  // small steps), or nullptr for a host backend.
  virtual DeviceApi* device() { return nullptr; }
  // Results that stay on the device (no host round trip): a backend that says so is given its
  // device's contiguous outputs by run() and writes them there, and the engine keeps computed
  // variables and gradient terms in its device's memory.
  virtual bool writes_device_outputs() const { return false; }
};

// The built-in backends, one object each for the life of the process.
KernelBackend& compiled_backend();     // backend/cpu/compiled.cpp
KernelBackend& interpreter_backend();  // backend/cpu/interpreter.cpp
KernelBackend& cuda_backend();         // backend/cuda/launch.cpp

// The rows and columns of an output as the engine stores it: (rows, cols), or (rows) for cols = 1.
inline void output_rows(const ArrayView& a, int64_t& rows, int64_t& cols) {
  cols = a.shape.size() == 2 ? a.shape[1] : 1;
  rows = a.shape.empty() ? 1 : a.shape[0];
}

// Whether `a` is C-contiguous (its elements in row-major order without gaps; the strides of
// dimensions of size 1 do not matter).
inline bool contiguous(const ArrayView& a) {
  if (a.strides.empty()) return true;
  int64_t expect = 1;
  for (int k = static_cast<int>(a.shape.size()) - 1; k >= 0; --k) {
    if (a.shape[k] != 1 && a.strides[k] != expect) return false;
    if (__builtin_mul_overflow(expect, a.shape[k], &expect)) return false;
  }
  return true;
}

// `a` as one flat row of a.size() elements (C-contiguous arrays only): what the device steps
// that work elementwise take.
inline ArrayView flat_view(const ArrayView& a) {
  ArrayView f = a;
  f.shape = {a.size()};
  f.strides.clear();
  return f;
}

}  // namespace tessel
