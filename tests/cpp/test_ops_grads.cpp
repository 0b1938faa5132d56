// Op derivatives: symbolic VJPs (tessel::grad) and forward mode (tessel::jvp) against central
// finite differences, to second and third order, for every op and for composite kernels.
#include <gtest/gtest.h>

#include <set>

#include "op_cases.hpp"

using namespace tessel;
using namespace op_cases;

namespace {

// Extra variables: the cotangent E, probe directions W and Z, the tangent T. Case variables use
// 0..9.
constexpr int kE = 50, kW = 51, kZ = 52, kT = 53;

Vec random_vec(Rng& rng, int d) {
  Vec v(d);
  for (double& x : v) x = unif(rng, -1, 1);
  return v;
}
double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t c = 0; c < a.size(); ++c) s += a[c] * b[c];
  return s;
}
bool evaluates_to_zero(const Formula& g, const Point& p, const std::map<int, Vec>& extra) {
  for (double x : eval_at(g, p, extra))
    if (x != 0) return false;
  return true;
}

// Central difference of phi along coordinate (k, i).
double fd(const std::function<double(const Point&)>& phi, Point p, size_t k, int i, double h) {
  const double x = p[k][i];
  p[k][i] = x + h;
  const double up = phi(p);
  p[k][i] = x - h;
  const double down = phi(p);
  return (up - down) / (2 * h);
}

// Checks grad(s, v_j, 1) of a scalar formula s against finite differences of s, for every variable.
void check_scalar_grad(const std::string& what, const Formula& s, const std::vector<Formula>& vars,
                       const Point& p, const std::map<int, Vec>& extra, double h, double tol) {
  ASSERT_EQ(s.dim(), 1) << what;
  auto phi = [&](const Point& q) { return eval_at(s, q, extra)[0]; };
  for (size_t j = 0; j < vars.size(); ++j) {
    const Formula g = grad(s, vars[j], constant(1.0));
    ASSERT_EQ(g.dim(), vars[j].dim()) << what;
    const Vec gv = eval_at(g, p, extra);
    for (int i = 0; i < vars[j].dim(); ++i) {
      const double want = fd(phi, p, j, i, h);
      EXPECT_TRUE(close(gv[i], want, tol)) << what << ": d/dx" << j << "[" << i << "] = " << gv[i]
                                           << ", finite differences give " << want;
    }
  }
}

// Random scalar probe <g, W> of a vector formula, W a fresh parameter with values put in `extra`.
Formula probe(const Formula& g, int index, Rng& rng, std::map<int, Vec>& extra) {
  extra[index] = random_vec(rng, g.dim());
  return g | pm(index, g.dim());
}

const std::vector<OpCase>& cases() {
  static const std::vector<OpCase> cs = all_cases();
  return cs;
}

