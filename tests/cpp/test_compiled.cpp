// Compiled kernels against the interpreter: every op, both dtypes, SIMD math at its edges, layouts.
#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "codegen/cpu_codegen.hpp"
#include "ops/op.hpp"
#include "reduction_helpers.hpp"
#include "simd_level_test.hpp"
#include "temp_env.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

// A formula exercising `code` on i/j variables, with arguments kept inside each op's domain.
Formula sample(OpCode code) {
  const Formula x = vi(0, 3), y = vj(1, 3), a = x - y, u = sin(a), pos = square(a) + 0.5;
  const Formula s = elem(a, 0), sp = elem(pos, 1);
  switch (code) {
    case OpCode::Add: return x + y[0];
    case OpCode::Sub: return x - y;
    case OpCode::Mul: return x * y;
    case OpCode::Div: return x / pos;
    case OpCode::Neg: return -a;
    case OpCode::Exp: return exp(a);
    case OpCode::Log: return log(pos);
    case OpCode::XLogX: return xlogx(pos * step(s));
    case OpCode::Sqrt: return sqrt(pos);
    case OpCode::Rsqrt: return rsqrt(pos);
    case OpCode::Inv: return inv(pos);
    case OpCode::Pow: return pow(a, 3) + pow(pos, -2);
    case OpCode::Powf: return powf(pos, y + 1.0);
    case OpCode::Square: return square(a);
    case OpCode::Abs: return abs(a);
    case OpCode::Sign: return sign(a);
    case OpCode::Step: return step(a);
    case OpCode::ReLU: return relu(a);
    case OpCode::Sin: return sin(a);
    case OpCode::Cos: return cos(a);
    case OpCode::Asin: return asin(0.9 * u);
    case OpCode::Acos: return acos(0.9 * u);
    case OpCode::Atan: return atan(3.0 * a);
    case OpCode::SinXDivX: return sin_x_div_x(3.0 * a * step(s)) + sin_x_div_x(1e3 * a);
    case OpCode::Atan2: return atan2(x, y);
    case OpCode::Floor: return floor(4.0 * a);
    case OpCode::Round: return round(4.0 * a) + make(OpCode::Round, {a}, {2});
    case OpCode::Mod: return mod(4.0 * a, constant(1.5), constant(0.25));
    case OpCode::Clamp: return clamp(a, constant(-0.3), y);
    case OpCode::ClampInt: return clampint(4.0 * a, -1, 2);
    case OpCode::IfElse: return ifelse(s, x, y);
    case OpCode::ElemMin: return elem_min(x, y);
    case OpCode::ElemMax: return elem_max(x, y);
    case OpCode::Less: return less(x, y);
    case OpCode::LessEq: return less_eq(round(4.0 * x), round(4.0 * y));
    case OpCode::Greater: return greater(x, y);
    case OpCode::GreaterEq: return greater_eq(round(4.0 * x), round(4.0 * y));
    case OpCode::Equal: return equal(round(2.0 * x), round(2.0 * y));
    case OpCode::NotEqual: return not_equal(round(2.0 * x), round(2.0 * y));
    case OpCode::Sum: return sum(a);
    case OpCode::Max: return max(a);
    case OpCode::Min: return min(a);
    case OpCode::ArgMax: return argmax(a);
    case OpCode::ArgMin: return argmin(a);
    case OpCode::Elem: return elem(a, 2);
    case OpCode::Extract: return extract(a, 1, 2);
    case OpCode::Concat: return concat(x, y[1]);
    case OpCode::OneHot: return one_hot(clampint(round(2.0 * s), 0, 3), 4);
    case OpCode::SqNorm2: return sqnorm2(a);
    case OpCode::Norm2: return norm2(a);
    case OpCode::Normalize: return normalize(a);
    case OpCode::SqDist: return sqdist(x, y);
    case OpCode::Scalprod: return x | y;
    case OpCode::SqNormIso: return sqnorm_iso(sp, a);
    case OpCode::SqNormDiag: return sqnorm_diag(pos, a);
    case OpCode::SymSqNorm: return sym_sqnorm(tensorprod(x, y), a);
    case OpCode::MatVecMult: return matvecmult(tensorprod(x, y), a);
    case OpCode::VecMatMult: return vecmatmult(a, tensorprod(x, y));
    case OpCode::TensorProd: return tensorprod(x, y);
    case OpCode::TensorDot:
      return tensordot(tensorprod(x, y), concat(y, x), {3, 3}, {2, 3}, {1}, {1});
    // complex ops: x and y read as (re, im) pairs after padding to dim 4
    case OpCode::ComplexAdd: return complex_add(concat(x, y[0]), concat(y, x[1]));
    case OpCode::ComplexSubtract: return complex_sub(concat(x, y[0]), extract(a, 0, 2));
    case OpCode::ComplexMult: return complex_mult(concat(x, y[0]), concat(y, x[1]));
    case OpCode::ComplexDivide: return complex_divide(concat(x, y[0]), concat(pos, x[1] + 2.0));
    case OpCode::Conj: return conj(concat(a, x[0]));
    case OpCode::ComplexExp: return complex_exp(concat(a, y[2]));
    case OpCode::ComplexReal: return complex_real(concat(a, y[2]));
    case OpCode::ComplexImag: return complex_imag(concat(a, y[2]));
    case OpCode::ComplexSquareAbs: return complex_square_abs(concat(a, y[2]));
    case OpCode::ComplexAbs: return complex_abs(concat(a, y[2]));
    case OpCode::ComplexAngle: return complex_angle(concat(a, y[2]));
    case OpCode::Real2Complex: return real2complex(a);
    case OpCode::Imag2Complex: return imag2complex(a);
    case OpCode::ComplexExp1j: return complex_exp1j(3.0 * a);
    case OpCode::ComplexRealScal: return complex_real_scal(concat(a, y[2]), s);
    case OpCode::ComplexSum: return complex_sum(concat(a, x[1]));
    case OpCode::ComplexSumT: return complex_sum_t(extract(a, 1, 2), 6);
    case OpCode::ElemT: return elem_t(sum(a), 4, 1) + 0.5;
    case OpCode::ExtractT: return extract_t(a, 1, 5);
    case OpCode::SumT: return sum_t(s, 3) * x;
    case OpCode::DiffClampInt: return diff_clampint(4.0 * a, -1, 2);
    case OpCode::BSpline: {  // sorted knots, two equal (a zero ratio); raw inputs for the jumps
      const Formula k = concat(concat(concat(s, s + 0.5), concat(s + 0.5, s + 1.25)),
                               concat(s + 2.0, s + 3.0));
      return concat(bspline(k, 2.0 * x[1], 3), bspline(concat(x, y), y[2], 0));
    }
    case OpCode::SoftDTW: return softdtw_sqdist(x, concat(y, s), sp);
    case OpCode::SoftDTWGrad: return make(code, {x, extract(y, 0, 2), sp});
    case OpCode::SoftDTWGradDir: return make(code, {x, extract(y, 0, 2), sp, concat(x, y)});
    case OpCode::DifferenceMatrix: return difference_matrix(x, extract(y, 0, 2));
    default: return {};
  }
}

}  // namespace

