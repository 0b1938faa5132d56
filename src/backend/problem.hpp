// A validated evaluation request: the reduction, each variable's data, the sizes, the options.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "reduction/reduction_impl.hpp"
#include "tessel/array.hpp"

namespace tessel {

// One variable's data as rows × dim with element strides (any layout, any float dtype).
struct Bound {
  int index = -1;
  Category cat = Category::I;
  const void* data = nullptr;
  DType dtype = DType::Float32;
  int64_t rows = 0;
  int dim = 0;
  int64_t s_row = 0, s_col = 1;

  double at(int64_t row, int c) const {
    const int64_t off = row * s_row + c * s_col;
    switch (dtype) {
      case DType::Float32:
        return static_cast<const float*>(data)[off];
      case DType::Float64:
        return static_cast<const double*>(data)[off];
      case DType::Int64:
        return static_cast<double>(static_cast<const int64_t*>(data)[off]);
      default:  // half inputs reach backends as float32 copies
        break;
    }
    return 0;
  }
  int64_t index_at(int64_t row, int c) const {
    return static_cast<const int64_t*>(data)[row * s_row + c * s_col];
  }
};

// Rows [begin, end) of the output reduce over the inner intervals iv = {s0, e0, s1, e1, ...}.
// A dense reduction is one block: all rows, one interval [0, n_inner).
struct RowBlock {
  int64_t begin = 0, end = 0;
  std::vector<int64_t> iv;
};

struct Problem {
  const ReductionImpl* r = nullptr;
  std::vector<Bound> vars;  // sorted by index
  int64_t n_outer = 0, n_inner = 0;
  DType dtype = DType::Float32;  // of the float inputs and value outputs
  Options opt;
  int threads = 1;
  int device = -1;               // the CUDA device evaluating, or -1 for the CPU
  std::vector<RowBlock> blocks;  // cover every output row once

  // The interval list of each row, or nullptr for rows that reduce over nothing.
  std::vector<const RowBlock*> block_of_rows() const;

  const Bound& var(int index) const;
};

}  // namespace tessel
