// Values, first and second derivatives of every op at and near its singular points (Rsqrt(0) = 0,
// Sign(0) = 0, ...: docs/conventions.md), on the interpreter and the compiled CPU kernels, and the
// kernels of the issue reports (Laplace, Matern, energy distance) on coincident points K(X, X).
#include "singular_cases.hpp"

using namespace tessel;
using namespace tessel::testing;
using namespace tessel::singular;

namespace {

struct Config {
  Backend backend;
  DType dtype;
  std::string label() const {
    return std::string(backend == Backend::Interpreter ? "interpreter" : "compiled") +
           (dtype == DType::Float64 ? "_f64" : "_f32");
  }
};

Options opts(const Config& c) {
  Options o;
  o.backend = c.backend;
  return o;
}
// Relative tolerance: float32 inputs near +-1 lose digits in 1 - x^2 (Asin, Acos), the rest is
// a few ulp of each op.
double rtol(DType t) { return t == DType::Float32 ? 3e-4 : 1e-11; }

// The input a backend saw, as a double: references are evaluated at the rounded point.
double as_input(double x, DType t) { return t == DType::Float32 ? static_cast<float>(x) : x; }

void expect_entry(double got, double want, double tol, const std::string& what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": got " << got << ", want NaN";
  } else if (std::isinf(want)) {
    EXPECT_EQ(got, want) << what;
  } else {
    EXPECT_TRUE(std::isfinite(got)) << what << ": got " << got << ", want " << want;
    EXPECT_NEAR(got, want, tol * std::max(1.0, std::fabs(want))) << what;
  }
}

class SingularPoints : public ::testing::TestWithParam<Config> {
 protected:
  void SetUp() override {
    if (GetParam().backend == Backend::Compiled && !compiler_info().usable)
      GTEST_SKIP() << "no working C++ compiler: " << compiler_info().problem;
  }
  std::vector<Array> run(const Reduction& r, const std::vector<Array>& in) {
    return evaluate(r, in, opts(GetParam()));
  }
};

TEST_P(SingularPoints, UnaryOpsValueAndTwoDerivatives) {
  const DType t = GetParam().dtype;
  const auto& cs = unary_cases();
  const Batch b = unary_batch(t);
  for (int order = 0; order <= 2; ++order) {
    const auto [r, in] = derivative(b, order, t);
    const Array out = run(r, in)[0];
    ASSERT_EQ(out.size(), kRows * b.width);
    for (size_t k = 0; k < cs.size(); ++k)
      for (int i = 0; i < kRows; ++i) {
        const double x = as_input(cs[k].at[i], t);
        const auto& ref = order == 0 ? cs[k].v : order == 1 ? cs[k].d1 : cs[k].d2;
        expect_entry(out.at(i * b.width + static_cast<int64_t>(k)), ref(x), rtol(t),
                     cs[k].name + " derivative " + std::to_string(order) + " at x = " +
                         std::to_string(x));
      }
  }
}

// Second derivatives of the multi-argument cases: 0 on the singular rows (the convention), central
// differences of the first-derivative reference elsewhere (smooth there).
Vec second_ref(const MultiCase& c, const Vec& a, bool on_singular) {
  Vec r(a.size(), 0.0);
  if (on_singular) return r;
  for (size_t q = 0; q < a.size(); ++q) {
    const double h = 1e-6 * std::max(1e-3, std::fabs(a[q]));
    Vec up = a, down = a;
    up[q] += h, down[q] -= h;
    const Vec gu = c.d1(up), gd = c.d1(down);
    for (size_t p = 0; p < a.size(); ++p) r[q] += (gu[p] - gd[p]) / (2 * h);
  }
  return r;
}

TEST_P(SingularPoints, MultiArgumentOpsAndKernels) {
  const DType t = GetParam().dtype;
  const Batch b = multi_batch(t);
  for (int order = 0; order <= 2; ++order) {
    const auto [r, in] = derivative(b, order, t);
    const Array out = run(r, in)[0];
    int col = 0, in_col = 0;
    for (const MultiCase& c : multi_cases()) {
      const int w = static_cast<int>(c.at[0].size());
      for (int i = 0; i < kRows; ++i) {
        Vec a = c.at[i];
        for (double& x : a) x = as_input(x, t);
        Vec want;
        if (order == 0) want = c.v(a);
        if (order == 1) want = c.d1(a);
        if (order == 2) want = second_ref(c, a, i < c.singular);
        // finite differences carry ~1e-9 relative error in float64
        const double tol = order == 2 && i >= c.singular ? std::max(rtol(t), 1e-6) : rtol(t);
        const int first = order == 0 ? col : in_col;
        if (order == 2 && !c.second) continue;
        for (size_t q = 0; q < want.size(); ++q)
          expect_entry(out.at(i * (order == 0 ? r.output_dim(0) : b.width) + first +
                              static_cast<int64_t>(q)),
                       want[q], tol,
                       c.name + " row " + std::to_string(i) + " derivative " +
                           std::to_string(order) + " component " + std::to_string(q));
      }
      col += c.out_dim;
      in_col += w;
    }
  }
}

