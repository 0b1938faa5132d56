// Every reduction against brute force (ties and NaN included), on both backends, both axes.
#include <limits>
#include <tuple>

#include "reduction_cases.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

const std::vector<ReductionCase> kCases = reduction_cases();

void run_case(const ReductionCase& c, int axis, Backend backend, DType dtype, bool with_nan) {
  const Reduction r = tie_reduction(c, axis);
  std::vector<Array> in = tie_inputs(dtype, axis, 37, 53);
  if (with_nan) {
    Array& yy = in[1];  // the reduced-over variable in both layouts
    if (dtype == DType::Float32) yy.as<float>()[10] = NAN;
    else yy.as<double>()[10] = NAN;
  }
  const auto want = dense_reduction(r, in);
  Options opt;
  opt.backend = backend;
  auto got = evaluate(r, in, opt);
  const double tol = dtype == DType::Float32 ? 2e-5 : 1e-12;
  const std::string what = std::string(reduction_name(c.op)) + " axis " + std::to_string(axis) +
                           (with_nan ? " with NaN" : "");
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k)
    r.output_is_index(static_cast<int>(k)) ? expect_close(got[k], want[k], 0, 0, what + " indices")
                                           : expect_close(got[k], want[k], tol, tol, what);
}

}  // namespace

class ReductionBrute : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(ReductionBrute, MatchesBruteForce) {
  auto [case_idx, axis, variant] = GetParam();
  const Backend backend = variant % 2 == 0 ? Backend::Interpreter : Backend::Auto;
  const DType dtype = variant < 2 ? DType::Float64 : DType::Float32;
  const ReductionCase& c = kCases[case_idx];
  run_case(c, axis, backend, dtype, false);
  // Sums carry NaN through; Min/Max/KMin rank it, which is what this compares.
  const bool nan_ok = reduction_info(c.op).keeps_index();
  if (nan_ok) run_case(c, axis, backend, dtype, true);
}

INSTANTIATE_TEST_SUITE_P(All, ReductionBrute,
                         ::testing::Combine(::testing::Range(0, static_cast<int>(kCases.size())),
                                            ::testing::Values(0, 1), ::testing::Range(0, 4)));

TEST(ReductionNames, KeOpsSpellingsAndUnknownNames) {
  // The one table of names that every front end (C++, Python, the pykeops layer) reads.
  EXPECT_EQ(reduction_from_name("MinArgMin"), ReductionOp::MinArgMin);
  EXPECT_EQ(reduction_from_name("KMinArgKMin"), ReductionOp::KMinArgKMin);
  EXPECT_EQ(reduction_from_name("SoftMax"), ReductionOp::SumSoftMaxWeight);
  EXPECT_EQ(reduction_from_name("LogSumExpWeight"), ReductionOp::LogSumExp);
  // KeOps returns Max_SumShiftExpWeight's raw (max, shifted sums), not a log-sum-exp.
  EXPECT_THROW(reduction_from_name("Max_SumShiftExpWeight"), Error);
  EXPECT_THROW(reduction_from_name("GatherSum"), Error);  // internal to gradients
}

TEST(ReductionEdge, EmptyInputsGiveNeutralValues) {
  Formula f = sqdist(vi(0, 2), vj(1, 2));
  std::vector<Array> in = {random_array(DType::Float32, {4, 2}, 1), Array(DType::Float32, {0, 2})};
  auto s = evaluate(Reduction(ReductionOp::Sum, f), in);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(s[0].at(k), 0.0);
  auto m = evaluate(Reduction(ReductionOp::MinArgMin, f), in);
  EXPECT_TRUE(std::isinf(m[0].at(0)) && m[0].at(0) > 0);
  EXPECT_EQ(m[1].at(0), -1.0);
  auto l = evaluate(Reduction(ReductionOp::LogSumExp, f), in);
  EXPECT_TRUE(std::isinf(l[0].at(0)) && l[0].at(0) < 0);
  // A softmax over no terms has no weights (0 / 0): NaN, as KeOps's, not a made-up 0.
  for (const Backend b : {Backend::Interpreter, Backend::Compiled}) {
    Options o;
    o.backend = b;
    if (b == Backend::Compiled && !compiler_info().usable) continue;
    auto sm = evaluate(Reduction(ReductionOp::SumSoftMaxWeight, -f, 1, 0, vj(1, 2)), in, o);
    for (int k = 0; k < 8; ++k) EXPECT_TRUE(std::isnan(sm[0].at(k))) << static_cast<int>(b);
  }
  std::vector<Array> none = {Array(DType::Float32, {0, 2}), random_array(DType::Float32, {5, 2}, 2)};
  EXPECT_EQ(evaluate(Reduction(ReductionOp::Sum, f), none)[0].size(), 0);
}

// A -inf term has softmax weight exp(-inf) = 0, and adds 0 * w: NaN where its weight w is
// infinite (IEEE, KeOps, torch), on every backend. The interpreter once skipped such terms, so an
// all -inf row with -inf weights gave 0 there and NaN compiled. With finite weights an all -inf
// row stays -inf (LogSumExp) and is NaN (SumSoftMaxWeight: every weight is 0 / 0, as in torch and
// KeOps) on both.
TEST(ReductionEdge, MinusInfTermsWithInfiniteWeights) {
  const double inf = std::numeric_limits<double>::infinity();
  const Formula f = vi(0, 1) + vj(1, 1), w = vj(2, 1);
  auto col = [](std::vector<double> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    return Array::from(std::move(v), {n, 1});
  };
  struct Row {
    std::vector<double> y, w;
    double lse, ssmw;  // NaN: expect NaN
  };
  const Row rows[] = {{{-inf, -inf, -inf}, {-inf, 1, 1}, NAN, NAN},
                      {{0, -inf, 1}, {1, inf, 2}, NAN, NAN},
                      {{-inf, -inf}, {1, 2}, -inf, NAN}};
  for (const Backend b : {Backend::Interpreter, Backend::Compiled}) {
    if (b == Backend::Compiled && !compiler_info().usable) continue;
    Options o;
    o.backend = b;
    for (const Row& r : rows) {
      const std::vector<Array> in = {col({0.0}), col(r.y), col(r.w)};
      const double lse = evaluate(Reduction(ReductionOp::LogSumExp, f, 1, 0, w), in, o)[0].at(0);
      const double sm =
          evaluate(Reduction(ReductionOp::SumSoftMaxWeight, f, 1, 0, w), in, o)[0].at(0);
      for (const auto& [got, want, name] :
           {std::tuple{lse, r.lse, "LogSumExp"}, std::tuple{sm, r.ssmw, "SumSoftMaxWeight"}}) {
        if (std::isnan(want))
          EXPECT_TRUE(std::isnan(got)) << name << " backend " << static_cast<int>(b) << ": " << got;
        else
          EXPECT_EQ(got, want) << name << " backend " << static_cast<int>(b);
      }
    }
  }
}
