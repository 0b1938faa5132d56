// The compiled kernels' own sin/cos/asin/acos/atan/atan2 against long double libm, value by value.
//
// Each value goes through a real kernel: a_i = Sum_j IfElse(1/4 - (I_i - K_j)^2, g(Y_j), 0) with
// I_i = i and K_j = j picks j = i, so every SIMD tile mixes arguments (huge ones taking libm
// beside reduced ones), and the sum adds only zeros to g(Y_i). A second column, 1/g, shows the
// sign of a zero. Bounds are the errors documented next to the functions (cpu_prelude.cpp,
// README.md); scripts/test.sh reruns these tests at every SIMD level below the native one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "reduction_helpers.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

using LD = long double;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A function under test: its formula on Y (dim 1, or 2 for atan2's (y, x)), the long double
// reference, and the documented maximum errors rounded up, in ulp of float32 / float64.
struct Fn {
  const char* name;
  double ulp_f32, ulp_f64;
  int dim;
  Formula (*build)(const Formula& y);
  LD (*ref)(LD y, LD x);
};
const Fn kSin{
    "sin", 2, 1, 1, [](const Formula& y) { return sin(y); }, [](LD y, LD) { return sinl(y); }};
const Fn kCos{
    "cos", 2, 1, 1, [](const Formula& y) { return cos(y); }, [](LD y, LD) { return cosl(y); }};
const Fn kAsin{
    "asin", 1, 1, 1, [](const Formula& y) { return asin(y); }, [](LD y, LD) { return asinl(y); }};
const Fn kAcos{
    "acos", 1, 1, 1, [](const Formula& y) { return acos(y); }, [](LD y, LD) { return acosl(y); }};
const Fn kAtan{"atan",
               2.5,
               2.5,
               1,
               [](const Formula& y) { return atan(y); },
               [](LD y, LD) { return atanl(y); }};
const Fn kAtan2{"atan2",
                2.5,
                2.5,
                2,
                [](const Formula& y) { return atan2(elem(y, 0), elem(y, 1)); },
                [](LD y, LD x) { return atan2l(y, x); }};

// g(Y_i) and 1/g(Y_i) for every row i of ys (flattened, dim 1 or 2), through the compiled backend.
Array per_value(const Fn& f, DType t, const std::vector<double>& ys) {
  const int dim = f.dim;
  const int64_t n = static_cast<int64_t>(ys.size()) / dim;
  std::vector<double> idx(n);
  for (int64_t k = 0; k < n; ++k) idx[k] = static_cast<double>(k);
  const Formula pick = 0.25 - square(vi(0, 1) - vj(1, 1)), g = f.build(vj(2, dim));
  const Reduction r(ReductionOp::Sum,
                    concat(ifelse(pick, g, constant(0.0)), ifelse(pick, inv(g), constant(0.0))));
  const std::vector<Array> in = {array_of(idx, t), array_of(idx, t), array_of(ys, t, dim)};
  return evaluate(r, in, with(Backend::Compiled))[0];
}

// One unit in the last place of T at |r|; subnormal results share the smallest normal's ulp.
double ulp_at(LD r, bool f64) {
  int e = 0;
  std::frexp(static_cast<double>(r), &e);
  const int p = f64 ? 53 : 24, emin = f64 ? -1021 : -125;
  return std::ldexp(1.0, std::max(e, emin) - p);
}

// "" if g (and 1/g, for a zero) is libm's value of f at (y, x) within `bound` ulp, else why not.
std::string judge(const Fn& f, bool f64, double y, double x, double g, double ginv, double bound) {
  const LD ref = f.ref(y, x);
  const double want = f64 ? static_cast<double>(ref) : static_cast<float>(ref);
  const double tiny = f64 ? 0.0 : std::numeric_limits<float>::min();  // float kernels flush
  if (std::isnan(want)) return std::isnan(g) ? "" : "want NaN";
  if (want == 0) {
    if (g != 0) return "want 0";
    return std::signbit(ginv) == std::signbit(want) ? "" : "wrong sign of zero";
  }
  if (std::fabs(want) < tiny && g == 0) return "";  // a flushed subnormal result
  const double err = static_cast<double>(std::fabs(static_cast<LD>(g) - ref)) / ulp_at(ref, f64);
  if (err <= bound) return "";
  return "want " + std::to_string(want) + ", " + std::to_string(err) + " ulp off";
}

// Checks every value against libm. A float kernel may flush subnormal inputs to zero (x86 does,
// see the prelude): there either input's value is accepted.
void check(const Fn& f, DType t, const std::vector<double>& raw) {
  const bool f64 = t == DType::Float64;
  const int dim = f.dim;
  const Array in = array_of(raw, t, dim);  // the arguments as the kernel sees them
  const Array got = per_value(f, t, raw);
  const double bound = f64 ? f.ulp_f64 : f.ulp_f32;
  auto flush = [&](double v) {
    return !f64 && std::fabs(v) < std::numeric_limits<float>::min() ? std::copysign(0.0, v) : v;
  };
  const int64_t n = in.shape()[0];
  ASSERT_EQ(got.size(), 2 * n);
  for (int64_t k = 0; k < n; ++k) {
    const double y = in.at(k * dim), x = dim == 2 ? in.at(k * dim + 1) : 1.0;
    const double g = got.at(2 * k), ginv = got.at(2 * k + 1);
    std::string why = judge(f, f64, y, x, g, ginv, bound);
    if (!why.empty() && (flush(y) != y || flush(x) != x) &&
        judge(f, f64, flush(y), flush(x), g, ginv, bound).empty())
      why.clear();
    EXPECT_TRUE(why.empty()) << f.name << (f64 ? " f64" : " f32") << "(" << y
                             << (dim == 2 ? ", " + std::to_string(x) : "") << ") = " << g << ": "
                             << why;
  }
}

// Zeros, tiny and subnormal values, multiples of pi/2 (where the reduction cancels most), the
// edge of the reduced range, huge values and the non-finite ones.
std::vector<double> trig_arguments() {
  std::vector<double> v = {0.0,   -0.0, 1e-30, -1e-30, 1e-40, -1e-40, 1e-310, -1e-310, 1e-8,
                           0.5,   -0.5, 1.0,   2.0,    1e4,   -1e4,   5e4,    -5.2e4,  1.5e6,
                           1.7e6, 1e30, -1e30, 1e300,  kInf,  -kInf,  kNaN,   -kNaN};
  for (int k = -40; k <= 40; ++k) {
    v.push_back(k * M_PI_2);
    v.push_back(k * M_PI_4);
    v.push_back(k * 1000 * M_PI_2);
    v.push_back(k * 31831 * M_PI);  // 1e5 and beyond: past the float bound of the reduction
  }
  std::mt19937_64 rng(13);
  std::uniform_real_distribution<double> u(-1, 1), e(-6, 7);
  for (int k = 0; k < 300; ++k) v.push_back(u(rng) * std::pow(10.0, e(rng)));
  return v;
}

std::vector<double> inverse_arguments() {
  std::vector<double> v = {0.0,
                           -0.0,
                           1e-40,
                           -1e-40,
                           1e-310,
                           1e-20,
                           0.5,
                           -0.5,
                           1.0,
                           -1.0,
                           std::nextafter(1.0, 2.0),
                           -std::nextafter(1.0, 2.0),
                           std::nextafter(1.0f, 0.0f),
                           1.5,
                           -2.0,
                           1e30,
                           kInf,
                           -kInf,
                           kNaN};
  std::mt19937_64 rng(14);
  std::uniform_real_distribution<double> u(-1, 1), e(-12, 0);
  for (int k = 0; k < 300; ++k) v.push_back(u(rng));
  for (int k = 0; k < 100; ++k) v.push_back((1 - std::pow(10.0, e(rng))) * (k % 2 ? 1 : -1));
  return v;
}

std::vector<double> tangent_arguments() {
  std::vector<double> v = {0.0,  -0.0, 1e-40,  -1e-310, 0.41421356, 2.4142136, 1.0,
                           -1.0, 1e30, -1e300, kInf,    -kInf,      kNaN};
  std::mt19937_64 rng(15);
  std::uniform_real_distribution<double> u(-1, 1), e(-30, 30);
  for (int k = 0; k < 300; ++k) v.push_back(u(rng) * std::pow(10.0, e(rng)));
  for (int k = 0; k < 100; ++k) v.push_back(3 * u(rng));
  return v;
}

// (y, x) pairs: IEEE 754's table (signed zeros, infinities, NaN) and random magnitudes.
std::vector<double> atan2_arguments() {
  const double s[] = {0.0,  -0.0, 1e-40,  -1e-310, 1.0,   -1.0, 2.5,
                      -0.3, 1e30, -1e300, kInf,    -kInf, kNaN};
  std::vector<double> v;
  for (double y : s)
    for (double x : s) v.insert(v.end(), {y, x});
  std::mt19937_64 rng(16);
  std::uniform_real_distribution<double> u(-1, 1), e(-20, 20);
  for (int k = 0; k < 300; ++k)
    v.insert(v.end(), {u(rng) * std::pow(10.0, e(rng)), u(rng) * std::pow(10.0, e(rng))});
  for (int k = 0; k < 100; ++k) v.insert(v.end(), {3 * u(rng), 3 * u(rng)});
  return v;
}

class CompiledTrig : public ::testing::TestWithParam<bool> {
 protected:
  DType dtype() const { return GetParam() ? DType::Float64 : DType::Float32; }
};

}  // namespace

