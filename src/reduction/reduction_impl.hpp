// The reduction spec behind tessel::Reduction: op, formulas, axis, variable slots and dependencies.
#pragma once

#include <memory>
#include <vector>

#include "ir/node.hpp"
#include "reduction/reduction_info.hpp"
#include "tessel/reduction.hpp"

namespace tessel {

// Indices of variables filled by sub-reductions start here, so that the caller's inputs stay
// numbered 0, 1, 2, ... through any number of differentiations.
constexpr int kComputedBase = 1 << 20;

struct ComputedVar {
  int index = 0;                                 // variable index in this reduction's formulas
  std::shared_ptr<const ReductionImpl> source;  // evaluated on the same inputs
  int output = 0;                                // which output of `source`
};

// Gather/Scatter slots: at slot k, formula variable `var` (anchor category, dim d) is zero but in
// component k % d, which holds E[anchor, k] (Elem: KMin's slot k * D + c carries the cotangent
// of component c's k-th best), E[anchor, k] again (Masked, E of dim d: Min/Max of a vector), or 1
// (OneHot, no source); E is variable `src`.
enum class SlotKind : uint8_t { Elem, Masked, OneHot };
struct SlotVar {
  int var = 0;
  int src = -1;
  SlotKind kind = SlotKind::Elem;
};

struct ReductionImpl {
  ReductionOp op = ReductionOp::Sum;
  Formula f;
  Formula weight;  // LogSumExp weight, SumSoftMaxWeight's G
  int axis = 1;    // 1: over j, output indexed by i; 0: over i
  int k = 0;       // KMin family: K. Gather/Scatter: number of slots
  bool full_sum = false;
  std::vector<VarSlot> vars;  // every variable, sorted by index (inputs and computed)
  std::vector<ComputedVar> computed;
  int index_var = -1;  // Gather/Scatter: the Int64 variable holding partner indices (dim k)
  std::vector<SlotVar> slot_vars;
  // Reductions on the same inputs whose outputs are added to this one's output 0: the chain rule
  // through computed variables (a LogSumExp value inside its own gradient, ...) needs them.
  std::vector<std::shared_ptr<const ReductionImpl>> addends;
  Hash128 hash;

  // The category that indexes the output rows, and the one reduced over.
  Category outer() const { return axis == 1 ? Category::I : Category::J; }
  Category inner() const { return axis == 1 ? Category::J : Category::I; }
  const VarSlot* find_var(int index) const;
  int num_outputs() const;
  int output_dim(int out) const;
  bool output_is_index(int out) const;
  int next_input_index() const;     // first free index below kComputedBase
  int next_computed_index() const;  // first free index from kComputedBase
  void finalize();                  // sorts vars, checks consistency, computes the hash
};

using ReductionPtr = std::shared_ptr<const ReductionImpl>;

}  // namespace tessel
