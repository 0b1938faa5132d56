// The reduction cases that the brute-force and the CUDA emulator suites share: one per reduction
// row, the rounded formula that makes exact ties common, and its inputs.
#pragma once

#include <vector>

#include "reduction_helpers.hpp"

namespace tessel::testing {

struct ReductionCase {
  ReductionOp op;
  int k = 0;
  bool weighted = false;
};

// One case per reduction row built by name (K = 5), and a weighted one where the weight is
// optional: a new row in the table is tested without a change here.
inline std::vector<ReductionCase> reduction_cases() {
  std::vector<ReductionCase> v;
  for (const ReductionInfo& info : reduction_rows()) {
    if (!info.by_name) continue;
    const int k = info.uses_k ? 5 : 0;
    v.push_back({info.op, k, info.weight == WeightUse::Required});
    if (info.weight == WeightUse::Optional) v.push_back({info.op, k, true});
  }
  return v;
}

// x = Vi(0, 2), y = Vj(1, 2), the weight b = Vj(2, 3), s = Pm(3, 1); rounded values make exact
// ties common. Over i (axis 0) the roles of i and j swap, so that variable 1 is still the one
// reduced over.
inline Reduction tie_reduction(const ReductionCase& c, int axis) {
  const Formula x = vi(0, 2), y = vj(1, 2), b = vj(2, 3), s = pm(3, 1);
  Formula f = reduction_info(c.op).scalar_formula ? round(s * sqdist(x, y) * 4.0) * 0.25 - 1.0
                                                  : round(4.0 * (x - y) * s) * 0.25;
  Formula w = c.weighted ? b : Formula{};
  if (axis == 0) {
    f = substitute(f, {x, y, b}, {vj(0, 2), vi(1, 2), vi(2, 3)});
    if (w.valid()) w = vi(2, 3);
  }
  return Reduction(c.op, f, axis, c.k, w);
}

// Inputs for tie_reduction: n_out output rows reduced over n_red rows.
inline std::vector<Array> tie_inputs(DType t, int axis, int64_t n_out, int64_t n_red) {
  const int64_t n0 = axis == 1 ? n_out : n_red, n1 = axis == 1 ? n_red : n_out;
  return {random_array(t, {n0, 2}, 1, -2, 2), random_array(t, {n1, 2}, 2, -2, 2),
          random_array(t, {n1, 3}, 3, 0.1, 1), random_array(t, {1}, 4, 0.5, 1)};
}

}  // namespace tessel::testing