TEST_P(CompiledTrig, SinCos) {
  check(kSin, dtype(), trig_arguments());
  check(kCos, dtype(), trig_arguments());
}

TEST_P(CompiledTrig, AsinAcos) {
  check(kAsin, dtype(), inverse_arguments());
  check(kAcos, dtype(), inverse_arguments());
}

TEST_P(CompiledTrig, AtanAtan2) {
  check(kAtan, dtype(), tangent_arguments());
  check(kAtan2, dtype(), atan2_arguments());
}

// The gradient of sin is written through cos (and cos's through sin): d/dx_i of
// Sum_j sin(x_i y_j) b_j against e_i is e_i Sum_j cos(x_i y_j) y_j b_j, with arguments up to 1e5
// (both the reduced path and the libm one). Each term is within a few ulp of T.
TEST_P(CompiledTrig, GradientOfSin) {
  const DType t = dtype();
  const bool f64 = t == DType::Float64;
  const std::vector<Array> in = {
      random_array(t, {37, 1}, 21, -300, 300), random_array(t, {53, 1}, 22, -300, 300),
      random_array(t, {53, 1}, 23, -1, 1), random_array(t, {37, 1}, 24, -1, 1)};
  const Reduction r(ReductionOp::Sum, sin(vi(0, 1) * vj(1, 1)) * vj(2, 1));
  const Reduction g = grad(r, 0);  // appends the cotangent Vi(3, 1)
  const Array got = evaluate(g, in, with(Backend::Compiled))[0];
  const double eps = f64 ? 0x1p-53 : 0x1p-24;
  for (int64_t i = 0; i < 37; ++i) {
    LD want = 0, mag = 0;
    for (int64_t j = 0; j < 53; ++j) {
      const double xy =
          f64 ? in[0].at(i) * in[1].at(j)
              : static_cast<float>(in[0].at(i) * in[1].at(j));  // the kernel's product
      const LD term = cosl(xy) * in[1].at(j) * in[2].at(j) * in[3].at(i);
      want += term;
      mag += std::fabs(term);
    }
    EXPECT_NEAR(got.at(i), static_cast<double>(want), static_cast<double>(16 * eps * mag))
        << "row " << i << (f64 ? " f64" : " f32");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CompiledTrig, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "f64" : "f32"; });
