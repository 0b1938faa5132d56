// Op values: every op against an independent float64 reference, Lanes against double, dim rules,
// and simplifications that must not change values.
#include <gtest/gtest.h>

#include <set>

#include "op_cases.hpp"
#include "tessel/error.hpp"

using namespace tessel;
using namespace op_cases;

namespace {

const std::vector<OpCase>& cases() {
  static const std::vector<OpCase> cs = all_cases();
  return cs;
}

std::string show(const Vec& v) {
  std::string s = "[";
  for (size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + std::to_string(v[k]);
  return s + "]";
}

}  // namespace

// A new op without a case makes this fail: each op must be the root of some case's formula.
TEST(OpValues, EveryOpHasACase) {
  std::set<OpCode> covered;
  for (const OpCase& c : cases()) {
    const Formula f = c.build(make_vars(c));
    if (f.node().op == c.op) covered.insert(c.op);
  }
  for (int k = static_cast<int>(OpCode::Add); k < static_cast<int>(OpCode::Count_); ++k) {
    const OpCode op = static_cast<OpCode>(k);
    EXPECT_TRUE(covered.count(op)) << "no value case for op " << op_info(op).name;
    EXPECT_NE(op_info(op).apply_d, nullptr) << op_info(op).name;
    EXPECT_NE(op_info(op).apply_l, nullptr) << op_info(op).name;
    EXPECT_NE(op_info(op).apply_e, nullptr) << op_info(op).name;
    EXPECT_NE(op_info(op).vjp, nullptr) << op_info(op).name;
  }
}

// The elementwise cases build through make(); the public builders must give the very same nodes.
TEST(OpValues, PublicBuildersMatchTheTable) {
  const Formula a = vi(0, 3), b = vj(1, 3), c = pm(2, 3);
  auto m = [](OpCode op, std::vector<Formula> args, std::vector<int64_t> ip = {}) {
    return make(op, std::move(args), std::move(ip));
  };
  const std::pair<Formula, Formula> pairs[] = {
      {exp(a), m(OpCode::Exp, {a})},
      {log(a), m(OpCode::Log, {a})},
      {xlogx(a), m(OpCode::XLogX, {a})},
      {sqrt(a), m(OpCode::Sqrt, {a})},
      {rsqrt(a), m(OpCode::Rsqrt, {a})},
      {inv(a), m(OpCode::Inv, {a})},
      {square(a), m(OpCode::Square, {a})},
      {abs(a), m(OpCode::Abs, {a})},
      {sign(a), m(OpCode::Sign, {a})},
      {step(a), m(OpCode::Step, {a})},
      {relu(a), m(OpCode::ReLU, {a})},
      {sin(a), m(OpCode::Sin, {a})},
      {cos(a), m(OpCode::Cos, {a})},
      {asin(a), m(OpCode::Asin, {a})},
      {acos(a), m(OpCode::Acos, {a})},
      {atan(a), m(OpCode::Atan, {a})},
      {sin_x_div_x(a), m(OpCode::SinXDivX, {a})},
      {floor(a), m(OpCode::Floor, {a})},
      {powf(a, b), m(OpCode::Powf, {a, b})},
      {atan2(a, b), m(OpCode::Atan2, {a, b})},
      {elem_min(a, b), m(OpCode::ElemMin, {a, b})},
      {elem_max(a, b), m(OpCode::ElemMax, {a, b})},
      {less(a, b), m(OpCode::Less, {a, b})},
      {less_eq(a, b), m(OpCode::LessEq, {a, b})},
      {greater(a, b), m(OpCode::Greater, {a, b})},
      {greater_eq(a, b), m(OpCode::GreaterEq, {a, b})},
      {equal(a, b), m(OpCode::Equal, {a, b})},
      {not_equal(a, b), m(OpCode::NotEqual, {a, b})},
      {a + b, m(OpCode::Add, {a, b})},
      {a - b, m(OpCode::Sub, {a, b})},
      {a * b, m(OpCode::Mul, {a, b})},
      {a / b, m(OpCode::Div, {a, b})},
      {-a, m(OpCode::Neg, {a})},
      {pow(a, 3), m(OpCode::Pow, {a}, {3})},
      {pow(a, -3), m(OpCode::Pow, {a}, {-3})},
      {round(a), m(OpCode::Round, {a}, {0})},
      {mod(a, b, c), m(OpCode::Mod, {a, b, c})},
      {clamp(a, b, c), m(OpCode::Clamp, {a, b, c})},
      {clampint(a, -1, 2), m(OpCode::ClampInt, {a}, {-1, 2})},
      {diff_clampint(a, -1, 2), m(OpCode::DiffClampInt, {a}, {-1, 2})},
      {ifelse(a, b, c), m(OpCode::IfElse, {a, b, c})},
  };
  for (const auto& [pub, tab] : pairs)
    EXPECT_TRUE(pub.same(tab)) << pub.str() << " vs " << tab.str();
}

TEST(OpValues, MatchIndependentReference) {
  Rng rng(12345);
  for (const OpCase& c : cases()) {
    if (!c.ref) continue;
    const Formula f = c.build(make_vars(c));
    for (int trial = 0; trial < 8; ++trial) {
      const Point p = sample(c, rng);
      const Vec want = c.ref(p), got = eval_at(f, p);
      ASSERT_EQ(static_cast<int>(want.size()), f.dim()) << c.name;
      ASSERT_EQ(got.size(), want.size()) << c.name;
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_TRUE(close(got[i], want[i], 1e-12))
            << c.name << " component " << i << ": got " << got[i] << ", want " << want[i]
            << " at x0 = " << show(p[0]) << (p.size() > 1 ? ", x1 = " + show(p[1]) : "")
            << (p.size() > 2 ? ", x2 = " + show(p[2]) : "");
    }
  }
}

// The tile interpreter's apply<Lanes> with lane l holding point l equals apply<double> on each
// point.
TEST(OpValues, LanesMatchDouble) {
  Rng rng(777);
  for (const OpCase& c : cases()) {
    const Formula f = c.build(make_vars(c));
    const Node& n = f.node();
    if (n.args.empty()) continue;
    const OpInfo& o = op_info(n.op);
    std::vector<std::vector<Lanes>> la(n.args.size());
    std::vector<std::vector<Vec>> da(kLanes);  // da[l][k]: argument k at point l
    for (size_t k = 0; k < n.args.size(); ++k) la[k].resize(n.args[k]->dim);
    for (int l = 0; l < kLanes; ++l) {
      const Point p = sample(c, rng);
      for (size_t k = 0; k < n.args.size(); ++k) {
        da[l].push_back(eval_at(Formula(n.args[k]), p));
        for (int i = 0; i < n.args[k]->dim; ++i) la[k][i].v[l] = da[l][k][i];
      }
    }
    std::vector<const Lanes*> lptr;
    for (auto& a : la) lptr.push_back(a.data());
    std::vector<Lanes> lout(n.dim);
    o.apply_l(n, lptr.data(), lout.data());
    for (int l = 0; l < kLanes; ++l) {
      std::vector<const double*> dptr;
      for (auto& a : da[l]) dptr.push_back(a.data());
      Vec dout(n.dim);
      o.apply_d(n, dptr.data(), dout.data());
      for (int i = 0; i < n.dim; ++i)
        EXPECT_TRUE(close(lout[i].v[l], dout[i], 1e-15))
            << c.name << " lane " << l << " component " << i << ": lanes " << lout[i].v[l]
            << ", double " << dout[i];
    }
  }
}

TEST(OpValues, TensorDotHandExamples) {
  const Vec a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9, 10, 11, 12};
  const Formula x = vi(0, 6), y = vj(1, 6);
  const std::map<int, Vec> v = {{0, a}, {1, b}};
  // (2×3)·(3×2)
  EXPECT_EQ(eval_point(tensordot(x, y, {2, 3}, {3, 2}, {1}, {0}), v), (Vec{58, 64, 139, 154}));
  // (2×3)·(2×3)^T: contract the last axes
  EXPECT_EQ(eval_point(tensordot(x, y, {2, 3}, {2, 3}, {1}, {1}), v), (Vec{50, 68, 122, 167}));
  // (2×3)^T·(2×3): contract the first axes -> 3×3
  EXPECT_EQ(eval_point(tensordot(x, y, {2, 3}, {2, 3}, {0}, {0}), v),
            (Vec{47, 52, 57, 64, 71, 78, 81, 90, 99}));
  // full contraction, paired in order and transposed
  EXPECT_EQ(eval_point(tensordot(x, y, {2, 3}, {2, 3}, {0, 1}, {0, 1}), v), (Vec{217}));
  EXPECT_EQ(eval_point(tensordot(x, y, {2, 3}, {3, 2}, {1, 0}, {0, 1}), v),
            (Vec{1 * 7 + 2 * 9 + 3 * 11 + 4 * 8 + 5 * 10 + 6 * 12}));
  // outer product equals TensorProd
  EXPECT_EQ(eval_point(tensordot(x, y, {6}, {6}, {}, {}), v), eval_point(tensorprod(x, y), v));
  EXPECT_EQ(tensordot(x, y, {2, 3}, {3, 2}, {1}, {0}).dim(), 4);
  EXPECT_EQ(tensordot(x, y, {6}, {6}, {}, {}).dim(), 36);
  // KeOps's permutation: pre-permutation axis q goes to output position perm[q]. Here the pre
  // axes (i, j, k) of a[i,j] b[k] are sent to positions (1, 2, 0): out[k,i,j] = a[i,j] b[k].
  const Formula z = vj(2, 2);
  const std::map<int, Vec> w = {{0, a}, {2, {7, 8}}};
  EXPECT_EQ(eval_point(tensordot(x, z, {2, 3}, {2}, {}, {}, {1, 2, 0}), w),
            (Vec{7, 14, 21, 28, 35, 42, 8, 16, 24, 32, 40, 48}));
  // and the same from the KeOps text
  EXPECT_EQ(eval_point(parse("TensorDot(X, Z, (2,3), (2), (), (), (1,2,0))",
                             {"X = Vi(0,6)", "Z = Vj(2,2)"}),
                       w),
            (Vec{7, 14, 21, 28, 35, 42, 8, 16, 24, 32, 40, 48}));
}

