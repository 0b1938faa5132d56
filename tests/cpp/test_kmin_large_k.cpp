// KMin / ArgKMin with a K past what the compiled kernels keep in fixed arrays: no crash, the
// interpreter's heap-kept lists give what a sort gives, and the limit is named when it applies.
#include <cmath>
#include <numeric>

#include "codegen/cpu_codegen.hpp"
#include "reduction_helpers.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

// Integer coordinates in [0, 40): many equal distances, so ties must go to the lower index; one
// NaN row of y ranks after every number.
std::vector<Array> tied_points(int64_t ni, int64_t nj, uint64_t seed) {
  std::vector<Array> in = {random_array(DType::Float64, {ni, 1}, seed, 0, 40),
                           random_array(DType::Float64, {nj, 1}, seed + 1, 0, 40)};
  for (Array& a : in)
    for (int64_t k = 0; k < a.size(); ++k) a.as<double>()[k] = std::floor(a.as<double>()[k]);
  in[1].as<double>()[nj / 3] = NAN;
  return in;
}

// The first K of (distance, index) sorted with NaN last, as the reference for row i.
std::vector<int64_t> sorted_indices(const std::vector<Array>& in, int64_t i, int k) {
  const int64_t nj = in[1].shape()[0];
  const double x = in[0].as<double>()[i];
  std::vector<double> d(nj);
  for (int64_t j = 0; j < nj; ++j) d[j] = (x - in[1].as<double>()[j]) * (x - in[1].as<double>()[j]);
  std::vector<int64_t> idx(nj);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) {
    return !std::isnan(d[a]) && (std::isnan(d[b]) || d[a] < d[b]);
  });
  idx.resize(k);
  return idx;
}

void expect_sorted(const std::vector<Array>& got, const std::vector<Array>& in, int k) {
  const int64_t ni = in[0].shape()[0];
  for (int64_t i = 0; i < ni; ++i) {
    const std::vector<int64_t> want = sorted_indices(in, i, k);
    const double x = in[0].as<double>()[i];
    for (int q = 0; q < k; ++q) {
      const int64_t j = want[q];
      const double dv = (x - in[1].as<double>()[j]) * (x - in[1].as<double>()[j]);
      ASSERT_EQ(got[1].as<int64_t>()[i * k + q], j) << "row " << i << " slot " << q;
      if (std::isnan(dv))
        ASSERT_TRUE(std::isnan(got[0].as<double>()[i * k + q])) << "row " << i << " slot " << q;
      else
        ASSERT_EQ(got[0].as<double>()[i * k + q], dv) << "row " << i << " slot " << q;
    }
  }
}

const Formula kDist = sqdist(vi(0, 1), vj(1, 1));

}  // namespace

TEST(KMinLargeK, PastTheCompiledLimitMatchesASort) {
  const int k = kCompiledMaxK + 500;
  const auto in = tied_points(3, 2 * k, 11);
  const Reduction r(ReductionOp::KMinArgKMin, kDist, 1, k);
  expect_sorted(evaluate(r, in), in, k);
  expect_sorted(evaluate(r, in, with(Backend::Interpreter)), in, k);
}

TEST(KMinLargeK, AtTheLimitTheCompiledKernelMatchesASort) {
  const int k = kCompiledMaxK;
  const auto in = tied_points(5, k + 300, 21);
  const Reduction r(ReductionOp::KMinArgKMin, kDist, 1, k);
  expect_sorted(evaluate(r, in, with(Backend::Compiled)), in, k);
}

TEST(KMinLargeK, SmallKStillUsesTheSortedList) {
  const int k = 7;
  const auto in = tied_points(9, 200, 31);
  expect_sorted(evaluate(Reduction(ReductionOp::KMinArgKMin, kDist, 1, k), in), in, k);
}

// The case that overflowed the compiled kernel's stack: a million best of two million.
TEST(KMinLargeK, AMillionOfTwoMillionDoesNotCrash) {
  const int k = 1000000;
  const auto in = tied_points(1, 2 * k, 41);
  const auto got = evaluate(Reduction(ReductionOp::ArgKMin, kDist, 1, k), in);
  const std::vector<int64_t> want = sorted_indices(in, 0, k);
  for (int q = 0; q < k; ++q) ASSERT_EQ(got[0].as<int64_t>()[q], want[q]) << "slot " << q;
}

TEST(KMinLargeK, CompiledBackendNamesTheLimit) {
  const int k = kCompiledMaxK + 1;
  const auto in = tied_points(2, k + 1, 51);
  expect_error(
      [&] { evaluate(Reduction(ReductionOp::KMin, kDist, 1, k), in, with(Backend::Compiled)); },
      {"evaluate", "KMin", "K = 1025", "dim 1", "K * dim <= 1024"});
  // K > nj keeps its own error, whatever the size of K.
  expect_error([&] { evaluate(Reduction(ReductionOp::ArgKMin, kDist, 1, 5000), in); },
               {"ArgKMin", "K = 5000", "larger than the number of j rows (1026)"});
}
