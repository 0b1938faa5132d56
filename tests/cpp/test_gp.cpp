// Gaussian-process linear algebra: kernel products, rows and diagonal, the pivoted Cholesky
// preconditioner, batched preconditioned CG with its Lanczos quadrature, the BBMM marginal
// likelihood and its gradient, and predictive variances, against dense float64 linear algebra.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numbers>
#include <random>
#include <vector>

#include "reduction_helpers.hpp"
#include "temp_env.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;
using tessel::testing::expect_error;

namespace {

constexpr int kD = 2;

// RBF kernel s exp(-g |x_i - x_j|^2) on n random points in [0, 1]^2, dense references.
struct GpProblem {
  int n;
  double s = 1.3, g = 4.0;
  std::vector<double> x, y;
  Array xa, sa, ga;
  GpKernel kern;
  explicit GpProblem(int n_points, unsigned seed = 3) : n(n_points) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> u(0, 1);
    x.resize(n * kD);
    y.resize(n);
    for (double& v : x) v = u(gen);
    for (int i = 0; i < n; ++i) y[i] = std::sin(6 * x[i * kD]) + 0.3 * (u(gen) - 0.5);
    xa = Array::from(x, {n, kD});
    sa = Array::from(std::vector<double>{s}, {1});
    ga = Array::from(std::vector<double>{g}, {1});
    kern.k = pm(2, 1) * exp(-pm(3, 1) * sqdist(vi(0, kD), vj(1, kD)));
    kern.inputs = {ArrayView{}, ArrayView{}, sa.view(), ga.view()};
  }
  double d2(int i, int j) const {
    double s2 = 0;
    for (int c = 0; c < kD; ++c) s2 += std::pow(x[i * kD + c] - x[j * kD + c], 2);
    return s2;
  }
  std::vector<double> dense(double noise) const {
    std::vector<double> k(n * n);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j) k[i * n + j] = s * std::exp(-g * d2(i, j)) + (i == j) * noise;
    return k;
  }
};

// Lower Cholesky in place; solves and log-determinant.
std::vector<double> chol(std::vector<double> a, int n) {
  for (int c = 0; c < n; ++c) {
    for (int q = 0; q < c; ++q) a[c * n + c] -= a[c * n + q] * a[c * n + q];
    a[c * n + c] = std::sqrt(a[c * n + c]);
    for (int r = c + 1; r < n; ++r) {
      for (int q = 0; q < c; ++q) a[r * n + c] -= a[r * n + q] * a[c * n + q];
      a[r * n + c] /= a[c * n + c];
    }
  }
  return a;
}
std::vector<double> chol_solve(const std::vector<double>& l, int n, std::vector<double> b) {
  for (int r = 0; r < n; ++r) {
    for (int q = 0; q < r; ++q) b[r] -= l[r * n + q] * b[q];
    b[r] /= l[r * n + r];
  }
  for (int r = n - 1; r >= 0; --r) {
    for (int q = r + 1; q < n; ++q) b[r] -= l[q * n + r] * b[q];
    b[r] /= l[r * n + r];
  }
  return b;
}
double chol_logdet(const std::vector<double>& l, int n) {
  double s = 0;
  for (int r = 0; r < n; ++r) s += 2 * std::log(l[r * n + r]);
  return s;
}
std::vector<double> column(const std::vector<double>& a, int n, int m, int c) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = a[i * m + c];
  return v;
}

TEST(Gp, KernelProductRowsAndDiagonalMatchDense) {
  GpProblem pb(50);
  const std::vector<double> k = pb.dense(0);
  std::vector<double> v(pb.n * 3), out(pb.n * 3);
  for (size_t q = 0; q < v.size(); ++q) v[q] = std::cos(0.7 * static_cast<double>(q));
  gp_kernel_product(pb.kern, pb.xa.view(), pb.xa.view(), v, 3, out);
  for (int i = 0; i < pb.n; ++i)
    for (int c = 0; c < 3; ++c) {
      double s = 0;
      for (int j = 0; j < pb.n; ++j) s += k[i * pb.n + j] * v[j * 3 + c];
      EXPECT_NEAR(out[i * 3 + c], s, 1e-12 * (1 + std::abs(s)));
    }
  const std::vector<int64_t> rows{7, 0, 49};
  std::vector<double> r(3 * pb.n), diag(pb.n);
  gp_kernel_rows(pb.kern, pb.xa.view(), rows, r);
  for (int q = 0; q < 3; ++q)
    for (int j = 0; j < pb.n; ++j) EXPECT_NEAR(r[q * pb.n + j], k[rows[q] * pb.n + j], 1e-14);
  gp_kernel_diag(pb.kern, pb.xa.view(), diag);
  for (int i = 0; i < pb.n; ++i) EXPECT_NEAR(diag[i], pb.s, 1e-14);
}

