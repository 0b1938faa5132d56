// A device beside the kernel backends: its memory, streams, copies and the small vector steps
// that keep results there. The engine reaches it through the registry by the device kind of its
// arrays (registry.hpp), never through a backend's name.
#pragma once

#include <cstdint>
#include <memory>

#include "tessel/array.hpp"

namespace tessel {

// Device memory allocated for the engine: a contiguous (rows, cols) array on a device, freed with
// the last copy of `owner`.
struct DeviceRows {
  std::shared_ptr<void> owner;
  ArrayView view;
};

// What a device offers the engine and the algorithms, apart from running kernels (a backend's
// job, backend.hpp). Separate from the backends, as MLX keeps its allocator and streams apart
// from its primitives: host backends have no device, and a test stands one in for a GPU.
class DeviceApi {
 public:
  virtual ~DeviceApi() = default;

  // Throws a clear error unless `device` can run kernels (called before any output is touched).
  virtual void open_device(int device) = 0;
  // Orders `device`'s default stream after the work queued so far on the caller's `stream`: the
  // small device steps run on the default stream, which does not wait for the caller's own
  // (non-blocking) streams by itself.
  virtual void wait_for_stream(int device, void* stream) = 0;

  // Copies between host rows and device arrays: `dst`/`src` are (rows, cols) or (rows) device
  // arrays with contiguous rows, the host side contiguous.
  virtual void store_rows(const Array& src, const ArrayView& dst) = 0;
  virtual Array load_rows(const ArrayView& src) = 0;

  // Memory for computed variables, gradient terms and temporaries kept on the device.
  virtual DeviceRows alloc_rows(DType dtype, int64_t rows, int64_t cols, int device) = 0;
  // dst += src: src a contiguous (rows, cols) device array, dst the same shape, rows strided.
  virtual void add_rows_device(const ArrayView& src, const ArrayView& dst) = 0;
  // dst = the sum over rows of src (a contiguous (rows, cols) device array), accumulated in
  // double: dst a (1, cols) or (cols) device array, its elements strided (a sum over all rows).
  virtual void sum_rows_device(const ArrayView& src, const ArrayView& dst) = 0;
  // dst = src converted elementwise: contiguous device arrays of one size, float32 <-> float16
  // or bfloat16 (half-precision device arrays reduced in float32 without leaving the device).
  virtual void convert_device(const ArrayView& src, const ArrayView& dst) = 0;
  // Conjugate gradient's vector steps on device arrays (flat, contiguous, one size, float32 or
  // float64 each), in double: y = a x + b y (y = a x when b = 0, y not read), and x . y.
  virtual void axpby_device(double a, const ArrayView& x, double b, const ArrayView& y) = 0;
  virtual double dot_device(const ArrayView& x, const ArrayView& y) = 0;
};

// The built-in GPU device, one object for the life of the process (backend/cuda/device_api.cpp).
DeviceApi& cuda_device_api();

}  // namespace tessel
