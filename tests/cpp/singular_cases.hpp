// Every op at and near its singular points, batched into a few reductions, with float64 references
// that follow the conventions of docs/conventions.md (shared by the CPU and emulated CUDA tests).
#pragma once

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "reduction_helpers.hpp"

namespace tessel::singular {

using Vec = std::vector<double>;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kRows = 5;  // points per case: row 0 (and more, see `singular`) on the singular point

// A unary op: value, first and second derivative in closed form, conventions included.
struct UnaryCase {
  std::string name;
  std::function<Formula(const Formula&)> op;
  std::function<double(double)> v, d1, d2;
  Vec at;  // kRows points
};

// sin(x)/x (order 0) and its first and second derivatives in long double: the Taylor series
// below |x| = 2 (30 terms: the remainder is below 1e-40), the closed forms above.
inline long double sin_x_div_x_ref(double xd, int order) {
  const long double x = xd;
  if (std::fabs(xd) < 2) {
    long double sum = 0, c = 1;  // c = (-1)^k / (2k+1)!
    for (int k = 0; k < 30; ++k, c /= -(2.0L * k) * (2.0L * k + 1)) {
      const int e = 2 * k;
      if (e < order) continue;
      const long double falling = order == 0 ? 1 : order == 1 ? e : e * (e - 1.0L);
      sum += c * falling * std::pow(x, e - order);
    }
    return sum;
  }
  const long double v = std::sin(x) / x, d1 = (x * std::cos(x) - std::sin(x)) / (x * x);
  return order == 0 ? v : order == 1 ? d1 : -v - 2 * d1 / x;
}

inline double sgn(double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }

inline const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cs = {
      {"Sqrt", [](const Formula& a) { return sqrt(a); }, [](double x) { return std::sqrt(x); },
       [](double x) { return x == 0 ? 0.0 : 0.5 / std::sqrt(x); },
       [](double x) { return x == 0 ? 0.0 : -0.25 * std::pow(x, -1.5); }, {0.0, -0.0, 1e-3, 0.3, 2}},
      {"Rsqrt", [](const Formula& a) { return rsqrt(a); },
       [](double x) { return x == 0 ? 0.0 : 1 / std::sqrt(x); },
       [](double x) { return x == 0 ? 0.0 : -0.5 * std::pow(x, -1.5); },
       [](double x) { return x == 0 ? 0.0 : 0.75 * std::pow(x, -2.5); }, {0.0, -0.0, 1e-3, 0.3, 2}},
      {"Abs", [](const Formula& a) { return abs(a); }, [](double x) { return std::fabs(x); }, sgn,
       [](double) { return 0.0; }, {0.0, -0.0, 1e-3, -1e-3, 1.5}},
      {"Sign", [](const Formula& a) { return sign(a); }, sgn, [](double) { return 0.0; },
       [](double) { return 0.0; }, {0.0, -0.0, 1e-3, -1e-3, -2}},
      {"Step", [](const Formula& a) { return step(a); }, [](double x) { return x < 0 ? 0.0 : 1.0; },
       [](double) { return 0.0; }, [](double) { return 0.0; }, {0.0, -0.0, 1e-3, -1e-3, 2}},
      {"ReLU", [](const Formula& a) { return relu(a); }, [](double x) { return x < 0 ? 0.0 : x; },
       [](double x) { return x < 0 ? 0.0 : 1.0; }, [](double) { return 0.0; },
       {0.0, -0.0, 1e-3, -1e-3, 2}},
      // sin(x)/x: 1 at 0, derivatives 0 and -1/3 there (the series branch of its VJP).
      {"SinXDivX", [](const Formula& a) { return sin_x_div_x(a); },
       [](double x) { return static_cast<double>(sin_x_div_x_ref(x, 0)); },
       [](double x) { return static_cast<double>(sin_x_div_x_ref(x, 1)); },
       [](double x) { return static_cast<double>(sin_x_div_x_ref(x, 2)); },
       {0.0, -0.0, 1e-8, 1, -30}},
      // Poles: IEEE infinities, no convention needed.
      {"Log", [](const Formula& a) { return log(a); }, [](double x) { return std::log(x); },
       [](double x) { return 1 / x; }, [](double x) { return -1 / (x * x); }, {0.0, 1e-3, 0.5, 1, 3}},
      {"Inv", [](const Formula& a) { return inv(a); }, [](double x) { return 1 / x; },
       [](double x) { return -1 / (x * x); }, [](double x) { return 2 / (x * x * x); },
       {0.0, 1e-3, -1e-3, 0.5, -2}},
      {"Pow-2", [](const Formula& a) { return pow(a, -2); }, [](double x) { return 1 / (x * x); },
       [](double x) { return -2 / (x * x * x); }, [](double x) { return 6 / (x * x * x * x); },
       {0.0, 1e-3, -1e-3, 0.5, -2}},
      {"XLogX", [](const Formula& a) { return xlogx(a); },
       [](double x) { return x == 0 ? 0.0 : x * std::log(x); },
       [](double x) { return std::log(x) + 1; }, [](double x) { return 1 / x; },
       {0.0, 1e-3, 0.5, 1, 2}},
      // Asin/Acos: the derivative goes through Rsqrt(1 - x^2), hence 0 at +-1 (KeOps's too).
      {"Asin", [](const Formula& a) { return asin(a); }, [](double x) { return std::asin(x); },
       [](double x) { return std::fabs(x) == 1 ? 0.0 : 1 / std::sqrt(1 - x * x); },
       [](double x) { return std::fabs(x) == 1 ? 0.0 : x * std::pow(1 - x * x, -1.5); },
       {1.0, -1.0, 0.999, -0.999, 0.3}},
      {"Acos", [](const Formula& a) { return acos(a); }, [](double x) { return std::acos(x); },
       [](double x) { return std::fabs(x) == 1 ? 0.0 : -1 / std::sqrt(1 - x * x); },
       [](double x) { return std::fabs(x) == 1 ? 0.0 : -x * std::pow(1 - x * x, -1.5); },
       {1.0, -1.0, 0.999, -0.999, 0.3}},
      {"Floor", [](const Formula& a) { return floor(a); }, [](double x) { return std::floor(x); },
       [](double) { return 0.0; }, [](double) { return 0.0; }, {0.0, -0.0, 1, -1, 0.5}},
      {"Round", [](const Formula& a) { return round(a); }, [](double x) { return std::round(x); },
       [](double) { return 0.0; }, [](double) { return 0.0; }, {0.5, -0.5, 1.5, 0.25, -2.5}},
  };
  return cs;
}

