// Summation accuracy at every SIMD level this CPU runs: each scheme within its stated error bound.
//
// The bounds (sum_bounds.hpp, README "Accuracy of sums") hold for every vector width, so each
// level is forced in-process through TESSEL_SIMD and checked against the same tolerance: a
// scheme whose accuracy depends on the lane count fails here on the machine that has it.
#include <algorithm>
#include <random>

#include "reduction_helpers.hpp"
#include "simd_level_test.hpp"
#include "sum_bounds.hpp"
#include "tessel/runtime.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

struct Data {
  std::string name;
  std::vector<double> terms;  // exactly representable in float32
};

// The case (a long run of 0.1f, where a float accumulator drifts systematically), a
// longer one where the drift of the accumulator itself shows, and terms of both signs and many
// magnitudes, where |s| << Σ|x_i|.
std::vector<Data> datasets() {
  std::vector<Data> d;
  d.push_back({"0.1f x 2e5", std::vector<double>(200000, static_cast<double>(0.1f))});
  d.push_back({"0.1f x 2^22", std::vector<double>(int64_t{1} << 22, static_cast<double>(0.1f))});
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(-1, 1);
  std::uniform_int_distribution<int> e(-20, 20);
  std::vector<double> mixed(300001);
  for (double& v : mixed) v = static_cast<float>(std::ldexp(u(rng), e(rng)));
  d.push_back({"mixed signs and magnitudes", std::move(mixed)});
  return d;
}

// Row sums of the terms (along j) and column sums (along i), with `backend`, against the bound.
void check_sums(const SumSetup& c, Backend backend, const std::string& what) {
  for (const Data& d : datasets()) {
    const ExactSum ref = exact_sum(d.terms);
    const double tol =
        sum_error_bound(c, static_cast<int64_t>(d.terms.size()), ref.abs_sum, std::fabs(ref.sum)) +
        ref.error;
    Options o;
    o.backend = backend;
    o.sum_scheme = c.scheme;
    o.accumulate_f64 = c.acc_f64;
    const Array t = array_of(d.terms, c.dtype);
    // The term is exactly t; three output rows, so a kernel's row block holds several.
    for (int axis : {1, 0}) {
      const Reduction r(ReductionOp::Sum, axis == 1 ? vj(0, 1) : vi(0, 1), axis);
      const Sizes rows = axis == 1 ? Sizes{3, -1} : Sizes{-1, 3};
      const Array got = evaluate(r, std::vector<Array>{t}, o, rows)[0];
      ASSERT_EQ(got.size(), 3);
      for (int64_t q = 0; q < got.size(); ++q)
        EXPECT_LE(std::fabs(got.at(q) - ref.sum), tol)
            << what << ", " << d.name << ", axis " << axis << ": got " << got.at(q) << ", exact "
            << ref.sum << " (relative error " << std::fabs(got.at(q) / ref.sum - 1) << ", bound "
            << tol / std::fabs(ref.sum) << ")";
    }
  }
}

std::string setup_name(const SumSetup& c) {
  const char* s = c.scheme == SumScheme::Block   ? "block"
                  : c.scheme == SumScheme::Kahan ? "kahan"
                                                 : "direct";
  return std::string(s) + (c.acc_f64 ? "+f64acc" : "") +
         (c.dtype == DType::Float32 ? " float32" : " float64");
}

std::vector<SumSetup> setups() {
  std::vector<SumSetup> all;
  for (DType t : {DType::Float32, DType::Float64})
    for (SumScheme s : {SumScheme::Block, SumScheme::Kahan, SumScheme::Direct})
      all.push_back({s, false, t});
  all.push_back({SumScheme::Block, true, DType::Float32});
  return all;
}

class SumAccuracyAtLevel : public SimdLevelTest {};

TEST_P(SumAccuracyAtLevel, EverySchemeWithinItsBound) {
  const std::string level = this->level();
  for (const SumSetup& c : setups()) check_sums(c, Backend::Compiled, level + " " + setup_name(c));
}

INSTANTIATE_TEST_SUITE_P(Levels, SumAccuracyAtLevel, ::testing::ValuesIn(kSimdLevels),
                         simd_level_name);

// LogSumExp adds its exponentials like block sums: float runs of L per lane, then float64. The
// first tile holds every lane's maximum (so no rescaling rounds), the rest are uniform below
// it; then |LSE error| <= u|LSE| + (2u (one exp, within one ulp) + (L-1)u + u_d terms) in
// relative terms of the sum, whatever the width. A float running sum per lane (the earlier
// kernels) is off by ~1e-4 here.
TEST_P(SumAccuracyAtLevel, LogSumExpSumsAsBlocks) {
  const std::string level = this->level();
  const int64_t n = int64_t{1} << 21;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u01(-3, 0);
  std::vector<double> f(n);
  for (int64_t j = 0; j < n; ++j) f[j] = j < kMaxLanes ? 0.0 : static_cast<float>(u01(rng));
  std::vector<double> e(n);
  for (int64_t j = 0; j < n; ++j) e[j] = std::exp(f[j]);
  const ExactSum ref = exact_sum(e);
  const double want = std::log(ref.sum);
  Options o;
  o.backend = Backend::Compiled;
  const double u = unit_roundoff(DType::Float32);
  const double rel =
      2 * u +
      sum_error_bound({SumScheme::Block, false, DType::Float32}, n, ref.abs_sum, ref.sum) / ref.sum;
  const double tol = u * std::fabs(want) + rel / (1 - rel);  // |log(1 + d)| <= |d| / (1 - |d|)
  const Reduction r(ReductionOp::LogSumExp, vj(0, 1), 1);
  const Array got = evaluate(r, std::vector<Array>{array_of(f, DType::Float32)}, o, Sizes{3, -1})[0];
  for (int64_t q = 0; q < got.size(); ++q)
    EXPECT_LE(std::fabs(got.at(q) - want), tol)
        << level << ": got " << got.at(q) << ", exact " << want << ", bound " << tol;
}

// The interpreter accumulates in float64 whatever the options, so it meets the tightest bound of
// each dtype (float64 accumulation for float32 data, compensated for float64), hence all of them.
TEST(SumAccuracy, InterpreterWithinEveryBound) {
  for (const SumSetup& c : {SumSetup{SumScheme::Block, true, DType::Float32},
                            SumSetup{SumScheme::Kahan, false, DType::Float64}})
    check_sums(c, Backend::Interpreter, setup_name(c));
}

// The bounds must be worth stating: the block and compensated bounds are far below the naive
// one on the long sum, and a plain float32 running sum of it breaks the block bound.
TEST(SumAccuracy, BoundsSeparateTheSchemes) {
  const int64_t n = int64_t{1} << 22;
  const double abs_sum = 0.1f * static_cast<double>(n);
  const auto bound = [&](SumScheme s) {
    return sum_error_bound({s, false, DType::Float32}, n, abs_sum, abs_sum);
  };
  EXPECT_LT(bound(SumScheme::Kahan), bound(SumScheme::Block) / 10);
  EXPECT_LT(bound(SumScheme::Block), bound(SumScheme::Direct) / 1000);
  float naive = 0;
  for (int64_t j = 0; j < n; ++j) naive += 0.1f;
  EXPECT_GT(std::fabs(naive - abs_sum), 10 * bound(SumScheme::Block));
}

}  // namespace