TEST(OpValues, WeightedSqNormDispatchesOnWeightDim) {
  const Formula x = vi(0, 3), y = vj(1, 3);
  EXPECT_EQ(weighted_sqnorm(pm(2, 1), x).node().op, OpCode::SqNormIso);
  EXPECT_EQ(weighted_sqnorm(pm(2, 3), x).node().op, OpCode::SqNormDiag);
  EXPECT_EQ(weighted_sqnorm(pm(2, 9), x).node().op, OpCode::SymSqNorm);
  EXPECT_EQ(weighted_sqdist(pm(2, 9), x, y).node().op, OpCode::SymSqNorm);
  EXPECT_THROW(weighted_sqnorm(pm(2, 4), x), Error);
  EXPECT_THROW(weighted_sqdist(pm(2, 2), x, y), Error);
  // dim-1 vector: weight of dim 1 is the isotropic form
  EXPECT_EQ(weighted_sqnorm(pm(2, 1), vi(0, 1)).node().op, OpCode::SqNormIso);
}

TEST(OpValues, DimRules) {
  const Formula x3 = vi(0, 3), y3 = vj(1, 3), s = pm(2, 1), m6 = pm(3, 6), x2 = vi(4, 2);
  EXPECT_EQ((x3 + s).dim(), 3);
  EXPECT_EQ((s - x3).dim(), 3);
  EXPECT_EQ(powf(s, x3).dim(), 3);
  EXPECT_EQ(atan2(x3, s).dim(), 3);
  EXPECT_EQ(mod(s, x3, s).dim(), 3);
  EXPECT_EQ(clamp(s, s, x3).dim(), 3);
  EXPECT_EQ(ifelse(x3, s, s).dim(), 3);
  EXPECT_EQ(less(s, x3).dim(), 3);
  EXPECT_THROW(x3 * x2, Error);
  EXPECT_THROW(elem_min(x3, x2), Error);
  EXPECT_THROW(clamp(x3, x2, s), Error);
  EXPECT_THROW(ifelse(s, x3, x2), Error);
  EXPECT_EQ(sum(x3).dim(), 1);
  EXPECT_EQ(max(x3).dim(), 1);
  EXPECT_EQ(argmin(x3).dim(), 1);
  EXPECT_EQ(concat(x3, x2).dim(), 5);
  EXPECT_EQ(extract(x3, 1, 2).dim(), 2);
  EXPECT_THROW(extract(x3, -1, 2), Error);
  EXPECT_THROW(extract(x3, 0, 0), Error);
  EXPECT_THROW(elem(x3, -1), Error);
  EXPECT_EQ(one_hot(s, 5).dim(), 5);
  EXPECT_THROW(one_hot(x3, 5), Error);
  EXPECT_THROW(one_hot(s, 0), Error);
  EXPECT_EQ(normalize(x3).dim(), 3);
  EXPECT_THROW(sqdist(x3, x2), Error);
  EXPECT_THROW(x3 | x2, Error);
  EXPECT_THROW(sqnorm_iso(x2, x3), Error);
  EXPECT_THROW(sqnorm_diag(x2, x3), Error);
  EXPECT_THROW(sym_sqnorm(m6, x3), Error);
  EXPECT_EQ(sym_sqnorm(pm(5, 4), x2).dim(), 1);
  EXPECT_EQ(matvecmult(m6, x3).dim(), 2);
  EXPECT_EQ(matvecmult(m6, x2).dim(), 3);
  EXPECT_THROW(matvecmult(m6, vi(6, 4)), Error);
  EXPECT_EQ(vecmatmult(x2, m6).dim(), 3);
  EXPECT_THROW(vecmatmult(vi(6, 4), m6), Error);
  EXPECT_EQ(tensorprod(x3, x2).dim(), 6);
  EXPECT_THROW(clampint(x3, 2, 1), Error);
  // TensorDot: sizes, axes and pairs are checked, and every failure is a tessel::Error
  EXPECT_THROW(tensordot(m6, x3, {2, 3}, {3}, {0}, {0}), Error);           // sizes 2 vs 3
  EXPECT_THROW(tensordot(m6, x3, {2, 2}, {3}, {1}, {0}), Error);           // dims do not multiply
  EXPECT_THROW(tensordot(m6, x3, {2, 3}, {3}, {1}, {}), Error);            // unpaired
  EXPECT_THROW(tensordot(m6, x3, {2, 3}, {3}, {2}, {0}), Error);           // axis out of range
  EXPECT_THROW(tensordot(m6, m6, {2, 3}, {2, 3}, {0, 0}, {0, 1}), Error);  // repeated axis
  EXPECT_THROW(tensordot(x3, x3, {3}, {3}, {0, 0, 0}, {0, 0, 0}), Error);  // too many axes
  EXPECT_THROW(tensordot(m6, x3, {2, 0, 3}, {3}, {2}, {0}), Error);        // zero size
}