// Rows go in blocks of one width: any number of rows (the exact mode asks for all n) from the
// same compiled kernels, the last block's missing columns no harm.
// The kernels compiled into a kernel cache (0 where the interpreter ran them all).
int compiled_kernels(const std::filesystem::path& cache) {
  int count = 0;
  if (std::filesystem::exists(cache / "kernels"))
    for (const auto& e : std::filesystem::recursive_directory_iterator(cache / "kernels"))
      count += e.path().extension() == ".so";
  return count;
}

TEST(Gp, ManyRowsInBlocksFromOneKernel) {
  const test_env::TempDir tmp;
  const test_env::ScopedEnv cache("TESSEL_CACHE_DIR", tmp.path());
  auto compiled = [&] { return compiled_kernels(tmp.path()); };
  GpProblem pb(90);
  const std::vector<double> k = pb.dense(0);
  int after_first = -1;
  for (int c : {40, 70, 90, 33}) {
    std::vector<int64_t> rows(c);
    for (int q = 0; q < c; ++q) rows[q] = (q * 37 + c) % pb.n;  // shuffled, some repeated
    std::vector<double> r(static_cast<size_t>(c) * pb.n);
    gp_kernel_rows(pb.kern, pb.xa.view(), rows, r);
    for (int q = 0; q < c; ++q)
      for (int j = 0; j < pb.n; ++j)
        ASSERT_NEAR(r[q * pb.n + j], k[rows[q] * pb.n + j], 1e-14) << c << " rows, row " << q;
    if (after_first < 0) after_first = compiled();
  }
  if (after_first > 0) EXPECT_EQ(compiled(), after_first);  // 0: the interpreter ran them
}

TEST(Gp, PivotedCholeskyFullRankIsExactAndWoodburyMatchesDense) {
  GpProblem pb(40);
  const double noise[1] = {0.05};
  const PivotedCholesky full(pb.kern, pb.xa.view(), noise, pb.n);
  const std::vector<double> k = pb.dense(0);
  const std::vector<double>& l = full.factor();
  const int64_t r = full.rank();
  for (int i = 0; i < pb.n; ++i)
    for (int j = 0; j < pb.n; ++j) {
      double s = 0;
      for (int64_t a = 0; a < r; ++a) s += l[i * r + a] * l[j * r + a];
      EXPECT_NEAR(s, k[i * pb.n + j], 1e-8);
    }
  EXPECT_NEAR(full.logdet(), chol_logdet(chol(pb.dense(0.05), pb.n), pb.n), 1e-7);
  // Rank 8: P = L L^T + 0.05 I, checked against its dense Cholesky.
  const PivotedCholesky low(pb.kern, pb.xa.view(), noise, 8);
  ASSERT_EQ(low.rank(), 8);
  std::vector<double> p(pb.n * pb.n, 0.0);
  double trace_rest = 0;
  for (int i = 0; i < pb.n; ++i)
    for (int j = 0; j < pb.n; ++j) {
      for (int a = 0; a < 8; ++a)
        p[i * pb.n + j] += low.factor()[i * 8 + a] * low.factor()[j * 8 + a];
      if (i == j) trace_rest += k[i * pb.n + i] - p[i * pb.n + i];
      if (i == j) p[i * pb.n + j] += 0.05;
    }
  EXPECT_NEAR(low.residual_trace(), trace_rest, 1e-9);
  const std::vector<double> lp = chol(p, pb.n);
  EXPECT_NEAR(low.logdet(), chol_logdet(lp, pb.n), 1e-9);
  std::vector<double> sol(pb.n);
  low.solve(pb.y, 1, sol);
  const std::vector<double> ref = chol_solve(lp, pb.n, pb.y);
  for (int i = 0; i < pb.n; ++i) EXPECT_NEAR(sol[i], ref[i], 1e-8 * (1 + std::abs(ref[i])));
  // The greedy pivots: the first is the largest diagonal (all equal: index 0), all distinct.
  std::vector<int64_t> piv = low.pivots();
  std::sort(piv.begin(), piv.end());
  EXPECT_EQ(std::unique(piv.begin(), piv.end()), piv.end());
}