// Sum and Max over j of f on the compiled backend and the interpreter: every lane of every tile
// goes through the emitted code.
void expect_compiled_matches(const Formula& f, bool f64, const std::string& what) {
  const DType t = f64 ? DType::Float64 : DType::Float32;
  std::vector<Array> in = {random_array(t, {23, 3}, 5, -1.5, 1.5),
                           random_array(t, {41, 3}, 6, -1.5, 1.5)};
  for (ReductionOp op : {ReductionOp::Sum, ReductionOp::Max})
    expect_compiled_matches_interpreter(Reduction(op, f), in, f64, what);
}

// Ops per compiled kernel in the test below: most of a small kernel's compile time is its
// skeleton (the tiles' head, body and tail loops), so a kernel per op spent it 86 times per dtype
// and SIMD level (and the test runs at five: native, three lower, aarch64).
constexpr int kOpsPerKernel = 8;

class CompiledOp : public ::testing::TestWithParam<std::tuple<int, bool>> {};

// A Sum over j of kOpsPerKernel ops' samples, concatenated, each op's columns compared with the
// interpreter under its own name. A Sum only: an op's emitted code is the same under every
// reduction, and a sum sees every lane's value where a Max sees the largest; the reductions' own
// code is checked against brute force at every level (test_reductions.cpp).
TEST_P(CompiledOp, MatchesInterpreter) {
  const auto [batch, f64] = GetParam();
  const int first = static_cast<int>(OpCode::Add) + batch * kOpsPerKernel;
  const int last = std::min(first + kOpsPerKernel, static_cast<int>(OpCode::Count_));
  Formula f;
  std::vector<std::pair<int64_t, std::string>> starts;  // each op's first column, its name
  for (int code_i = first; code_i < last; ++code_i) {
    const OpCode code = static_cast<OpCode>(code_i);
    const Formula s = sample(code);
    ASSERT_TRUE(s.valid()) << "no compiled-kernel sample for op " << op_info(code).name;
    starts.emplace_back(f.valid() ? f.dim() : 0, op_info(code).name);
    f = f.valid() ? concat(f, s) : s;
  }
  const DType t = f64 ? DType::Float64 : DType::Float32;
  const std::vector<Array> in = {random_array(t, {23, 3}, 5, -1.5, 1.5),
                                 random_array(t, {41, 3}, 6, -1.5, 1.5)};
  const Reduction r(ReductionOp::Sum, f);
  const Array want = evaluate(r, in, with(Backend::Interpreter))[0];
  const Array got = evaluate(r, in, with(Backend::Compiled))[0];
  ASSERT_EQ(got.size(), want.size());
  const double tol = f64 ? 1e-12 : 3e-5;
  const int64_t rows = got.size() / f.dim();
  for (size_t o = 0; o < starts.size(); ++o) {  // each op's columns, as expect_close compares
    const int64_t c0 = starts[o].first;
    const int64_t dim = (o + 1 < starts.size() ? starts[o + 1].first : f.dim()) - c0;
    Array g(DType::Float64, {rows, dim});
    std::vector<double> w(static_cast<size_t>(rows * dim));
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t c = 0; c < dim; ++c) {
        g.as<double>()[i * dim + c] = got.at(i * f.dim() + c0 + c);
        w[i * dim + c] = want.at(i * f.dim() + c0 + c);
      }
    expect_close(g, w, tol, tol * 10, starts[o].second + (f64 ? " f64" : " f32"));
  }
}

