// Reductions a_i = Red_j F(x_i, y_j) (or over i), their gradients (which are reductions) and
// evaluation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tessel/array.hpp"
#include "tessel/formula.hpp"

namespace tessel {

enum class ReductionOp : uint8_t {
  Sum,
  Min,
  Max,
  ArgMin,
  ArgMax,
  MinArgMin,
  MaxArgMax,
  KMin,
  ArgKMin,
  KMinArgKMin,
  LogSumExp,         // log sum_j exp(F)  or, with a weight w, log sum_j exp(F) w
  SumSoftMaxWeight,  // sum_j exp(F) G / sum_j exp(F)
  /// Produced by differentiation of Min/Max/KMin: sums over a few gathered indices, O(N K) work.
  GatherSum,   // out[o] = sum_k G(o, inner = idx[o, k], slot k)
  ScatterSum,  // out[inner] += G(o, inner, slot k) for every (o, k) with idx[o, k] == inner
};

const char* reduction_name(ReductionOp op);
ReductionOp reduction_from_name(const std::string& name);  // KeOps names, e.g. "Min_ArgMin"

// ---- the reduction table, for front ends and tests that iterate over every reduction ----------
struct ReductionSummary {
  ReductionOp op;
  std::string name;                    // tessel's and KeOps's name
  std::vector<std::string> spellings;  // other KeOps names reduction_from_name accepts
  bool by_name = true;                 // false: made by differentiation only (Gather/Scatter)
  std::string family;    // "sum", "select" (Min/Max), "kselect" (K best), "softmax", "indexed"
  bool is_max = false;   // select: Max rather than Min
  std::string outputs;   // "value", "index" or "value,index"
  // Columns of each output: "formula", "k_times_formula" (K times the formula's dim) or
  // "weight_or_1".
  std::string dim_rule;
  std::string weight;    // the weight formula: "none", "optional" or "required"
  bool scalar_formula = false;  // the formula must have dim 1
  bool uses_k = false;
  double identity = 0;        // the state before any term (indices start at -1)
  std::string index_op;       // select/kselect: the reduction giving the selected indices, else ""
  std::string grad;           // gradient rule: "none", "sum", "logsumexp", "softmax", ...
  bool forward_mode = false;  // jvp applies
  std::string summary;
};
std::vector<ReductionSummary> reduction_table();

enum class SumScheme : uint8_t { Block, Kahan, Direct };

/// Block-sparse reductions, in KeOps's layout. For a reduction over j, the i rows
/// [ranges_i[2c], ranges_i[2c+1]) reduce over the j intervals [redranges_j[2q], redranges_j[2q+1])
/// for q in [slices_i[c-1], slices_i[c]) (with slices_i[-1] = 0). The other triple serves
/// reductions over i, and so the gradients that flip the axis. Rows in no block get the neutral
/// value of the reduction.
struct BlockRanges {
  std::vector<int64_t> ranges_i, slices_i, redranges_j;
  std::vector<int64_t> ranges_j, slices_j, redranges_i;
};
/// Auto: the GPU when an input or output is a CUDA array, else compiled CPU code (the interpreter
/// when no compiler works). Cuda: on the GPU even for host arrays (copied in and out).
enum class Backend : uint8_t { Auto, Compiled, Interpreter, Cuda };

struct Options {
  Backend backend = Backend::Auto;
  SumScheme sum_scheme = SumScheme::Block;
  bool accumulate_f64 = false;                // float32 inputs, float64 accumulators
  int threads = 0;                            // 0: TESSEL_NUM_THREADS, else all cores
  std::shared_ptr<const BlockRanges> ranges;  // block-sparse reduction; null: dense
  /// CUDA: the stream to run on (a CUstream / cudaStream_t; null: the default stream) and, for
  /// Backend::Cuda with host arrays only, the GPU. The call returns when the results are written.
  void* stream = nullptr;
  int device = 0;
  /// CUDA with host arrays: the most device memory (bytes) a call may use; past it the call runs
  /// block by block, copies overlapped with kernels (0: no limit).
  int64_t gpu_memory_budget = 0;
  /// CUDA with host arrays: the GPUs that share a call, each reducing a contiguous part of the
  /// outer rows (empty, or one GPU: `device` alone). Block-sparse calls use the first.
  std::vector<int> gpu_devices;
};

struct ReductionImpl;  // defined in the library

/// How an input slot of a reduction is filled: by the caller, or by another reduction on the same
/// inputs (a gradient of LogSumExp needs the forward value, one of Min needs the argmin, ...).
struct VarSlot {
  int index = 0;
  Category cat = Category::I;
  int dim = 1;
  DType kind = DType::Float32;  // Int64 for gathered indices
  bool computed = false;
};

class Reduction {
 public:
  Reduction() = default;
  /// axis = 1: reduce over j, output indexed by i (KeOps convention); axis = 0: over i.
  /// `k` is K for the KMin family; `weight` is the LogSumExp weight or the SoftMax G formula.
  Reduction(ReductionOp op, Formula f, int axis = 1, int k = 0, Formula weight = {});

