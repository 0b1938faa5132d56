// The error bounds of the summation schemes (README, "Accuracy of sums") as test tolerances.
//
// For n terms x_i with exact sum s, a computed sum ŝ obeys |ŝ - s| <= bound(...). Each scheme is
// a summation tree: a term passes through at most k_T roundings in the data's precision (unit
// roundoff u) and k_a in the accumulator's (u_a), so |ŝ - s| <= ((1+γ_T)(1+γ_a) - 1) Σ|x_i|
// with γ = k u / (1 - k u) (Higham, "Accuracy and Stability of Numerical Algorithms", 4.2),
// plus u|s| (1+...) for rounding the result to the output type. Nothing here depends on the
// SIMD width beyond the widest one (16 lanes), which is the point: one bound for every machine.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "codegen/cpu_codegen.hpp"
#include "tessel/reduction.hpp"

namespace tessel::testing {

inline double unit_roundoff(DType t) { return t == DType::Float32 ? 0x1p-24 : 0x1p-53; }
inline double gamma_k(double k, double u) { return k * u / (1 - k * u); }

// Summation parameters and the reference they are checked against.
struct SumSetup {
  SumScheme scheme = SumScheme::Block;
  bool acc_f64 = false;  // Options::accumulate_f64 (float32 data)
  DType dtype = DType::Float32;
  int block_terms = kSumBlockLaneTerms;  // L: float run length per accumulator (CUDA: a tile)
};

// The most lanes a CPU vector has (AVX-512 float32), and the extra accumulator additions per
// lane: a masked head and tail tile, then the horizontal sum across lanes.
constexpr int kMaxLanes = 16;
constexpr int kExtraAccAdds = kMaxLanes + 2;

// The bound on |ŝ - s| for n terms with Σ|x_i| = abs_sum and |s| = abs_s.
inline double sum_error_bound(const SumSetup& c, int64_t n, double abs_sum, double abs_s) {
  const double u = unit_roundoff(c.dtype), ud = 0x1p-53;
  const double nn = static_cast<double>(n);
  double rel = 0;  // the factor of Σ|x_i|
  if (c.acc_f64 && c.dtype == DType::Float32) {
    // Every addition in double: a lane's (or a CUDA thread's tile partial's) chain, then runs.
    rel = gamma_k(2 * nn + kExtraAccAdds, ud);
  } else if (c.scheme == SumScheme::Block) {
    // Runs of at most L terms in T, then one double addition per run (CUDA: also one merge per
    // split of the inner rows, at most one per 4 tiles).
    const double runs = 2 * std::ceil(nn / c.block_terms) + kExtraAccAdds;
    rel = (1 + gamma_k(c.block_terms - 1, u)) * (1 + gamma_k(runs, ud)) - 1;
  } else if (c.scheme == SumScheme::Kahan) {
    // Knuth: each term's relative error is at most 2u + O(n u^2); the second-order term is
    // taken as 4 n u^2, a fraction of u for the n u << 1 these tests use. Lanes add in double.
    rel = (1 + 2 * u + 4 * nn * u * u) * (1 + gamma_k(kExtraAccAdds, ud)) - 1;
  } else {
    // Direct: a lane's running sum in T (at most n - 1 + head and tail adds), lanes in double.
    rel = (1 + gamma_k(nn + 1, u)) * (1 + gamma_k(kExtraAccAdds, ud)) - 1;
  }
  return u * abs_s + (1 + u) * rel * abs_sum;
}

// Σ x_i to nearly full double precision (Ogita-Rump-Oishi Sum2: error <= u_d|s| + γ_{n-1}^2
// Σ|x_i|), so that checking float64 kernels against it is not limited by the reference.
struct ExactSum {
  double sum = 0, abs_sum = 0, error = 0;
};
inline ExactSum exact_sum(const std::vector<double>& x) {
  double s = 0, c = 0, a = 0;
  for (double v : x) {
    const double t = s + v, z = t - s;
    c += (s - (t - z)) + (v - z);  // TwoSum: the rounding error of s + v, exactly
    s = t;
    a += std::fabs(v);
  }
  const double sum = s + c, ud = 0x1p-53, g = gamma_k(static_cast<double>(x.size()), ud);
  return {sum, a, ud * std::fabs(sum) + g * g * a * (1 + ud)};
}

}  // namespace tessel::testing
