// The Sinkhorn solver against a dense float64 log-domain Sinkhorn written here: potentials,
// marginals, early stopping, the envelope gradient, float32, custom costs and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <optional>
#include <random>
#include <vector>

#include "reduction_helpers.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;
using tessel::testing::expect_error;

namespace {

using Vec = std::vector<double>;
using CostFn = std::function<double(const double*, const double*)>;

struct Cloud {
  int n = 0;
  Vec w, x;  // n weights, n x kD points
};

constexpr int kD = 2;

Cloud make_cloud(int n, unsigned seed, double shift, double mass = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(0, 1);
  Cloud c;
  c.n = n;
  double s = 0;
  for (int i = 0; i < n; ++i) s += c.w.emplace_back(u(gen) + 0.1);
  for (double& v : c.w) v *= mass / s;
  for (int i = 0; i < n * kD; ++i) c.x.push_back(u(gen) + shift);
  return c;
}

double sq_half(const double* a, const double* b) {
  double s = 0;
  for (int k = 0; k < kD; ++k) s += (a[k] - b[k]) * (a[k] - b[k]);
  return s / 2;
}

// -eps log sum_j w_j exp((pot_j - C(u_i, v_j)) / eps), max-shifted.
Vec dense_softmin(const Cloud& u, const Cloud& v, const Vec& pot, double eps, const CostFn& c) {
  Vec out(u.n);
  for (int i = 0; i < u.n; ++i) {
    Vec t(v.n);
    double m = -INFINITY;
    for (int j = 0; j < v.n; ++j) {
      t[j] = std::log(v.w[j]) + (pot[j] - c(&u.x[i * kD], &v.x[j * kD])) / eps;
      m = std::max(m, t[j]);
    }
    double s = 0;
    for (double z : t) s += std::exp(z - m);
    out[i] = -eps * (m + std::log(s));
  }
  return out;
}

struct Dense {
  Vec f, g, p, q;
};

// The symmetric loop with its last extrapolation, densely; cost c(x_i, y_j) for the x-y problem.
Dense dense_sinkhorn(const Cloud& a, const Cloud& b, const Vec& sched, double eps_end,
                     std::optional<double> rx, std::optional<double> ry, const CostFn& c) {
  auto damp = [](double e, std::optional<double> r) { return r ? 1 / (1 + e / *r) : 1.0; };
  const CostFn ct = [&](const double* u, const double* v) { return c(v, u); };
  auto scaled = [](Vec v, double d) {
    for (double& z : v) z *= d;
    return v;
  };
  auto avg = [](Vec& pot, const Vec& s, double d) {
    for (size_t i = 0; i < pot.size(); ++i) pot[i] = 0.5 * (pot[i] + d * s[i]);
  };
  Dense r;
  double e = sched[0];
  const Vec za(a.n, 0.0), zb(b.n, 0.0);
  r.f = scaled(dense_softmin(a, b, zb, e, c), damp(e, rx));
  r.g = scaled(dense_softmin(b, a, za, e, ct), damp(e, ry));
  r.p = scaled(dense_softmin(a, a, za, e, c), damp(e, rx));
  r.q = scaled(dense_softmin(b, b, zb, e, c), damp(e, ry));
  for (double ek : sched) {
    const Vec sf = dense_softmin(a, b, r.g, ek, c), sg = dense_softmin(b, a, r.f, ek, ct);
    const Vec sp = dense_softmin(a, a, r.p, ek, c), sq = dense_softmin(b, b, r.q, ek, c);
    avg(r.f, sf, damp(ek, rx));
    avg(r.g, sg, damp(ek, ry));
    avg(r.p, sp, damp(ek, rx));
    avg(r.q, sq, damp(ek, ry));
  }
  e = eps_end;
  Dense out;
  out.f = scaled(dense_softmin(a, b, r.g, e, c), damp(e, rx));
  out.g = scaled(dense_softmin(b, a, r.f, e, ct), damp(e, ry));
  out.p = scaled(dense_softmin(a, a, r.p, e, c), damp(e, rx));
  out.q = scaled(dense_softmin(b, b, r.q, e, c), damp(e, ry));
  return out;
}

struct Views {
  Array a, x, b, y;
  Views(const Cloud& ca, const Cloud& cb, DType t = DType::Float64) {
    auto arr = [t](const Vec& v, std::vector<int64_t> shape) {
      if (t == DType::Float64) return Array::from(v, shape);
      return Array::from(std::vector<float>(v.begin(), v.end()), shape);
    };
    a = arr(ca.w, {ca.n});
    x = arr(ca.x, {ca.n, kD});
    b = arr(cb.w, {cb.n});
    y = arr(cb.x, {cb.n, kD});
  }
  SinkhornResult solve(const SinkhornOptions& o) const {
    return sinkhorn(a.view(), x.view(), b.view(), y.view(), o);
  }
};

void expect_near(const Array& got, const Vec& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), static_cast<int64_t>(want.size())) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got.at(static_cast<int64_t>(i)), want[i], tol) << what << "[" << i << "]";
}

