// The compiled kernels' inner chunks (cache tiling over j): chunked runs equal unchunked ones.
//
// Large inner ranges are cut into chunks and every block of rows saves its reduction state at the
// end of a chunk and restores it at the next (codegen/cpu_codegen.cpp). Tiny chunks make that
// happen at test sizes. Chunks are whole blocks of tiles, so a dense reduction adds and compares
// the same terms in the same order with or without them: the results must be identical, bit for
// bit, in every reduction family, with ties and NaN across chunk boundaries. Block-sparse ranges
// cut intervals at chunk boundaries, which regroups float runs: those are checked to a bound.
#include <cmath>
#include <cstring>

#include "backend/cpu/compiled.hpp"
#include "reduction_helpers.hpp"
#include "simd_level_test.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

// Sets the compiled kernels' chunk size for one scope.
class ScopedChunk {
 public:
  explicit ScopedChunk(int64_t bytes) : old_(set_cpu_chunk_bytes(bytes)) {}
  ~ScopedChunk() { set_cpu_chunk_bytes(old_); }
  ScopedChunk(const ScopedChunk&) = delete;
  ScopedChunk& operator=(const ScopedChunk&) = delete;

 private:
  int64_t old_;
};

constexpr int64_t kN = 403, kM = 3007;

// x in the unit cube; y repeats with period 37, so every row has exact ties between chunks; with
// `nan`, one y coordinate in the last chunk is NaN.
std::vector<Array> inputs(DType t, bool nan) {
  Array x = random_array(t, {kN, 3}, 11);
  Array y(t, {kM, 3});
  const Array base = random_array(t, {37, 3}, 12);
  for (int64_t j = 0; j < kM; ++j)
    std::memcpy(static_cast<char*>(y.data()) + j * 3 * dtype_size(t),
                static_cast<const char*>(base.data()) + (j % 37) * 3 * dtype_size(t),
                3 * dtype_size(t));
  if (nan) {
    if (t == DType::Float32)
      y.as<float>()[(kM - 5) * 3 + 1] = std::nanf("");
    else
      y.as<double>()[(kM - 5) * 3 + 1] = std::nan("");
  }
  return {x, y, random_array(t, {kM, 2}, 13, 0.1, 1)};
}

// The leading inputs r reads (evaluate wants exactly those).
std::vector<Array> args_for(const Reduction& r, const std::vector<Array>& in) {
  size_t n = 0;
  for (const VarSlot& v : r.inputs()) n = std::max(n, static_cast<size_t>(v.index + 1));
  return std::vector<Array>(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n));
}

struct Case {
  std::string name;
  Reduction r;
  Options opt;
};

std::vector<Case> cases() {
  const Formula x = vi(0, 3), y = vj(1, 3), b = vj(2, 2), d2 = sqdist(x, y);
  auto opt = [](SumScheme s, bool f64acc) {
    Options o = with(Backend::Compiled);
    o.sum_scheme = s;
    o.accumulate_f64 = f64acc;
    return o;
  };
  const Options plain = with(Backend::Compiled);
  const Formula gauss = exp(-d2 * 4.0) * b;
  return {
      {"sum-block", Reduction(ReductionOp::Sum, gauss), plain},
      {"sum-kahan", Reduction(ReductionOp::Sum, gauss), opt(SumScheme::Kahan, false)},
      {"sum-direct", Reduction(ReductionOp::Sum, gauss), opt(SumScheme::Direct, false)},
      {"sum-f64acc", Reduction(ReductionOp::Sum, gauss), opt(SumScheme::Block, true)},
      {"max", Reduction(ReductionOp::Max, -d2), plain},
      {"argmin", Reduction(ReductionOp::ArgMin, d2), plain},
      {"min-argmin", Reduction(ReductionOp::MinArgMin, d2), plain},
      {"argkmin", Reduction(ReductionOp::ArgKMin, d2, 1, 5), plain},
      {"kmin-argkmin", Reduction(ReductionOp::KMinArgKMin, d2, 1, 3), plain},
      {"logsumexp", Reduction(ReductionOp::LogSumExp, -d2 * 8.0), plain},
      {"logsumexp-weight", Reduction(ReductionOp::LogSumExp, -d2 * 8.0, 1, 0, b), plain},
      {"softmax-weight", Reduction(ReductionOp::SumSoftMaxWeight, -d2 * 8.0, 1, 0, b), plain},
  };
}

// Against the interpreter (which computes float32 data in float64): the same indices, exactly,
// ties between copies of a point resolved to the first; values to the compiled exp's and the
// float32 rounding's bound.
void expect_same_choice(const std::vector<Array>& got, const std::vector<Array>& want, double rtol,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t o = 0; o < got.size(); ++o) {
    if (got[o].dtype() == DType::Int64) {
      expect_outputs_near({got[o]}, {want[o]}, 0, what + " indices");
      continue;
    }
    std::vector<double> w(want[o].size());
    for (int64_t k = 0; k < want[o].size(); ++k) w[k] = want[o].at(k);
    expect_close(got[o], w, rtol, rtol, what);
  }
}

// Three blocks of rows: everything, two intervals that each cross chunk boundaries at every
// width (chunks are 64 tiles: 64 to 1024 indices), and nothing.
std::shared_ptr<BlockRanges> crossing_ranges() {
  auto br = std::make_shared<BlockRanges>();
  br->ranges_i = {0, 150, 150, 390, 390, kN};
  br->redranges_j = {0, kM, 5, 1500, 2100, 2990};
  br->slices_i = {1, 3, 3};
  br->ranges_j = {0, 5, 5, 1500, 1500, 2100, 2100, 2990, 2990, kM};
  br->redranges_i = {0, 150, 0, 390, 0, 150, 0, 390, 0, 150};
  br->slices_j = {1, 3, 4, 6, 7};
  return br;
}

