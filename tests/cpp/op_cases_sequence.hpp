// Op cases of the recursions (BSpline, SoftDTW_SqDist and its derivative ops, DifferenceMatrix),
// with independent float64 references: the textbook Cox-de Boor recursion, soft-DTW on a grid
// bordered with infinities. Included by op_cases.hpp.
#pragma once

#include <limits>
#include <memory>

#include "op_cases.hpp"

namespace op_cases {

// Draws the components of one variable from a pattern: pattern[k] + a shift drawn once per
// variable + jitter. The state is shared by the copies of the Draw (sample() calls it dim times
// in a row per point).
inline Draw pattern_draw(std::vector<double> pattern, double jitter) {
  auto state = std::make_shared<std::pair<size_t, double>>(0, 0.0);
  return [=](Rng& r) {
    const size_t k = state->first++ % pattern.size();
    if (k == 0) state->second = jitter > 0 ? unif(r, -0.5, 0.5) : 0.0;
    return state->second + pattern[k] + (jitter > 0 ? unif(r, -jitter, jitter) : 0.0);
  };
}

inline double cox_de_boor(const Vec& t, int i, int k, double x) {
  if (k == 0) return t[i] <= x && x < t[i + 1] ? 1.0 : 0.0;
  double r = 0;
  if (t[i + k] > t[i]) r += (x - t[i]) / (t[i + k] - t[i]) * cox_de_boor(t, i, k - 1, x);
  if (t[i + k + 1] > t[i + 1])
    r += (t[i + k + 1] - x) / (t[i + k + 1] - t[i + 1]) * cox_de_boor(t, i + 1, k - 1, x);
  return r;
}

inline double soft_dtw_ref(const Vec& x, const Vec& y, double gamma) {
  const double inf = std::numeric_limits<double>::infinity();
  const size_t n = x.size(), m = y.size();
  std::vector<Vec> r(n + 1, Vec(m + 1, inf));
  r[0][0] = 0;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const double a[3] = {r[i - 1][j - 1], r[i - 1][j], r[i][j - 1]};
      const double lo = std::min({a[0], a[1], a[2]});
      double s = 0;
      for (double v : a)
        if (v < inf) s += std::exp(-(v - lo) / gamma);
      const double d = x[i - 1] - y[j - 1];
      r[i][j] = d * d + lo - gamma * std::log(s);
    }
  return r[n][m];
}

inline void add_sequence_cases(std::vector<OpCase>& cs) {
  using namespace tessel;
  using GK = GradKind;
  const std::vector<double> grid = {0, 1, 2, 3, 4, 5, 6};
  // x away from every knot: B-splines have kinks there (jumps at order 0).
  const auto off_knots = [](const Point& p) {
    for (double t : p[0])
      if (std::fabs(p[1][0] - t) < 1e-3) return false;
    return true;
  };
  auto bspline_case = [&](std::string name, std::vector<double> knots, double jitter, int order,
                          Draw xs, GK g, std::function<bool(const Point&)> ok) {
    const int nk = static_cast<int>(knots.size());
    cs.push_back(OpCase{name + "_k" + std::to_string(order),
                        OpCode::BSpline,
                        {nk, 1},
                        [order](auto& v) { return bspline(v[0], v[1], order); },
                        [order, nk](const Point& p) {
                          Vec r;
                          for (int i = 0; i < nk - order - 1; ++i)
                            r.push_back(cox_de_boor(p[0], i, order, p[1][0]));
                          return r;
                        },
                        {pattern_draw(knots, jitter), xs},
                        ok,
                        g});
  };
  for (int k : {0, 1, 2, 3, 5})  // x inside and outside [t_0, t_K-1)
    bspline_case("BSpline", grid, 0.3, k, uniform(-1.5, 7.5), k == 0 ? GK::Zero : GK::Smooth,
                 off_knots);
  // coincident knots (ratios 0/0 are 0), and x exactly on knots: values only
  for (int k : {1, 2, 3})
    bspline_case("BSpline_coincident", {0, 1, 1, 2, 3, 3, 3, 4}, 0, k, uniform(-0.5, 4.5), GK::Skip,
                 {});
  for (int k : {0, 1, 3}) bspline_case("BSpline_on_knots", grid, 0, k, ints(-1, 7), GK::Skip, {});

  const Draw u2 = uniform(-2, 2), gammas = uniform(0.2, 2);
  auto dtw = [&](std::string name, int n, int m, Draw series, Draw gamma, GK g) {
    cs.push_back(OpCase{name + std::to_string(n) + std::to_string(m),
                        OpCode::SoftDTW,
                        {n, m, 1},
                        [](auto& v) { return softdtw_sqdist(v[0], v[1], v[2]); },
                        [](const Point& p) { return Vec{soft_dtw_ref(p[0], p[1], p[2][0])}; },
                        {series, series, gamma},
                        {},
                        g});
  };
  for (auto [n, m] : std::vector<std::pair<int, int>>{{4, 3}, {1, 3}, {3, 1}, {1, 1}, {5, 5}})
    dtw("SoftDTW", n, m, u2, gammas, GK::Smooth);
  dtw("SoftDTW_ties", 4, 4, ints(-1, 1), gammas, GK::Smooth);  // equal values, equal series
  dtw("SoftDTW_small_gamma", 4, 5, u2, uniform(1e-4, 1e-2), GK::Skip);
  // The derivative ops: their own VJPs (the next order) against differences of their values.
  cs.push_back(OpCase{"SoftDTW_Grad",
                      OpCode::SoftDTWGrad,
                      {3, 2, 1},
                      [](auto& v) {
                        return make(OpCode::SoftDTWGrad, {v[0], v[1], v[2]});
                      },
                      {},
                      {u2, u2, gammas},
                      {},
                      GK::Smooth});
  cs.push_back(OpCase{"SoftDTW_GradDir",
                      OpCode::SoftDTWGradDir,
                      {2, 3, 1, 6},
                      [](auto& v) {
                        return make(OpCode::SoftDTWGradDir, {v[0], v[1], v[2], v[3]});
                      },
                      {},
                      {u2, u2, gammas, u2},
                      {},
                      GK::Smooth});

  for (auto [a, b] : std::vector<std::pair<int, int>>{{3, 2}, {1, 3}, {2, 1}})
    cs.push_back(OpCase{"DifferenceMatrix" + std::to_string(a) + std::to_string(b),
                        OpCode::DifferenceMatrix,
                        {a, b},
                        [](auto& v) { return difference_matrix(v[0], v[1]); },
                        [](const Point& p) {
                          Vec r;
                          for (double x : p[0])
                            for (double y : p[1]) r.push_back(x - y);
                          return r;
                        },
                        {u2},
                        {},
                        GK::Smooth});
}

}  // namespace op_cases
