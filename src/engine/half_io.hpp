// Half-precision arrays at the engine's boundary (half_io.cpp): float32 copies in, rounding out.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "tessel/reduction.hpp"

namespace tessel::engine {

// Whether a call has a float16 or bfloat16 input or output.
bool any_half(std::span<const ArrayView> inputs, std::span<const ArrayView> outputs);

// The call's inputs with every half array replaced by a float32 host copy (same shape), the half
// dtype they share (an error if the float inputs mix dtypes), and the options to run with: a call
// on a GPU (`device` >= 0) stays there, with the copies uploaded.
struct HalfInputs {
  std::vector<Array> arrays;
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
// A float32 result rounded to `half` (index results unchanged).
Array round_to_half(const Array& src, DType half);

}  // namespace tessel::engine
