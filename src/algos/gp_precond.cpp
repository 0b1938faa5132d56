// The pivoted partial Cholesky of a kernel matrix from its diagonal and rows, and the
// preconditioner P = L L^T + D it gives: Woodbury solves, log-determinant and samples of N(0, P).
#include <algorithm>
#include <cmath>
#include <random>

#include "algos/gp_internal.hpp"
#include "tessel/error.hpp"

namespace tessel {

namespace {

constexpr const char* kWho = "PivotedCholesky";

// The largest remaining diagonal entry, skipping the pivots taken (their entry is exactly 0).
int64_t next_pivot(const std::vector<double>& d) {
  return static_cast<int64_t>(std::max_element(d.begin(), d.end()) - d.begin());
}

}  // namespace

PivotedCholesky::PivotedCholesky(const GpKernel& kern, const ArrayView& x,
                                 std::span<const double> noise, int64_t rank, double tol) {
  n_ = gp_detail::check_points(kWho, kern, x, "x");
  d_ = gp_detail::noise_diagonal(kWho, noise, n_);
  // A rank above n stops at n, as GPyTorch's min(rank, n): the loop below runs out of pivots.
  if (rank < 0) detail::fail(kWho, "rank must be >= 0, got ", rank);
  if (!(tol >= 0)) detail::fail(kWho, "tol must be >= 0, got ", tol);
  std::vector<double> diag(static_cast<size_t>(n_));
  gp_kernel_diag(kern, x, diag);
  double trace = 0;
  for (double v : diag) {
    if (!std::isfinite(v))
      detail::fail(kWho, "the kernel's diagonal holds a NaN or an infinity (bad hyperparameters?)");
    if (v < 0) detail::fail(kWho, "the kernel's diagonal holds ", v, " < 0: not a covariance");
    trace += v;
  }
  // Zero noise somewhere: P uses a floor there, so that P is invertible; any symmetric positive
  // definite P keeps log det P + log det(P^-1/2 K-hat P^-1/2) exact, only CG's speed changes.
  const double floor = 1e-8 * std::max(trace / static_cast<double>(n_), 1e-300);
  for (double& s : d_) s = std::max(s, floor);
  std::vector<double> cols;  // column k of L at cols[k * n + j] while building
  std::vector<double> row(static_cast<size_t>(n_));
  for (int64_t k = 0; k < rank; ++k) {
    double rest = 0;
    for (double v : diag) rest += std::max(v, 0.0);
    const int64_t p = next_pivot(diag);
    if (!(diag[p] > 0) || rest <= tol * trace) break;
    const int64_t pr[1] = {p};
    gp_kernel_rows(kern, x, pr, row);
    const double piv = std::sqrt(diag[p]);
    cols.resize(static_cast<size_t>((k + 1) * n_));
    double* lk = cols.data() + k * n_;
    for (int64_t j = 0; j < n_; ++j) {
      double s = row[j];
      for (int64_t q = 0; q < k; ++q) s -= cols[q * n_ + j] * cols[q * n_ + p];
      lk[j] = s / piv;
    }
    for (int64_t j = 0; j < n_; ++j) diag[j] -= lk[j] * lk[j];
    for (int64_t q : pivots_) diag[q] = 0;
    diag[p] = 0;
    pivots_.push_back(p);
    rank_ = k + 1;
  }
  residual_trace_ = 0;
  for (double v : diag) residual_trace_ += std::max(v, 0.0);
  l_.assign(static_cast<size_t>(n_ * rank_), 0.0);
  for (int64_t j = 0; j < n_; ++j)
    for (int64_t q = 0; q < rank_; ++q) l_[j * rank_ + q] = cols[q * n_ + j];
  // Woodbury: P^-1 = D^-1 - D^-1 L C^-1 L^T D^-1, C = I + L^T D^-1 L; det P = det D det C.
  chol_.assign(static_cast<size_t>(rank_ * rank_), 0.0);
  for (int64_t j = 0; j < n_; ++j) {
    const double* lj = l_.data() + j * rank_;
    for (int64_t a = 0; a < rank_; ++a)
      for (int64_t b = 0; b <= a; ++b) chol_[a * rank_ + b] += lj[a] * lj[b] / d_[j];
  }
  for (int64_t a = 0; a < rank_; ++a) {
    chol_[a * rank_ + a] += 1;
    for (int64_t b = 0; b < a; ++b) chol_[b * rank_ + a] = chol_[a * rank_ + b];
  }
  if (!gp_detail::cholesky(chol_, rank_))
    detail::fail(kWho, "internal: I + L^T D^-1 L is not positive definite");
  logdet_ = 0;
  for (double s : d_) logdet_ += std::log(s);
  for (int64_t a = 0; a < rank_; ++a) logdet_ += 2 * std::log(chol_[a * rank_ + a]);
}

void PivotedCholesky::solve(std::span<const double> v, int64_t m, std::span<double> out) const {
  gp_detail::check_size("PivotedCholesky::solve", "v", v.size(), n_ * m);
  gp_detail::check_size("PivotedCholesky::solve", "out", out.size(), n_ * m);
  const int64_t r = rank_;
  std::vector<double> w(static_cast<size_t>(r * m), 0.0);  // L^T D^-1 v, r x m
  for (int64_t j = 0; j < n_; ++j)
    for (int64_t c = 0; c < m; ++c) {
      const double dv = v[j * m + c] / d_[j];
      out[j * m + c] = dv;
      for (int64_t a = 0; a < r; ++a) w[a * m + c] += l_[j * r + a] * dv;
    }
  if (r == 0) return;
  std::vector<double> col(static_cast<size_t>(r));
  for (int64_t c = 0; c < m; ++c) {
    for (int64_t a = 0; a < r; ++a) col[a] = w[a * m + c];
    gp_detail::cholesky_solve(chol_, r, col.data());
    for (int64_t a = 0; a < r; ++a) w[a * m + c] = col[a];
  }
  for (int64_t j = 0; j < n_; ++j)
    for (int64_t c = 0; c < m; ++c) {
      double s = 0;
      for (int64_t a = 0; a < r; ++a) s += l_[j * r + a] * w[a * m + c];
      out[j * m + c] -= s / d_[j];
    }
}

void PivotedCholesky::sample(uint64_t seed, int64_t m, std::span<double> z) const {
  gp_detail::check_size("PivotedCholesky::sample", "z", z.size(), n_ * m);
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> e(static_cast<size_t>(rank_ * m));
  for (double& v : e) v = normal(gen);
  for (int64_t j = 0; j < n_; ++j)
    for (int64_t c = 0; c < m; ++c) {
      double s = std::sqrt(d_[j]) * normal(gen);
      for (int64_t a = 0; a < rank_; ++a) s += l_[j * rank_ + a] * e[a * m + c];
      z[j * m + c] = s;
    }
}

}  // namespace tessel
