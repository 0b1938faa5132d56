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
// gauss-sum-64d: points uniform in [0, 1]^64 are sqrt(64/6) ~ 3.3 apart on average; G = 0.1 gives
// terms around exp(-1), so the sum is spread over all j as in gauss-sum.
inline constexpr int kWideDim = 64;
inline constexpr double kWideG = 0.1;

// gauss-sum, gauss-grad, lse, argkmin, hamiltonian, sin-sum (all but hamiltonian measured against
// pykeops as well; bench/python_bench.py compares the Hamiltonian with pykeops through autograd).
const std::vector<std::string>& case_names();
bool is_case(const std::string& name);
bool has_pykeops_case(const std::string& name);
// The points' dimension in a case (3, or kWideDim for gauss-sum-64d).
int case_dim(const std::string& name);

// A reduction and its inputs, indexed by variable index (the order bench/pykeops_case.py uses):
//   gauss-sum   Sum_j Exp(-G*SqDist(X,Y)) * B          X=Vi(0,3) Y=Vj(1,3) B=Vj(2,1) G=Pm(3,1)
//   gauss-grad  d/dX of gauss-sum against E=Vi(4,1)     (tessel::grad(r, 0))
//   gauss-sum-64d  gauss-sum with X=Vi(0,64) Y=Vj(1,64), G = kWideG: the data-heavy case (256
//               bytes per j point in float32), where the inner points leave the caches first
//   lse         LogSumExp_j -G*SqDist(X,Y)              X=Vi(0,3) Y=Vj(1,3) G=Pm(2,1)
//   argkmin     ArgKMin_j(SqDist(X,Y), K=10)            X=Vi(0,3) Y=Vj(1,3)
//   sin-sum     Sum_j Sin(G*(X|Y)) * B                  X=Vi(0,3) Y=Vj(1,3) B=Vj(2,1) G=Pm(3,1)
//   hamiltonian H = 1/2 Sum_ij Exp(-G*SqDist(Qi,Qj)) <Pi,Pj> and the reductions of dH/dq, dH/dp:
//               K = Sum_j Exp(-G*SqDist(Qi,Qj)) (Pi|Pj)    Qi=Vi(0,3) Qj=Vj(1,3) Pi=Vi(2,3)
//               and grad(K, v) for v = Qi, Pi fused (one    Pj=Vj(3,3) G=Pm(4,1) E=Vi(5,1) = 1/2
//               Concat reduction), and for v = Qj, Pj fused
//               (q and p bound twice, as Vi and Vj, as autograd through a Genred evaluates it)
// A case is one or more reductions evaluated in turn on the leading inputs each one reads.
struct BenchProblem {
  std::vector<Reduction> reductions;
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
// Evaluates every reduction of the case once (fresh outputs).
std::vector<std::vector<Array>> run_problem(const BenchProblem& p, const Options& opt = {});
// Calls run_problem once, then `reps` more times into preallocated outputs.
Timing time_problem(const BenchProblem& p, int reps, const Options& opt = {});

}  // namespace tessel::bench
