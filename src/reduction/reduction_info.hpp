// The reduction table: one row per ReductionOp with everything the layers ask about its kind.
//
// Names, output count, dims and dtypes, the weight formula, K, the empty-row value, how its
// state folds terms and partial states, and which gradient rule applies all come from here, so a
// new reduction is one row plus its fold code (reduce_state.hpp, the two code generators) and
// its gradient rule; tests walk the table, so a row without coverage fails.
#pragma once

#include <span>
#include <string>

#include "tessel/reduction.hpp"

namespace tessel {

// How a reduction's state folds terms and merges partial states (fold_rules.hpp holds the merge
// rules every backend shares):
//   Sum:     one running sum per formula component; merge by adding.
//   Select:  per component the best (value, index); Min or Max by `is_max`.
//   KSelect: per formula component, the K best (value, index) pairs, sorted (KeOps's layout:
//            output column k * dim + c is the k-th best of component c).
//   SoftMax: a running maximum m and sums rescaled by exp(m_old - m_new) (LogSumExp and SoftMax).
//   Indexed: sums over a few listed partner indices (Gather/Scatter, made by differentiation).
enum class ReductionFamily : uint8_t { Sum, Select, KSelect, SoftMax, Indexed };
// What the outputs hold: values, indices, or (values, indices).
enum class ReductionOutputs : uint8_t { Value, Index, ValueIndex };
// Columns of every output: the formula's dim, K times it, or the weight's dim (1 without one).
enum class OutputDimRule : uint8_t { FormulaDim, KTimesFormulaDim, WeightDimOr1 };
enum class WeightUse : uint8_t { None, Optional, Required };
// The rule src/autodiff/reduction_grad.cpp applies to differentiate a reduction of this kind.
enum class GradRule : uint8_t {
  None,       // index outputs: no derivative
  Sum,        // the VJP of the formula, summed
  LogSumExp,  // softmax-weighted VJP, needs the forward value
  SoftMax,    // needs the LogSumExp and the forward value
  Select,     // through the selected index (Gather/Scatter of the VJP); forward mode too
  KSelect,    // through the K selected indices; reverse mode only
  Indexed,    // Gather/Scatter again
};

struct ReductionInfo {
  ReductionOp op;
  const char* name;          // tessel's (and KeOps's) name
  const char* spellings[3];  // other KeOps spellings accepted by name, null-terminated
  bool by_name;              // false: produced by differentiation only, never built by name
  ReductionFamily family;
  bool is_max;  // Select family: Max (else Min)
  ReductionOutputs outputs;
  OutputDimRule dim_rule;
  WeightUse weight;
  bool scalar_formula;  // the formula must have dim 1
  bool uses_k;          // takes K (Gather/Scatter: the slot count, set by differentiation)
  // The state's value before any term: the fold's identity (Sum 0, Min +inf, Max -inf, KMin
  // +inf, the SoftMax family's running maximum -inf with sums 0); indices start at -1.
  double identity;
  ReductionOp index_op;  // Select/KSelect: the reduction giving the selected indices
  GradRule grad;
  const char* summary;

  int num_outputs() const { return outputs == ReductionOutputs::ValueIndex ? 2 : 1; }
  bool output_is_index(int out) const {
    return outputs == ReductionOutputs::Index ||
           (outputs == ReductionOutputs::ValueIndex && out == 1);
  }
  // Terms carry their inner index (the state keeps indices).
  bool keeps_index() const {
    return family == ReductionFamily::Select || family == ReductionFamily::KSelect;
  }
  bool is_indexed() const { return family == ReductionFamily::Indexed; }
  // Forward mode (jvp) has a rule: not through the K selected indices, not for index outputs.
  bool forward_mode() const { return grad != GradRule::None && grad != GradRule::KSelect; }
  int output_dim(int formula_dim, int weight_dim, int k) const {
    switch (dim_rule) {
      case OutputDimRule::KTimesFormulaDim:
        return k * formula_dim;
      case OutputDimRule::WeightDimOr1:
        return weight_dim > 0 ? weight_dim : 1;
      default:
        return formula_dim;
    }
  }
};

// The row of `op` (every ReductionOp has one).
const ReductionInfo& reduction_info(ReductionOp op);
// Every row, in ReductionOp order.
std::span<const ReductionInfo> reduction_rows();
// The identity as source text, `inf` spelling infinity in the target language.
std::string identity_text(const ReductionInfo& info, const char* inf);

}  // namespace tessel