  ReductionOp op() const;
  int axis() const;
  int k() const;
  const Formula& formula() const;
  const Formula& weight() const;
  /// Number of outputs (2 for Min_ArgMin, ...) and their dims (columns) and dtypes.
  int num_outputs() const;
  int output_dim(int out) const;
  bool output_is_index(int out) const;
  /// True for gradients with respect to a parameter: the result is also summed over the outer
  /// index.
  bool full_sum() const;
  /// The slots the caller fills, by variable index (computed ones are filled automatically).
  std::vector<VarSlot> inputs() const;
  std::string str() const;
  Hash128 hash() const;
  const ReductionImpl& impl() const;
  const std::shared_ptr<const ReductionImpl>& impl_ptr() const { return impl_; }
  explicit Reduction(std::shared_ptr<const ReductionImpl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<const ReductionImpl> impl_;
};

/// A whole reduction in KeOps's text form, as rkeops and KeOpsLab users write it:
/// "Sum_Reduction(F, 0)", "ArgKMin_Reduction(F, K, 0)", "SumSoftMaxWeight_Reduction(F, 0, G)",
/// "LogSumExp_Reduction(F, 0[, G])". The tag (last index) is 0 to reduce over j (output indexed by
/// i, axis = 1), 1 to reduce over i. F and G are read by parse() with `aliases`.
Reduction parse_reduction(const std::string& text, const std::vector<std::string>& aliases = {});

/// Reverse mode: the vector-Jacobian product with respect to variable `var_index`, as a new
/// reduction whose inputs are those of `r` followed by one new variable holding the cotangent of
/// output 0 (shape: that output's shape). Its output has the shape of the variable.
Reduction grad(const Reduction& r, int var_index);
/// Forward mode: the derivative along a tangent for `var_index`, appended as a new input variable
/// of the same category and dim as that variable. The output has the shape of output 0.
Reduction jvp(const Reduction& r, int var_index);

/// The sizes the inputs imply. Sizes only matter where no input of that category exists.
struct Sizes {
  int64_t ni = -1, nj = -1;
};

/// Evaluate into caller-provided outputs (shapes checked). Inputs are indexed by variable index.
void evaluate(const Reduction& r, std::span<const ArrayView> inputs,
              std::span<const ArrayView> outputs, const Options& opt = {}, Sizes sizes = {});
/// Convenience: allocate and return the outputs.
std::vector<Array> evaluate(const Reduction& r, std::span<const ArrayView> inputs,
                            const Options& opt = {}, Sizes sizes = {});
std::vector<Array> evaluate(const Reduction& r, const std::vector<Array>& inputs,
                            const Options& opt = {}, Sizes sizes = {});

/// The outputs the allocating evaluate() returns for these inputs, without evaluating: their
/// shapes and dtypes, so that a caller can allocate them itself (on a GPU, say) and evaluate into
/// them.
struct OutputSpec {
  std::vector<int64_t> shape;
  DType dtype = DType::Float32;
};
std::vector<OutputSpec> output_specs(const Reduction& r, std::span<const ArrayView> inputs,
                                     Sizes sizes = {});

}  // namespace tessel