// An op or kernel of several arguments: reference value and gradient for a cotangent of ones.
struct MultiCase {
  std::string name;
  std::vector<int> dims;  // argument dims
  std::function<Formula(const std::vector<Formula>&)> f;
  int out_dim;
  std::function<Vec(const Vec&)> v, d1;  // of the concatenated arguments
  std::vector<Vec> at;                   // kRows points
  int singular = 1;                      // rows [0, singular) sit on the singular point
  bool second = true;  // check second derivatives (0 on the singular rows, FD of d1 elsewhere)
};

inline double norm(const Vec& a, size_t from = 0, size_t n = 3) {
  double s = 0;
  for (size_t c = from; c < from + n; ++c) s += a[c] * a[c];
  return std::sqrt(s);
}
// Gradient of a radial function k(|a|) for a in R^3: k'(r) a / r, 0 at a = 0 (Rsqrt(0) = 0).
inline Vec radial_grad(const Vec& a, double (*dk)(double)) {
  const double r = norm(a);
  Vec g(3, 0.0);
  if (r > 0)
    for (int c = 0; c < 3; ++c) g[c] = dk(r) * a[c] / r;
  return g;
}
constexpr double kS3 = 1.7320508075688772;  // sqrt(3), the Matern 3/2 scale

// Powf(x, p) is C's pow; d/dx = p x^(p-1) (0 for p = 0), d/dp = s log x (0 where s = 0).
inline Vec powf_value(const Vec& a) { return Vec{std::pow(a[0], a[1])}; }
inline Vec powf_grad(const Vec& a) {
  const double x = a[0], p = a[1], s = std::pow(x, p);
  return Vec{p == 0 ? 0.0 : p * std::pow(x, p - 1), s == 0 ? 0.0 : s * std::log(x)};
}

