// The engine's internal pieces: binding and validation (bind.cpp), running a bound problem on the
// backend the registry picks (dispatch.cpp); engine.cpp plans batches and is the entry point.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/problem.hpp"
#include "tessel/reduction.hpp"

namespace tessel::engine {

const char* cat_word(Category c);
// Whether every element offset of `a`, in bytes, fits in 64 bits: the kernels index with
// row * stride products, which would otherwise wrap (a huge or broadcast shape). Checked on every
// call, so it allocates nothing; check_extent builds the message only when this fails.
bool extent_fits(const ArrayView& a);
void check_extent(const char* fn, const std::string& who, const ArrayView& a);
// Checks one input against its slot and returns its rows × dim view.
Bound bind(const VarSlot& v, const ArrayView& a, bool cuda);
void check_output(const ReductionImpl& r, int k, const ArrayView& o, int64_t rows, DType dtype,
                  bool cuda);
// The row blocks of a reduction: all rows over [0, n_inner), or the block-sparse ranges checked
// and completed with empty blocks for the rows they leave out.
std::vector<RowBlock> row_blocks(const ReductionImpl& r, const Options& opt, int64_t n_outer,
                                 int64_t n_inner);

// A computed variable's results: host arrays, or memory the GPU's device allocated (a call on a
// GPU whose backend keeps results there), seen through `views` either way.
struct ComputedResult {
  std::vector<Array> host;
  std::vector<DeviceRows> device;
  std::vector<ArrayView> views;
};

struct Context {
  std::span<const ArrayView> inputs;
  Options opt;
  Sizes sizes;
  std::map<std::pair<uint64_t, uint64_t>, ComputedResult> computed;  // by source hash
  int device = -1;  // the CUDA device evaluating, or -1 for the CPU
};

// Where a call runs: the CUDA device of its CUDA arrays (all on one device), the GPU asked for
// with Backend::Cuda, or the CPU (-1); a clear error when that device cannot run kernels.
int pick_device(std::span<const ArrayView> inputs, std::span<const ArrayView> outputs,
                const Options& opt);
// Contiguous shares [begin, end) of n rows for `parts` devices: equal, in whole granules, none
// empty (fewer shares when n is small); one share [0, n) for n = 0.
std::vector<std::pair<int64_t, int64_t>> split_rows(int64_t n, int parts, int64_t granule);
// Binds r's inputs from ctx, checks `outputs` and evaluates r into them (`top`: r is the call's
// own reduction, not a computed variable or an addend).
void eval_into(const ReductionImpl& r, Context& ctx, std::span<const ArrayView> outputs, bool top);
// As eval_into, into host arrays allocated here.
std::vector<Array> eval_impl(const ReductionImpl& r, Context& ctx, bool top);
// The dtype and number of rows of r's results on ctx's inputs (1 row for a sum over all rows).
std::pair<DType, int64_t> result_rows(const ReductionImpl& r, const Context& ctx);

}  // namespace tessel::engine