// Composite kernels: the derivatives that KeOps-style reductions actually take.
std::vector<OpCase> composite_cases() {
  const Draw u = uniform(-1.5, 1.5);
  std::vector<OpCase> cs;
  auto add = [&](std::string name, std::vector<int> dims, auto build, std::vector<Draw> d = {}) {
    cs.push_back(OpCase{name, OpCode::Count_, dims, build, {}, d.empty() ? std::vector{u} : d, {}});
  };
  add("gaussian", {3, 3, 2}, [](auto& v) { return exp(-sqdist(v[0], v[1])) * v[2]; });
  add("gaussian_scaled", {3, 3, 2, 1},
      [](auto& v) { return exp(-(v[3] * sqdist(v[0], v[1]))) * v[2]; },
      {u, u, u, uniform(0.2, 1.5)});
  add("laplacian", {3, 3, 1}, [](auto& v) { return exp(-sqrt(sqdist(v[0], v[1]) + 0.1)) * v[2]; });
  add("normalize_dot", {3, 3}, [](auto& v) { return normalize(v[0]) | normalize(v[1]); },
      {away0(0.3, 1.5)});
  add("normalize_diff", {3, 3, 3}, [](auto& v) { return normalize(v[0] - v[1]) * (v[2] | v[0]); },
      {away0(0.3, 1.5), uniform(-0.2, 0.2), u});
  add("sym_sqnorm_kernel", {9, 3, 3},
      [](auto& v) { return exp(-sym_sqnorm(v[0], v[1] - v[2])) * (v[1] | v[2]); });
  add("weighted_sqdist_diag", {3, 3, 3},
      [](auto& v) { return exp(-weighted_sqdist(v[0], v[1], v[2])); });
  add("matvec_chain", {6, 3, 2},
      [](auto& v) { return vecmatmult(v[2], tensorprod(matvecmult(v[0], v[1]), v[1])); });
  // TensorDot compositions: the VJP of one TensorDot (a permuted TensorDot) feeds another.
  add("tensordot_chain", {6, 12, 8}, [](auto& v) {
    const Formula ab = tensordot(v[0], v[1], {2, 3}, {3, 4}, {1}, {0});  // 2×4
    return tensordot(ab, v[2], {2, 4}, {4, 2}, {1, 0}, {0, 1}) * sin(ab);
  });
  add("tensordot_two_axes_exp", {24, 60}, [](auto& v) {
    return exp(0.3 * tensordot(v[0], v[1], {2, 3, 4}, {4, 3, 5}, {1, 2}, {1, 0}));
  });
  add("tensordot_self", {6}, [](auto& v) {
    return square(tensordot(v[0], v[0], {2, 3}, {2, 3}, {0}, {0}));  // (A^T A)^2 elementwise
  });
  add("tensordot_perm_square", {24, 20}, [](auto& v) {
    const TdConfig t{"perm", {2, 3, 4}, {4, 5}, {2}, {0}, {2, 0, 1}};
    const Formula p = build_tensordot(t, v[0], v[1]);
    return p * p;
  });
  add("tensordot_mixed_cos", {24, 40}, [](auto& v) {
    return cos(tensordot(v[0], v[1], {3, 2, 4}, {4, 5, 2}, {2, 1}, {0, 2}));
  });
  add("powf_atan2_clamp", {3, 3},
      [](auto& v) {
        return powf(1.5 + sin(v[0]), v[1]) * atan2(v[1], 2.0 + v[0]) +
               clamp(v[0], constant(-1.0), v[1] * v[1]);
      },
      {uniform(-1.2, 1.2)});
  cs.back().accept = [](const Point& p) {
    for (int c = 0; c < 3; ++c) {
      const double x = p[0][c], y = p[1][c];
      if (std::fabs(x + 1) < 1e-3 || std::fabs(x - y * y) < 1e-3) return false;
    }
    return true;
  };
  return cs;
}

}  // namespace

// Every op has a case whose derivatives are checked (by finite differences, or as exactly zero).
TEST(OpGrads, EveryOpHasADerivativeCase) {
  std::set<OpCode> covered;
  for (const OpCase& c : cases())
    if (c.grad != GradKind::Skip && c.build(make_vars(c)).node().op == c.op) covered.insert(c.op);
  for (int k = static_cast<int>(OpCode::Add); k < static_cast<int>(OpCode::Count_); ++k)
    EXPECT_TRUE(covered.count(static_cast<OpCode>(k)))
        << "no derivative case for op " << op_info(static_cast<OpCode>(k)).name;
}

// Calls body(case, its variables, its formula) for each case with derivatives of this kind.
template <class Body>
void for_each_case(GradKind kind, Body body) {
  for (const OpCase& c : cases()) {
    if (c.grad != kind) continue;
    const auto vars = make_vars(c);
    body(c, vars, c.build(vars));
  }
}

// grad(f, v, e) against central differences of <f, e>, for every variable of every smooth case.
TEST(OpGrads, VjpMatchesFiniteDifferences) {
  Rng rng(99);
  for_each_case(GradKind::Smooth, [&](const OpCase& c, const auto& vars, const Formula& f) {
    const Formula e = pm(kE, f.dim());
    for (int trial = 0; trial < 3; ++trial) {
      const Point p = sample(c, rng);
      const std::map<int, Vec> extra = {{kE, random_vec(rng, f.dim())}};
      auto phi = [&](const Point& q) { return dot(eval_at(f, q), extra.at(kE)); };
      for (size_t k = 0; k < vars.size(); ++k) {
        const Formula g = grad(f, vars[k], e);
        ASSERT_EQ(g.dim(), vars[k].dim()) << c.name;
        const Vec gv = eval_at(g, p, extra);
        for (int i = 0; i < vars[k].dim(); ++i) {
          const double want = fd(phi, p, k, i, 1e-6);
          EXPECT_TRUE(close(gv[i], want, 1e-6))
              << c.name << ": d/dx" << k << "[" << i << "] = " << gv[i]
              << ", finite differences give " << want << "\n  gradient: " << g.str();
        }
      }
    }
  });
}