// ---- simplifications keep values ----------------------------------------------------------------
namespace {

struct Gen {
  Formula f;
  Vec v;
};

// Random formulas over x (dim 3), y (dim 1), zeros, ones and other constants; the expected value is
// computed alongside, by the plain arithmetic the formula denotes, before any simplification.
class RandomFormulas {
 public:
  RandomFormulas(Rng& rng, Vec xv, Vec yv) : rng_(rng), xv_(std::move(xv)), yv_(std::move(yv)) {}

  Gen gen(int d, int depth) {
    if (depth == 0 || pick(5) == 0) return leaf(d);
    switch (pick(14)) {
      case 0:
        return bin(
            d, depth, [](const Formula& a, const Formula& b) { return a + b; }, std::plus<>());
      case 1:
        return bin(
            d, depth, [](const Formula& a, const Formula& b) { return a - b; }, std::minus<>());
      case 2:
        return bin(
            d, depth, [](const Formula& a, const Formula& b) { return a * b; },
            std::multiplies<>());
      case 3: {  // denominators that are never 0
        const Gen a = gen(d, depth - 1);
        const int dd = d == 1 || pick(2) ? 1 : 3;
        Gen den;
        switch (pick(4)) {
          case 0:
            den = {constant(1.0), {1.0}};
            break;
          case 1:
            den = {int_cst(-1), {-1.0}};
            break;
          case 2:
            den = {rational(1, 2), {0.5}};
            break;
          default: {
            const Gen b = gen(dd, depth - 1);
            den = {1.5 + square(b.f), map1(b.v, [](double t) { return 1.5 + t * t; })};
          }
        }
        return {a.f / den.f, map2(a.v, den.v, std::divides<>())};
      }
      case 4: {
        const Gen a = gen(d, depth - 1);
        return {-a.f, map1(a.v, std::negate<>())};
      }
      case 5: {
        const Gen a = gen(d, depth - 1);
        switch (pick(5)) {
          case 0:
            return {square(a.f), map1(a.v, [](double t) { return t * t; })};
          case 1:
            return {sin(a.f), map1(a.v, [](double t) { return std::sin(t); })};
          case 2:
            return {abs(a.f), map1(a.v, [](double t) { return std::fabs(t); })};
          case 3:
            return {relu(a.f), map1(a.v, [](double t) { return t > 0 ? t : 0.0; })};
          default:
            return {atan(a.f), map1(a.v, [](double t) { return std::atan(t); })};
        }
      }
      case 6: {
        const Gen a = gen(d, depth - 1);
        const int n = pick(4);
        return {pow(a.f, n), map1(a.v, [n](double t) { return n == 0 ? 1.0 : std::pow(t, n); })};
      }
      case 7: {
        const Gen a = gen(d, depth - 1);
        return {clampint(a.f, -1, 1), map1(a.v, [](double t) {
                  return t < -1 ? -1.0 : t > 1 ? 1.0 : t;
                })};
      }
      case 8: {  // c1 * (c2 * a): merged constants
        const Gen a = gen(d, depth - 1);
        const double c1 = pick(5) - 2.0, c2 = 0.5 * (pick(5) - 2.0);
        return {constant(c1) * (constant(c2) * a.f),
                map1(a.v, [=](double t) { return c1 * (c2 * t); })};
      }
      case 9: {  // a + (-b), a - a, a * a
        const Gen a = gen(d, depth - 1), b = gen(d, depth - 1);
        switch (pick(3)) {
          case 0:
            return {a.f + (-b.f), map2(a.v, b.v, std::minus<>())};
          case 1:
            return {a.f - a.f, Vec(d, 0.0)};
          default:
            return {a.f * a.f, map1(a.v, [](double t) { return t * t; })};
        }
      }
      case 10:
        if (d == 1) {  // reductions of a dim-3 formula
          const Gen a = gen(3, depth - 1), b = gen(3, depth - 1);
          const int m = pick(3);
          switch (pick(6)) {
            case 0:
              return {sum(a.f), {a.v[0] + a.v[1] + a.v[2]}};
            case 1:
              return {sqnorm2(a.f), {a.v[0] * a.v[0] + a.v[1] * a.v[1] + a.v[2] * a.v[2]}};
            case 2:
              return {elem(a.f, m), {a.v[m]}};
            case 3:
              return {a.f | b.f, {a.v[0] * b.v[0] + a.v[1] * b.v[1] + a.v[2] * b.v[2]}};
            case 4:
              return {max(a.f), {std::max({a.v[0], a.v[1], a.v[2]})}};
            default:
              return {extract(a.f, m, 1), {a.v[m]}};
          }
        } else {  // dim 3 from pieces
          const Gen a = gen(3, depth - 1), b = gen(1, depth - 1);
          switch (pick(3)) {
            case 0:
              return {concat(extract(a.f, 0, 2), b.f), {a.v[0], a.v[1], b.v[0]}};
            case 1:
              return {concat(b.f, extract(a.f, 1, 2)), {b.v[0], a.v[1], a.v[2]}};
            default:
              return {extract(a.f, 0, 3), a.v};
          }
        }
      case 11: {  // scalar products and sums with explicit zeros
        const Gen a = gen(d, depth - 1);
        if (d == 3) return {sum(a.f) * zero(3) + a.f, a.v};
        return {(zero(3) | gen(3, depth - 1).f) + a.f, a.v};
      }
      case 12: {  // one-hot selection
        const int m = pick(3);
        const Gen a = gen(3, depth - 1);
        return d == 1 ? Gen{a.f | one_hot(int_cst(m), 3), {a.v[m]}}
                      : Gen{a.f * one_hot(int_cst(m), 3),
                            {m == 0 ? a.v[0] : 0.0, m == 1 ? a.v[1] : 0.0, m == 2 ? a.v[2] : 0.0}};
      }
      default: {  // ifelse on a constant or a variable condition
        const Gen c = gen(1, depth - 1), a = gen(d, depth - 1), b = gen(d, depth - 1);
        return {ifelse(c.f, a.f, b.f), c.v[0] >= 0 ? bcast(a.v, d) : bcast(b.v, d)};
      }
    }
  }