constexpr int kOpBatches =
    (static_cast<int>(OpCode::Count_) - static_cast<int>(OpCode::Add) + kOpsPerKernel - 1) /
    kOpsPerKernel;
INSTANTIATE_TEST_SUITE_P(EveryOp, CompiledOp,
                         ::testing::Combine(::testing::Range(0, kOpBatches), ::testing::Bool()));

// exp/log are our own polynomials: check them across the whole range, specials included.
TEST(CompiledMath, ExpLogEdges) {
  for (bool f64 : {false, true}) {
    const DType t = f64 ? DType::Float64 : DType::Float32;
    std::vector<double> xs;
    for (double v = -110; v <= 100; v += 0.37) xs.push_back(v);
    // float's overflow edge (88.7228 is finite, 88.72284 is not; 88.4 rounds n up to 128) and
    // the halfway points of the reduction, where n changes
    for (double v : {88.4, 88.72283, 88.72284, 88.38, 0.34657359, -0.34657359, 1.0397208})
      xs.push_back(v);
    for (double v : {0.0, -0.0, 1e-30, -1e-30, 88.5, 88.8, -87.5, -103.5, 709.5, 710.0, -744.0,
                     -746.0, 1e10, -1e10})
      xs.push_back(v);
    xs.push_back(std::numeric_limits<double>::quiet_NaN());
    xs.push_back(std::numeric_limits<double>::infinity());
    xs.push_back(-std::numeric_limits<double>::infinity());
    const int64_t n = static_cast<int64_t>(xs.size());
    Array x(t, {n, 1});
    for (int64_t k = 0; k < n; ++k) {
      if (f64) x.as<double>()[k] = xs[k];
      else x.as<float>()[k] = static_cast<float>(xs[k]);
    }
    Array one(t, {1, 1});
    if (f64) one.as<double>()[0] = 1;
    else one.as<float>()[0] = 1;
    for (int which = 0; which < 3; ++which) {
      const Formula xi = vi(0, 1);
      const Formula f = which == 0 ? exp(xi) * vj(1, 1)
                        : which == 1 ? log(abs(xi)) * vj(1, 1)
                                     : log(xi) * vj(1, 1);
      Reduction r(ReductionOp::Sum, f);
      const Array got = evaluate(r, std::vector<Array>{x, one}, with(Backend::Compiled))[0];
      for (int64_t k = 0; k < n; ++k) {
        const double in = x.at(k);
        const double want = which == 0 ? std::exp(in) : which == 1 ? std::log(std::fabs(in)) : std::log(in);
        const double g = got.at(k);
        const double want_t = f64 ? want : static_cast<double>(static_cast<float>(want));
        if (std::isnan(want_t)) {
          EXPECT_TRUE(std::isnan(g)) << which << " at " << in;
        } else if (std::isinf(want_t) || want_t == 0) {
          EXPECT_EQ(g, want_t) << which << " at " << in;
        } else {
          const double ulp = f64 ? 2.3e-16 : 1.2e-7;
          // float32 kernels flush subnormal results to zero (on purpose: see the prelude), and
          // below AVX-512 exp's one-shift scaling flushes results under 2^-125.5 (1.7e-38) too
          const double flushed = f64 ? 1e-320 : 1.7e-38;
          EXPECT_NEAR(g, want_t, 2 * ulp * std::fabs(want_t) + flushed)
              << (which ? "log" : "exp") << " at " << in << (f64 ? " f64" : " f32");
        }
      }
    }
  }
}

