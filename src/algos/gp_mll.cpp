// The BBMM log marginal likelihood of a Gaussian process and its gradient (one batched CG on y
// and the probes, stochastic Lanczos quadrature, the variance-reduced trace estimate, one
// gradient reduction per variable), and exact predictive variances by chunked batched solves.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "algos/gp_internal.hpp"
#include "ir/node.hpp"
#include "tessel/error.hpp"

namespace tessel {

namespace {

constexpr const char* kWho = "gp_log_marginal_likelihood";

}  // namespace

std::vector<double> gp_detail::check_likelihood(const char* who, const GpKernel& kern,
                                                const ArrayView& x, std::span<const double> y,
                                                std::span<const double> noise,
                                                std::span<const int> wrt,
                                                std::span<const ArrayView> grads) {
  const int64_t n = gp_detail::check_points(who, kern, x, "x");
  gp_detail::check_size(who, "y", y.size(), n);
  for (double v : y)
    if (!std::isfinite(v)) detail::fail(who, "y holds a NaN or an infinity");
  std::vector<double> dn = gp_detail::noise_diagonal(who, noise, n);
  gp_detail::check_duplicates(who, x, dn);
  if (wrt.size() != grads.size())
    detail::fail(who, "wrt names ", wrt.size(), " variables but grads holds ", grads.size());
  return dn;
}

// By the gradient of the Sum reduction K B with cotangent A: no derivative matrix is formed.
void gp_detail::bilinear_grads(const char* who, const GpKernel& kern, const ArrayView& x,
                               const std::vector<double>& a, const std::vector<double>& b,
                               int64_t m, std::span<const int> wrt,
                               std::span<const ArrayView> grads) {
  const int64_t n = x.shape[0];
  const int slot = gp_detail::next_slot(kern.k);
  const Reduction r(ReductionOp::Sum, kern.k * vj(slot, static_cast<int>(m)), 1);
  const Array av = gp_detail::to_array(a, n, m, x.dtype),
              bv = gp_detail::to_array(b, n, m, x.dtype);
  const std::vector<ArrayView> in =
      gp_detail::reduction_inputs(kern, kern.k, x, x, slot, bv.view());
  for (size_t q = 0; q < wrt.size(); ++q) {
    bool used = false;
    for (const Formula& u : variables(kern.k)) used = used || u.node().var_index() == wrt[q];
    if (!used)
      detail::fail(who, "wrt names variable ", wrt[q], ", which is not a variable of the kernel");
    const Reduction g = grad(r, wrt[q]);
    int cot = 0;
    for (const VarSlot& s : g.inputs())
      if (!s.computed) cot = std::max(cot, s.index);
    std::vector<ArrayView> gin = in;
    gin.resize(std::max<size_t>(gin.size(), static_cast<size_t>(cot) + 1));
    gin[cot] = av.view();
    const ArrayView outs[1] = {grads[q]};
    evaluate(g, std::span<const ArrayView>(gin), std::span<const ArrayView>(outs), kern.eval);
  }
}

GpMllResult gp_log_marginal_likelihood(const GpKernel& kern, const ArrayView& x,
                                       std::span<const double> y, std::span<const double> noise,
                                       std::span<const int> wrt, std::span<const ArrayView> grads,
                                       const GpMllOptions& opt) {
  const std::vector<double> dn = gp_detail::check_likelihood(kWho, kern, x, y, noise, wrt, grads);
  const auto n = static_cast<int64_t>(dn.size());
  if (opt.probes < 1) detail::fail(kWho, "probes must be >= 1, got ", opt.probes);
  if (opt.rank < 0) detail::fail(kWho, "rank must be >= 0, got ", opt.rank);
  const PivotedCholesky pre(kern, x, noise, opt.rank);
  const int64_t t = opt.probes, m = 1 + t;
  std::vector<double> z(static_cast<size_t>(n * t)), rhs(static_cast<size_t>(n * m));
  pre.sample(opt.seed, t, z);
  for (int64_t i = 0; i < n; ++i) {
    rhs[i * m] = y[i];
    std::copy(z.begin() + i * t, z.begin() + (i + 1) * t, rhs.begin() + i * m + 1);
  }
  std::vector<double> sol(rhs.size());
  std::vector<LanczosTridiagonal> tri;
  GpMllResult res;
  res.cg = gp_solve(kern, x, noise, rhs, m, sol, &pre, opt.cg, &tri);
  res.rank = pre.rank();
  res.alpha.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) res.alpha[i] = sol[i * m];
  for (int64_t i = 0; i < n; ++i) res.quad += y[i] * res.alpha[i];
  res.logdet_precond = pre.logdet();
  for (int64_t p = 0; p < t; ++p) {
    res.logdet_samples.push_back(res.logdet_precond + tri[1 + p].log_quadrature());
    res.logdet += res.logdet_samples.back() / static_cast<double>(t);
  }
  res.value =
      -0.5 * (res.quad + res.logdet + static_cast<double>(n) * std::log(2 * std::numbers::pi));
  res.grad_y.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) res.grad_y[i] = -res.alpha[i];
  // tr(K-hat^-1 dK) ~ mean_p u_p^T dK P^-1 z_p with u_p = K-hat^-1 z_p: E[P^-1 z z^T] = I, and
  // P^-1 z_p ~ u_p keeps the variance small (GPyTorch's estimator).
  std::vector<double> pz(z.size());
  pre.solve(z, t, pz);
  std::vector<double> a(rhs.size()), b(rhs.size());
  std::vector<double> gd(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    a[i * m] = 0.5 * res.alpha[i];
    b[i * m] = res.alpha[i];
    double tr = 0;
    for (int64_t p = 0; p < t; ++p) {
      const double u = sol[i * m + 1 + p];
      a[i * m + 1 + p] = -0.5 * u / static_cast<double>(t);
      b[i * m + 1 + p] = pz[i * t + p];
      tr += u * pz[i * t + p];
    }
    gd[i] = 0.5 * res.alpha[i] * res.alpha[i] - 0.5 * tr / static_cast<double>(t);
  }
  if (noise.size() == 1) {
    double s = 0;
    for (double v : gd) s += v;
    res.grad_noise = {s};
  } else {
    res.grad_noise = gd;
  }
  gp_detail::bilinear_grads(kWho, kern, x, a, b, m, wrt, grads);
  return res;
}

