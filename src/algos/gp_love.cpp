// LOVE's predictive variances: a Lanczos root of K-hat^-1 computed once, after which the variances
// of any number of test points cost kernel products with as many columns as Lanczos steps.
#include <algorithm>
#include <cmath>
#include <random>

#include "gp_internal.hpp"
#include "tessel/error.hpp"
#include "tessel/gp.hpp"

namespace tessel {

namespace {

// h = Q[:, :k]^T w and then w -= Q[:, :k] h, Q row-major n x stride: classical Gram-Schmidt
// against the first k columns. Run twice ("twice is enough") it keeps Q orthonormal to rounding,
// which plain Lanczos loses as soon as a Ritz value converges.
void orthogonalise(const std::vector<double>& q, int64_t n, int64_t stride, int64_t k,
                   std::vector<double>& w) {
  if (k == 0) return;
  std::vector<double> h(static_cast<size_t>(k), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const double* row = &q[i * stride];
    for (int64_t j = 0; j < k; ++j) h[j] += row[j] * w[i];
  }
  for (int64_t i = 0; i < n; ++i) {
    const double* row = &q[i * stride];
    double s = 0;
    for (int64_t j = 0; j < k; ++j) s += row[j] * h[j];
    w[i] -= s;
  }
}

double norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

}  // namespace

GpLoveRoot gp_love_root(const GpKernel& kern, const ArrayView& x, std::span<const double> noise,
                        int64_t rank, uint64_t seed) {
  constexpr const char* who = "gp_love_root";
  const int64_t n = gp_detail::check_points(who, kern, x, "x");
  const std::vector<double> d = gp_detail::noise_diagonal(who, noise, n);
  gp_detail::check_duplicates(who, x, d);
  if (rank < 1) detail::fail(who, "rank must be >= 1, got ", rank);
  if (n == 0) return {};
  const int64_t k = std::min(rank, n);
  std::vector<double> q(static_cast<size_t>(n * k), 0.0), alpha, beta;
  std::vector<double> v(static_cast<size_t>(n)), w(static_cast<size_t>(n));
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (double& e : v) e = normal(gen);
  const double v0 = norm(v);
  for (double& e : v) e /= v0;
  int64_t steps = 0;
  double scale = 0;  // the largest |alpha| so far: breakdown is judged against it
  for (int64_t j = 0; j < k; ++j) {
    for (int64_t i = 0; i < n; ++i) q[i * k + j] = v[i];
    gp_kernel_product(kern, x, x, v, 1, w);
    double a = 0;
    for (int64_t i = 0; i < n; ++i) {
      w[i] += d[i] * v[i];
      a += w[i] * v[i];
    }
    if (!std::isfinite(a))
      detail::fail(who, "K-hat v is not finite at Lanczos step ", j,
                   ": the kernel's hyperparameters or the points overflow");
    alpha.push_back(a);
    steps = j + 1;
    scale = std::max(scale, std::abs(a));
    if (j + 1 == k) break;
    orthogonalise(q, n, k, j + 1, w);
    orthogonalise(q, n, k, j + 1, w);
    const double b = norm(w);
    // An invariant Krylov space: the approximation is exact on it and there is nothing to add.
    if (!(b > 1e-12 * scale)) break;
    beta.push_back(b);
    for (int64_t i = 0; i < n; ++i) v[i] = w[i] / b;
  }
  // T = Q^T K-hat Q (tridiagonal to rounding: Q is kept orthonormal), T = L L^T; R = Q L^-T.
  std::vector<double> t(static_cast<size_t>(steps * steps), 0.0);
  for (int64_t j = 0; j < steps; ++j) {
    t[j * steps + j] = alpha[j];
    if (j + 1 < steps) t[j * steps + j + 1] = t[(j + 1) * steps + j] = beta[j];
  }
  if (!gp_detail::cholesky(t, steps))
    detail::fail(who,
                 "the Lanczos matrix is not positive definite: K-hat is singular to "
                 "rounding (zero noise on close points?); give a larger noise");
  GpLoveRoot out;
  out.rank = steps;
  out.root.resize(static_cast<size_t>(n * steps));
  // Row i of R solves L r = q_i (Q's row i), so R R^T = Q (L L^T)^-1 Q^T.
  for (int64_t i = 0; i < n; ++i) {
    const double* qi = &q[i * k];
    double* ri = &out.root[i * steps];
    for (int64_t r = 0; r < steps; ++r) {
      double s = qi[r];
      for (int64_t c = 0; c < r; ++c) s -= t[r * steps + c] * ri[c];
      ri[r] = s / t[r * steps + r];
    }
  }
  return out;
}

void gp_love_variance(const GpKernel& kern, const ArrayView& x, const GpLoveRoot& love,
                      const ArrayView& p, std::span<double> var) {
  constexpr const char* who = "gp_love_variance";
  const int64_t n = gp_detail::check_points(who, kern, x, "x");
  const int64_t c = gp_detail::check_points(who, kern, p, "the test points p");
  if (p.dtype != x.dtype) detail::fail_type(who, "p and x have different dtypes");
  gp_detail::check_size(who, "var", var.size(), c);
  const int64_t k = love.rank;
  if (k < 1 || love.root.size() != static_cast<size_t>(n * k))
    detail::fail(who, "the LOVE root holds ", love.root.size(), " values for rank ", k,
                 "; expected n x rank = ", n, " x ", k, " from gp_love_root on the same points");
  gp_kernel_diag(kern, p, var);
  // The root's columns in blocks of kBlock, the last zero-padded: the product's kernel is
  // compiled per column count, and the root's rank is the number of Lanczos steps taken, which
  // changes with the data and hyperparameters (one width, one kernel: a 400-column kernel took
  // 25 s to compile). Test points in chunks, so that the product's output stays small.
  constexpr int64_t kBlock = 32;
  constexpr int64_t kChunk = 8192;
  std::vector<double> kr, block(static_cast<size_t>(n * kBlock));
  for (int64_t b0 = 0; b0 < k; b0 += kBlock) {
    const int64_t w = std::min(kBlock, k - b0);
    const std::vector<double>* r = &love.root;
    if (k != kBlock) {
      std::fill(block.begin(), block.end(), 0.0);
      for (int64_t i = 0; i < n; ++i) std::copy_n(&love.root[i * k + b0], w, &block[i * kBlock]);
      r = &block;
    }
    for (int64_t s = 0; s < c; s += kChunk) {
      const int64_t e = std::min(c, s + kChunk), m = e - s;
      ArrayView part = p;
      part.shape[0] = m;
      part.data = static_cast<char*>(p.data) + s * p.stride(0) * dtype_size(p.dtype);
      kr.assign(static_cast<size_t>(m * kBlock), 0.0);
      gp_kernel_product(kern, part, x, *r, kBlock, kr);
      for (int64_t q = 0; q < m; ++q) {
        double t = 0;
        for (int64_t j = 0; j < w; ++j) t += kr[q * kBlock + j] * kr[q * kBlock + j];
        var[s + q] -= t;
      }
    }
  }
  // Rounding can take a variance that is ~0 below 0; the latent variance is >= 0.
  for (int64_t q = 0; q < c; ++q) var[q] = std::max(var[q], 0.0);
}

}  // namespace tessel