TEST(Gp, BatchedPreconditionedCgSolvesEveryColumn) {
  GpProblem pb(80);
  const double noise[1] = {0.01};
  const PivotedCholesky pre(pb.kern, pb.xa.view(), noise, 10);
  const int m = 4;
  std::vector<double> b(pb.n * m), x(pb.n * m);
  for (size_t q = 0; q < b.size(); ++q) b[q] = std::sin(1.3 * static_cast<double>(q));
  for (int i = 0; i < pb.n; ++i) b[i * m + 2] = 0;  // a zero column converges at once
  GpCgOptions opt;
  opt.tol = 1e-10;
  const GpCgReport rep = gp_solve(pb.kern, pb.xa.view(), noise, b, m, x, &pre, opt);
  EXPECT_TRUE(rep.all_converged()) << rep.str();
  EXPECT_EQ(rep.column_iterations[2], 0);
  const std::vector<double> l = chol(pb.dense(0.01), pb.n);
  for (int c = 0; c < m; ++c) {
    const std::vector<double> ref = chol_solve(l, pb.n, column(b, pb.n, m, c));
    for (int i = 0; i < pb.n; ++i) EXPECT_NEAR(x[i * m + c], ref[i], 1e-7 * (1 + std::abs(ref[i])));
  }
  // Without a preconditioner: more iterations, same answer.
  std::vector<double> x0(pb.n * m);
  const GpCgReport plain = gp_solve(pb.kern, pb.xa.view(), noise, b, m, x0, nullptr, opt);
  EXPECT_GT(plain.iterations, rep.iterations);
  for (size_t q = 0; q < x.size(); ++q) EXPECT_NEAR(x0[q], x[q], 1e-6 * (1 + std::abs(x[q])));
  // maxiter 2: not converged, reported, and an error on request.
  opt.maxiter = 2;
  const GpCgReport cut = gp_solve(pb.kern, pb.xa.view(), noise, b, m, x0, nullptr, opt);
  EXPECT_FALSE(cut.all_converged());
  EXPECT_NE(cut.str().find("not converged"), std::string::npos);
  opt.raise_on_nonconvergence = true;
  expect_error([&] { gp_solve(pb.kern, pb.xa.view(), noise, b, m, x0, nullptr, opt); },
               {"gp_solve", "did not converge"});
}