// Floor, Round, Step, Sign, comparisons, ArgMax/ArgMin and OneHot are piecewise constant.
TEST(OpGrads, PiecewiseConstantOpsHaveZeroGradient) {
  Rng rng(5);
  for_each_case(GradKind::Zero, [&](const OpCase& c, const auto& vars, const Formula& f) {
    const Point p = sample(c, rng);
    const std::map<int, Vec> extra = {{kE, random_vec(rng, f.dim())}};
    for (size_t k = 0; k < vars.size(); ++k) {
      const Formula g = grad(f, vars[k], pm(kE, f.dim()));
      EXPECT_TRUE(g.node().is_zero() || evaluates_to_zero(g, p, extra))
          << c.name << ": " << g.str();
      EXPECT_TRUE(g.same(zero(vars[k].dim())))
          << c.name << ": expected the Zero node, got " << g.str();
      const Formula j = jvp(f, vars[k], pm(kT, vars[k].dim()));
      EXPECT_TRUE(j.node().is_zero()) << c.name << ": jvp " << j.str();
    }
  });
}

// jvp(f, v, t) against the central difference of f along t.
void check_jvp(const OpCase& c, const Formula& f, const std::vector<Formula>& vars, Rng& rng) {
  const Point p = sample(c, rng);
  for (size_t k = 0; k < vars.size(); ++k) {
    const Vec t = random_vec(rng, vars[k].dim());
    const Formula j = jvp(f, vars[k], pm(kT, vars[k].dim()));
    ASSERT_EQ(j.dim(), f.dim()) << c.name;
    const Vec jv = eval_at(j, p, {{kT, t}});
    const double h = 1e-6;
    Point up = p, down = p;
    for (int i = 0; i < vars[k].dim(); ++i) up[k][i] += h * t[i], down[k][i] -= h * t[i];
    const Vec fu = eval_at(f, up), fdn = eval_at(f, down);
    for (int i = 0; i < f.dim(); ++i) {
      const double want = (fu[i] - fdn[i]) / (2 * h);
      EXPECT_TRUE(close(jv[i], want, 1e-6))
          << c.name << ": jvp along x" << k << ", component " << i << " = " << jv[i]
          << ", finite differences give " << want;
    }
  }
}

TEST(OpGrads, JvpMatchesFiniteDifferences) {
  Rng rng(31);
  for_each_case(GradKind::Smooth, [&](const OpCase& c, const auto& vars, const Formula& f) {
    check_jvp(c, f, vars, rng);
  });
  for (const OpCase& c : composite_cases()) {
    const auto vars = make_vars(c);
    check_jvp(c, c.build(vars), vars, rng);
  }
}

// Hessian-vector products: d/dx_j <grad(f, x_k, E), W> against differences of the first gradient.
void check_second_order(const OpCase& c, Rng& rng, int trials) {
  const auto vars = make_vars(c);
  const Formula f = c.build(vars);
  for (int trial = 0; trial < trials; ++trial) {
    const Point p = sample(c, rng);
    std::map<int, Vec> extra = {{kE, random_vec(rng, f.dim())}};
    for (size_t k = 0; k < vars.size(); ++k) {
      const Formula s = probe(grad(f, vars[k], pm(kE, f.dim())), kW, rng, extra);
      check_scalar_grad(c.name + " (second order, via x" + std::to_string(k) + ")", s, vars, p,
                        extra, 1e-5, 1e-6);
    }
  }
}

TEST(OpGrads, SecondOrderMatchesFiniteDifferences) {
  Rng rng(4242);
  for (const OpCase& c : cases())
    if (c.grad == GradKind::Smooth) check_second_order(c, rng, 2);
}

TEST(OpGrads, CompositeFirstAndSecondOrder) {
  Rng rng(8);
  for (const OpCase& c : composite_cases()) {
    const auto vars = make_vars(c);
    const Formula f = c.build(vars);
    for (int trial = 0; trial < 2; ++trial) {
      const Point p = sample(c, rng);
      std::map<int, Vec> extra;
      check_scalar_grad(c.name, probe(f, kE, rng, extra), vars, p, extra, 1e-6, 1e-6);
    }
    check_second_order(c, rng, 2);
  }
}

