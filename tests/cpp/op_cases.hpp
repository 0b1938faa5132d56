// Shared op-test fixtures: cases per op (builder, sampling domain, independent float64 reference).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "ops/eval_ref.hpp"
#include "ir/node.hpp"
#include "ops/op.hpp"
#include "singular_cases.hpp"
#include "tessel/formula.hpp"

namespace op_cases {

using tessel::Formula;
using tessel::OpCode;
using Vec = std::vector<double>;
using Point = std::vector<Vec>;  // the value of each variable; variable k has index k
using Rng = std::mt19937_64;
using Draw = std::function<double(Rng&)>;

// ---- sampling domains ---------------------------------------------------------------------------
inline double unif(Rng& r, double lo, double hi) {
  return std::uniform_real_distribution<double>(lo, hi)(r);
}
inline Draw uniform(double lo, double hi) {
  return [=](Rng& r) { return unif(r, lo, hi); };
}
// |x| in [lo, hi] with a random sign: keeps away from 0.
inline Draw away0(double lo, double hi) {
  return [=](Rng& r) { return (r() & 1 ? 1.0 : -1.0) * unif(r, lo, hi); };
}
// Integers in [lo, hi], as doubles: makes ties and exact zeros likely.
inline Draw ints(int lo, int hi) {
  return [=](Rng& r) { return static_cast<double>(std::uniform_int_distribution<int>(lo, hi)(r)); };
}
// Multiples of `step` in [lo, hi] half of the time, uniform otherwise.
inline Draw grid_or_uniform(double step, int lo, int hi) {
  return [=](Rng& r) {
    if (r() & 1) return step * std::uniform_int_distribution<int>(lo, hi)(r);
    return unif(r, step * lo, step * hi);
  };
}

// ---- cases --------------------------------------------------------------------------------------
// Smooth: check derivatives by finite differences. Zero: the gradient must be zero. Skip: values
// only (points on kinks or ties).
enum class GradKind { Smooth, Zero, Skip };

struct OpCase {
  std::string name;
  OpCode op;  // the op the case is for (the root of the built formula, unless simplified away)
  std::vector<int> dims;  // dims of the variables
  std::function<Formula(const std::vector<Formula>&)> build;
  std::function<Vec(const Point&)> ref;      // independent reference; empty for composite formulas
  std::vector<Draw> draws;                   // one per variable, or one for all
  std::function<bool(const Point&)> accept;  // optional: rejects points near kinks
  GradKind grad = GradKind::Smooth;
};

// Appends cases to a table, the fields in the order the case lists write them: the gradient kind
// and the point filter last, as most cases leave them out.
class CaseAdder {
 public:
  explicit CaseAdder(std::vector<OpCase>& cs) : cs_(cs) {}
  void operator()(std::string name, OpCode op, std::vector<int> dims,
                  std::function<Formula(const std::vector<Formula>&)> f,
                  std::function<Vec(const Point&)> ref, std::vector<Draw> d,
                  GradKind g = GradKind::Smooth, std::function<bool(const Point&)> ok = {}) const {
    cs_.push_back(OpCase{std::move(name), op, std::move(dims), std::move(f), std::move(ref),
                         std::move(d), std::move(ok), g});
  }