 private:
  int pick(int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng_); }
  static Vec bcast(const Vec& v, int d) {
    return v.size() == static_cast<size_t>(d) ? v : Vec(d, v[0]);
  }
  template <class Fn>
  static Vec map1(const Vec& a, Fn fn) {
    Vec r(a.size());
    for (size_t c = 0; c < a.size(); ++c) r[c] = fn(a[c]);
    return r;
  }
  template <class Fn>
  static Vec map2(const Vec& a, const Vec& b, Fn fn) {
    Vec r(std::max(a.size(), b.size()));
    for (size_t c = 0; c < r.size(); ++c) r[c] = fn(bc(a, c), bc(b, c));
    return r;
  }
  template <class FF, class Fn>
  Gen bin(int d, int depth, FF ff, Fn fn) {
    int da = d, db = d;
    if (d == 3 && pick(3) == 0) (pick(2) ? da : db) = 1;
    const Gen a = gen(da, depth - 1), b = gen(db, depth - 1);
    return {ff(a.f, b.f), map2(a.v, b.v, fn)};
  }
  Gen leaf(int d) {
    if (d == 3) {
      switch (pick(3)) {
        case 0:
          return {zero(3), Vec(3, 0.0)};
        default:
          return {vi(0, 3), xv_};
      }
    }
    switch (pick(10)) {
      case 0:
        return {vj(1, 1), yv_};
      case 1:
        return {zero(1), {0.0}};
      case 2:
        return {constant(0.0), {0.0}};
      case 3:
        return {constant(1.0), {1.0}};
      case 4:
        return {constant(-1.0), {-1.0}};
      case 5:
        return {constant(2.5), {2.5}};
      case 6:
        return {int_cst(2), {2.0}};
      case 7:
        return {rational(1, 2), {0.5}};
      case 8:
        return {elem(vi(0, 3), 1), {xv_[1]}};
      default:
        return {vj(1, 1), yv_};
    }
  }
  Rng& rng_;
  Vec xv_, yv_;
};

}  // namespace

