// Half-precision arrays at the engine's boundary (half_io.cpp): float32 copies in, rounding out.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "tessel/reduction.hpp"

namespace tessel::engine {

// Whether a call has a float16 or bfloat16 input or output.
bool any_half(std::span<const ArrayView> inputs, std::span<const ArrayView> outputs);

// The call's inputs with every half array replaced by a float32 copy (same shape), the half
// dtype they share (an error if the float inputs mix dtypes), and the options to run with: a call
// on a GPU (`device` >= 0) stays there. A device array's copy is converted on its device when the
// GPU's backend keeps results there (no host round trip), else on the host and uploaded.
struct HalfInputs {
  std::vector<Array> arrays;
  std::vector<DeviceRows> device_arrays;
  std::vector<ArrayView> views;
  DType dtype = DType::Float16;
  bool have_dtype = false;  // some input is a float array (dtype is theirs)
  Options opt;
};
HalfInputs convert_half_inputs(std::span<const ArrayView> inputs, const Options& opt, int device);

// Value outputs must have the inputs' half dtype (index outputs are int64).
void check_half_outputs(std::span<const ArrayView> outputs, DType half);
// Rounds the contiguous float32 `src` (dst's logical shape) into the half array `dst`.
void store_half(const Array& src, const ArrayView& dst, const std::string& who);

// Float32 stand-ins for a call's half outputs: host arrays, or device memory for contiguous
// device outputs when the GPU's backend keeps results there; finish() rounds them into the
// caller's outputs (on the device for the latter).
class HalfOutputs {
 public:
  HalfOutputs(std::span<const ArrayView> outputs, int device);
  std::span<const ArrayView> views() const { return views_; }
  void finish() const;

 private:
  std::span<const ArrayView> outputs_;
  std::vector<ArrayView> views_;
  std::vector<Array> host_;
  std::vector<DeviceRows> device_;
};
// A float32 result rounded to `half` (index results unchanged).
Array round_to_half(const Array& src, DType half);

}  // namespace tessel::engine