// Jacobi eigenvalues of a small dense symmetric matrix, and its eigenvectors (columns of v).
void jacobi(std::vector<double>& a, int n, std::vector<double>& v) {
  v.assign(n * n, 0.0);
  for (int i = 0; i < n; ++i) v[i * n + i] = 1;
  for (int sweep = 0; sweep < 60; ++sweep)
    for (int p = 0; p < n; ++p)
      for (int q = p + 1; q < n; ++q) {
        if (std::abs(a[p * n + q]) < 1e-300) continue;
        const double th = (a[q * n + q] - a[p * n + p]) / (2 * a[p * n + q]);
        const double t = std::copysign(1.0, th) / (std::abs(th) + std::sqrt(th * th + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (int k = 0; k < n; ++k) {  // A <- A J, then J^T A
          const double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
          const double vkp = v[k * n + p], vkq = v[k * n + q];
          v[k * n + p] = c * vkp - s * vkq;
          v[k * n + q] = s * vkp + c * vkq;
        }
        for (int k = 0; k < n; ++k) {
          const double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
      }
}

TEST(Gp, LanczosQuadratureOfFullCgIsTheExactQuadraticForm) {
  // Two known cases: a diagonal T, and a 2 x 2.
  LanczosTridiagonal t;
  t.diag = {2.0, 5.0};
  t.off = {0.0};
  t.weight = 3;
  EXPECT_NEAR(t.log_quadrature(), 3 * std::log(2.0), 1e-14);
  t.off = {1.5};  // [[2, 1.5], [1.5, 5]]: e1^T log T e1 from its eigen-decomposition
  const double m = 3.5, r = std::hypot(1.5, 1.5);
  const double l1 = m - r, l2 = m + r, c2 = std::pow((l1 - 5) / std::hypot(l1 - 5, 1.5), 2);
  EXPECT_NEAR(t.log_quadrature(), 3 * (c2 * std::log(l1) + (1 - c2) * std::log(l2)), 1e-12);
  // CG run n steps without a preconditioner (P = I): the quadrature is b^T log(A) b.
  GpProblem pb(24);
  const double noise[1] = {0.3};
  GpCgOptions opt;
  opt.tol = 1e-300;
  opt.miniter = pb.n;
  opt.maxiter = pb.n;
  std::vector<double> x(pb.n);
  std::vector<LanczosTridiagonal> tri;
  gp_solve(pb.kern, pb.xa.view(), noise, pb.y, 1, x, nullptr, opt, &tri);
  std::vector<double> a = pb.dense(0.3), v;
  jacobi(a, pb.n, v);
  double ref = 0;
  for (int k = 0; k < pb.n; ++k) {
    double proj = 0;
    for (int i = 0; i < pb.n; ++i) proj += v[i * pb.n + k] * pb.y[i];
    ref += proj * proj * std::log(a[k * pb.n + k]);
  }
  ASSERT_GE(tri[0].diag.size(), 10u);
  EXPECT_NEAR(tri[0].log_quadrature(), ref, 1e-6 * std::abs(ref));
}

struct DenseMll {
  double value, grad_s, grad_g, grad_noise;
};

DenseMll dense_mll(const GpProblem& pb, double noise) {
  const int n = pb.n;
  const std::vector<double> l = chol(pb.dense(noise), n);
  const std::vector<double> alpha = chol_solve(l, n, pb.y);
  double quad = 0;
  for (int i = 0; i < n; ++i) quad += pb.y[i] * alpha[i];
  DenseMll r{-0.5 * (quad + chol_logdet(l, n) + n * std::log(2 * std::numbers::pi)), 0, 0, 0};
  // dL/dtheta = 1/2 tr((alpha alpha^T - K^-1) dK).
  for (int j = 0; j < n; ++j) {
    std::vector<double> e(n, 0.0);
    e[j] = 1;
    const std::vector<double> kinv = chol_solve(l, n, e);
    for (int i = 0; i < n; ++i) {
      const double w = 0.5 * (alpha[i] * alpha[j] - kinv[i]);
      const double ex = std::exp(-pb.g * pb.d2(i, j));
      r.grad_s += w * ex;
      r.grad_g += w * (-pb.s * pb.d2(i, j) * ex);
      if (i == j) r.grad_noise += w;
    }
  }
  return r;
}

TEST(Gp, MarginalLikelihoodAndGradientMatchDenseOnAverage) {
  GpProblem pb(60);
  const double noise[1] = {0.04};
  const DenseMll ref = dense_mll(pb, 0.04);
  const int seeds = 8;
  std::vector<double> value, gs, gg, gn;
  for (int seed = 0; seed < seeds; ++seed) {
    GpMllOptions opt;
    opt.probes = 16;
    opt.rank = 15;
    opt.seed = static_cast<uint64_t>(seed);
    opt.cg.tol = 1e-8;
    Array g_s(DType::Float64, {1}), g_g(DType::Float64, {1});
    const int wrt[2] = {2, 3};
    const ArrayView grads[2] = {g_s.view(), g_g.view()};
    const GpMllResult res =
        gp_log_marginal_likelihood(pb.kern, pb.xa.view(), pb.y, noise, wrt, grads, opt);
    EXPECT_TRUE(res.cg.all_converged()) << res.cg.str();
    EXPECT_EQ(res.rank, 15);
    value.push_back(res.value);
    gs.push_back(g_s.at(0));
    gg.push_back(g_g.at(0));
    gn.push_back(res.grad_noise[0]);
  }
  auto check = [&](const std::vector<double>& v, double want, const char* what) {
    double mean = 0, var = 0;
    for (double e : v) mean += e / seeds;
    for (double e : v) var += (e - mean) * (e - mean) / (seeds - 1);
    const double se = std::sqrt(var / seeds);
    EXPECT_LT(std::abs(mean - want), 4 * se + 1e-6 * std::abs(want))
        << what << ": mean " << mean << " want " << want << " se " << se;
    EXPECT_LT(se, 0.15 * std::abs(want) + 0.1) << what << " se " << se;
  };
  check(value, ref.value, "value");
  check(gs, ref.grad_s, "d/ds");
  check(gg, ref.grad_g, "d/dg");
  check(gn, ref.grad_noise, "d/dnoise");
  // Full rank: P = K-hat, so log det P is the exact log-determinant and the estimate is exact.
  GpMllOptions full;
  full.rank = pb.n;
  full.probes = 2;
  const GpMllResult ex =
      gp_log_marginal_likelihood(pb.kern, pb.xa.view(), pb.y, noise, {}, {}, full);
  EXPECT_NEAR(ex.value, ref.value, 1e-6 * std::abs(ref.value));
}

// k(t_q, t_q) - k_q^T (K + noise)^-1 k_q by the dense Cholesky l of K + noise.
double dense_variance(const GpProblem& pb, const std::vector<double>& l, const double* tq) {
  std::vector<double> kq(pb.n);
  for (int j = 0; j < pb.n; ++j) {
    double s2 = 0;
    for (int c = 0; c < kD; ++c) s2 += std::pow(tq[c] - pb.x[j * kD + c], 2);
    kq[j] = pb.s * std::exp(-pb.g * s2);
  }
  const std::vector<double> w = chol_solve(l, pb.n, kq);
  double s2 = 0;
  for (int j = 0; j < pb.n; ++j) s2 += kq[j] * w[j];
  return pb.s - s2;
}

TEST(Gp, PredictiveVarianceMatchesDense) {
  GpProblem pb(50);
  const double noise[1] = {0.02};
  std::vector<double> t = {0.5, 0.5, 0.1, 0.9, 2.0, 2.0, 0.3, 0.3, 0.7, 0.2};
  const Array ta = Array::from(t, {5, kD});
  const PivotedCholesky pre(pb.kern, pb.xa.view(), noise, 5);
  GpCgOptions opt;
  opt.tol = 1e-10;
  std::vector<double> var(5);
  const GpCgReport rep =
      gp_predictive_variance(pb.kern, pb.xa.view(), noise, ta.view(), var, &pre, opt, 2);
  EXPECT_EQ(rep.residuals.size(), 5u);
  const std::vector<double> l = chol(pb.dense(0.02), pb.n);
  for (int q = 0; q < 5; ++q) EXPECT_NEAR(var[q], dense_variance(pb, l, &t[q * kD]), 1e-8);
  EXPECT_NEAR(var[2], pb.s, 1e-6);  // far from the data: the prior
}

// A last, partial block of test points is solved padded with zero columns to a power of two: 5,
// 6, 7 and 13 test points in blocks of 8 share one compiled product kernel, the values and the
// report (one entry per test point) as without padding.
TEST(Gp, PredictiveVarianceBlocksShareOneKernelWidth) {
  const test_env::TempDir tmp;
  const test_env::ScopedEnv cache("TESSEL_CACHE_DIR", tmp.path());
  auto compiled = [&] { return compiled_kernels(tmp.path()); };
  GpProblem pb(60);
  const double noise[1] = {0.02};
  const std::vector<double> l = chol(pb.dense(0.02), pb.n);
  const PivotedCholesky pre(pb.kern, pb.xa.view(), noise, 5);
  GpCgOptions opt;
  opt.tol = 1e-10;
  std::mt19937 gen(3);
  std::uniform_real_distribution<double> u(-0.2, 1.2);
  int after_first = -1;
  for (int c : {5, 6, 7, 13}) {
    std::vector<double> t(static_cast<size_t>(c) * kD), var(c);
    for (double& e : t) e = u(gen);
    const Array ta = Array::from(t, {c, kD});
    const GpCgReport rep =
        gp_predictive_variance(pb.kern, pb.xa.view(), noise, ta.view(), var, &pre, opt, 8);
    EXPECT_EQ(rep.residuals.size(), static_cast<size_t>(c));
    EXPECT_EQ(rep.converged.size(), static_cast<size_t>(c));
    EXPECT_TRUE(rep.all_converged()) << rep.str();
    for (int q = 0; q < c; ++q)
      EXPECT_NEAR(var[q], dense_variance(pb, l, &t[q * kD]), 1e-8) << c << " points, " << q;
    if (after_first < 0) after_first = compiled();
  }
  if (after_first > 0) EXPECT_EQ(compiled(), after_first);  // 0: the interpreter ran them
}

// The dense mode: value against the dense Cholesky, gradient in both kernel parameters and in the
// noise against central differences of the value (n = 70: three 32-column chunks, one partial).
TEST(Gp, ExactLikelihoodMatchesDenseAndItsGradientFiniteDifferences) {
  GpProblem pb(70);
  const double noise[1] = {0.05};
  const std::vector<double> l = chol(pb.dense(0.05), pb.n);
  const std::vector<double> w = chol_solve(l, pb.n, pb.y);
  double quad = 0;
  for (int i = 0; i < pb.n; ++i) quad += pb.y[i] * w[i];
  const double want = -0.5 * (quad + chol_logdet(l, pb.n) + pb.n * std::log(2 * std::numbers::pi));
  Array gs(DType::Float64, {1}), gg(DType::Float64, {1});
  const int wrt[2] = {2, 3};
  const ArrayView gv[2] = {gs.view(), gg.view()};
  const GpMllResult r =
      gp_exact_log_marginal_likelihood(pb.kern, pb.xa.view(), pb.y, noise, wrt, gv);
  EXPECT_NEAR(r.value, want, 1e-9 * std::abs(want));
  for (int i = 0; i < pb.n; ++i) EXPECT_NEAR(r.alpha[i], w[i], 1e-9 * (1 + std::abs(w[i])));
  auto value_at = [&](double s, double g, double nz) {
    GpProblem q(70);
    q.sa.as<double>()[0] = s;
    q.ga.as<double>()[0] = g;
    const double nv[1] = {nz};
    return gp_exact_log_marginal_likelihood(q.kern, q.xa.view(), q.y, nv, {}, {}).value;
  };
  const double h = 1e-5;
  const double ds = (value_at(pb.s + h, pb.g, 0.05) - value_at(pb.s - h, pb.g, 0.05)) / (2 * h);
  const double dg = (value_at(pb.s, pb.g + h, 0.05) - value_at(pb.s, pb.g - h, 0.05)) / (2 * h);
  const double dn = (value_at(pb.s, pb.g, 0.05 + h) - value_at(pb.s, pb.g, 0.05 - h)) / (2 * h);
  EXPECT_NEAR(gs.as<double>()[0], ds, 1e-6 * (1 + std::abs(ds)));
  EXPECT_NEAR(gg.as<double>()[0], dg, 1e-6 * (1 + std::abs(dg)));
  EXPECT_NEAR(r.grad_noise[0], dn, 1e-6 * (1 + std::abs(dn)));
  // Duplicate points without noise: named, not a NaN.
  const double zero[1] = {0};
  std::vector<double> x2 = pb.x;
  x2[2] = x2[0], x2[3] = x2[1];
  const Array xd = Array::from(x2, {pb.n, kD});
  expect_error([&] { gp_exact_log_marginal_likelihood(pb.kern, xd.view(), pb.y, zero, {}, {}); },
               {"gp_exact_log_marginal_likelihood", "equal"});
}

// LOVE's variances never fall below the exact ones (a Galerkin projection of K-hat^-1), close
// in on them as the Lanczos space grows, and equal them once it is the whole space.
// Also: roots of every rank share the variances' product kernels (the root's columns go in
// blocks of one width), so the ranks after the first compile nothing new.
TEST(Gp, LoveVariancesBoundTheExactOnesAndConverge) {
  const test_env::TempDir tmp;
  const test_env::ScopedEnv cache("TESSEL_CACHE_DIR", tmp.path());
  GpProblem pb(120);
  const double noise[1] = {0.01};
  std::vector<double> t;
  std::mt19937 gen(11);
  std::uniform_real_distribution<double> u(-0.2, 1.2);
  for (int q = 0; q < 40 * kD; ++q) t.push_back(u(gen));
  const Array ta = Array::from(t, {40, kD});
  const PivotedCholesky pre(pb.kern, pb.xa.view(), noise, 10);
  GpCgOptions opt;
  opt.tol = 1e-12;
  std::vector<double> exact(40);
  gp_predictive_variance(pb.kern, pb.xa.view(), noise, ta.view(), exact, &pre, opt);
  double last_gap = INFINITY;
  int after_first = -1;
  for (int rank : {4, 8, 16, 32, 120}) {
    const GpLoveRoot love = gp_love_root(pb.kern, pb.xa.view(), noise, rank, 5);
    std::vector<double> var(40);
    gp_love_variance(pb.kern, pb.xa.view(), love, ta.view(), var);
    if (after_first < 0) after_first = compiled_kernels(tmp.path());
    double gap = 0;
    for (int q = 0; q < 40; ++q) {
      EXPECT_GE(var[q], exact[q] - 1e-9) << "rank " << rank << " point " << q;
      gap = std::max(gap, var[q] - exact[q]);
    }
    EXPECT_LE(gap, last_gap + 1e-9) << "rank " << rank;
    last_gap = gap;
    std::printf("LOVE rank %d (reached %lld): largest excess variance %.3g\n", rank,
                static_cast<long long>(love.rank), gap);
  }
  EXPECT_LT(last_gap, 1e-8);
  if (after_first > 0) EXPECT_EQ(compiled_kernels(tmp.path()), after_first);
  expect_error([&] { gp_love_root(pb.kern, pb.xa.view(), noise, 0); },
               {"gp_love_root", "rank must be >= 1"});
  GpLoveRoot bad;
  bad.rank = 3;
  std::vector<double> var(40);
  expect_error([&] { gp_love_variance(pb.kern, pb.xa.view(), bad, ta.view(), var); },
               {"gp_love_variance", "from gp_love_root"});
}

TEST(Gp, BadInputGetsClearErrors) {
  GpProblem pb(20);
  const double noise[1] = {0.1};
  std::vector<double> y = pb.y;
  y[3] = std::nan("");
  expect_error([&] { gp_log_marginal_likelihood(pb.kern, pb.xa.view(), y, noise, {}, {}); },
               {"gp_log_marginal_likelihood", "y holds a NaN"});
  std::vector<double> short_y(5);
  expect_error([&] { gp_log_marginal_likelihood(pb.kern, pb.xa.view(), short_y, noise, {}, {}); },
               {"y holds 5 values; expected 20"});
  std::vector<double> dup = pb.x;
  dup[9 * kD] = dup[4 * kD];
  dup[9 * kD + 1] = dup[4 * kD + 1];
  const Array da = Array::from(dup, {20, kD});
  const double zero[1] = {0.0};
  expect_error([&] { gp_log_marginal_likelihood(pb.kern, da.view(), pb.y, zero, {}, {}); },
               {"points 4 and 9 are equal", "noise is 0"});
  std::vector<double> sol(20);  // a solve alone (samples, covariances) refuses them too
  expect_error([&] { gp_solve(pb.kern, da.view(), zero, pb.y, 1, sol, nullptr); },
               {"gp_solve", "points 4 and 9 are equal"});
  const double neg[1] = {-1.0};
  expect_error([&] { gp_log_marginal_likelihood(pb.kern, pb.xa.view(), pb.y, neg, {}, {}); },
               {"noise variance must be finite and >= 0"});
  expect_error([&] { PivotedCholesky(pb.kern, pb.xa.view(), noise, -1); },
               {"PivotedCholesky", "rank must be >= 0, got -1"});
  EXPECT_EQ(PivotedCholesky(pb.kern, pb.xa.view(), noise, 25).rank(), 20);  // stops at n
  const Array x3 = Array::from(std::vector<double>(60, 0.5), {20, 3});
  expect_error([&] { PivotedCholesky(pb.kern, x3.view(), noise, 2); },
               {"x has 3 columns; expected shape (n, 2)"});
  const Array xh(DType::Float16, {20, kD});
  expect_error([&] { PivotedCholesky(pb.kern, xh.view(), noise, 2); }, {"float16"});
  std::vector<double> bad_x = pb.x;
  bad_x[0] = INFINITY;
  const Array bx = Array::from(bad_x, {20, kD});
  expect_error([&] { PivotedCholesky(pb.kern, bx.view(), noise, 2); }, {"NaN or an infinity"});
  GpKernel vec = pb.kern;
  vec.k = exp(-(vi(0, kD) - vj(1, kD)));
  expect_error([&] { PivotedCholesky(vec, pb.xa.view(), noise, 2); }, {"has dim 2"});
}

}  // namespace

TEST(Gp, NystromRidgeMatchesTheDenseNormalEquations) {
  GpProblem pb(150);
  const int m = 25, k = 2;
  const double lam = 1e-3;
  std::vector<double> c(pb.x.begin(), pb.x.begin() + m * kD), y(pb.n * k);
  for (int i = 0; i < pb.n; ++i) y[i * k] = pb.y[i], y[i * k + 1] = pb.y[i] * pb.y[i] - 0.5;
  const Array ca = Array::from(c, {m, kD});
  GpCgOptions opt;
  opt.tol = 1e-10;
  const NystromResult r = nystrom_krr(pb.kern, pb.xa.view(), ca.view(), y, k, lam, opt);
  ASSERT_EQ(r.alpha.size(), static_cast<size_t>(m * k));
  EXPECT_TRUE(r.cg.all_converged()) << r.cg.str();
  EXPECT_GT(r.jitter, 0.0);
  EXPECT_LT(r.jitter, 1e-11 * pb.s);
  // Dense: (Knm^T Knm + lam n Kmm) alpha = Knm^T y; the centres are the first m points.
  const std::vector<double> kd = pb.dense(0);
  std::vector<double> h(m * m), rhs(m * k);
  for (int a = 0; a < m; ++a)
    for (int b = 0; b < m; ++b) {
      double s = 0;
      for (int i = 0; i < pb.n; ++i) s += kd[i * pb.n + a] * kd[i * pb.n + b];
      h[a * m + b] = s + lam * pb.n * kd[a * pb.n + b];
    }
  for (int a = 0; a < m; ++a)
    for (int q = 0; q < k; ++q) {
      double s = 0;
      for (int i = 0; i < pb.n; ++i) s += kd[i * pb.n + a] * y[i * k + q];
      rhs[a * k + q] = s;
    }
  const std::vector<double> l = chol(h, m);
  for (int q = 0; q < k; ++q) {
    const std::vector<double> want = chol_solve(l, m, column(rhs, m, k, q));
    // The predictions K_nM alpha: what CG's tolerance bounds (the coefficients themselves carry
    // K_MM's condition number).
    for (int i = 0; i < pb.n; ++i) {
      double got = 0, ref = 0;
      for (int a = 0; a < m; ++a) {
        got += kd[i * pb.n + a] * r.alpha[a * k + q];
        ref += kd[i * pb.n + a] * want[a];
      }
      EXPECT_NEAR(got, ref, 1e-7) << "output " << q << ", point " << i;
    }
  }
  // Repeated centres: K_MM is singular; the jitter makes it factorable, the solution stays.
  std::vector<double> twice(c);
  twice.insert(twice.end(), c.begin(), c.begin() + 5 * kD);
  const Array ta = Array::from(twice, {m + 5, kD});
  const NystromResult rt = nystrom_krr(pb.kern, pb.xa.view(), ta.view(), y, k, lam, opt);
  for (double a : rt.alpha) EXPECT_TRUE(std::isfinite(a));
  EXPECT_THROW(nystrom_krr(pb.kern, pb.xa.view(), ca.view(), y, k, 0.0), Error);
  EXPECT_THROW(nystrom_krr(pb.kern, pb.xa.view(), ca.view(), y, 3, lam), Error);
}
