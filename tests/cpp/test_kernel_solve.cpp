// Kernel CG solve: solutions and gradients against dense float64 linear algebra, finite
// differences, bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "backend/registry.hpp"
#include "reduction_helpers.hpp"
#include "support/null_backend.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;
using tessel::testing::expect_error;

namespace {

constexpr int kN = 120, kD = 2, kC = 3;

struct SolveProblem {
  std::vector<double> x, b, g;  // points (kN x kD), right-hand side (kN x kC), kernel scale
  Reduction k;
  explicit SolveProblem(unsigned seed = 1) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> u(0, 1);
    x.resize(kN * kD);
    b.resize(kN * kC);
    for (double& v : x) v = u(gen);
    for (double& v : b) v = u(gen) - 0.5;
    g = {5.0};
    k = Reduction(ReductionOp::Sum, exp(-pm(3, 1) * sqdist(vi(0, kD), vj(1, kD))) * vj(2, kC));
  }
  std::vector<Array> arrays(const std::vector<double>& rhs) const {
    return {Array::from(x, {kN, kD}), Array::from(x, {kN, kD}), Array::from(rhs, {kN, kC}),
            Array::from(g, {1})};
  }
  // The dense matrix alpha I + K.
  std::vector<double> dense(double alpha) const {
    std::vector<double> a(kN * kN);
    for (int i = 0; i < kN; ++i)
      for (int j = 0; j < kN; ++j) {
        double d2 = 0;
        for (int c = 0; c < kD; ++c) d2 += std::pow(x[i * kD + c] - x[j * kD + c], 2);
        a[i * kN + j] = std::exp(-g[0] * d2) + (i == j ? alpha : 0.0);
      }
    return a;
  }
};

// Solves A X = B (A n x n, B n x c) by Gaussian elimination with partial pivoting.
std::vector<double> dense_solve(std::vector<double> a, std::vector<double> b, int n, int c) {
  for (int col = 0; col < n; ++col) {
    int piv = col;
    for (int r = col + 1; r < n; ++r)
      if (std::abs(a[r * n + col]) > std::abs(a[piv * n + col])) piv = r;
    for (int q = 0; q < n; ++q) std::swap(a[col * n + q], a[piv * n + q]);
    for (int q = 0; q < c; ++q) std::swap(b[col * c + q], b[piv * c + q]);
    for (int r = col + 1; r < n; ++r) {
      const double f = a[r * n + col] / a[col * n + col];
      for (int q = col; q < n; ++q) a[r * n + q] -= f * a[col * n + q];
      for (int q = 0; q < c; ++q) b[r * c + q] -= f * b[col * c + q];
    }
  }
  for (int r = n - 1; r >= 0; --r)
    for (int q = 0; q < c; ++q) {
      double s = b[r * c + q];
      for (int k = r + 1; k < n; ++k) s -= a[r * n + k] * b[k * c + q];
      b[r * c + q] = s / a[r * n + r];
    }
  return b;
}

std::vector<ArrayView> views(const std::vector<Array>& a) {
  std::vector<ArrayView> v;
  for (const Array& x : a) v.push_back(x.view());
  return v;
}

// x = (alpha I + K)^-1 b for the problem's own b (float64), and the solver's report.
struct Solved {
  Array x{DType::Float64, {kN, kC}};
  SolveReport rep;
};

Solved solve(const SolveProblem& p, const SolveOptions& opt = {}) {
  Solved s;
  const std::vector<Array> in = p.arrays(p.b);
  s.rep = kernel_solve(p.k, 2, views(in), s.x.view(), opt);
  return s;
}

// alpha 0.05, CG run to a residual of 1e-12: the options of the tests that compare solutions.
SolveOptions tight_options() {
  SolveOptions opt;
  opt.alpha = 0.05;
  opt.tol = 1e-12;
  return opt;
}

double max_diff(const Array& a, const std::vector<double>& ref) {
  double m = 0;
  for (size_t k = 0; k < ref.size(); ++k) m = std::max(m, std::abs(a.at(k) - ref[k]));
  return m;
}

TEST(KernelSolve, MatchesDenseSolveFloat64) {
  const SolveProblem p;
  const SolveOptions opt = tight_options();
  const auto [x, rep] = solve(p, opt);
  EXPECT_TRUE(rep.converged) << rep.str();
  EXPECT_LT(rep.residual, 1e-11);
  EXPECT_GT(rep.iterations, 5);
  EXPECT_LT(max_diff(x, dense_solve(p.dense(0.05), p.b, kN, kC)), 1e-9);
}

