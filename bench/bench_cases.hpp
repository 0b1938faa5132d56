// The benchmark cases (formulas, random inputs, timing loop) used by `tessel bench`.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessel/tessel.hpp"

namespace tessel::bench {

// Kernel width s for points uniform in [0, 1]^3: about 9% of the pairs contribute more than
// exp(-1) of the peak, so sums neither underflow nor degenerate into a few terms.
inline constexpr double kScale = 0.25;
inline constexpr int kArgKMinK = 10;

// gauss-sum, gauss-grad, lse, argkmin, sin-sum: the cases measured against pykeops as well.
const std::vector<std::string>& case_names();
bool is_case(const std::string& name);

// A reduction and its inputs, indexed by variable index (the order bench/pykeops_case.py uses):
//   gauss-sum   Sum_j Exp(-G*SqDist(X,Y)) * B          X=Vi(0,3) Y=Vj(1,3) B=Vj(2,1) G=Pm(3,1)
//   gauss-grad  d/dX of gauss-sum against E=Vi(4,1)     (tessel::grad(r, 0))
//   lse         LogSumExp_j -G*SqDist(X,Y)              X=Vi(0,3) Y=Vj(1,3) G=Pm(2,1)
//   argkmin     ArgKMin_j(SqDist(X,Y), K=10)            X=Vi(0,3) Y=Vj(1,3)
//   sin-sum     Sum_j Sin(G*(X|Y)) * B                  X=Vi(0,3) Y=Vj(1,3) B=Vj(2,1) G=Pm(3,1)
struct BenchProblem {
  Reduction reduction;
  std::vector<Array> inputs;
  int64_t n = 0, m = 0;
};
BenchProblem make_problem(const std::string& name, int64_t n, int64_t m, DType dtype,
                          uint64_t seed = 1);

// An (n, dim) array with entries uniform in [lo, hi), from a fixed seed.
Array uniform_array(DType dtype, int64_t rows, int64_t dim, uint64_t seed, double lo = 0,
                    double hi = 1);

struct Timing {
  double first_call_s = 0;  // the first evaluate: code generation, compilation (unless cached), run
  double median_s = 0;      // median of `reps` further calls
  int reps = 0;
};
// Calls evaluate once, then `reps` more times into preallocated outputs.
Timing time_problem(const BenchProblem& p, int reps, const Options& opt = {});

}  // namespace tessel::bench
