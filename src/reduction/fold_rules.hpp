// The merge rules of reduction states (fold_rules.inc), compiled for the interpreter in float64.
//
// The same text is emitted into the generated CPU and CUDA kernels (fold_rules_source()), so the
// interpreter, which the compiled kernels are tested against, and the kernels combine partial
// states (Min/Max candidates, K-best lists, SoftMax maxima) by one definition.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace tessel {

namespace fold {
using T = double;
using i64 = std::int64_t;
#define FOLD_QUAL inline
#define FOLD_INF std::numeric_limits<double>::infinity()
#define FOLD_EXP std::exp
#define TESSEL_FOLD_RULES(...) __VA_ARGS__
#include "reduction/fold_rules.inc"
#undef TESSEL_FOLD_RULES
#undef FOLD_EXP
#undef FOLD_INF
#undef FOLD_QUAL
}  // namespace fold

// fold_rules.inc as source text for the code generators (one line; comments dropped).
const char* fold_rules_source();

}  // namespace tessel