void check_against_dense(const SinkhornOptions& o, double mass_b = 1.0) {
  const Cloud a = make_cloud(17, 1, 0.0), b = make_cloud(12, 2, 0.3, mass_b);
  const SinkhornResult r = Views(a, b).solve(o);
  const Vec sched = epsilon_schedule(o.p, r.diameter, o.blur, o.scaling);
  EXPECT_EQ(r.history.size(), sched.size());
  const auto rx = o.reach_x ? o.reach_x : o.reach, ry = o.reach_y ? o.reach_y : o.reach;
  auto sq = [](std::optional<double> v) { return v ? std::optional(*v * *v) : v; };
  const Dense d = dense_sinkhorn(a, b, sched, o.blur * o.blur, sq(rx), sq(ry), sq_half);
  expect_near(r.f, d.f, 1e-10, "f");
  expect_near(r.g, d.g, 1e-10, "g");
  expect_near(r.p, d.p, 1e-10, "p");
  expect_near(r.q, d.q, 1e-10, "q");
}

// Each coordinate of `grad` against central differences (step 1e-6) of `value` at the cloud c.
template <class F>
void expect_matches_central_differences(const Array& grad, const Cloud& c, F value) {
  for (int k = 0; k < c.n * kD; ++k) {
    Cloud up = c, dn = c;
    up.x[k] += 1e-6;
    dn.x[k] -= 1e-6;
    EXPECT_NEAR(grad.at(k), (value(up) - value(dn)) / 2e-6, 1e-6) << k;
  }
}

}  // namespace

TEST(Sinkhorn, ScheduleFollowsGeomLoss) {
  // numpy: [1] + exp(arange(0, 2 log .1, 2 log .5)) + [.01] = 1, 1, .25, .0625, .015625, .01
  const Vec e = epsilon_schedule(2, 1.0, 0.1, 0.5);
  const Vec want = {1, 1, 0.25, 0.0625, 0.015625, 0.01};
  ASSERT_EQ(e.size(), want.size());
  for (size_t k = 0; k < e.size(); ++k) EXPECT_NEAR(e[k], want[k], 1e-15);
  EXPECT_EQ(epsilon_schedule(1, 0.05, 0.1, 0.5).size(), 2u);  // diameter below blur
}

TEST(Sinkhorn, BalancedMatchesDense) {
  SinkhornOptions o;
  o.blur = 0.1;
  check_against_dense(o);
}

TEST(Sinkhorn, UnbalancedAndSemiUnbalancedMatchDense) {
  SinkhornOptions o;
  o.blur = 0.1;
  o.reach = 0.5;
  check_against_dense(o, 1.7);
  o.reach.reset();
  o.reach_y = 0.4;  // hard constraint on x, soft on y
  check_against_dense(o, 1.3);
}

TEST(Sinkhorn, BalancedPlanHasTheMarginalsAtTolerance) {
  const Cloud a = make_cloud(20, 3, 0.0), b = make_cloud(15, 4, 0.2);
  for (SinkhornUpdate u : {SinkhornUpdate::Symmetric, SinkhornUpdate::Alternating}) {
    SinkhornOptions o;
    o.blur = 0.2;
    o.tol = 1e-10;
    o.update = u;
    const SinkhornResult r = Views(a, b).solve(o);
    ASSERT_TRUE(r.converged) << r.str();
    EXPECT_LE(r.history.back().error, 1e-10);
    EXPECT_LE(r.history.back().error_x + r.history.back().error_y, 2e-10);
    Vec rows(a.n, 0.0), cols(b.n, 0.0);
    for (int i = 0; i < a.n; ++i)
      for (int j = 0; j < b.n; ++j) {
        const double pij =
            a.w[i] * b.w[j] *
            std::exp((r.f.at(i) + r.g.at(j) - sq_half(&a.x[i * kD], &b.x[j * kD])) / r.eps);
        rows[i] += pij;
        cols[j] += pij;
      }
    for (int i = 0; i < a.n; ++i) EXPECT_NEAR(rows[i], a.w[i], 1e-8);
    for (int j = 0; j < b.n; ++j) EXPECT_NEAR(cols[j], b.w[j], 1e-8);
  }
}