// Third order through TensorDot: the VJP of the VJP of the VJP, each a permuted TensorDot.
TEST(OpGrads, TensorDotThirdOrder) {
  Rng rng(77);
  std::vector<OpCase> tds;
  for (const OpCase& c : cases())
    if (c.op == OpCode::TensorDot) tds.push_back(c);
  for (const OpCase& c : composite_cases())
    if (c.name.rfind("tensordot", 0) == 0) tds.push_back(c);
  ASSERT_GE(tds.size(), 10u);
  for (const OpCase& c : tds) {
    // Make the op nonlinear so that third derivatives do not vanish: f = TensorDot(...)^3.
    const auto vars = make_vars(c);
    const Formula f = pow(c.build(vars), 3);
    const Point p = sample(c, rng);
    std::map<int, Vec> extra;
    const Formula s1 = probe(f, kE, rng, extra);
    for (size_t k = 0; k < vars.size(); ++k) {
      const Formula s2 = probe(grad(s1, vars[k], constant(1.0)), kW, rng, extra);
      for (size_t j = 0; j < vars.size(); ++j) {
        const Formula s3 = probe(grad(s2, vars[j], constant(1.0)), kZ, rng, extra);
        check_scalar_grad(
            c.name + " (third order, x" + std::to_string(k) + " x" + std::to_string(j) + ")", s3,
            vars, p, extra, 1e-5, 1e-6);
      }
    }
  }
}

// The VJPs of TensorDot are TensorDots (with an output permutation), so every order stays in the
// IR.
TEST(OpGrads, TensorDotVjpIsATensorDot) {
  for (const TdConfig& t : tensordot_configs()) {
    const Formula a = vi(0, prod(t.dims_a)), b = vj(1, prod(t.dims_b));
    const Formula f = build_tensordot(t, a, b);
    const Formula e = pm(kE, f.dim());
    EXPECT_EQ(grad(f, a, e).node().op, OpCode::TensorDot) << t.name;
    EXPECT_EQ(grad(f, b, e).node().op, OpCode::TensorDot) << t.name;
    EXPECT_EQ(grad(f, a, e).dim(), a.dim()) << t.name;
    EXPECT_EQ(grad(f, b, e).dim(), b.dim()) << t.name;
  }
}

// The gradient with respect to a variable that occurs twice sums both contributions.
TEST(OpGrads, SharedVariablesAccumulate) {
  const Formula x = vi(0, 3);
  const Formula f = sqdist(x, 2.0 * x) + (x | x);  // = |x|^2 + |x|^2
  const Vec xv = {0.3, -1.2, 0.7};
  const Vec g = eval_point(grad(f, x, constant(1.0)), {{0, xv}});
  for (int c = 0; c < 3; ++c) EXPECT_NEAR(g[c], 4 * xv[c], 1e-14);
}

// SinXDivX's derivative from 1e-300 to 1e3, across the series/closed-form switch at |x| = 1,
// against a long-double reference: the naive (cos x - sin(x)/x) / x would lose all digits below
// ~1e-8. Bounds: the series' rounding (a few ulp), ~6 eps for the closed form near |x| = 1.
TEST(OpGrads, SinXDivXDerivativeIsAccurateFromTinyToLarge) {
  const Formula x = vi(0, 1), d1 = grad(sin_x_div_x(x), x, constant(1.0));
  const Formula d2 = grad(d1, x, constant(1.0));
  std::vector<double> xs = {0.0, -0.0, 1e-300, 1e-150, 3e-9, 1e-4, 0.5, 0.999999999999,
                            1.0, 1.000000000001, 1.5, 7.25, 100.0, 1e3};
  for (double e = -300; e <= 3; e += 0.37) xs.push_back(std::pow(10.0, e));
  for (double v : xs)
    for (double s : {1.0, -1.0}) {
      const double at = s * v;
      const double want1 = static_cast<double>(tessel::singular::sin_x_div_x_ref(at, 1));
      const double want2 = static_cast<double>(tessel::singular::sin_x_div_x_ref(at, 2));
      const double got1 = eval_at(d1, {{at}})[0], got2 = eval_at(d2, {{at}})[0];
      EXPECT_LE(std::fabs(got1 - want1), 2e-15 * std::fabs(want1) + 1e-300) << "x = " << at;
      // the second derivative's closed form subtracts terms of ~1/x^2 near its zeros: absolute
      EXPECT_NEAR(got2, want2, 1e-13) << "x = " << at;
    }
}