// Rows of one block in a generated kernel: row r's copy of variable 0 is named o0_<r>_0.
int rows_of(const Reduction& r, bool f64, int vbytes) {
  CpuKernelSpec spec;
  spec.r = &r.impl();
  spec.f64 = f64;
  spec.vbytes = vbytes;
  KernelLayout lay;
  const std::string src = generate_cpu_kernel(spec, lay);
  int rows = 0;
  while (src.find("o0_" + std::to_string(rows) + "_0") != std::string::npos) ++rows;
  return rows;
}

// NEON's FMLA takes no memory operand: an exp's constants hold registers for the whole loop, and
// the rows that spilled without them (`tessel bench --asm` on aarch64) are not chosen. x86 keeps
// its own choice (AVX2: one row; its constants are memory operands).
TEST(CompiledLayout, RowsPerBlockLeaveRoomForTheExpConstants) {
  const Formula d2 = sqdist(vi(0, 3), vj(1, 3));
  const Reduction sum(ReductionOp::Sum, exp(-pm(3, 1) * d2) * vj(2, 1));
  const Reduction grad(ReductionOp::Sum,
                       vi(4, 1) * vj(2, 1) * exp(-pm(3, 1) * d2) * (vi(0, 3) - vj(1, 3)));
  const Reduction lse(ReductionOp::LogSumExp, -pm(2, 1) * d2);
  const Reduction dist(ReductionOp::Sum, d2 * vj(2, 1));
#if defined(__aarch64__)
  EXPECT_EQ(rows_of(sum, false, 16), 2);
  EXPECT_EQ(rows_of(grad, false, 16), 1);
  EXPECT_EQ(rows_of(lse, false, 16), 2);
  EXPECT_EQ(rows_of(sum, true, 16), 1);
  EXPECT_EQ(rows_of(lse, true, 16), 2);
  EXPECT_EQ(rows_of(dist, false, 16), 4);  // no polynomial: all of the register file's rows
#else
  EXPECT_EQ(rows_of(sum, false, 32), 1);
  EXPECT_EQ(rows_of(sum, false, 64), 4);
  EXPECT_EQ(rows_of(dist, false, 64), 4);
#endif
}

TEST(CompiledLayout, NonContiguousAndParamsAndBothAxes) {
  // x stored transposed (3 × n with strides), y as a column slice of a wider array.
  const int64_t n = 37, m = 29;
  Array xt = random_array(DType::Float64, {3, n}, 1);
  Array wide = random_array(DType::Float64, {m, 5}, 2);
  Array b = random_array(DType::Float64, {m}, 3);
  Array g = random_array(DType::Float64, {1, 1}, 4, 0.5, 1);
  ArrayView xv{xt.data(), DType::Float64, {n, 3}, {1, n}};
  ArrayView yv{wide.as<double>() + 1, DType::Float64, {m, 3}, {5, 1}};
  Reduction r(ReductionOp::Sum, exp(-pm(3, 1) * sqdist(vi(0, 3), vj(1, 3))) * vj(2, 1));
  std::vector<ArrayView> in = {xv, yv, b.view(), g.view()};
  for (Backend be : {Backend::Interpreter, Backend::Compiled}) {
    const Array got = evaluate(r, std::span<const ArrayView>(in), with(be))[0];
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t j = 0; j < m; ++j) {
        double d2 = 0;
        for (int c = 0; c < 3; ++c) {
          const double d = xt.at(c * n + i) - wide.at(j * 5 + 1 + c);
          d2 += d * d;
        }
        s += std::exp(-g.at(0) * d2) * b.at(j);
      }
      EXPECT_NEAR(got.at(i), s, 1e-12 * (1 + std::fabs(s)));
    }
  }
}

// The AVX2, SSE and scalar code paths are what other machines run: check them here too.
class CompiledSimdLevel : public SimdLevelTest {};