TEST(Sinkhorn, ToleranceExtendsTheScheduleAndMaxIterBoundsIt) {
  const Cloud a = make_cloud(20, 5, 0.0), b = make_cloud(20, 6, 0.1);
  SinkhornOptions o;
  o.blur = 0.1;
  const Views v(a, b);
  const SinkhornResult r0 = v.solve(o);  // tol = 0: exactly the schedule
  EXPECT_FALSE(r0.converged);
  const size_t n = r0.history.size();
  EXPECT_NEAR(r0.history.back().eps, 0.01, 1e-15);
  o.tol = 1e-8;
  const SinkhornResult r1 = v.solve(o);
  ASSERT_TRUE(r1.converged) << r1.str();
  ASSERT_GT(r1.history.size(), n);
  EXPECT_LT(r1.history.back().error, r1.history[n - 1].error);
  o.max_iter = static_cast<int64_t>(n) + 2;
  const SinkhornResult r2 = v.solve(o);
  EXPECT_FALSE(r2.converged);
  EXPECT_EQ(r2.history.size(), n + 2);
}

TEST(Sinkhorn, AsymmetricCostFormula) {
  // C(x, y) = |x - y|^2 / 2 + <x, w>: not symmetric, so g's softmin uses the transposed cost.
  const Cloud a = make_cloud(9, 7, 0.0), b = make_cloud(11, 8, 0.5);
  const Formula cost = sqdist(vi(4, kD), vj(7, kD)) * 0.5 + (vi(4, kD) | vi(4, kD)) * 0.3;
  const SinkhornOptions o{.cost = cost, .blur = 0.2, .debias = false};
  const SinkhornResult r = Views(a, b).solve(o);
  const CostFn c = [](const double* u, const double* v) {
    return sq_half(u, v) + 0.3 * (u[0] * u[0] + u[1] * u[1]);
  };
  const Vec sched = epsilon_schedule(2, r.diameter, o.blur, o.scaling);
  const Dense d = dense_sinkhorn(a, b, sched, 0.04, std::nullopt, std::nullopt, c);
  expect_near(r.f, d.f, 1e-10, "f");
  expect_near(r.g, d.g, 1e-10, "g");
  EXPECT_EQ(r.p.size(), 0);
}

TEST(Sinkhorn, Float32CloseToFloat64) {
  const Cloud a = make_cloud(30, 9, 0.0), b = make_cloud(25, 10, 0.2);
  SinkhornOptions o;
  o.blur = 0.1;
  const SinkhornResult r64 = Views(a, b).solve(o), r32 = Views(a, b, DType::Float32).solve(o);
  ASSERT_EQ(r32.f.dtype(), DType::Float32);
  for (int64_t i = 0; i < r64.f.size(); ++i) EXPECT_NEAR(r32.f.at(i), r64.f.at(i), 1e-4);
}

TEST(Sinkhorn, EnvelopeGradientMatchesFiniteDifferences) {
  const Cloud a = make_cloud(8, 11, 0.0), b = make_cloud(6, 12, 0.3);
  SinkhornOptions o;
  o.blur = 0.2;
  o.reach = 0.7;
  const Views v(a, b);
  const SinkhornResult r = v.solve(o);
  const double eps = r.eps, damp = 1 / (1 + eps / 0.49);
  Vec cot(a.n);
  for (int i = 0; i < a.n; ++i) cot[i] = std::sin(i + 1.0);
  const Array cf = Array::from(cot, {a.n}), cp = Array::from(cot, {a.n});
  Array gx(DType::Float64, {a.n, kD}), gy(DType::Float64, {b.n, kD});
  sinkhorn_potentials_vjp(v.a.view(), v.x.view(), v.b.view(), v.y.view(), o, r, cf.view(), {},
                          cp.view(), {}, gx.view(), gy.view());
  // f_i + p_i as functions of x_i alone, the softmins' other inputs frozen.
  auto value = [&](const Cloud& ax) {
    const Vec f = dense_softmin(ax, b, r.g_in, eps, sq_half);
    const Vec p = dense_softmin(ax, a, r.p_in, eps, sq_half);
    double s = 0;
    for (int i = 0; i < a.n; ++i) s += cot[i] * damp * (f[i] + p[i]);
    return s;
  };
  expect_matches_central_differences(gx, a, value);
  for (int64_t k = 0; k < gy.size(); ++k) EXPECT_EQ(gy.at(k), 0.0);
}