inline const std::vector<MultiCase>& multi_cases() {
  const Vec z3 = {0, 0, 0}, t3 = {1e-3, -2e-3, 0}, m3 = {0.3, -0.2, 0.5}, b3 = {-1, 0.5, 2};
  static const std::vector<MultiCase> cs = {
      {"Norm2", {3}, [](auto& a) { return norm2(a[0]); }, 1,
       [](const Vec& a) { return Vec{norm(a)}; },
       [](const Vec& a) { return radial_grad(a, [](double) { return 1.0; }); },
       {z3, {-0.0, 0, -0.0}, t3, m3, b3}, 2},
      {"Normalize", {3}, [](auto& a) { return normalize(a[0]); }, 3,
       [](const Vec& a) {
         const double r = norm(a);
         return r == 0 ? Vec{0, 0, 0} : Vec{a[0] / r, a[1] / r, a[2] / r};
       },
       [](const Vec& a) {  // (1 - (u.1) u) / r, 0 at 0
         const double r = norm(a);
         if (r == 0) return Vec{0, 0, 0};
         const double s = (a[0] + a[1] + a[2]) / r;
         return Vec{(1 - s * a[0] / r) / r, (1 - s * a[1] / r) / r, (1 - s * a[2] / r) / r};
       },
       {z3, {-0.0, 0, 0}, t3, m3, b3}, 2},
      {"Atan2", {1, 1}, [](auto& a) { return atan2(a[0], a[1]); }, 1,
       [](const Vec& a) { return Vec{std::atan2(a[0], a[1])}; },
       [](const Vec& a) {
         const double q = a[0] * a[0] + a[1] * a[1];
         return q == 0 ? Vec{0, 0} : Vec{a[1] / q, -a[0] / q};
       },
       {{0, 0}, {0, -0.0}, {1e-3, 0}, {0, -1e-3}, {0.5, -0.25}}, 2},
      // Powf(x, p): the exact limits at x = 0; its second derivatives there are checked apart
      // (SingularPoints.PowfSecondDerivativesAtBaseZero): they are not all 0 on these rows.
      {"Powf", {1, 1}, [](auto& a) { return powf(a[0], a[1]); }, 1,
       powf_value, powf_grad,
       {{0, 0.5}, {0, 1}, {0, 2.5}, {0, 0}, {0, -0.5}}, 5, false},
      {"PowfNear0", {1, 1}, [](auto& a) { return powf(a[0], a[1]); }, 1,
       [](const Vec& a) { return Vec{std::pow(a[0], a[1])}; },
       [](const Vec& a) {
         const double s = std::pow(a[0], a[1]);
         return Vec{a[1] * std::pow(a[0], a[1] - 1), s * std::log(a[0])};
       },
       {{1e-3, 0.5}, {1e-3, 1}, {1e-3, 2.5}, {2, 0.3}, {0.5, -0.5}}, 0},
      // Negative, -0 and infinite bases, and the IEEE rows of C's pow: the same references
      // (std::pow), so Powf(-2, 3) = -8 as in KeOps and torch, not Exp(3 Log(-2)) = NaN.
      {"PowfNegativeBase", {1, 1}, [](auto& a) { return powf(a[0], a[1]); }, 1,
       powf_value, powf_grad, {{-2, 2}, {-2, 3}, {-0.5, -1}, {-2, 0.5}, {-1.5, -2}}, 0, false},
      {"PowfIeeeRows", {1, 1}, [](auto& a) { return powf(a[0], a[1]); }, 1, powf_value,
       powf_grad, {{-kInf, 0.5}, {-kInf, 3}, {-1, kInf}, {1, kNaN}, {-0.0, -1}}, 0, false},
      // IfElse(c, a, b) = c >= 0 ? a : b: a NaN condition takes b (KeOps). Under Exp, the
      // last rows' taken branch overflows: the cotangent inf reaches the taken branch only, where
      // a 0/1 mask gave the other one inf * 0 = NaN.
      {"IfElse", {1, 1, 1}, [](auto& a) { return exp(ifelse(a[0], a[1], a[2])); }, 1,
       [](const Vec& a) { return Vec{std::exp(a[0] >= 0 ? a[1] : a[2])}; },
       [](const Vec& a) {
         const bool t = a[0] >= 0;
         return Vec{0, t ? std::exp(a[1]) : 0.0, t ? 0.0 : std::exp(a[2])};
       },
       {{0, 2, 3}, {-0.0, 2, 3}, {kNaN, 2, 3}, {-1, 0, 800}, {1, 800, 0}}, 3, false},
      // Clamp at its bounds: x keeps the gradient (as in KeOps); ElemMin/ElemMax ties: b gets it.
      {"Clamp", {1, 1, 1}, [](auto& a) { return clamp(a[0], a[1], a[2]); }, 1,
       [](const Vec& a) { return Vec{a[0] < a[1] ? a[1] : a[0] > a[2] ? a[2] : a[0]}; },
       [](const Vec& a) {
         const double lo = a[0] < a[1], hi = !lo && a[0] > a[2];
         return Vec{1 - lo - hi, lo, hi};
       },
       {{-1, -1, 1}, {1, -1, 1}, {-2, -1, 1}, {2, -1, 1}, {0.5, -1, 1}}, 2},
      {"ElemMin", {1, 1}, [](auto& a) { return elem_min(a[0], a[1]); }, 1,
       [](const Vec& a) { return Vec{std::min(a[0], a[1])}; },
       [](const Vec& a) { return a[0] < a[1] ? Vec{1, 0} : Vec{0, 1}; },
       {{0.5, 0.5}, {-0.0, 0}, {1, 2}, {2, 1}, {-1, -1}}, 2},
      {"ElemMax", {1, 1}, [](auto& a) { return elem_max(a[0], a[1]); }, 1,
       [](const Vec& a) { return Vec{std::max(a[0], a[1])}; },
       [](const Vec& a) { return a[1] < a[0] ? Vec{1, 0} : Vec{0, 1}; },
       {{0.5, 0.5}, {-0.0, 0}, {1, 2}, {2, 1}, {-1, -1}}, 2},
      // Max/Min over components: the first extreme component takes the gradient on ties.
      {"MaxTie", {3}, [](auto& a) { return max(a[0]); }, 1,
       [](const Vec& a) { return Vec{std::max({a[0], a[1], a[2]})}; },
       [](const Vec& a) {
         const int k = a[0] >= a[1] && a[0] >= a[2] ? 0 : a[1] >= a[2] ? 1 : 2;
         Vec g(3, 0.0);
         g[k] = 1;
         return g;
       },
       {{1, 1, 1}, {0, 2, 2}, {1, 0, 1}, {0, 1, 2}, {3, 1, 2}}, 3},
      {"MinTie", {3}, [](auto& a) { return min(a[0]); }, 1,
       [](const Vec& a) { return Vec{std::min({a[0], a[1], a[2]})}; },
       [](const Vec& a) {
         const int k = a[0] <= a[1] && a[0] <= a[2] ? 0 : a[1] <= a[2] ? 1 : 2;
         Vec g(3, 0.0);
         g[k] = 1;
         return g;
       },
       {{1, 1, 1}, {2, 0, 0}, {1, 2, 1}, {0, 1, 2}, {3, 1, 2}}, 3},
      // Mod(a, n, d) = a - n floor((a - d) / n): d/da = 1 at the jumps too, d/dd = 0.
      {"Mod", {1, 1, 1}, [](auto& a) { return mod(a[0], a[1], a[2]); }, 1,
       [](const Vec& a) { return Vec{a[0] - a[1] * std::floor((a[0] - a[2]) / a[1])}; },
       [](const Vec& a) { return Vec{1, -std::floor((a[0] - a[2]) / a[1]), 0}; },
       {{2, 2, 0}, {-2, 2, 0}, {1.5, 0.5, 0}, {0.7, 2, 0.1}, {-3.3, 2, 0.5}}, 3, false},
      // The kernels of issue reports, at coincident points x = y.
      {"Laplace", {3}, [](auto& a) { return exp(-norm2(a[0])); }, 1,
       [](const Vec& a) { return Vec{std::exp(-norm(a))}; },
       [](const Vec& a) { return radial_grad(a, [](double r) { return -std::exp(-r); }); },
       {z3, {-0.0, 0, 0}, t3, m3, b3}, 2},
      {"Matern32", {3},
       [](auto& a) { return (1.0 + kS3 * norm2(a[0])) * exp(-kS3 * norm2(a[0])); }, 1,
       [](const Vec& a) { return Vec{(1 + kS3 * norm(a)) * std::exp(-kS3 * norm(a))}; },
       [](const Vec& a) {
         return radial_grad(a, [](double r) { return -3 * r * std::exp(-kS3 * r); });
       },
       {z3, {-0.0, 0, 0}, t3, m3, b3}, 2},
      {"Energy", {3}, [](auto& a) { return -norm2(a[0]); }, 1,
       [](const Vec& a) { return Vec{-norm(a)}; },
       [](const Vec& a) { return radial_grad(a, [](double) { return -1.0; }); },
       {z3, {-0.0, 0, 0}, t3, m3, b3}, 2},
      {"SqrtSqDist", {3, 3}, [](auto& a) { return sqrt(sqdist(a[0], a[1])); }, 1,
       [](const Vec& a) {
         return Vec{std::sqrt(std::pow(a[0] - a[3], 2) + std::pow(a[1] - a[4], 2) +
                              std::pow(a[2] - a[5], 2))};
       },
       [](const Vec& a) {
         const Vec d = {a[0] - a[3], a[1] - a[4], a[2] - a[5]};
         const Vec g = radial_grad(d, [](double) { return 1.0; });
         return Vec{g[0], g[1], g[2], -g[0], -g[1], -g[2]};
       },
       {{1, 2, 3, 1, 2, 3}, {0, 0, 0, 0, 0, 0}, {1, 2, 3, 1.001, 2, 3}, {0, 0, 0, 0.3, -0.2, 0.5},
        {1, 0, -1, 0, 1, 1}},
       2},
  };
  return cs;
}

