// Kernel linear solves (alpha I + K) x = b by conjugate gradient, K a Sum reduction linear in b,
// and their gradient.
//
// K is given as a Sum reduction whose formula is linear in one variable `var` (the unknown's
// slot): K(v)_i = sum_j F(x_i, y_j, v_j) with F linear in v, e.g. exp(-g |x_i - y_j|^2) v_j.
// The system is square: the reduction's output has as many rows as `var` and the same columns.
// Conjugate gradient needs alpha I + K symmetric positive definite (a positive definite kernel on
// the same points, alpha >= 0); a breakdown (p^T A p <= 0) is reported as an Error.
//
// The whole unknown (all rows and columns) is one CG vector, as in KeOps: a formula may mix the
// columns of v. Vectors are kept in float64 whatever the inputs' dtype; only the matrix-vector
// products run in the inputs' dtype. Memory: a few vectors of b's size, none per iteration.
// Devices: CG's vectors live where b does. With b a CUDA array (C-contiguous), x, grad_x and the
// gradient for b must be contiguous arrays on the same device: every CG step and product then
// runs on that GPU and only scalars (dot products) reach the host. With b on the host, they are
// host arrays; K's other inputs may still be CUDA arrays, and then every product runs on that GPU
// with the O(size of b) vectors crossing per iteration.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "tessel/array.hpp"
#include "tessel/reduction.hpp"

namespace tessel {

struct SolveOptions {
  double alpha = 0;   // the ridge: (alpha I + K) x = b; must be >= 0
  double tol = 1e-6;  // stop when |b - A x| <= max(tol |b|, atol) (Euclidean norms)
  double atol = 0;
  int64_t maxiter = 0;  // 0: max(100, min(2 * size, 1000)), size = rows * columns of b
  /// Not converging within maxiter is reported in SolveReport; with this flag it throws an Error
  /// that gives the residual and the iteration count.
  bool raise_on_nonconvergence = false;
  Options eval;  // options of the matrix-vector products (backend, ranges, threads, ...)
};

struct SolveReport {
  int64_t iterations = 0;  // matrix-vector products of the CG loop
  double residual = 0;     // the true relative residual |b - A x| / |b| at the returned x
  bool converged = false;
  std::string str() const;  // e.g. "converged in 37 iterations, relative residual 4.1e-07"
};

/// Solves (alpha I + K) x = b where K(v) = evaluate(k) with `v` in slot `var` and b = inputs[var].
/// `x` (same shape as b, float dtype of the inputs) receives the solution.
SolveReport kernel_solve(const Reduction& k, int var, std::span<const ArrayView> inputs,
                         const ArrayView& x, const SolveOptions& opt = {});

/// The gradient of a solve by implicit differentiation, given the solution `x` and the cotangent
/// `grad_x` of x: u = (alpha I + K)^-1 grad_x (K symmetric, so one more solve with the same
/// operator) is the gradient for b; for any other variable w of k the gradient is
/// -d<u, K(x)>/dw, one gradient reduction. grads[m] receives the gradient for variable wrt[m]
/// (its shape); `grad_alpha`, when not null, receives -<u, x>. Returns the report of the solve.
SolveReport kernel_solve_grad(const Reduction& k, int var, std::span<const ArrayView> inputs,
                              const ArrayView& x, const ArrayView& grad_x, std::span<const int> wrt,
                              std::span<const ArrayView> grads, const SolveOptions& opt = {},
                              double* grad_alpha = nullptr);

}  // namespace tessel