GpCgReport gp_predictive_variance(const GpKernel& kern, const ArrayView& x,
                                  std::span<const double> noise, const ArrayView& p,
                                  std::span<double> var, const PivotedCholesky* pre,
                                  const GpCgOptions& opt, int64_t chunk) {
  constexpr const char* who = "gp_predictive_variance";
  const int64_t n = gp_detail::check_points(who, kern, x, "x");
  const int64_t c = gp_detail::check_points(who, kern, p, "the test points p");
  if (p.dtype != x.dtype) detail::fail_type(who, "p and x have different dtypes");
  gp_detail::check_size(who, "var", var.size(), c);
  gp_detail::check_duplicates(who, x, gp_detail::noise_diagonal(who, noise, n));
  if (chunk < 1) detail::fail(who, "chunk must be >= 1, got ", chunk);
  gp_kernel_diag(kern, p, var);
  GpCgReport rep;
  for (int64_t s = 0; s < c; s += chunk) {
    const int64_t e = std::min(c, s + chunk), w = e - s;
    // The solve's product kernel is compiled per column count: a last, partial block is padded
    // with zero columns (CG leaves them at 0 from the start) to the next power of two, so that
    // any number of test points compiles at most log2(chunk) + 2 product kernels.
    int64_t cols = 1;
    while (cols < w) cols *= 2;
    cols = std::min(cols, chunk);
    ArrayView part = p;
    part.shape[0] = w;
    part.data = static_cast<char*>(p.data) + s * p.stride(0) * dtype_size(p.dtype);
    std::vector<double> rows(static_cast<size_t>(w * n)), kp(static_cast<size_t>(cols * n), 0.0),
        sol(kp.size());
    gp_kernel_cross_rows(kern, part, x, rows);
    for (int64_t q = 0; q < w; ++q)
      for (int64_t j = 0; j < n; ++j) kp[j * cols + q] = rows[q * n + j];
    const GpCgReport r = gp_solve(kern, x, noise, kp, cols, sol, pre, opt);
    rep.iterations += r.iterations;
    rep.column_iterations.insert(rep.column_iterations.end(), r.column_iterations.begin(),
                                 r.column_iterations.begin() + w);
    rep.residuals.insert(rep.residuals.end(), r.residuals.begin(), r.residuals.begin() + w);
    rep.converged.insert(rep.converged.end(), r.converged.begin(), r.converged.begin() + w);
    for (int64_t q = 0; q < w; ++q) {
      double s2 = 0;
      for (int64_t j = 0; j < n; ++j) s2 += kp[j * cols + q] * sol[j * cols + q];
      // Rounding can take a variance that is ~0 below 0; the latent variance is >= 0.
      var[s + q] = std::max(var[s + q] - s2, 0.0);
    }
  }
  return rep;
}

}  // namespace tessel