TEST(OpValues, SimplificationsKeepValues) {
  Rng rng(2024);
  int simplified = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const Vec xv = {unif(rng, -2, 2), unif(rng, -2, 2), unif(rng, -2, 2)}, yv = {unif(rng, -2, 2)};
    RandomFormulas gen(rng, xv, yv);
    const int d = trial % 2 ? 3 : 1;
    const Gen g = gen.gen(d, 4);
    ASSERT_EQ(g.f.dim(), d) << g.f.str();
    ASSERT_EQ(g.v.size(), static_cast<size_t>(d));
    simplified += g.f.node().is_const() || g.f.node().op == OpCode::Zero;
    const Vec got = eval_at(g.f, {xv, yv});
    for (int i = 0; i < d; ++i)
      EXPECT_TRUE(close(got[i], g.v[i], 1e-10))
          << g.f.str() << " component " << i << ": got " << got[i] << ", want " << g.v[i];
  }
  EXPECT_GT(simplified, 10);  // folding and zero rules did fire
}

TEST(OpValues, SpecificSimplificationsKeepValues) {
  const Formula x = vi(0, 3), s = vj(1, 1);
  const std::map<int, Vec> v = {{0, {0.5, -1.5, 2.0}}, {1, {-0.75}}};
  auto expect_values = [&](const Formula& f, const Vec& want) {
    const Vec got = eval_point(f, v);
    ASSERT_EQ(got.size(), want.size()) << f.str();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(close(got[i], want[i], 1e-14)) << f.str();
  };
  expect_values(pow(x, 0), {1, 1, 1});
  expect_values(pow(s, 0), {1});
  expect_values(x + zero(1), {0.5, -1.5, 2.0});       // broadcast: stays dim 3
  expect_values(s + zero(3), {-0.75, -0.75, -0.75});  // broadcast: must not become s
  expect_values(s * constant(1.0) + zero(3), {-0.75, -0.75, -0.75});
  expect_values(zero(3) - s, {0.75, 0.75, 0.75});
  expect_values(s - zero(3), {-0.75, -0.75, -0.75});
  expect_values(s * 1.0 * (x * 0.0 + 1.0), {-0.75, -0.75, -0.75});
  expect_values(constant(1.0) / s + zero(3), {-4.0 / 3, -4.0 / 3, -4.0 / 3});
  expect_values(constant(1.0) * x, {0.5, -1.5, 2.0});
  expect_values(s * constant(-1.0) * x, {0.375, -1.125, 1.5});
  expect_values(constant(-1.0) * s + x, {1.25, -0.75, 2.75});
  expect_values(2.0 * (3.0 * x), {3, -9, 12});
  expect_values(x * 2.0 * 3.0, {3, -9, 12});
  expect_values(x + (-(x * s)), {0.875, -2.625, 3.5});
  expect_values(sum(zero(3)) + s, {-0.75});
  expect_values(concat(zero(1), zero(2)) + x, {0.5, -1.5, 2.0});
  expect_values(exp(constant(0.0)) * x, {0.5, -1.5, 2.0});
  expect_values(clampint(constant(5.0), 0, 3) * s, {-2.25});
  expect_values(pow(constant(2.0), -3) * s, {-0.09375});
  expect_values(xlogx(zero(3)) + 1.0, {1, 1, 1});
  expect_values(step(zero(3)), {1, 1, 1});  // Step(0) = 1: not zero-preserving
  expect_values(cos(zero(2)) + extract(x, 0, 2), {1.5, -0.5});
  expect_values(one_hot(constant(1.0), 3) * x, {0, -1.5, 0});
  expect_values(one_hot(constant(1.0), 1) + s, {-0.75});
  expect_values(normalize(constant(-2.0)) * s, {0.75});
}