TEST(KernelSolve, Float32InputsConvergeToFloat32Accuracy) {
  const SolveProblem p;
  std::vector<float> xf(p.x.begin(), p.x.end()), bf(p.b.begin(), p.b.end());
  const std::vector<Array> in = {Array::from(xf, {kN, kD}), Array::from(xf, {kN, kD}),
                                 Array::from(bf, {kN, kC}),
                                 Array::from(std::vector<float>{5.f}, {1})};
  Array x(DType::Float32, {kN, kC});
  SolveOptions opt;
  opt.alpha = 0.1;
  // A x computed in float32 has a floor of about u |A| |x| <= u |A| |b| / alpha (|A|_2 is at
  // most the largest row sum of the symmetric A): tol a few times above it, as float32 allows.
  const std::vector<double> a = p.dense(opt.alpha);
  double norm_a = 0;
  for (int i = 0; i < kN; ++i) {
    double row = 0;
    for (int j = 0; j < kN; ++j) row += std::abs(a[i * kN + j]);
    norm_a = std::max(norm_a, row);
  }
  opt.tol = 8 * std::ldexp(norm_a / opt.alpha, -24);
  const SolveReport rep = kernel_solve(p.k, 2, views(in), x.view(), opt);
  EXPECT_TRUE(rep.converged) << rep.str();
  EXPECT_LE(rep.residual, opt.tol) << "converged must mean the true residual met tol";
  const std::vector<double> ref = dense_solve(p.dense(0.1), p.b, kN, kC);
  double scale = 0;
  for (double v : ref) scale = std::max(scale, std::abs(v));
  EXPECT_LT(max_diff(x, ref), 1e-3 * scale);
}

TEST(KernelSolve, GradientMatchesFiniteDifferences) {
  const SolveProblem p;
  const double alpha = 0.05, h = 1e-6;
  SolveOptions opt;
  opt.alpha = alpha;
  opt.tol = 1e-13;
  std::mt19937 gen(7);
  std::normal_distribution<double> nd;
  std::vector<double> gx(kN * kC);
  for (double& v : gx) v = nd(gen);
  // L(x, y, b, g) = <gx, solve(...)>.
  auto loss = [&](const SolveProblem& q, double a) {
    SolveOptions o = opt;
    o.alpha = a;
    const Array x = solve(q, o).x;
    double s = 0;
    for (int k = 0; k < kN * kC; ++k) s += gx[k] * x.at(k);
    return s;
  };
  const std::vector<Array> in = p.arrays(p.b);
  const Array x = solve(p, opt).x;
  const Array gxa = Array::from(gx, {kN, kC});
  Array d0(DType::Float64, {kN, kD}), d1(DType::Float64, {kN, kD}), db(DType::Float64, {kN, kC}),
      dg(DType::Float64, {1});
  const int wrt[4] = {0, 1, 2, 3};
  const ArrayView grads[4] = {d0.view(), d1.view(), db.view(), dg.view()};
  double dalpha = 0;
  const SolveReport rep =
      kernel_solve_grad(p.k, 2, views(in), x.view(), gxa.view(), wrt, grads, opt, &dalpha);
  EXPECT_TRUE(rep.converged);
  // Central differences on a few coordinates of each input, and on alpha.
  auto check = [&](std::vector<double> SolveProblem::*field, const Array& got, int idx) {
    SolveProblem plus = p, minus = p;
    (plus.*field)[idx] += h;
    (minus.*field)[idx] -= h;
    const double fd = (loss(plus, alpha) - loss(minus, alpha)) / (2 * h);
    EXPECT_NEAR(got.at(idx), fd, 1e-6 * (1 + std::abs(fd))) << "index " << idx;
  };
  for (int idx : {0, 7, 101}) check(&SolveProblem::b, db, idx);
  check(&SolveProblem::g, dg, 0);
  // x feeds both the i and the j slot: the total derivative is the sum of the two gradients.
  for (int idx : {3, 64}) {
    SolveProblem plus = p, minus = p;
    plus.x[idx] += h;
    minus.x[idx] -= h;
    const double fd = (loss(plus, alpha) - loss(minus, alpha)) / (2 * h);
    EXPECT_NEAR(d0.at(idx) + d1.at(idx), fd, 1e-6 * (1 + std::abs(fd)));
  }
  const double fd_alpha = (loss(p, alpha + h) - loss(p, alpha - h)) / (2 * h);
  EXPECT_NEAR(dalpha, fd_alpha, 1e-6 * (1 + std::abs(fd_alpha)));
}