// Batch layout: X = Vi(0, width) holds every case's arguments side by side, Y = Vj(1, width) one
// row of zeros; output column block k is case k's formula of its slice of X - Y.
struct Batch {
  Reduction r;
  int width = 0;
  std::vector<Array> inputs;  // X (kRows x width), Y (1 x width)
};

inline Array filled(DType t, std::vector<int64_t> shape, const Vec& values) {
  Array a(t, std::move(shape));
  for (int64_t k = 0; k < a.size(); ++k) {
    if (t == DType::Float32)
      a.as<float>()[k] = static_cast<float>(values[static_cast<size_t>(k)]);
    else
      a.as<double>()[k] = values[static_cast<size_t>(k)];
  }
  return a;
}

inline Batch unary_batch(DType t) {
  const auto& cs = unary_cases();
  Batch b;
  b.width = static_cast<int>(cs.size());
  const Formula d = vi(0, b.width) - vj(1, b.width);
  Formula f;
  Vec xs(kRows * cs.size());
  for (size_t k = 0; k < cs.size(); ++k) {
    const Formula fk = cs[k].op(d[static_cast<int>(k)]);
    f = k == 0 ? fk : concat(f, fk);
    for (int i = 0; i < kRows; ++i) xs[i * cs.size() + k] = cs[k].at[i];
  }
  b.r = Reduction(ReductionOp::Sum, f);
  b.inputs = {filled(t, {kRows, b.width}, xs), filled(t, {1, b.width}, Vec(cs.size(), 0.0))};
  return b;
}

