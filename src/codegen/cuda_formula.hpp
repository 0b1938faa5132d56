// One outer row's formula and weight as CUDA statements: the op table's forms, regrouped and with
// the exponential of a scaled argument folded so that fewer instructions run per (i, j) pair.
#pragma once

#include <string>
#include <vector>

#include "codegen/layout.hpp"
#include "reduction/reduction_impl.hpp"

namespace tessel::cuda_gen {

// The register (or shared-memory lane) name of component c of variable e for outer row `row`.
std::string var_name(const KernelLayout::Entry& e, int row, int c);

// The formulas a kernel's rows evaluate: products regrouped with their j-invariant factors
// together (codegen/hoist.hpp) and, for a Sum, f = factor * rest with `factor` the product of
// f's j-invariant scalar factors (invalid when it has none): the kernel sums rest and multiplies
// each tile's partial sum by the factor, which saves a multiply per pair (the gradient of the
// Gaussian sum: -2 g e_i, times (b_j exp(..)) (x_i - y_j)).
struct RowForms {
  Formula f, w, factor;
};
RowForms row_forms(const ReductionImpl& r);
// The forms without the Sum's factor pulled out (factor * rest as one formula).
RowForms unfactored(const RowForms& forms);

// Emits row `row`'s formula and weight through the active Emitter: f[c] and w[c] are the
// expressions of their components. In float32 exp(k * v), k j-invariant, becomes
// ex2(v * (k log2 e)): the compiler computes k log2 e once per thread, so a pair costs one
// multiply for the scaling, not two (NVRTC does not reassociate (k v) log2 e by itself).
// With `log2_arg` (float32 only), *log2_arg is f[0] log2 e - ml as one fma: of the varying part
// and (k log2 e) when f = +-k v with k j-invariant, else of f and log2 e (the softmax family's
// exponent against its running maximum ml).
void emit_row(const RowForms& forms, const KernelLayout& lay, int row, bool f64,
              std::vector<std::string>& f, std::vector<std::string>& w,
              std::string* log2_arg = nullptr, const std::string& ml = "");
// Emits row `row`'s forms.factor (which must be valid) and returns its expression.
std::string emit_factor(const RowForms& forms, const KernelLayout& lay, int row);

}  // namespace tessel::cuda_gen