TEST_P(CompiledSimdLevel, MatchesInterpreter) {
  const std::string level = this->level();
  const Formula x = vi(0, 3), y = vj(1, 3), b = vj(2, 2), a = x - y;
  const std::vector<std::pair<ReductionOp, Formula>> cases = {
      {ReductionOp::Sum, exp(-sqdist(x, y)) * b},
      {ReductionOp::Sum, log(sqnorm2(a) + 0.5) + sqrt(abs(a)) + floor(3.0 * a) + round(3.0 * a)},
      {ReductionOp::Sum, elem_min(x, y) + elem_max(x, y) * rsqrt(sqnorm2(a) + 1.0)},
      {ReductionOp::LogSumExp, -4.0 * sqdist(x, y)},
      {ReductionOp::MinArgMin, a},
      {ReductionOp::KMinArgKMin, sqdist(x, y)},
  };
  for (bool f64 : {false, true}) {
    const DType t = f64 ? DType::Float64 : DType::Float32;
    std::vector<Array> in = {random_array(t, {19, 3}, 7, -1.5, 1.5),
                             random_array(t, {45, 3}, 8, -1.5, 1.5),
                             random_array(t, {45, 2}, 9, -1.5, 1.5)};
    for (const auto& [op, f] : cases) {
      Reduction r(op, f, 1, op == ReductionOp::KMinArgKMin ? 4 : 0);
      std::vector<Array> use(in.begin(), in.begin() + r.inputs().size());
      const auto want = evaluate(r, use, with(Backend::Interpreter));
      const auto got = evaluate(r, use, with(Backend::Compiled));
      for (size_t k = 0; k < want.size(); ++k) {
        std::vector<double> w(want[k].size());
        for (int64_t q = 0; q < want[k].size(); ++q) w[q] = want[k].at(q);
        const double tol = f64 ? 1e-12 : 3e-5;
        expect_close(got[k], w, tol, tol, level + " " + r.str());
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, CompiledSimdLevel,
                         ::testing::Values("avx2", "sse2", "neon", "scalar"));

TEST(CompiledIndices, ExactBeyondFloatPrecision) {
  // 2^24 + 3 columns: float-encoded indices (as in KeOps) could not tell 2^24 + 1 from 2^24.
  const int64_t m = (int64_t{1} << 24) + 3;
  Array y(DType::Float32, {m, 1});
  for (int64_t j = 0; j < m; ++j) y.as<float>()[j] = 1.0f + static_cast<float>(j % 1000) * 1e-3f;
  y.as<float>()[(int64_t{1} << 24) + 1] = 0.0f;
  Array x(DType::Float32, {2, 1});
  Reduction r(ReductionOp::ArgMin, abs(vj(1, 1) - vi(0, 1)));
  const Array got = evaluate(r, std::vector<Array>{x, y}, with(Backend::Compiled))[0];
  EXPECT_EQ(got.as<int64_t>()[0], (int64_t{1} << 24) + 1);
  EXPECT_EQ(got.as<int64_t>()[1], (int64_t{1} << 24) + 1);
}

// macOS and some Linux machines have clang, not g++: the prelude's builtins must compile there
// (clang wants rounding modes as literals and names AVX-512 min/max/sqrt without a mask).
TEST(CompiledWithClang, PreludeCompilesAndMatchesTheInterpreter) {
  if (std::system("command -v clang++ > /dev/null 2>&1") != 0) GTEST_SKIP() << "no clang++";
  // A clang for another architecture (this suite cross-compiled and emulated) cannot build a
  // kernel this process loads.
#if defined(__aarch64__)
  const char* arch = "aarch64";
#else
  const char* arch = "x86_64";
#endif
  if (std::system((std::string("clang++ -dumpmachine | grep -q ^") + arch).c_str()) != 0)
    GTEST_SKIP() << "clang++ does not target " << arch;
  test_env::TempDir cache;
  test_env::ScopedEnv cxx("TESSEL_CXX", std::string("clang++"));
  test_env::ScopedEnv dir("TESSEL_CACHE_DIR", cache.path());
  Formula f;
  for (OpCode code : {OpCode::Exp, OpCode::Log, OpCode::Sqrt, OpCode::Rsqrt, OpCode::Floor,
                      OpCode::Round, OpCode::Abs, OpCode::Min, OpCode::Max, OpCode::IfElse,
                      OpCode::Sin, OpCode::Cos, OpCode::Atan2}) {
    const Formula s = sample(code);
    ASSERT_TRUE(s.valid()) << op_info(code).name;
    f = f.valid() ? concat(f, s) : s;
  }
  for (bool f64 : {false, true}) expect_compiled_matches(f, f64, "clang");
}