TEST(KernelSolve, ZeroRightHandSideGivesZero) {
  const SolveProblem p;
  const std::vector<Array> in = p.arrays(std::vector<double>(kN * kC, 0.0));
  Array x(DType::Float64, {kN, kC});
  const SolveReport rep = kernel_solve(p.k, 2, views(in), x.view());
  EXPECT_TRUE(rep.converged);
  EXPECT_EQ(rep.iterations, 0);
  EXPECT_EQ(max_diff(x, std::vector<double>(kN * kC, 0.0)), 0.0);
}

TEST(KernelSolve, BadInputErrors) {
  const SolveProblem p;
  const std::vector<Array> in = p.arrays(p.b);
  Array x(DType::Float64, {kN, kC});
  const Formula base = exp(-pm(3, 1) * sqdist(vi(0, kD), vj(1, kD)));
  auto solve_with = [&](const Reduction& r, int var, SolveOptions o = {}) {
    return [&, r, var, o] { kernel_solve(r, var, views(in), x.view(), o); };
  };
  expect_error(solve_with(Reduction(ReductionOp::Sum, base * vj(2, kC) + 1.0), 2), {"not linear"});
  expect_error(solve_with(Reduction(ReductionOp::Sum, base * vj(2, kC) * vj(2, kC)), 2),
               {"not linear"});
  expect_error(solve_with(Reduction(ReductionOp::Max, base * vj(2, kC)), 2), {"Sum reduction"});
  expect_error(solve_with(p.k, 0), {"reduced index"});
  expect_error(solve_with(p.k, 7), {"not a variable"});
  SolveOptions neg;
  neg.alpha = -1;
  expect_error(solve_with(p.k, 2, neg), {"alpha must be"});
  SolveOptions few;
  few.maxiter = 2;
  few.raise_on_nonconvergence = true;
  expect_error(solve_with(p.k, 2, few), {"no convergence after 2 iterations"});
  expect_error(solve_with(Reduction(ReductionOp::Sum, -base * vj(2, kC)), 2),
               {"positive definite"});
  Array wrong(DType::Float64, {kN, kC + 1});
  expect_error([&] { kernel_solve(p.k, 2, views(in), wrong.view()); }, {"x has shape"});
  Array wrong_type(DType::Float32, {kN, kC});
  expect_error([&] { kernel_solve(p.k, 2, views(in), wrong_type.view()); }, {"dtype"});
  // Not square: 10 output rows for 120 unknowns.
  std::vector<Array> rect = p.arrays(p.b);
  rect[0] = Array::from(std::vector<double>(p.x.begin(), p.x.begin() + 10 * kD), {10, kD});
  expect_error([&] { kernel_solve(p.k, 2, views(rect), x.view()); }, {"square"});
}

TEST(KernelSolve, NonConvergenceIsReportedWithoutRaising) {
  SolveOptions few;
  few.maxiter = 2;
  const SolveReport rep = solve(SolveProblem(), few).rep;
  EXPECT_FALSE(rep.converged);
  EXPECT_EQ(rep.iterations, 2);
  EXPECT_GT(rep.residual, 1e-6);
  EXPECT_NE(rep.str().find("not converged after 2 iterations"), std::string::npos);
}

}  // namespace

// K's points on a CUDA device (host memory tagged CUDA, the null backend computing in the CUDA
// slot): every product runs there, on that device, and the solution and its gradients equal the
// host solve's (b and x on the host: CG's vectors there, each product on the device).
TEST(KernelSolve, PointsOnAGpuRunEveryProductThere) {
  const SolveProblem p;
  const SolveOptions opt = tight_options();
  const Solved host = solve(p, opt);
  NullBackend dev(true, true);
  ScopedBackend use(BackendId::Cuda, dev);
  const std::vector<Array> in = p.arrays(p.b);
  std::vector<ArrayView> v = views(in);
  for (int k : {0, 1, 3}) v[k].device = Device{DeviceKind::CUDA, 1};
  Array x(DType::Float64, {kN, kC});
  const SolveReport rep = kernel_solve(p.k, 2, v, x.view(), opt);
  EXPECT_EQ(rep.iterations, host.rep.iterations);
  for (int64_t q = 0; q < x.size(); ++q) EXPECT_EQ(x.at(q), host.x.at(q));
  const size_t products = dev.calls().size();
  EXPECT_GE(products, static_cast<size_t>(rep.iterations));
  for (const NullCall& c : dev.calls()) EXPECT_EQ(c.device, 1);

  // The gradient: one more solve and one gradient reduction per variable, all on the device.
  const Array gx = tessel::testing::random_array(DType::Float64, {kN, kC}, 5);
  Array d0(DType::Float64, {kN, kD}), db(DType::Float64, {kN, kC});
  const int wrt[2] = {0, 2};
  const ArrayView grads[2] = {d0.view(), db.view()};
  kernel_solve_grad(p.k, 2, v, x.view(), gx.view(), wrt, grads, opt, nullptr);
  EXPECT_GT(dev.calls().size(), products);
  for (const NullCall& c : dev.calls()) EXPECT_EQ(c.device, 1);
  Array h0(DType::Float64, {kN, kD}), hb(DType::Float64, {kN, kC});
  const ArrayView hgrads[2] = {h0.view(), hb.view()};
  kernel_solve_grad(p.k, 2, views(in), host.x.view(), gx.view(), wrt, hgrads, opt, nullptr);
  for (int64_t q = 0; q < d0.size(); ++q) EXPECT_EQ(d0.at(q), h0.at(q));
  for (int64_t q = 0; q < db.size(); ++q) EXPECT_EQ(db.at(q), hb.at(q));
}

