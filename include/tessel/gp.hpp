// Gaussian-process linear algebra on kernel reductions: kernel products, rows and diagonal, a
// pivoted-Cholesky preconditioner, batched preconditioned CG with its Lanczos coefficients, and
// the BBMM log marginal likelihood with its gradient (GPyTorch's estimator), all in O(n) memory.
//
// The kernel is one scalar formula k(x_i, x_j, params) of an i-variable and a j-variable that
// hold the points (the same array for K, test and training points for a cross-covariance) and
// any parameters. Every product K V is the Sum reduction Sum_j k(x_i, x_j) V_j; a row of K is the
// same formula reduced over i against one point; the diagonal is the formula with x_j replaced
// by x_i. No n x n matrix is ever formed. CG's vectors are float64 whatever the points' dtype; the
// products run in the points' dtype (Options::accumulate_f64 for float64 sums of float32 terms).
//
// K-hat = K + D, D the noise: one variance for every point, or one per point. Vectors of n x m
// values (m columns) are row-major spans of doubles.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tessel/array.hpp"
#include "tessel/formula.hpp"
#include "tessel/reduction.hpp"

namespace tessel {

/// A kernel k(x_i, x_j, params): a formula of dim 1; `xi` and `xj` the variable indices of the
/// points as i- and j-variable (same dim); `inputs` holds every other variable by its index (the
/// slots xi and xj are filled by each call and may be left empty).
struct GpKernel {
  Formula k;
  int xi = 0, xj = 1;
  std::vector<ArrayView> inputs;
  Options eval;
};

/// out (n1 x m) = K(x1, x2) v, v of n2 x m values.
void gp_kernel_product(const GpKernel& kern, const ArrayView& x1, const ArrayView& x2,
                       std::span<const double> v, int64_t m, std::span<double> out);
/// out (rows.size() x n) = the rows K(x[rows], x) of the square kernel on x.
void gp_kernel_rows(const GpKernel& kern, const ArrayView& x, std::span<const int64_t> rows,
                    std::span<double> out);
/// out (c x n2): the rows K(p, x2) for the c points p (c x d) of another set (a cross-covariance
/// read column by column, as prediction needs).
void gp_kernel_cross_rows(const GpKernel& kern, const ArrayView& p, const ArrayView& x2,
                          std::span<double> out);
/// out (n) = k(x_i, x_i), exactly, from the formula with x_j replaced by x_i.
void gp_kernel_diag(const GpKernel& kern, const ArrayView& x, std::span<double> out);

/// The rank-r pivoted partial Cholesky K ~ L L^T (greedy on the largest remaining diagonal) and
/// the preconditioner P = L L^T + D with its Woodbury solve and log-determinant.
class PivotedCholesky {
 public:
  /// rank 0 gives P = D. Stops early (rank() < the rank asked) once the remaining diagonal's
  /// trace falls below tol times the kernel's trace or a pivot is not positive, so at most at n.
  PivotedCholesky(const GpKernel& kern, const ArrayView& x, std::span<const double> noise,
                  int64_t rank, double tol = 0);

  int64_t n() const { return n_; }
  int64_t rank() const { return rank_; }
  const std::vector<int64_t>& pivots() const { return pivots_; }
  /// L, n x rank, row-major.
  const std::vector<double>& factor() const { return l_; }
  /// trace(K - L L^T) = the sum of the remaining diagonal (>= 0: the approximation's error).
  double residual_trace() const { return residual_trace_; }
  /// log det(L L^T + D).
  double logdet() const { return logdet_; }
  /// out = P^-1 v for v of n x m values (out may alias v).
  void solve(std::span<const double> v, int64_t m, std::span<double> out) const;
  /// z (n x m) ~ N(0, P): z = L e + D^(1/2) f for standard normal e, f from the seed.
  void sample(uint64_t seed, int64_t m, std::span<double> z) const;

