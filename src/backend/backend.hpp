// The one interface every backend implements (compiled CPU, interpreter, CUDA, null): the engine
// binds and validates the arrays, plans, picks a backend by its id and hands it a Problem.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "backend/problem.hpp"
#include "tessel/array.hpp"

namespace tessel {

// The slots the engine picks from. The user's Backend option maps onto them (engine); the null
// backend has no id of its own: tests put it into a slot (BackendRegistry::replace).
enum class BackendId : uint8_t { Compiled, Interpreter, Cuda };
constexpr int kBackendSlots = 3;

// Device memory a backend allocated for the engine: a contiguous (rows, cols) array on a device,
// freed with the last copy of `owner`.
struct DeviceRows {
  std::shared_ptr<void> owner;
  ArrayView view;
};

class KernelBackend {
 public:
  virtual ~KernelBackend() = default;
  virtual const char* name() const = 0;

  // Evaluates p into `outs`: C-contiguous (n_outer, dim) host arrays of p.dtype, Int64 for index
  // outputs. Returns false when this backend has no kernel for p, before writing anything, so
  // that the engine may give p to another backend; errors throw.
  virtual bool run(const Problem& p, std::span<const ArrayView> outs) = 0;

  // Throws a clear error unless `device` can run kernels (called before any output is touched).
  virtual void open_device(int device) {}
  // Orders `device`'s default stream after the work queued so far on the caller's `stream`: the
  // small device steps run on the default stream, which does not wait for the caller's own
  // (non-blocking) streams by itself.
  virtual void wait_for_stream(int device, void* stream) {}

  // Device outputs: the engine computes into host rows and these move them in and out of the
  // backend's memory. `dst`/`src` are (rows, cols) or (rows) arrays with contiguous rows; host
  // backends never see device arrays, so their versions report an internal error.
  virtual void store_rows(const Array& src, const ArrayView& dst);
  virtual Array load_rows(const ArrayView& src);

  // Drops the kernels held in memory (the disk cache stays), so that the next call loads from
  // disk: lets tests measure disk hits and the bench measure first calls.
  virtual void forget_loaded() {}

  // Results that stay on the device (no host round trip): a backend that says so is given its
  // device's contiguous CUDA outputs by run() and writes them there; it allocates the device
  // memory of computed variables and gradient terms, and adds such terms into outputs there.
  virtual bool writes_device_outputs() const { return false; }
  virtual DeviceRows alloc_rows(DType dtype, int64_t rows, int64_t cols, int device);
  // dst += src: src a contiguous (rows, cols) device array, dst the same shape, rows strided.
  virtual void add_rows_device(const ArrayView& src, const ArrayView& dst);
  // dst = the sum over rows of src (a contiguous (rows, cols) device array), accumulated in
  // double: dst a (1, cols) or (cols) device array, its elements strided (a sum over all rows).
  virtual void sum_rows_device(const ArrayView& src, const ArrayView& dst);
  // dst = src converted elementwise: contiguous device arrays of one size, float32 <-> float16
  // or bfloat16 (half-precision device arrays reduced in float32 without leaving the device).
  virtual void convert_device(const ArrayView& src, const ArrayView& dst);
  // Conjugate gradient's vector steps on device arrays (flat, contiguous, one size, float32 or
  // float64 each), in double: y = a x + b y (y = a x when b = 0, y not read), and x . y.
  virtual void axpby_device(double a, const ArrayView& x, double b, const ArrayView& y);
  virtual double dot_device(const ArrayView& x, const ArrayView& y);
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