TEST(Sinkhorn, BadInput) {
  const Cloud a = make_cloud(5, 1, 0.0), b = make_cloud(4, 2, 0.0);
  const Views v(a, b);
  SinkhornOptions o;
  expect_error([&] { sinkhorn(v.a.view(), v.x.view(), v.a.view(), v.y.view(), o); },
               {"sinkhorn", "b has shape (5,)", "expected (4,)"});
  const Array neg = Array::from(Vec{0.5, 0.5, -0.1, 0.05, 0.05}, {5});
  expect_error([&] { sinkhorn(neg.view(), v.x.view(), v.b.view(), v.y.view(), o); },
               {"a[2] = -0.1", ">= 0"});
  const Array heavy = Array::from(Vec{1, 1, 1, 1, 1}, {5});
  expect_error([&] { sinkhorn(heavy.view(), v.x.view(), v.b.view(), v.y.view(), o); },
               {"equal total masses", "reach"});
  // Masses 1 +- 1e-6: digits enough to tell them apart (the stream's 6 printed 1 and 1).
  const Array near = Array::from(Vec{0.200001, 0.2, 0.2, 0.2, 0.2}, {5});
  const Array below = Array::from(Vec{0.249999, 0.25, 0.25, 0.25}, {4});
  expect_error([&] { sinkhorn(near.view(), v.x.view(), below.view(), v.y.view(), o); },
               {"a sums to 1.000001", "b to 0.999999"});
  const Array y3 = Array::from(Vec(12, 0.0), {4, 3});
  expect_error([&] { sinkhorn(v.a.view(), v.x.view(), v.b.view(), y3.view(), o); },
               {"dimension 2", "dimension 3"});
  const Views v32(a, b, DType::Float32);
  expect_error([&] { sinkhorn(v.a.view(), v.x.view(), v32.b.view(), v32.y.view(), o); }, {"dtype"});
  for (auto [field, value, frag] : {std::tuple{&SinkhornOptions::blur, 0.0, "blur"},
                                    {&SinkhornOptions::scaling, 1.0, "scaling"},
                                    {&SinkhornOptions::p, -1.0, "p must"},
                                    {&SinkhornOptions::tol, -1.0, "tol"}}) {
    SinkhornOptions bad;
    bad.*field = value;
    expect_error([&] { v.solve(bad); }, {"sinkhorn", frag});
  }
  SinkhornOptions bad;
  bad.p = 3;
  expect_error([&] { v.solve(bad); }, {"p = 3", "cost formula"});
  bad = {};
  bad.cost = sqdist(vi(0, 2), vi(1, 2));
  expect_error([&] { v.solve(bad); }, {"one j-variable"});
  bad.cost = sqdist(vi(0, 3), vj(1, 3));
  expect_error([&] { v.solve(bad); }, {"dim 3", "points have dim 2"});
  bad.cost = vi(0, 2) - vj(1, 2);
  expect_error([&] { v.solve(bad); }, {"expected a scalar"});
  bad = {};
  bad.reach = -1;
  expect_error([&] { v.solve(bad); }, {"reach must be"});
  Array nan_x = Array::from(a.x, {5, 2});
  nan_x.as<double>()[3] = NAN;
  expect_error([&] { sinkhorn(v.a.view(), nan_x.view(), v.b.view(), v.y.view(), o); },
               {"x[1, 1]", "finite"});
}

TEST(Sinkhorn, EnvelopeGradientOfTransposedAsymmetricCost) {
  // g's softmin runs on C^T: its gradient in y must differentiate C's second argument.
  const Cloud a = make_cloud(7, 13, 0.0), b = make_cloud(5, 14, 0.4);
  const Formula cost = sqdist(vi(0, kD), vj(1, kD)) * 0.5 + (vj(1, kD) | vj(1, kD)) * 0.2;
  const SinkhornOptions o{.cost = cost, .blur = 0.3, .debias = false};
  const Views v(a, b);
  const SinkhornResult r = v.solve(o);
  Vec cot(b.n);
  for (int j = 0; j < b.n; ++j) cot[j] = std::cos(j + 0.5);
  const Array cg = Array::from(cot, {b.n});
  Array gx(DType::Float64, {a.n, kD}), gy(DType::Float64, {b.n, kD});
  sinkhorn_potentials_vjp(v.a.view(), v.x.view(), v.b.view(), v.y.view(), o, r, {}, cg.view(), {},
                          {}, gx.view(), gy.view());
  const CostFn ct = [](const double* u, const double* w) {
    return sq_half(w, u) + 0.2 * (u[0] * u[0] + u[1] * u[1]);
  };
  auto value = [&](const Cloud& by) {
    const Vec g = dense_softmin(by, a, r.f_in, r.eps, ct);
    double s = 0;
    for (int j = 0; j < b.n; ++j) s += cot[j] * g[j];
    return s;
  };
  expect_matches_central_differences(gy, b, value);
  for (int64_t k = 0; k < gx.size(); ++k) EXPECT_EQ(gx.at(k), 0.0);
  // A cotangent for p without debias is refused.
  expect_error(
      [&] {
        sinkhorn_potentials_vjp(v.a.view(), v.x.view(), v.b.view(), v.y.view(), o, r, {}, {},
                                v.a.view(), {}, gx.view(), gy.view());
      },
      {"sinkhorn_potentials_vjp", "cot_p", "without debias"});
}
