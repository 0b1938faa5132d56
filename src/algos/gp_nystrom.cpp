// Nyström kernel ridge regression preconditioned as in Falkon: the Cholesky factors of K_MM and
// of T T^T / M + lambda I turn the normal equations into a system CG solves in a few tens of
// iterations, each one product with K_nM and one with its transpose.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "gp_internal.hpp"
#include "tessel/error.hpp"
#include "tessel/gp.hpp"

namespace tessel {

namespace {

using gp_detail::check_points;

// Solves L z = b (forward) or L^T z = b (backward) in place for the k columns of b (M x k).
void lower_solve(const std::vector<double>& l, int64_t m, std::vector<double>& b, int64_t k,
                 bool transposed) {
  for (int64_t c = 0; c < k; ++c) {
    if (!transposed) {
      for (int64_t r = 0; r < m; ++r) {
        double s = b[r * k + c];
        for (int64_t q = 0; q < r; ++q) s -= l[r * m + q] * b[q * k + c];
        b[r * k + c] = s / l[r * m + r];
      }
    } else {
      for (int64_t r = m - 1; r >= 0; --r) {
        double s = b[r * k + c];
        for (int64_t q = r + 1; q < m; ++q) s -= l[q * m + r] * b[q * k + c];
        b[r * k + c] = s / l[r * m + r];
      }
    }
  }
}

// The preconditioned operator W = B^T (K_nM^T K_nM + lambda n T^T T) B, B = T^-1 A^-1 / sqrt(n),
// with T = L^T (T^T T = K_MM + jitter I = L L^T) and A = La^T (L^T L / M + lambda I = La La^T).
class FalkonSystem {
 public:
  FalkonSystem(const GpKernel& kern, const ArrayView& x, const ArrayView& centres, int64_t n,
               int64_t m, double lambda, NystromResult& res)
      : kern_(kern), x_(x), c_(centres), n_(n), m_(m), lambda_(lambda) {
    constexpr const char* who = "nystrom_krr";
    std::vector<int64_t> all(static_cast<size_t>(m));
    std::iota(all.begin(), all.end(), 0);
    std::vector<double> kmm(static_cast<size_t>(m * m));
    gp_kernel_rows(kern, centres, all, kmm);
    double mean_diag = 0;
    for (int64_t r = 0; r < m; ++r) mean_diag += kmm[r * m + r] / static_cast<double>(m);
    if (!(mean_diag > 0) || !std::isfinite(mean_diag))
      detail::fail(who, "the kernel's diagonal at the centres is ", mean_diag,
                   "; expected a positive definite kernel");
    // T factors K_MM + jitter I, as in Falkon: a K_MM of close centres is singular to rounding.
    // The jitter starts at M times the points' rounding level.
    const double base = static_cast<double>(m) * (x.dtype == DType::Float32 ? 1e-7 : 1e-14);
    for (double jitter = base;; jitter *= 100) {
      l_ = kmm;
      for (int64_t r = 0; r < m; ++r) l_[r * m + r] += jitter * mean_diag;
      if (gp_detail::cholesky(l_, m)) {
        res.jitter = jitter * mean_diag;
        break;
      }
      if (jitter >= 1e-4)
        detail::fail(who, "K_MM is not positive definite even with a jitter of ", jitter,
                     " times its mean diagonal: the centres repeat, or the kernel is degenerate");
    }
    // L^T L / M + lambda I, then its lower factor La.
    la_.assign(static_cast<size_t>(m * m), 0.0);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c <= r; ++c) {
        double s = 0;
        for (int64_t q = r; q < m; ++q) s += l_[q * m + r] * l_[q * m + c];
        la_[r * m + c] = la_[c * m + r] = s / static_cast<double>(m) + (r == c ? lambda : 0.0);
      }
    if (!gp_detail::cholesky(la_, m))
      detail::fail(who, "the preconditioner's second factor is not positive definite (lambda ",
                   lambda, ")");
  }

  // u = B v (M x k).
  void apply_b(std::vector<double>& v, int64_t k) const {
    lower_solve(la_, m_, v, k, true);  // A^-1 = La^-T
    lower_solve(l_, m_, v, k, true);   // T^-1 = L^-T
    scale(v, 1 / std::sqrt(static_cast<double>(n_)));
  }
  // w = B^T h.
  void apply_bt(std::vector<double>& h, int64_t k) const {
    lower_solve(l_, m_, h, k, false);   // T^-T = L^-1
    lower_solve(la_, m_, h, k, false);  // A^-T = La^-1
    scale(h, 1 / std::sqrt(static_cast<double>(n_)));
  }
  // W v = A^-T (T^-T K_nM^T K_nM T^-1 A^-1 v / n + lambda A^-1 v): the ridge term through
  // T^-T (K_MM + jitter) T^-1 = I, never K_MM itself, whose product with T^-1 would cancel
  // digits by T's condition number squared.
  std::vector<double> apply_w(std::vector<double> v, int64_t k) const {
    lower_solve(la_, m_, v, k, true);
    std::vector<double> t = v, knm_t(static_cast<size_t>(n_ * k)), h(static_cast<size_t>(m_ * k));
    lower_solve(l_, m_, t, k, true);
    gp_kernel_product(kern_, x_, c_, t, k, knm_t);
    gp_kernel_product(kern_, c_, x_, knm_t, k, h);
    lower_solve(l_, m_, h, k, false);
    const double inv_n = 1 / static_cast<double>(n_);
    for (size_t q = 0; q < h.size(); ++q) h[q] = h[q] * inv_n + lambda_ * v[q];
    lower_solve(la_, m_, h, k, false);
    return h;
  }