class CompiledChunks : public SimdLevelTest {};

TEST_P(CompiledChunks, DenseChunkedEqualsUnchunkedBitForBit) {
  const std::string level = this->level();
  for (DType t : {DType::Float32, DType::Float64})
    for (bool nan : {false, true}) {
      const std::vector<Array> all = inputs(t, nan);
      for (const Case& c : cases()) {
        const std::vector<Array> in = args_for(c.r, all);
        const std::string what = level + " " + c.name + (t == DType::Float32 ? " f32" : " f64") +
                                 (nan ? " with NaN" : "");
        const std::vector<Array> whole = evaluate(c.r, in, c.opt);
        std::vector<Array> chunked;
        {
          ScopedChunk tiny(1);  // one block of tiles per chunk: 3 to 47 chunks here
          chunked = evaluate(c.r, in, c.opt);
        }
        expect_outputs_near(chunked, whole, 0, what);
        // And both against the interpreter where the order of terms cannot matter.
        if (reduction_info(c.r.op()).family != ReductionFamily::Sum &&
            reduction_info(c.r.op()).family != ReductionFamily::SoftMax)
          expect_same_choice(chunked, evaluate(c.r, in, with(Backend::Interpreter)),
                             t == DType::Float32 ? 1e-6 : 1e-14, what + " interp");
      }
    }
}

TEST_P(CompiledChunks, BlockSparseChunkedWithinBound) {
  const std::string level = this->level();
  const std::vector<Array> all = inputs(DType::Float64, false);
  for (Case c : cases()) {
    const std::vector<Array> in = args_for(c.r, all);
    c.opt.ranges = crossing_ranges();
    const std::string what = level + " " + c.name + " ranges";
    Options interp = c.opt;
    interp.backend = Backend::Interpreter;
    const std::vector<Array> want = evaluate(c.r, in, interp);
    std::vector<Array> got;
    {
      ScopedChunk tiny(1);
      got = evaluate(c.r, in, c.opt);
    }
    const ReductionFamily fam = reduction_info(c.r.op()).family;
    if (fam != ReductionFamily::Sum && fam != ReductionFamily::SoftMax) {
      expect_same_choice(got, want, 1e-14, what);
      continue;
    }
    // float64 sums of at most kM positive terms: regrouped runs differ by ~kM u relative at
    // worst (3e-13), while a term lost or counted twice moves a row by more than 1e-9 of it
    // (terms are >= 0.1 exp(-24) and rows <= kM).
    std::vector<double> w(want[0].size());
    for (int64_t k = 0; k < want[0].size(); ++k) w[k] = want[0].at(k);
    expect_close(got[0], w, 1e-12, 0, what);
  }
}

// A few rows against many points: the inner range is split across threads and the parts' states
// merged (backend/cpu/compiled.cpp). Min/max/K-min choices and their ties must not move; sums
// regroup, within their schemes' bounds: float64 accumulators for block sums (1e-6 covers the
// final float32 rounding), M u for direct float32 sums, a few u for Kahan.
TEST_P(CompiledChunks, FewRowsSplitAcrossThreads) {
  const std::string level = this->level();
  for (DType t : {DType::Float32, DType::Float64})
    for (bool nan : {false, true})
      for (int64_t rows : {1, 3})
        for (bool sparse : {false, true}) {
          std::vector<Array> all = inputs(t, nan);
          Array x(t, {rows, 3});
          std::memcpy(x.data(), all[0].data(), static_cast<size_t>(rows * 3) * dtype_size(t));
          all[0] = x;
          auto br = std::make_shared<BlockRanges>();
          br->ranges_i = {0, rows};
          br->redranges_j = {5, 1500, 2100, 2990};
          br->slices_i = {2};
          br->ranges_j = {5, 1500, 2100, 2990};
          br->redranges_i = {0, rows, 0, rows};
          br->slices_j = {1, 2};
          for (Case c : cases()) {
            const std::string what = level + " " + c.name +
                                     (t == DType::Float32 ? " f32" : " f64") + (nan ? " NaN" : "") +
                                     " rows " + std::to_string(rows) + (sparse ? " ranges" : "");
            if (sparse) c.opt.ranges = br;
            const std::vector<Array> in = args_for(c.r, all);
            c.opt.threads = 1;
            const std::vector<Array> whole = evaluate(c.r, in, c.opt);
            c.opt.threads = 3;
            std::vector<Array> split;
            {
              ScopedChunk tiny(1);  // chunks of 64 tiles: 2 or 3 parts at every width
              split = evaluate(c.r, in, c.opt);
            }
            const ReductionFamily fam = reduction_info(c.r.op()).family;
            if (fam != ReductionFamily::Sum && fam != ReductionFamily::SoftMax) {
              expect_outputs_near(split, whole, 0, what);
              continue;
            }
            const bool direct32 = t == DType::Float32 && c.opt.sum_scheme == SumScheme::Direct &&
                                  !c.opt.accumulate_f64;
            const double rtol = t == DType::Float64 ? 1e-12 : direct32 ? kM * 6e-8 : 1e-6;
            for (size_t o = 0; o < whole.size(); ++o) {
              std::vector<double> w(whole[o].size());
              for (int64_t k = 0; k < whole[o].size(); ++k) w[k] = whole[o].at(k);
              expect_close(split[o], w, rtol, rtol, what);
            }
          }
        }
}

INSTANTIATE_TEST_SUITE_P(Levels, CompiledChunks, ::testing::ValuesIn(kSimdLevels), simd_level_name);

}  // namespace
