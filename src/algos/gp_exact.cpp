// The exact Gaussian-process log marginal likelihood and its gradient by a dense Cholesky of
// K + D, for small n and for front ends (R, Octave, C++) that have no autograd of their own.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

#include "algos/gp_internal.hpp"
#include "tessel/error.hpp"

namespace tessel {

namespace {

constexpr const char* kWho = "gp_exact_log_marginal_likelihood";
// Columns per gradient reduction: one compiled kernel whatever n.
constexpr int64_t kColumns = 32;

// Element e (row-major over the view's shape) of a view, by its strides.
int64_t offset_of(const ArrayView& v, int64_t e) {
  int64_t off = 0;
  for (size_t ax = v.shape.size(); ax-- > 0;) {
    off += (e % v.shape[ax]) * v.stride(static_cast<int>(ax));
    e /= v.shape[ax];
  }
  return off;
}

void store(const ArrayView& v, const std::vector<double>& values) {
  for (int64_t e = 0; e < v.size(); ++e) {
    const int64_t off = offset_of(v, e);
    if (v.dtype == DType::Float32)
      static_cast<float*>(v.data)[off] = static_cast<float>(values[e]);
    else
      static_cast<double*>(v.data)[off] = values[e];
  }
}

void accumulate(const Array& a, std::vector<double>& sum) {
  for (int64_t e = 0; e < a.size(); ++e)
    sum[e] += a.dtype() == DType::Float32 ? a.as<float>()[e] : a.as<double>()[e];
}

}  // namespace

GpMllResult gp_exact_log_marginal_likelihood(const GpKernel& kern, const ArrayView& x,
                                             std::span<const double> y,
                                             std::span<const double> noise,
                                             std::span<const int> wrt,
                                             std::span<const ArrayView> grads) {
  const std::vector<double> dn = gp_detail::check_likelihood(kWho, kern, x, y, noise, wrt, grads);
  const auto n = static_cast<int64_t>(dn.size());
  GpMllResult res;
  std::vector<int64_t> all(static_cast<size_t>(n));
  std::iota(all.begin(), all.end(), 0);
  std::vector<double> l(static_cast<size_t>(n * n));
  gp_kernel_rows(kern, x, all, l);
  for (int64_t i = 0; i < n; ++i) {
    // The kernel's rows are symmetric only to the reduction's rounding: use one triangle.
    for (int64_t j = 0; j < i; ++j) l[j * n + i] = l[i * n + j];
    l[i * n + i] += dn[i];
  }
  if (!gp_detail::cholesky(l, n))
    detail::fail(kWho,
                 "K + noise is not positive definite to rounding: close points with a "
                 "small noise, or a degenerate kernel; give a larger noise");
  res.alpha.assign(y.begin(), y.end());
  gp_detail::cholesky_solve(l, n, res.alpha.data());
  for (int64_t i = 0; i < n; ++i) {
    res.quad += y[i] * res.alpha[i];
    res.logdet += 2 * std::log(l[i * n + i]);
  }
  res.logdet_precond = res.logdet;
  res.rank = n;
  res.value =
      -0.5 * (res.quad + res.logdet + static_cast<double>(n) * std::log(2 * std::numbers::pi));
  res.grad_y.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) res.grad_y[i] = -res.alpha[i];
  // d value / d K-hat = W = (a a^T - K-hat^-1) / 2 with K-hat^-1 = M M^T, M = L^-T: the gradient
  // is sum_c A_c^T dK B_c over the columns A = [a/2, -m_c/2], B = [a, m_c].
  std::vector<double> minv(static_cast<size_t>(n * n), 0.0);  // M, row-major, upper triangular
  std::vector<double> diag_inv(static_cast<size_t>(n), 0.0);
  for (int64_t c = 0; c < n; ++c) {  // L^T m_c = e_c: m_c is 0 below row c
    minv[c * n + c] = 1 / l[c * n + c];
    for (int64_t r = c - 1; r >= 0; --r) {
      double s = 0;
      for (int64_t q = r + 1; q <= c; ++q) s += l[q * n + r] * minv[q * n + c];
      minv[r * n + c] = -s / l[r * n + r];
    }
    for (int64_t r = 0; r <= c; ++r) diag_inv[r] += minv[r * n + c] * minv[r * n + c];
  }
  std::vector<double> gd(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) gd[i] = 0.5 * (res.alpha[i] * res.alpha[i] - diag_inv[i]);
  if (noise.size() == 1)
    res.grad_noise = {std::accumulate(gd.begin(), gd.end(), 0.0)};
  else
    res.grad_noise = gd;
  if (wrt.empty()) return res;
  std::vector<std::vector<double>> sums(grads.size());
  for (size_t q = 0; q < grads.size(); ++q) sums[q].assign(static_cast<size_t>(grads[q].size()), 0);
  std::vector<double> a(static_cast<size_t>(n * kColumns)), b(a.size());
  for (int64_t c0 = -1; c0 < n; c0 += kColumns) {  // column -1: the alpha term
    std::fill(a.begin(), a.end(), 0.0);
    std::fill(b.begin(), b.end(), 0.0);
    for (int64_t k = 0; k < kColumns && c0 + k < n; ++k) {
      const int64_t c = c0 + k;
      for (int64_t i = 0; i < n; ++i) {
        const double v = c < 0 ? res.alpha[i] : minv[i * n + c];
        a[i * kColumns + k] = (c < 0 ? 0.5 : -0.5) * v;
        b[i * kColumns + k] = v;
      }
    }
    std::vector<Array> parts;
    std::vector<ArrayView> views;
    parts.reserve(grads.size());
    for (const ArrayView& g : grads) {
      parts.emplace_back(g.dtype, g.shape);
      views.push_back(parts.back().view());
    }
    gp_detail::bilinear_grads(kWho, kern, x, a, b, kColumns, wrt, views);
    for (size_t q = 0; q < grads.size(); ++q) accumulate(parts[q], sums[q]);
  }
  for (size_t q = 0; q < grads.size(); ++q) store(grads[q], sums[q]);
  return res;
}

}  // namespace tessel