 private:
  static void scale(std::vector<double>& v, double a) {
    for (double& e : v) e *= a;
  }
  const GpKernel& kern_;
  const ArrayView &x_, &c_;
  int64_t n_, m_;
  double lambda_;
  std::vector<double> l_, la_;
};

}  // namespace

NystromResult nystrom_krr(const GpKernel& kern, const ArrayView& x, const ArrayView& centres,
                          std::span<const double> y, int64_t k, double lambda,
                          const GpCgOptions& opt) {
  constexpr const char* who = "nystrom_krr";
  const int64_t n = check_points(who, kern, x, "x");
  const int64_t m = check_points(who, kern, centres, "centres");
  if (x.dtype != centres.dtype) detail::fail_type(who, "x and centres have different dtypes");
  if (k < 1) detail::fail(who, "k (the outputs, columns of y) must be >= 1, got ", k);
  gp_detail::check_size(who, "y", y.size(), n * k);
  if (!(lambda > 0) || !std::isfinite(lambda))
    detail::fail(who, "lambda must be finite and > 0, got ", lambda);
  for (double v : y)
    if (!std::isfinite(v)) detail::fail(who, "y holds a NaN or an infinity");
  NystromResult res;
  const FalkonSystem sys(kern, x, centres, n, m, lambda, res);
  // The right-hand side B^T K_nM^T y.
  std::vector<double> rhs(static_cast<size_t>(m * k));
  gp_kernel_product(kern, centres, x, y, k, rhs);
  sys.apply_bt(rhs, k);
  // Batched CG on W beta = rhs, each column stopping on its own. M iterations solve it exactly
  // only without rounding: at the small lambda a GCV descent picks, a few times M are needed.
  const int64_t maxiter =
      opt.maxiter > 0 ? opt.maxiter : std::min<int64_t>(std::max<int64_t>(3 * m, 100), 1000);
  std::vector<double> beta(rhs.size(), 0.0), r = rhs, p = rhs;
  std::vector<double> rr(static_cast<size_t>(k)), bnorm(static_cast<size_t>(k));
  std::vector<uint8_t> active(static_cast<size_t>(k), 1);
  res.cg.column_iterations.assign(static_cast<size_t>(k), 0);
  for (int64_t c = 0; c < k; ++c) {
    for (int64_t q = 0; q < m; ++q) rr[c] += r[q * k + c] * r[q * k + c];
    bnorm[c] = std::sqrt(rr[c]);
    active[c] = bnorm[c] > 0;
  }
  for (int64_t it = 0; it < maxiter; ++it) {
    bool any = false;
    for (int64_t c = 0; c < k; ++c)
      if (active[c] && (it < opt.miniter || std::sqrt(rr[c]) > opt.tol * bnorm[c]))
        any = true;
      else
        active[c] = 0;
    if (!any) break;
    const std::vector<double> wp = sys.apply_w(p, k);
    ++res.cg.iterations;
    for (int64_t c = 0; c < k; ++c) {
      if (!active[c]) continue;
      double pwp = 0;
      for (int64_t q = 0; q < m; ++q) pwp += p[q * k + c] * wp[q * k + c];
      if (!(pwp > 0)) {
        active[c] = 0;
        continue;
      }
      const double a = rr[c] / pwp;
      double rr_new = 0;
      for (int64_t q = 0; q < m; ++q) {
        beta[q * k + c] += a * p[q * k + c];
        r[q * k + c] -= a * wp[q * k + c];
        rr_new += r[q * k + c] * r[q * k + c];
      }
      for (int64_t q = 0; q < m; ++q) p[q * k + c] = r[q * k + c] + rr_new / rr[c] * p[q * k + c];
      rr[c] = rr_new;
      ++res.cg.column_iterations[c];
    }
  }
  // The true residuals of the preconditioned system, recomputed.
  const std::vector<double> wb = sys.apply_w(beta, k);
  for (int64_t c = 0; c < k; ++c) {
    double s = 0;
    for (int64_t q = 0; q < m; ++q)
      s += (rhs[q * k + c] - wb[q * k + c]) * (rhs[q * k + c] - wb[q * k + c]);
    const double rel = bnorm[c] > 0 ? std::sqrt(s) / bnorm[c] : 0.0;
    res.cg.residuals.push_back(rel);
    res.cg.converged.push_back(rel <= 10 * opt.tol ? 1 : 0);
  }
  if (opt.raise_on_nonconvergence && !res.cg.all_converged())
    detail::fail(who, "conjugate gradient did not converge: ", res.cg.str(),
                 "; raise maxiter or lambda, or loosen tol");
  sys.apply_b(beta, k);  // alpha = B beta
  res.alpha = std::move(beta);
  return res;
}

}  // namespace tessel