// Sum_j k(|x_i - y_j|) b_j with y = x: every diagonal pair is coincident. Gradients in x and y, and
// a second derivative, against a dense float64 reference with the convention k'(r) u = 0 at r = 0.
struct Radial {
  const char* name;
  std::function<Formula(const Formula&)> k;  // of r = Norm2(x - y) or Sqrt(SqDist(x, y))
  double (*v)(double), (*d1)(double), (*d2)(double);
};
const Radial kRadial[] = {
    {"laplace", [](const Formula& r) { return exp(-r); }, [](double r) { return std::exp(-r); },
     [](double r) { return -std::exp(-r); }, [](double r) { return std::exp(-r); }},
    {"matern32", [](const Formula& r) { return (1.0 + kS3 * r) * exp(-kS3 * r); },
     [](double r) { return (1 + kS3 * r) * std::exp(-kS3 * r); },
     [](double r) { return -3 * r * std::exp(-kS3 * r); },
     [](double r) { return (-3 + 3 * kS3 * r) * std::exp(-kS3 * r); }},
    {"energy", [](const Formula& r) { return -r; }, [](double r) { return -r; },
     [](double) { return -1.0; }, [](double) { return 0.0; }},
};

TEST_P(SingularPoints, KernelsOnCoincidentPoints) {
  const DType t = GetParam().dtype;
  constexpr int n = 7;
  const Formula X = vi(0, 3), Y = vj(1, 3), B = vj(2, 1);
  Vec xs(n * 3);
  for (int q = 0; q < n * 3; ++q) xs[q] = q < 3 ? 0.25 * (q + 1) : std::sin(1.7 * q);
  for (int c = 0; c < 3; ++c) xs[3 + c] = xs[c];  // rows 0 and 1 coincide too
  const Array x = filled(t, {n, 3}, xs), bw = random_array(t, {n, 1}, 6, 0.5, 1.5);
  const Array v = random_array(t, {n, 3}, 8);
  for (const Radial& k : kRadial)
    for (bool via_sqdist : {false, true}) {
      const Formula r = via_sqdist ? sqrt(sqdist(X, Y)) : norm2(X - Y);
      const Reduction red(ReductionOp::Sum, k.k(r) * B);
      const std::string what = std::string(k.name) + (via_sqdist ? " (Sqrt(SqDist))" : "");
      std::vector<Array> in1 = {x, x, bw, filled(t, {n, 1}, Vec(n, 1.0))};
      const Reduction g1 = grad(red, 0);
      const Array g1x = run(g1, in1)[0], g1y = run(grad(red, 1), in1)[0];
      std::vector<double> rx(n * 3, 0.0), ry(n * 3, 0.0), rh(n * 3, 0.0);
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) {
          Vec d(3);
          for (int c = 0; c < 3; ++c) d[c] = x.at(i * 3 + c) - x.at(j * 3 + c);
          const double rr = norm(d), bj = bw.at(j);
          if (rr == 0) continue;
          const double a1 = k.d1(rr) / rr;
          const Vec vi_ = row_of(v, i, 3);
          const double uv = (d[0] * vi_[0] + d[1] * vi_[1] + d[2] * vi_[2]) / rr;
          for (int c = 0; c < 3; ++c) {
            rx[i * 3 + c] += bj * a1 * d[c];
            ry[j * 3 + c] -= bj * a1 * d[c];
            rh[i * 3 + c] += bj * (k.d2(rr) * uv * d[c] / rr + a1 * (vi_[c] - uv * d[c] / rr));
          }
        }
      expect_close(g1x, rx, rtol(t), rtol(t), what + ": gradient in x");
      expect_close(g1y, ry, rtol(t), rtol(t), what + ": gradient in y");
      std::vector<Array> in2 = in1;
      in2.push_back(v);
      expect_close(run(grad(g1, 0), in2)[0], rh, 10 * rtol(t), 10 * rtol(t),
                   what + ": second derivative in x");
    }
}

// Powf(x, p) at x = 0, p > 1: every second derivative is the finite limit (d2/dx2 = p (p-1)
// 0^(p-2), the others 0). The masked branch of d/dp, s Log x, used to give 0 * Log 0 = NaN.
TEST_P(SingularPoints, PowfSecondDerivativesAtBaseZero) {
  const DType t = GetParam().dtype;
  const Formula x = vi(0, 1), p = vi(1, 1), one = vj(2, 1), f = powf(x, p);
  const Vec ps = {2, 2.5, 3, 4, 1.5000001};
  const Vec want_xx = {2, 0, 0, 0, kInf};
  const Array in_x = filled(t, {5, 1}, Vec(5, 0.0)), in_p = filled(t, {5, 1}, ps);
  const Array in_one = filled(t, {1, 1}, Vec{1.0});
  const Formula vars[] = {x, p};
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b) {
      const Formula h = grad(grad(f, vars[a], constant(1.0)), vars[b], constant(1.0));
      const Array got = run(Reduction(ReductionOp::Sum, h * one), {in_x, in_p, in_one})[0];
      for (int i = 0; i < 5; ++i) {
        const double want = a == 0 && b == 0 ? want_xx[i] : 0.0;
        expect_entry(got.at(i), want, rtol(t),
                     "d2 Powf / d" + std::string(a ? "p" : "x") + " d" + (b ? "p" : "x") +
                         " at (0, " + std::to_string(ps[i]) + ")");
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, SingularPoints,
                         ::testing::Values(Config{Backend::Interpreter, DType::Float64},
                                           Config{Backend::Compiled, DType::Float64},
                                           Config{Backend::Compiled, DType::Float32}),
                         [](const auto& p) { return p.param.label(); });

}  // namespace
