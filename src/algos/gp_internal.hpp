// What the Gaussian-process files share: input checks, point arrays read as doubles, the noise
// diagonal and small dense helpers (Cholesky of the preconditioner's core).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tessel/gp.hpp"

namespace tessel::gp_detail {

/// Checks a kernel and points x (n x d, float32 or float64, finite) for function `who`; returns
/// n. `what` names x in messages ("x", "the test points").
int64_t check_points(const char* who, const GpKernel& kern, const ArrayView& x, const char* what);
/// The noise as n values (one given: repeated), each finite and >= 0.
std::vector<double> noise_diagonal(const char* who, std::span<const double> noise, int64_t n);
/// Zero noise somewhere and two equal points there: K-hat is singular; a clear error.
void check_duplicates(const char* who, const ArrayView& x, const std::vector<double>& noise);
/// The points as n x d row-major doubles (any strides).
std::vector<double> read_points(const ArrayView& x);
/// An array of rows x cols in `dtype` (float32 or float64) holding row-major doubles.
Array to_array(std::span<const double> v, int64_t rows, int64_t cols, DType dtype);
/// The inputs of a reduction of `f` (a kernel formula, maybe simplified, times a new variable at
/// `slot`, the top index + 1): the points xi, xj and the kernel's parameters where f reads them,
/// nothing where it does not (a simplification may drop a variable), `extra` at `slot`.
std::vector<ArrayView> reduction_inputs(const GpKernel& kern, const Formula& f, const ArrayView& xi,
                                        const ArrayView& xj, int slot, const ArrayView& extra);
/// The index one past the formula's variables: where a product's vectors go.
int next_slot(const Formula& f);
/// Checks a span holds `size` values for `who`.
void check_size(const char* who, const char* what, size_t got, int64_t size);
/// The checks of a log-likelihood call (points, y finite and of n values, noise, duplicates
/// without noise, one gradient per variable); returns the noise diagonal (n values).
std::vector<double> check_likelihood(const char* who, const GpKernel& kern, const ArrayView& x,
                                     std::span<const double> y, std::span<const double> noise,
                                     std::span<const int> wrt, std::span<const ArrayView> grads);
/// grads[q] = d/d(variable wrt[q]) of sum_c A[:, c]^T K(x, x) B[:, c] for A, B of n x m values
/// (one gradient reduction per variable; `who` names a variable the kernel lacks).
void bilinear_grads(const char* who, const GpKernel& kern, const ArrayView& x,
                    const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                    std::span<const int> wrt, std::span<const ArrayView> grads);
/// In-place lower Cholesky of a k x k row-major matrix; false when not positive definite.
bool cholesky(std::vector<double>& a, int64_t k);
/// Solves L L^T x = b in place for the lower factor of cholesky(), b of k values.
void cholesky_solve(const std::vector<double>& l, int64_t k, double* b);

}  // namespace tessel::gp_detail
