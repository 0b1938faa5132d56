// Regrouping of products for the generated kernels: factors constant along the inner loop first.
#pragma once

#include "tessel/formula.hpp"

namespace tessel {

// f with every product that depends on the inner index regrouped as (varying scalars) *
// (factors without the inner index) * (varying vectors), so that the middle factor is computed
// once per outer row. Variables of category `inner` are the ones that vary in the inner loop.
Formula hoist_invariant_factors(const Formula& f, Category inner);

}  // namespace tessel