 private:
  int64_t n_ = 0, rank_ = 0;
  std::vector<int64_t> pivots_;
  std::vector<double> l_, d_, chol_;  // chol_: Cholesky (rank x rank) of I + L^T D^-1 L
  double residual_trace_ = 0, logdet_ = 0;
};

struct GpCgOptions {
  double tol = 1e-4;    // a column stops when |b - A x| <= tol |b| (its recurrence residual)
  int64_t maxiter = 0;  // 0: min(max(2 n, 10), 1000); nystrom_krr: min(max(3 M, 100), 1000)
  int64_t miniter = 0;  // iterate at least this often (longer Lanczos tridiagonals)
  bool raise_on_nonconvergence = false;
};

/// One column's Lanczos tridiagonal from preconditioned CG: T = tridiag(off, diag, off) is the
/// Lanczos matrix of P^-1/2 A P^-1/2 started from P^-1/2 b, and b^T P^-1 b is its weight.
struct LanczosTridiagonal {
  std::vector<double> diag, off;  // off.size() == diag.size() - 1 (or both empty)
  double weight = 0;              // b^T P^-1 b
  /// weight * e1^T log(T) e1: the quadrature of b^T P^-1/2 log(P^-1/2 A P^-1/2) P^-1/2 b.
  double log_quadrature() const;
};

struct GpCgReport {
  int64_t iterations = 0;  // products A p of the loop (each over every column)
  std::vector<int64_t> column_iterations;
  std::vector<double> residuals;   // true relative residuals |b - A x| / |b| at the end
  std::vector<uint8_t> converged;  // per column
  bool all_converged() const;
  std::string str() const;  // e.g. "3 columns, 41 iterations, max relative residual 8.2e-05"
};

/// Solves (K + D) X = B (n x m) by batched preconditioned CG, one product per iteration for all
/// columns; each column stops on its own. `tri`, when not null, receives each column's Lanczos
/// tridiagonal. `pre` null: no preconditioner.
GpCgReport gp_solve(const GpKernel& kern, const ArrayView& x, std::span<const double> noise,
                    std::span<const double> b, int64_t m, std::span<double> out,
                    const PivotedCholesky* pre, const GpCgOptions& opt = {},
                    std::vector<LanczosTridiagonal>* tri = nullptr);

struct GpMllOptions {
  int64_t probes = 10;  // t: probe vectors z ~ N(0, P) for the log-determinant and the trace
  int64_t rank = 15;    // the pivoted-Cholesky rank (0: P = D)
  uint64_t seed = 0;
  GpCgOptions cg;
};

struct GpMllResult {
  double value = 0;           // log p(y) = -(y^T K-hat^-1 y + log det K-hat + n log 2 pi) / 2
  double quad = 0;            // y^T K-hat^-1 y
  double logdet = 0;          // the estimate of log det K-hat
  double logdet_precond = 0;  // log det P, its exact part
  std::vector<double> logdet_samples;  // per probe: log det P + that probe's quadrature
  std::vector<double> alpha;           // K-hat^-1 y (n): the predictive weights
  std::vector<double> grad_y;          // d value / d y = -alpha
  std::vector<double> grad_noise;      // d value / d D: size 1 (shared) or n (per point)
  int64_t rank = 0;                    // the preconditioner's rank reached
  GpCgReport cg;
};

/// The log marginal likelihood of y (n, the mean already taken off) under N(0, K + D), and its
/// gradient: grads[m] receives d value / d (variable wrt[m]) of the kernel's formula (a parameter,
/// or the points as xi or xj: the two slots' gradients add up). With probes > 0: BBMM, whose
/// gradient is 1/2 a^T dK a - 1/2 mean_p u_p^T dK P^-1 z_p (a = K-hat^-1 y, u_p = K-hat^-1 z_p),
/// one gradient reduction per variable, no dK/dtheta matrix. noise: 1 or n values, all >= 0.
GpMllResult gp_log_marginal_likelihood(const GpKernel& kern, const ArrayView& x,
                                       std::span<const double> y, std::span<const double> noise,
                                       std::span<const int> wrt, std::span<const ArrayView> grads,
                                       const GpMllOptions& opt = {});

/// The same log marginal likelihood and gradient exactly, by a dense Cholesky of K-hat: O(n^2)
/// memory and O(n^3) time, for small n (kriging), front ends without dense linear algebra of
/// their own, and as BBMM's reference. The gradient's trace term comes from K-hat^-1 in columns
/// of 32, each one gradient reduction per variable. Fills value, quad, logdet (= logdet_precond),
/// alpha, grad_y and grad_noise; no samples, no CG report.
GpMllResult gp_exact_log_marginal_likelihood(const GpKernel& kern, const ArrayView& x,
                                             std::span<const double> y,
                                             std::span<const double> noise,
                                             std::span<const int> wrt,
                                             std::span<const ArrayView> grads);

/// Predictive variances k(p, p) - k_p^T K-hat^-1 k_p for the c test points p, by batched solves
/// of `chunk` columns at a time (no noise added: the latent function's variance). The last block
/// is padded with zero columns to a power of two (at most chunk): each column count compiles its
/// own product kernel, and any c then needs only a few.
GpCgReport gp_predictive_variance(const GpKernel& kern, const ArrayView& x,
                                  std::span<const double> noise, const ArrayView& p,
                                  std::span<double> var, const PivotedCholesky* pre,
                                  const GpCgOptions& opt = {}, int64_t chunk = 32);

/// LOVE (Pleiss et al. 2018): a root R (n x rank) with K-hat^-1 ~ R R^T = Q T^-1 Q^T, from
/// `rank` steps of Lanczos on K-hat (full reorthogonalisation) started from a random vector, so
/// that the variances k(p, p) - |R^T k_p|^2 of any number of test points cost one product with
/// `rank` columns. Q T^-1 Q^T is the Galerkin approximation of K-hat^-1 on the Krylov space: as a
/// quadratic form it never exceeds K-hat^-1, so LOVE's variances are upper bounds of the exact
/// ones (to rounding) that meet them once the space holds k_p. Memory: n x rank doubles.
struct GpLoveRoot {
  std::vector<double> root;  // n x rank, row-major
  int64_t rank = 0;          // Lanczos steps taken: fewer than asked once the space is invariant
};
GpLoveRoot gp_love_root(const GpKernel& kern, const ArrayView& x, std::span<const double> noise,
                        int64_t rank, uint64_t seed = 0);
/// LOVE's latent variances at the c test points p (no noise added), from gp_love_root's root
/// for the same kernel, points and noise.
void gp_love_variance(const GpKernel& kern, const ArrayView& x, const GpLoveRoot& love,
                      const ArrayView& p, std::span<double> var);

/// Nyström kernel ridge regression in the manner of Falkon (Rudi et al. 2017): with M centres c,
/// the coefficients alpha (M x k) of f(x) = K(x, c) alpha solving
///   (K_nM^T K_nM + lambda n K_MM) alpha = K_nM^T y
/// for k outputs y (n x k) at once, by CG on the system preconditioned with T = chol(K_MM) and
/// A = chol(T T^T / M + lambda I), so that its condition stays near that of a well-posed ridge
/// problem whatever n. Each iteration is one product with K_nM and one with K_nM^T over all
/// columns (O(n + M) memory per column); K_MM and the factors are dense M x M.
struct NystromResult {
  std::vector<double> alpha;  // M x k, row-major
  GpCgReport cg;              // residuals of the preconditioned system
  double jitter = 0;          // added to K_MM's diagonal
};
/// lambda > 0. K_MM stands as K_MM + jitter I in the ridge term, as in Falkon: a K_MM of close
/// centres is singular to rounding. The jitter starts at M times the points' rounding level
/// (1e-14 in float64, 1e-7 in float32) times K_MM's mean diagonal and grows by 100 until it
/// factors (equal centres).
NystromResult nystrom_krr(const GpKernel& kern, const ArrayView& x, const ArrayView& centres,
                          std::span<const double> y, int64_t k, double lambda,
                          const GpCgOptions& opt = {});

}  // namespace tessel