inline Batch multi_batch(DType t) {
  Batch b;
  for (const MultiCase& c : multi_cases())
    for (int d : c.dims) b.width += d;
  const Formula d = vi(0, b.width) - vj(1, b.width);
  Formula f;
  Vec xs(kRows * b.width);
  int off = 0;
  for (const MultiCase& c : multi_cases()) {
    std::vector<Formula> args;
    int w = 0;
    for (int dim : c.dims) args.push_back(extract(d, off + w, dim)), w += dim;
    const Formula fc = c.f(args);
    f = f.valid() ? concat(f, fc) : fc;
    for (int i = 0; i < kRows; ++i)
      for (int q = 0; q < w; ++q) xs[i * b.width + off + q] = c.at[i][q];
    off += w;
  }
  b.r = Reduction(ReductionOp::Sum, f);
  b.inputs = {filled(t, {kRows, b.width}, xs), filled(t, {1, b.width}, Vec(b.width, 0.0))};
  return b;
}

// The derivative reductions of a batch: order 1 and 2 with respect to X, cotangents of ones.
inline std::pair<Reduction, std::vector<Array>> derivative(const Batch& b, int order, DType t) {
  Reduction r = b.r;
  std::vector<Array> in = b.inputs;
  for (int k = 0; k < order; ++k) {
    const int d = r.output_dim(0);
    in.push_back(filled(t, {kRows, d}, Vec(kRows * d, 1.0)));
    r = grad(r, 0);
  }
  return {r, in};
}

}  // namespace tessel::singular
