// Batched preconditioned conjugate gradient on (K + D) X = B for a GP kernel, each column with its
// own stopping test and Lanczos tridiagonal, and the Gauss quadrature e1^T log(T) e1 of a
// tridiagonal (implicit QL, tracking only the eigenvectors' first components).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "algos/gp_internal.hpp"
#include "tessel/error.hpp"

namespace tessel {

namespace {

constexpr const char* kWho = "gp_solve";

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

// Eigenvalues (into d) and eigenvectors' first components (into q) of the symmetric tridiagonal
// (d, e), e[i] coupling i and i + 1. QL with Wilkinson-like implicit shifts; only row 0 of the
// rotations' product is kept, so O(k^2) for k x k.
void tridiagonal_eigen(std::vector<double>& d, std::vector<double> e, std::vector<double>& q) {
  const int64_t k = static_cast<int64_t>(d.size());
  e.resize(static_cast<size_t>(k), 0.0);
  q.assign(static_cast<size_t>(k), 0.0);
  if (k == 0) return;
  q[0] = 1;
  for (int64_t l = 0; l < k; ++l) {
    for (int iter = 0;; ++iter) {
      int64_t m = l;
      for (; m < k - 1; ++m) {
        const double dd = std::abs(d[m]) + std::abs(d[m + 1]);
        if (std::abs(e[m]) <= 1e-16 * dd) break;
      }
      if (m == l) break;
      if (iter == 100)
        detail::fail("LanczosTridiagonal",
                     "internal: the tridiagonal eigensolver did not converge");
      double g = (d[l + 1] - d[l]) / (2 * e[l]);
      double r = std::hypot(g, 1.0);
      g = d[m] - d[l] + e[l] / (g + std::copysign(r, g));
      double s = 1, c = 1, p = 0;
      int64_t i = m - 1;
      bool deflated = false;
      for (; i >= l; --i) {
        const double f = s * e[i], b = c * e[i];
        r = std::hypot(f, g);
        e[i + 1] = r;
        if (r == 0) {  // an exact split: deflate and sweep again
          d[i + 1] -= p;
          e[m] = 0;
          deflated = true;
          break;
        }
        s = f / r;
        c = g / r;
        g = d[i + 1] - p;
        r = (d[i] - g) * s + 2 * c * b;
        p = s * r;
        d[i + 1] = g + p;
        g = c * r - b;
        const double qf = q[i + 1];
        q[i + 1] = s * q[i] + c * qf;
        q[i] = c * q[i] - s * qf;
      }
      if (deflated) continue;
      d[l] -= p;
      e[l] = g;
      e[m] = 0;
    }
  }
}

}  // namespace

double LanczosTridiagonal::log_quadrature() const {
  if (diag.empty()) return 0;
  if (off.size() + 1 != diag.size())
    detail::fail("LanczosTridiagonal", "off holds ", off.size(), " values; expected ",
                 diag.size() - 1);
  std::vector<double> lambda = diag, q;
  tridiagonal_eigen(lambda, off, q);
  double s = 0;
  for (size_t a = 0; a < lambda.size(); ++a) {
    if (!(lambda[a] > 0))
      detail::fail("LanczosTridiagonal", "the Lanczos tridiagonal has an eigenvalue ",
                   fmt(lambda[a]), " <= 0: the matrix is not positive definite");
    s += q[a] * q[a] * std::log(lambda[a]);
  }
  return weight * s;
}

bool GpCgReport::all_converged() const {
  return std::all_of(converged.begin(), converged.end(), [](uint8_t c) { return c != 0; });
}

std::string GpCgReport::str() const {
  double worst = 0;
  size_t bad = 0;
  for (size_t c = 0; c < residuals.size(); ++c) {
    worst = std::max(worst, residuals[c]);
    bad += converged[c] ? 0 : 1;
  }
  std::string s = std::to_string(residuals.size()) + " columns, " + std::to_string(iterations) +
                  " iterations, max relative residual " + fmt(worst);
  if (bad > 0) s += ", " + std::to_string(bad) + " not converged";
  return s;
}

namespace {

// (K + D) v for v of n x m values.
void apply(const GpKernel& kern, const ArrayView& x, const std::vector<double>& noise,
           const std::vector<double>& v, int64_t m, std::vector<double>& out) {
  gp_kernel_product(kern, x, x, v, m, out);
  for (size_t q = 0; q < out.size(); ++q) out[q] += noise[q / m] * v[q];
}

std::vector<double> column_norms(const std::vector<double>& v, int64_t m) {
  std::vector<double> s(static_cast<size_t>(m), 0.0);
  for (size_t q = 0; q < v.size(); ++q) s[q % m] += v[q] * v[q];
  for (double& x : s) x = std::sqrt(x);
  return s;
}

std::vector<double> column_dots(const std::vector<double>& a, const std::vector<double>& b,
                                int64_t m) {
  std::vector<double> s(static_cast<size_t>(m), 0.0);
  for (size_t q = 0; q < a.size(); ++q) s[q % m] += a[q] * b[q];
  return s;
}

void precondition(const PivotedCholesky* pre, const std::vector<double>& r, int64_t m,
                  std::vector<double>& z) {
  z.resize(r.size());
  if (pre != nullptr)
    pre->solve(r, m, z);
  else
    z = r;
}

}  // namespace

GpCgReport gp_solve(const GpKernel& kern, const ArrayView& x, std::span<const double> noise,
                    std::span<const double> b, int64_t m, std::span<double> out,
                    const PivotedCholesky* pre, const GpCgOptions& opt,
                    std::vector<LanczosTridiagonal>* tri) {
  const int64_t n = gp_detail::check_points(kWho, kern, x, "x");
  const std::vector<double> dn = gp_detail::noise_diagonal(kWho, noise, n);
  // Equal points without noise make K + noise singular: CG would stop anywhere on a consistent
  // b (a covariance from it had negative variances), so every solve refuses them by name.
  gp_detail::check_duplicates(kWho, x, dn);
  if (m < 1) detail::fail(kWho, "m (the columns of b) must be >= 1, got ", m);
  gp_detail::check_size(kWho, "b", b.size(), n * m);
  gp_detail::check_size(kWho, "out", out.size(), n * m);
  for (double v : b)
    if (!std::isfinite(v)) detail::fail(kWho, "b holds a NaN or an infinity");
  if (pre != nullptr && pre->n() != n)
    detail::fail(kWho, "the preconditioner was built for ", pre->n(), " points, not ", n);
  if (!(opt.tol > 0)) detail::fail(kWho, "tol must be > 0, got ", opt.tol);
  if (opt.maxiter < 0 || opt.miniter < 0)
    detail::fail(kWho, "maxiter and miniter must be >= 0, got ", opt.maxiter, " and ", opt.miniter);
  const int64_t maxiter =
      opt.maxiter > 0 ? opt.maxiter : std::min<int64_t>(std::max<int64_t>(2 * n, 10), 1000);
  const std::vector<double> bv(b.begin(), b.end());
  const std::vector<double> bnorm = column_norms(bv, m);
  std::vector<double> xs(bv.size(), 0.0), r = bv, z, p, ap(bv.size());
  precondition(pre, r, m, z);
  p = z;
  std::vector<double> rz = column_dots(r, z, m), alpha_prev(m, 0.0), beta_prev(m, 0.0);
  std::vector<uint8_t> active(static_cast<size_t>(m)), conv(static_cast<size_t>(m), 0);
  GpCgReport rep;
  rep.column_iterations.assign(static_cast<size_t>(m), 0);
  if (tri != nullptr) tri->assign(static_cast<size_t>(m), LanczosTridiagonal{});
  for (int64_t c = 0; c < m; ++c) {
    active[c] = bnorm[c] > 0;
    conv[c] = bnorm[c] == 0;
    if (tri != nullptr) (*tri)[c].weight = rz[c];
  }
  while (rep.iterations < maxiter &&
         std::any_of(active.begin(), active.end(), [](uint8_t a) { return a != 0; })) {
    apply(kern, x, dn, p, m, ap);
    ++rep.iterations;
    const std::vector<double> pap = column_dots(p, ap, m);
    std::vector<double> step(static_cast<size_t>(m), 0.0);
    for (int64_t c = 0; c < m; ++c) {
      if (!active[c]) continue;
      if (!(pap[c] > 0))
        detail::fail(kWho, "conjugate gradient broke down in column ", c, " at iteration ",
                     rep.iterations, ": p^T (K + noise) p = ", fmt(pap[c]),
                     "; the kernel matrix must be positive definite (a valid kernel and "
                     "hyperparameters, a positive noise)");
      step[c] = rz[c] / pap[c];
      if (tri != nullptr)
        (*tri)[c].diag.push_back(1 / step[c] +
                                 (alpha_prev[c] > 0 ? beta_prev[c] / alpha_prev[c] : 0));
      ++rep.column_iterations[c];
    }
    for (size_t q = 0; q < xs.size(); ++q) {
      xs[q] += step[q % m] * p[q];
      r[q] -= step[q % m] * ap[q];
    }
    const std::vector<double> rn = column_norms(r, m);
    precondition(pre, r, m, z);
    const std::vector<double> rz_new = column_dots(r, z, m);
    std::vector<double> beta(static_cast<size_t>(m), 0.0);
    for (int64_t c = 0; c < m; ++c) {
      if (!active[c]) continue;
      const bool met = rn[c] <= opt.tol * bnorm[c] && rep.column_iterations[c] >= opt.miniter;
      if (met || !(rz_new[c] > 0)) {
        active[c] = 0;
        conv[c] = 1;
        continue;
      }
      beta[c] = rz_new[c] / rz[c];
      if (tri != nullptr) (*tri)[c].off.push_back(std::sqrt(beta[c]) / step[c]);
      alpha_prev[c] = step[c];
      beta_prev[c] = beta[c];
      rz[c] = rz_new[c];
    }
    for (size_t q = 0; q < p.size(); ++q)
      if (active[q % m]) p[q] = z[q] + beta[q % m] * p[q];
  }
  if (tri != nullptr)  // a column cut off by maxiter has one coupling too many
    for (LanczosTridiagonal& t : *tri) t.off.resize(t.diag.empty() ? 0 : t.diag.size() - 1);
  // The true residuals: the recurrence's drift (float32 products) must not pass for convergence.
  apply(kern, x, dn, xs, m, ap);
  for (size_t q = 0; q < ap.size(); ++q) ap[q] = bv[q] - ap[q];
  const std::vector<double> true_r = column_norms(ap, m);
  rep.residuals.resize(static_cast<size_t>(m));
  rep.converged.resize(static_cast<size_t>(m));
  for (int64_t c = 0; c < m; ++c) {
    rep.residuals[c] = bnorm[c] > 0 ? true_r[c] / bnorm[c] : 0;
    rep.converged[c] = conv[c] && rep.residuals[c] <= 10 * opt.tol;
  }
  std::copy(xs.begin(), xs.end(), out.begin());
  if (opt.raise_on_nonconvergence && !rep.all_converged())
    detail::fail(kWho, "conjugate gradient did not converge: ", rep.str(), " (tol ", fmt(opt.tol),
                 ", maxiter ", maxiter,
                 "); raise maxiter or the preconditioner's rank, or loosen tol");
  return rep;
}

}  // namespace tessel