// Everything on a CUDA device (b, x, the cotangent and the gradients too): CG's vectors stay
// there, each step a device operation, no array crossing to the host; the same solution and
// gradients as on the host. A vector on the wrong device is a clear error.
TEST(KernelSolve, CgVectorsStayOnTheDevice) {
  const SolveProblem p;
  const SolveOptions opt = tight_options();
  const Solved host = solve(p, opt);
  const std::vector<Array> in = p.arrays(p.b);
  const Array gx = tessel::testing::random_array(DType::Float64, {kN, kC}, 5);
  const int wrt[3] = {0, 2, 3};
  Array h0(DType::Float64, {kN, kD}), hb(DType::Float64, {kN, kC}), hg(DType::Float64, {1});
  const ArrayView hgrads[3] = {h0.view(), hb.view(), hg.view()};
  double host_alpha = 0;
  kernel_solve_grad(p.k, 2, views(in), host.x.view(), gx.view(), wrt, hgrads, opt, &host_alpha);

  NullBackend dev(true, true);
  ScopedBackend use(BackendId::Cuda, dev);
  auto on_gpu = [](ArrayView a) {
    a.device = Device{DeviceKind::CUDA, 1};
    return a;
  };
  std::vector<ArrayView> v = views(in);
  for (ArrayView& a : v) a = on_gpu(a);
  Array x(DType::Float64, {kN, kC});
  const SolveReport rep = kernel_solve(p.k, 2, v, on_gpu(x.view()), opt);
  EXPECT_TRUE(rep.converged);
  EXPECT_NEAR(rep.iterations, host.rep.iterations, 1);
  auto expect_close = [](const Array& got, const Array& want, const char* what) {
    for (int64_t q = 0; q < got.size(); ++q)
      EXPECT_NEAR(got.at(q), want.at(q), 1e-9 * (1 + std::abs(want.at(q)))) << what << " " << q;
  };
  expect_close(x, host.x, "x");
  Array d0(DType::Float64, {kN, kD}), db(DType::Float64, {kN, kC}), dg(DType::Float64, {1});
  const ArrayView grads[3] = {on_gpu(d0.view()), on_gpu(db.view()), on_gpu(dg.view())};
  double alpha = 0;
  kernel_solve_grad(p.k, 2, v, on_gpu(x.view()), on_gpu(gx.view()), wrt, grads, opt, &alpha);
  expect_close(d0, h0, "gradient in the points");
  expect_close(db, hb, "gradient in b");
  expect_close(dg, hg, "gradient in the scale (a sum over all rows)");
  EXPECT_NEAR(alpha, host_alpha, 1e-9 * (1 + std::abs(host_alpha)));
  EXPECT_EQ(dev.loads(), 0);
  EXPECT_EQ(dev.stores(), 0);
  EXPECT_GT(dev.vector_ops(), 4 * rep.iterations);
  for (const NullCall& c : dev.calls()) EXPECT_EQ(c.device, 1);

  expect_error([&] { kernel_solve(p.k, 2, v, x.view(), opt); },
               {"kernel_solve", "x is on the CPU but b is on CUDA device 1"});
  ArrayView strided = on_gpu(x.view());
  strided.shape = {kN / 2, kC};
  strided.strides = {2 * kC, 1};
  std::vector<ArrayView> half_b = v;
  half_b[2] = strided;
  expect_error([&] { kernel_solve(p.k, 2, half_b, strided, opt); },
               {"kernel_solve", "b is a non-contiguous CUDA array"});
}