 private:
  std::vector<OpCase>& cs_;
};

inline std::vector<Formula> make_vars(const OpCase& c) {
  std::vector<Formula> v;
  for (size_t k = 0; k < c.dims.size(); ++k)
    v.push_back(tessel::var(static_cast<int>(k), c.dims[k], static_cast<tessel::Category>(k % 3)));
  return v;
}

inline Point sample(const OpCase& c, Rng& rng) {
  for (int tries = 0; tries < 10000; ++tries) {
    Point p(c.dims.size());
    for (size_t k = 0; k < c.dims.size(); ++k) {
      const Draw& d = c.draws.size() == 1 ? c.draws[0] : c.draws[k];
      for (int i = 0; i < c.dims[k]; ++i) p[k].push_back(d(rng));
    }
    if (!c.accept || c.accept(p)) return p;
  }
  throw std::runtime_error("op_cases: no acceptable point for " + c.name);
}

inline Vec eval_at(const Formula& f, const Point& p, const std::map<int, Vec>& extra = {}) {
  std::map<int, Vec> m(extra);
  for (size_t k = 0; k < p.size(); ++k) m[static_cast<int>(k)] = p[k];
  return tessel::eval_point(f, m);
}

inline bool close(double got, double want, double tol) {
  if (std::isnan(got) || std::isnan(want)) return std::isnan(got) && std::isnan(want);
  if (std::isinf(got) || std::isinf(want)) return got == want;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

// Component c of a possibly broadcast (dim-1) operand.
inline double bc(const Vec& v, size_t c) { return v.size() == 1 ? v[0] : v[c]; }
inline size_t out_dim(const Point& p) {
  size_t d = 1;
  for (const Vec& v : p) d = std::max(d, v.size());
  return d;
}
// Elementwise reference over broadcast operands.
template <class F>
std::function<Vec(const Point&)> ew_ref(F f) {
  return [f](const Point& p) {
    Vec r(out_dim(p));
    for (size_t c = 0; c < r.size(); ++c) {
      if constexpr (std::is_invocable_v<F, double>)
        if (p.size() == 1) r[c] = f(p[0][c]);
      if constexpr (std::is_invocable_v<F, double, double>)
        if (p.size() == 2) r[c] = f(bc(p[0], c), bc(p[1], c));
      if constexpr (std::is_invocable_v<F, double, double, double>)
        if (p.size() == 3) r[c] = f(bc(p[0], c), bc(p[1], c), bc(p[2], c));
    }
    return r;
  };
}
// Accept points where pred holds for every broadcast component.
template <class F>
std::function<bool(const Point&)> all_components(F pred) {
  return [pred](const Point& p) {
    for (size_t c = 0; c < out_dim(p); ++c) {
      if constexpr (std::is_invocable_v<F, double>)
        if (!pred(bc(p[0], c))) return false;
      if constexpr (std::is_invocable_v<F, double, double>)
        if (!pred(bc(p[0], c), bc(p[1], c))) return false;
      if constexpr (std::is_invocable_v<F, double, double, double>)
        if (!pred(bc(p[0], c), bc(p[1], c), bc(p[2], c))) return false;
    }
    return true;
  };
}

// ---- TensorDot: numpy.tensordot-like loops over multi-indices, then an optional permutation -----
inline std::vector<int> unravel(int flat, const std::vector<int>& dims) {
  std::vector<int> m(dims.size());
  for (int k = static_cast<int>(dims.size()) - 1; k >= 0; --k)
    m[k] = flat % dims[k], flat /= dims[k];
  return m;
}
inline int ravel(const std::vector<int>& m, const std::vector<int>& dims) {
  int flat = 0;
  for (size_t k = 0; k < dims.size(); ++k) flat = flat * dims[k] + m[k];
  return flat;
}
inline int prod(const std::vector<int>& d) {
  int p = 1;
  for (int v : d) p *= v;
  return p;
}
struct TdConfig {
  std::string name;
  std::vector<int> dims_a, dims_b, contr_a, contr_b, perm;  // perm empty: identity
};
inline std::vector<int> free_axes(const std::vector<int>& contr, size_t rank) {
  std::vector<int> f;
  for (int ax = 0; ax < static_cast<int>(rank); ++ax)
    if (std::find(contr.begin(), contr.end(), ax) == contr.end()) f.push_back(ax);
  return f;
}
inline Vec tensordot_ref(const TdConfig& t, const Vec& a, const Vec& b) {
  const auto fa = free_axes(t.contr_a, t.dims_a.size()), fb = free_axes(t.contr_b, t.dims_b.size());
  std::vector<int> pre;
  for (int ax : fa) pre.push_back(t.dims_a[ax]);
  for (int ax : fb) pre.push_back(t.dims_b[ax]);
  Vec out(prod(pre), 0.0);
  for (int ia = 0; ia < prod(t.dims_a); ++ia) {
    const auto ma = unravel(ia, t.dims_a);
    for (int ib = 0; ib < prod(t.dims_b); ++ib) {
      const auto mb = unravel(ib, t.dims_b);
      bool match = true;
      for (size_t k = 0; k < t.contr_a.size(); ++k) match &= ma[t.contr_a[k]] == mb[t.contr_b[k]];
      if (!match) continue;
      std::vector<int> mo;
      for (int ax : fa) mo.push_back(ma[ax]);
      for (int ax : fb) mo.push_back(mb[ax]);
      out[ravel(mo, pre)] += a[ia] * b[ib];
    }
  }
  if (t.perm.empty()) return out;
  // KeOps's convention: pre-permutation axis q goes to output position perm[q]
  std::vector<int> od(pre.size());
  for (size_t q = 0; q < t.perm.size(); ++q) od[t.perm[q]] = pre[q];
  Vec r(out.size());
  for (int p = 0; p < prod(pre); ++p) {
    const auto mp = unravel(p, pre);
    std::vector<int> mo(pre.size());
    for (size_t q = 0; q < t.perm.size(); ++q) mo[t.perm[q]] = mp[q];
    r[ravel(mo, od)] = out[p];
  }
  return r;
}
inline Formula build_tensordot(const TdConfig& t, const Formula& a, const Formula& b) {
  return tessel::tensordot(a, b, t.dims_a, t.dims_b, t.contr_a, t.contr_b, t.perm);
}
inline std::vector<TdConfig> tensordot_configs() {
  return {
      {"matmul", {2, 3}, {3, 4}, {1}, {0}, {}},
      {"matvec", {2, 3}, {3}, {1}, {0}, {}},
      {"full", {2, 3}, {2, 3}, {0, 1}, {0, 1}, {}},
      {"full_transposed", {2, 3}, {3, 2}, {0, 1}, {1, 0}, {}},
      {"two_axes", {2, 3, 4}, {4, 3, 5}, {1, 2}, {1, 0}, {}},
      {"mixed", {3, 2, 4}, {4, 5, 2}, {2, 1}, {0, 2}, {}},
      {"middle_free", {2, 3, 2}, {2, 2}, {0, 2}, {1, 0}, {}},
      {"outer", {2, 3}, {4}, {}, {}, {}},
      {"perm", {2, 3, 4}, {4, 5}, {2}, {0}, {2, 0, 1}},
      {"perm_outer", {2, 3}, {2}, {}, {}, {1, 2, 0}},
      {"perm_two_axes", {2, 3, 4}, {3, 5, 2}, {0, 1}, {2, 0}, {1, 0}},
      {"perm_rank4", {2, 3}, {2, 2}, {}, {}, {3, 0, 2, 1}},
      {"perm_free_mix", {2, 3, 4}, {4, 2}, {2}, {0}, {2, 1, 0}},
      {"unit_axes", {1, 3, 2}, {2, 1}, {2}, {0}, {}},
      {"rank0", {}, {2, 3}, {}, {}, {}},
  };
}

}  // namespace op_cases

#include "complex_cases.hpp"
#include "op_cases_linear.hpp"  // uses the helpers above; all_cases() below adds its cases

namespace op_cases {
// The recursions' cases (op_cases_sequence.hpp, included at the end).
inline void add_sequence_cases(std::vector<OpCase>& cs);

// ---- the case table -----------------------------------------------------------------------------
using F2 = std::function<Formula(const Formula&, const Formula&)>;

using Ref1 = std::function<double(double)>;
using Ref2 = std::function<double(double, double)>;
using Ref3 = std::function<double(double, double, double)>;

inline std::vector<OpCase> all_cases() {
  using namespace tessel;
  using GK = GradKind;
  std::vector<OpCase> cs;
  // Elementwise ops are built through the table (make), the same path as the public builders; a
  // binary or ternary op gets one case with equal dims and one per operand broadcast from dim 1.
  auto ew = [&](std::string name, OpCode op, std::vector<int64_t> ip, auto ref, std::vector<Draw> d,
                GK g = GK::Smooth, std::function<bool(const Point&)> ok = {}) {
    const int arity = op_info(op).arity;
    std::vector<std::vector<int>> shapes = {std::vector<int>(arity, 3)};
    for (int k = 0; k < arity && arity > 1; ++k) {
      shapes.push_back(std::vector<int>(arity, 1));
      shapes.back()[k] = 3;
      if (arity == 3) shapes.push_back(std::vector<int>(arity, 3)), shapes.back()[k] = 1;
    }
    for (const auto& dims : shapes) {
      std::string s = name + "_";
      for (int k : dims) s += std::to_string(k);
      auto build = [op, ip](const std::vector<Formula>& v) { return make(op, v, ip); };
      OpCase c{s, op, dims, build, ew_ref(ref), d, ok, g};
      cs.push_back(c);
    }
  };
  const CaseAdder vec(cs);
  const Draw u2 = uniform(-2, 2), tri = ints(-1, 1) /* ties are frequent */;
  const auto apart = [](double a, double b) { return std::fabs(a - b) > 1e-3; };
  // A binary vector op at several argument dims, each case named by them ("Concat23").
  auto vec_dims = [&](std::string name, OpCode op, std::vector<std::vector<int>> all,
                      Formula (*f)(const Formula&, const Formula&),
                      std::function<Vec(const Point&)> ref) {
    for (const auto& dims : all)
      vec(name + std::to_string(dims[0]) + std::to_string(dims[1]), op, dims,
          [f](auto& v) { return f(v[0], v[1]); }, ref, {u2});
  };

  // arithmetic
  ew("Add", OpCode::Add, {}, Ref2([](double x, double y) { return x + y; }), {u2});
  ew("Sub", OpCode::Sub, {}, Ref2([](double x, double y) { return x - y; }), {u2});
  ew("Mul", OpCode::Mul, {}, Ref2([](double x, double y) { return x * y; }), {u2});
  ew("Div", OpCode::Div, {}, Ref2([](double x, double y) { return x / y; }), {u2, away0(0.3, 2)});
  ew("Neg", OpCode::Neg, {}, Ref1([](double x) { return -x; }), {u2});
  // elementwise math
  ew("Exp", OpCode::Exp, {}, Ref1([](double x) { return std::exp(x); }), {u2});
  ew("Log", OpCode::Log, {}, Ref1([](double x) { return std::log(x); }), {uniform(0.1, 3)});
  const Ref1 xlogx_ref = [](double x) { return x == 0 ? 0.0 : x * std::log(x); };
  ew("XLogX", OpCode::XLogX, {}, xlogx_ref, {uniform(0.1, 3)});
  ew("XLogX_at0", OpCode::XLogX, {}, xlogx_ref,
     {[](Rng& r) { return r() & 1 ? 0.0 : unif(r, 0, 2); }}, GK::Skip);
  ew("Sqrt", OpCode::Sqrt, {}, Ref1([](double x) { return std::sqrt(x); }), {uniform(0.1, 4)});
  ew("Rsqrt", OpCode::Rsqrt, {}, Ref1([](double x) { return 1 / std::sqrt(x); }),
     {uniform(0.1, 4)});
  ew("Inv", OpCode::Inv, {}, Ref1([](double x) { return 1 / x; }), {away0(0.3, 3)});
  for (int n : {-3, -1, 0, 1, 2, 3, 5}) {
    const Ref1 pow_ref = [n](double x) {
      double r = 1;
      for (int k = 0; k < std::abs(n); ++k) r *= x;
      return n < 0 ? 1 / r : r;
    };
    ew("Pow" + std::to_string(n), OpCode::Pow, {n}, pow_ref, {away0(0.3, 2)});
  }
  ew("Powf", OpCode::Powf, {}, Ref2([](double x, double y) { return std::pow(x, y); }),
     {uniform(0.2, 3), u2});
  ew("Square", OpCode::Square, {}, Ref1([](double x) { return x * x; }), {u2});
  const Ref1 abs_ref = [](double x) { return x < 0 ? -x : x; };
  ew("Abs", OpCode::Abs, {}, abs_ref, {away0(0.05, 2)});
  ew("Abs_at0", OpCode::Abs, {}, abs_ref, {ints(-2, 2)}, GK::Skip);
  const Ref1 sign_ref = [](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; };
  ew("Sign", OpCode::Sign, {}, sign_ref, {grid_or_uniform(1, -2, 2)}, GK::Zero);
  ew("Step", OpCode::Step, {}, Ref1([](double x) { return x < 0 ? 0.0 : 1.0; }),
     {grid_or_uniform(1, -2, 2)}, GK::Zero);
  const Ref1 relu_ref = [](double x) { return x > 0 ? x : 0.0; };
  ew("ReLU", OpCode::ReLU, {}, relu_ref, {away0(0.05, 2)});
  ew("ReLU_at0", OpCode::ReLU, {}, relu_ref, {ints(-2, 2)}, GK::Skip);
  ew("Sin", OpCode::Sin, {}, Ref1([](double x) { return std::sin(x); }), {uniform(-3, 3)});
  ew("Cos", OpCode::Cos, {}, Ref1([](double x) { return std::cos(x); }), {uniform(-3, 3)});
  ew("Asin", OpCode::Asin, {}, Ref1([](double x) { return std::asin(x); }), {uniform(-.9, .9)});
  ew("Acos", OpCode::Acos, {}, Ref1([](double x) { return std::acos(x); }), {uniform(-.9, .9)});
  ew("Atan", OpCode::Atan, {}, Ref1([](double x) { return std::atan(x); }), {uniform(-3, 3)});
  // SinXDivX: around 0 (exact zeros, tiny, the series/closed-form switch at |x| = 1) and
  // at large |x|; singular::sin_x_div_x_ref is an independent long-double reference.
  const Ref1 sin_x_div_x_v = [](double x) {
    return static_cast<double>(tessel::singular::sin_x_div_x_ref(x, 0));
  };
  ew("SinXDivX", OpCode::SinXDivX, {}, sin_x_div_x_v, {uniform(-4, 4)});
  ew("SinXDivX_near0", OpCode::SinXDivX, {}, sin_x_div_x_v,
     {[](Rng& r) {
       const double pts[] = {0.0, -0.0, 1e-300, -3e-9, 1e-4, 0.999999, -1.000001, 1.0};
       return r() & 1 ? pts[r() % 8] : unif(r, -1.2, 1.2);
     }});
  ew("SinXDivX_large", OpCode::SinXDivX, {}, sin_x_div_x_v, {away0(1e2, 1e6)});
  ew("Atan2", OpCode::Atan2, {}, Ref2([](double y, double x) { return std::atan2(y, x); }),
     {away0(0.1, 2)});
  ew("Floor", OpCode::Floor, {}, Ref1([](double x) { return std::floor(x); }),
     {grid_or_uniform(1, -3, 3)}, GK::Zero);
  // Round(x, d): halves away from zero; the grids hold exact halves at the d-th decimal.
  const double round_grid[] = {0.5, 0.25, 0.125, 0.0625};
  for (int d : {0, 1, 2, 3}) {
    const double s = std::pow(10.0, d);
    const Ref1 round_ref = [s](double x) {
      return (x < 0 ? -1 : 1) * std::floor(std::fabs(x) * s + 0.5) / s;
    };
    ew("Round" + std::to_string(d), OpCode::Round, {d}, round_ref,
       {grid_or_uniform(round_grid[d], -12, 12)}, GK::Zero);
  }
  ew("Mod", OpCode::Mod, {},
     Ref3([](double a, double n, double d) { return a - n * std::floor((a - d) / n); }),
     {uniform(-5, 5), away0(0.5, 2), uniform(-1, 1)}, GK::Smooth,
     all_components([](double a, double n, double d) {  // away from the jumps
       const double q = (a - d) / n;
       return q - std::floor(q) > 0.01 && q - std::floor(q) < 0.99;
     }));
  const Ref3 clamp_ref = [](double x, double lo, double hi) {
    return x < lo ? lo : x > hi ? hi : x;
  };
  auto off_bounds = [](double x, double lo, double hi) {
    return std::fabs(x - lo) > 1e-3 && std::fabs(x - hi) > 1e-3;
  };
  ew("Clamp", OpCode::Clamp, {}, clamp_ref,
     {uniform(-2.5, 2.5), uniform(-1.5, -0.5), uniform(0.5, 1.5)}, GK::Smooth,
     all_components(off_bounds));
  // crossed bounds (lo > hi): x < lo gives lo, else x > hi gives hi
  ew("Clamp_crossed", OpCode::Clamp, {}, clamp_ref,
     {uniform(-2.5, 2.5), uniform(0.5, 1.5), uniform(-1.5, -0.5)}, GK::Smooth,
     all_components(off_bounds));
  const Ref1 clampint_ref = [](double x) { return x < -1 ? -1.0 : x > 2 ? 2.0 : x; };
  ew("ClampInt", OpCode::ClampInt, {-1, 2}, clampint_ref, {uniform(-3, 4)}, GK::Smooth,
     all_components([](double x) { return std::fabs(x + 1) > 1e-3 && std::fabs(x - 2) > 1e-3; }));
  ew("ClampInt_edges", OpCode::ClampInt, {-1, 2}, clampint_ref, {ints(-3, 4)}, GK::Skip);
  const Ref3 ifelse_ref = [](double c, double a, double b) { return c >= 0 ? a : b; };
  ew("IfElse", OpCode::IfElse, {}, ifelse_ref, {away0(0.1, 2), u2, u2});
  ew("IfElse_at0", OpCode::IfElse, {}, ifelse_ref, {ints(-1, 1), u2, u2}, GK::Skip);
  const Ref2 min_ref = [](double x, double y) { return x < y ? x : y; };
  const Ref2 max_ref = [](double x, double y) { return x > y ? x : y; };
  ew("ElemMin", OpCode::ElemMin, {}, min_ref, {u2}, GK::Smooth, all_components(apart));
  ew("ElemMax", OpCode::ElemMax, {}, max_ref, {u2}, GK::Smooth, all_components(apart));
  ew("ElemMin_ties", OpCode::ElemMin, {}, min_ref, {tri}, GK::Skip);
  ew("ElemMax_ties", OpCode::ElemMax, {}, max_ref, {tri}, GK::Skip);
  // comparisons give 1 or 0
  const std::pair<OpCode, Ref2> comparisons[] = {
      {OpCode::Less, [](double x, double y) { return x < y ? 1.0 : 0.0; }},
      {OpCode::LessEq, [](double x, double y) { return x <= y ? 1.0 : 0.0; }},
      {OpCode::Greater, [](double x, double y) { return x > y ? 1.0 : 0.0; }},
      {OpCode::GreaterEq, [](double x, double y) { return x >= y ? 1.0 : 0.0; }},
      {OpCode::Equal, [](double x, double y) { return x == y ? 1.0 : 0.0; }},
      {OpCode::NotEqual, [](double x, double y) { return x != y ? 1.0 : 0.0; }}};
  for (const auto& [op, ref] : comparisons) ew(op_info(op).name, op, {}, ref, {tri}, GK::Zero);

  // vector ops
  auto scalar = [](double v) { return Vec{v}; };
  vec(
      "Sum", OpCode::Sum, {4}, [](auto& v) { return sum(v[0]); },
      [=](const Point& p) {
        double s = 0;
        for (double x : p[0]) s += x;
        return scalar(s);
      },
      {u2});
  // Extremes: the first extreme component wins ties (strict comparisons while scanning).
  auto extreme = [=](bool is_max, bool is_arg) {
    return [=](const Point& p) {
      size_t best = 0;
      for (size_t c = 1; c < p[0].size(); ++c)
        if (is_max ? p[0][c] > p[0][best] : p[0][c] < p[0][best]) best = c;
      return scalar(is_arg ? static_cast<double>(best) : p[0][best]);
    };
  };
  auto distinct = [](const Point& p) {
    for (size_t a = 0; a < p[0].size(); ++a)
      for (size_t b = 0; b < a; ++b)
        if (std::fabs(p[0][a] - p[0][b]) < 1e-3) return false;
    return true;
  };
  vec(
      "Max", OpCode::Max, {4}, [](auto& v) { return max(v[0]); }, extreme(true, false), {u2},
      GK::Smooth, distinct);
  vec(
      "Min", OpCode::Min, {4}, [](auto& v) { return min(v[0]); }, extreme(false, false), {u2},
      GK::Smooth, distinct);
  vec("Max1", OpCode::Max, {1}, [](auto& v) { return max(v[0]); }, extreme(true, false), {u2});
  vec(
      "ArgMin1", OpCode::ArgMin, {1}, [](auto& v) { return argmin(v[0]); }, extreme(false, true),
      {u2}, GK::Zero);
  vec(
      "Max_ties", OpCode::Max, {5}, [](auto& v) { return max(v[0]); }, extreme(true, false), {tri},
      GK::Skip);
  vec(
      "Min_ties", OpCode::Min, {5}, [](auto& v) { return min(v[0]); }, extreme(false, false), {tri},
      GK::Skip);
  vec(
      "ArgMax", OpCode::ArgMax, {5}, [](auto& v) { return argmax(v[0]); }, extreme(true, true),
      {tri}, GK::Zero);
  vec(
      "ArgMin", OpCode::ArgMin, {5}, [](auto& v) { return argmin(v[0]); }, extreme(false, true),
      {tri}, GK::Zero);
  for (int m : {0, 2, 3})
    vec(
        "Elem" + std::to_string(m), OpCode::Elem, {4}, [m](auto& v) { return elem(v[0], m); },
        [=](const Point& p) { return scalar(p[0][m]); }, {u2});
  for (auto [st, len] : std::vector<std::pair<int, int>>{{0, 2}, {1, 2}, {3, 1}, {1, 3}})
    vec(
        "Extract" + std::to_string(st) + std::to_string(len), OpCode::Extract, {4},
        [st, len](auto& v) { return extract(v[0], st, len); },
        [st, len](const Point& p) { return Vec(p[0].begin() + st, p[0].begin() + st + len); },
        {u2});
  vec_dims("Concat", OpCode::Concat, {{2, 3}, {1, 1}, {3, 1}}, concat, [](const Point& p) {
    Vec r = p[0];
    r.insert(r.end(), p[1].begin(), p[1].end());
    return r;
  });
  vec(
      "OneHot", OpCode::OneHot, {1}, [](auto& v) { return one_hot(v[0], 4); },
      [](const Point& p) {
        Vec r(4, 0.0);
        const long k = std::lround(p[0][0]);
        if (k >= 0 && k < 4) r[k] = 1;
        return r;
      },
      {[](Rng& r) { return std::uniform_int_distribution<int>(-1, 5)(r) + unif(r, -0.4, 0.4); }},
      GK::Zero);
  auto dot = [](const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t c = 0; c < a.size(); ++c) s += a[c] * b[c];
    return s;
  };
  vec(
      "SqNorm2", OpCode::SqNorm2, {3}, [](auto& v) { return sqnorm2(v[0]); },
      [=](const Point& p) { return scalar(dot(p[0], p[0])); }, {u2});
  vec(
      "Norm2", OpCode::Norm2, {3}, [](auto& v) { return norm2(v[0]); },
      [=](const Point& p) { return scalar(std::sqrt(dot(p[0], p[0]))); }, {away0(0.2, 2)});
  for (int d : {3, 1})
    vec(
        "Normalize" + std::to_string(d), OpCode::Normalize, {d},
        [](auto& v) { return normalize(v[0]); },
        [=](const Point& p) {
          Vec r = p[0];
          const double n = std::sqrt(dot(p[0], p[0]));
          for (double& x : r) x /= n;
          return r;
        },
        {away0(0.2, 2)});
  auto sqdist_ref = [](const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t c = 0; c < a.size(); ++c) s += (a[c] - b[c]) * (a[c] - b[c]);
    return s;
  };
  vec(
      "SqDist", OpCode::SqDist, {3, 3}, [](auto& v) { return sqdist(v[0], v[1]); },
      [=](const Point& p) { return scalar(sqdist_ref(p[0], p[1])); }, {u2});
  vec(
      "Scalprod", OpCode::Scalprod, {3, 3}, [](auto& v) { return v[0] | v[1]; },
      [=](const Point& p) { return scalar(dot(p[0], p[1])); }, {u2});
  // Quadratic forms, directly and through WeightedSqNorm / WeightedSqDist's dispatch on the
  // weight's dim.
  auto quad = [](const Vec& w, const Vec& x) {
    const size_t d = x.size();
    double s = 0;
    for (size_t p = 0; p < d; ++p)
      for (size_t q = 0; q < d; ++q) {
        const double wpq = w.size() == 1   ? (p == q ? w[0] : 0)
                           : w.size() == d ? (p == q ? w[p] : 0)
                                           : w[p * d + q];
        s += x[p] * wpq * x[q];
      }
    return s;
  };
  const std::pair<OpCode, int> weights[] = {
      {OpCode::SqNormIso, 1}, {OpCode::SqNormDiag, 3}, {OpCode::SymSqNorm, 9}};
  for (auto [op, wd] : weights) {
    const std::string n = std::to_string(wd);
    F2 direct = op == OpCode::SqNormIso    ? F2(sqnorm_iso)
                : op == OpCode::SqNormDiag ? F2(sqnorm_diag)
                                           : F2(sym_sqnorm);
    vec(
        std::string(op_info(op).name), op, {wd, 3},
        [direct](auto& v) { return direct(v[0], v[1]); },
        [=](const Point& p) { return scalar(quad(p[0], p[1])); }, {u2});
    vec(
        "WeightedSqNorm" + n, op, {wd, 3}, [](auto& v) { return weighted_sqnorm(v[0], v[1]); },
        [=](const Point& p) { return scalar(quad(p[0], p[1])); }, {u2});
    vec(
        "WeightedSqDist" + n, op, {wd, 3, 3},
        [](auto& v) { return weighted_sqdist(v[0], v[1], v[2]); },
        [=](const Point& p) {
          Vec d(3);
          for (int c = 0; c < 3; ++c) d[c] = p[1][c] - p[2][c];
          return scalar(quad(p[0], d));
        },
        {u2});
  }
  // tensor ops
  auto matvec = [](const Vec& m, const Vec& v) {
    Vec r(m.size() / v.size(), 0.0);
    for (size_t i = 0; i < r.size(); ++i)
      for (size_t j = 0; j < v.size(); ++j) r[i] += m[i * v.size() + j] * v[j];
    return r;
  };
  vec_dims("MatVecMult", OpCode::MatVecMult, {{6, 3}, {6, 2}, {3, 1}, {3, 3}}, matvecmult,
           [=](const Point& p) { return matvec(p[0], p[1]); });
  vec_dims("VecMatMult", OpCode::VecMatMult, {{2, 6}, {3, 6}, {1, 3}}, vecmatmult,
           [](const Point& p) {
             const size_t m = p[0].size(), n = p[1].size() / m;
             Vec r(n, 0.0);
             for (size_t j = 0; j < n; ++j)
               for (size_t i = 0; i < m; ++i) r[j] += p[0][i] * p[1][i * n + j];
             return r;
           });
  vec_dims("TensorProd", OpCode::TensorProd, {{2, 3}, {3, 1}, {1, 2}}, tensorprod,
           [](const Point& p) {
             Vec r;
             for (double a : p[0])
               for (double b : p[1]) r.push_back(a * b);
             return r;
           });
  for (const TdConfig& t : tensordot_configs())
    vec(
        "TensorDot_" + t.name, OpCode::TensorDot, {prod(t.dims_a), prod(t.dims_b)},
        [t](auto& v) { return build_tensordot(t, v[0], v[1]); },
        [t](const Point& p) { return tensordot_ref(t, p[0], p[1]); }, {u2});
  add_complex_cases(cs);
  add_linear_cases(cs);
  add_sequence_cases(cs);
  return cs;
}

}  // namespace op_cases

#include "op_cases_sequence.hpp"
