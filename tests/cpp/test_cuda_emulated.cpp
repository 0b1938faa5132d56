// Generated CUDA kernels of every reduction run in the CPU emulator and checked value by value
// against the interpreter: both axes, float32 and float64, NaN/ties/-inf, split inner rows, odd
// tile sizes, long float sums and the softmax's edge values; the per-pair savings (the folded exp
// constant, a Sum's factor pulled out, the hand-unrolled inner loop).
#include "cuda_emulated_harness.hpp"
#include "reduction_cases.hpp"
#include "sum_bounds.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

const std::vector<ReductionCase> kCases = reduction_cases();

// tie_inputs with, when `nan`, NaN at rows 10 and 250 of variable 1 (the reduced-over one on
// both axes) where it has them: the first one must win.
std::vector<Array> case_inputs(DType t, int axis, int64_t n_out, int64_t n_red, bool nan) {
  std::vector<Array> in = tie_inputs(t, axis, n_out, n_red);
  if (nan && in[1].shape()[0] > 10) set(in[1], 20, NAN);
  if (nan && in[1].shape()[0] > 250) set(in[1], 501, NAN);
  return in;
}

bool kmin_family(ReductionOp op) {
  return op == ReductionOp::KMin || op == ReductionOp::ArgKMin || op == ReductionOp::KMinArgKMin;
}

}  // namespace

// Every reduction over j, with and without a NaN among the reduced-over values: one row per
// thread in 3 blocks of 128 threads (the last one partial) and 2 tiles of inner rows (the last
// one partial); then the plan's own choice (several rows per thread).
TEST_P(CudaEmulatedKernels, EveryReductionOverJ) {
  SKIP_WITHOUT_COMPILER();
  const double tol = tol_of(dtype());
  for (const ReductionCase& c : kCases) {
    const Reduction r = tie_reduction(c, 1);
    for (const CudaPlanOverrides& force : {CudaPlanOverrides{128, 1, 0}, CudaPlanOverrides{}})
      for (bool nan : {false, true})
        expect_matches(r, case_inputs(dtype(), 1, 300, 200, nan), force, tol, tol,
                       r.str() + (nan ? " with NaN" : ""));
  }
}

// Over i (axis 0) the kernel's outer rows are the j variables; one case per reduction family.
TEST_P(CudaEmulatedKernels, ReductionsOverI) {
  SKIP_WITHOUT_COMPILER();
  const double tol = tol_of(dtype());
  for (const ReductionCase& c : {kCases[0], kCases[5], kCases[9], kCases[11], kCases[12]}) {
    const Reduction r = tie_reduction(c, 0);
    for (bool nan : {false, true})
      expect_matches(r, case_inputs(dtype(), 0, 150, 90, nan), {.block = 64}, tol, tol,
                     r.str() + (nan ? " with NaN" : ""));
  }
}

// The inner rows split across block rows, then merged by tessel_combine: every reduction, chunk
// boundaries inside tiles (chunks of 100, 43, 60 and 150 rows against tiles of 32 or 64), every
// rows-per-thread, NaN in two chunks (the first one's index wins), and the rounded formulas'
// ties across chunks (the lowest index wins), all as the unsplit CPU computes them.
TEST_P(CudaEmulatedKernels, SplitInnerRowsEveryReduction) {
  SKIP_WITHOUT_COMPILER();
  const double tol = tol_of(dtype());
  const CudaPlanOverrides splits[] = {{.block = 64, .split_j = 3},
                                      {.block = 32, .rows_per_thread = 1, .split_j = 7},
                                      {.block = 64, .rows_per_thread = 2, .split_j = 5},
                                      {.block = 32, .rows_per_thread = 4, .split_j = 2}};
  for (const ReductionCase& c : kCases) {
    const Reduction r = tie_reduction(c, 1);
    for (int k = 0; k < 4; ++k) {
      const bool nan = k % 2;  // NaN makes every LogSumExp NaN: half the splits see numbers
      expect_matches(r, case_inputs(dtype(), 1, 70, 300, nan), splits[k], tol, tol,
                     r.str() + (nan ? " with NaN" : ""));
    }
  }
}

// Ties everywhere and ranges with nothing to pick: every inner row equal (ArgMin must give 0,
// ArgKMin 0..K-1, whichever chunk the rows fall in), every term +inf, -inf or NaN (Min of +inf
// terms still names the first one; a single NaN term makes SoftMax NaN), and chunks left empty by
// the split (5 rows in 4 chunks of 2: the last one starts past the end; no rows at all).
TEST_P(CudaEmulatedKernels, TiesInfinitiesAndEmptyChunks) {
  SKIP_WITHOUT_COMPILER();
  const double tol = tol_of(dtype());
  const Formula x = vi(0, 2), y = vj(1, 2), b = vj(2, 1);
  const Reduction rs[] = {Reduction(ReductionOp::MinArgMin, (x - y) * b),
                          Reduction(ReductionOp::MaxArgMax, (y - x) * b),
                          Reduction(ReductionOp::KMinArgKMin, sqdist(x, y) * b, 1, 3),
                          // past K = 16 the list lives in local memory: another code path
                          Reduction(ReductionOp::ArgKMin, sqdist(x, y) * b, 1, 20),
                          Reduction(ReductionOp::Sum, (x - y) * b),
                          Reduction(ReductionOp::LogSumExp, sqdist(x, y) - 1.0, 1, 0, b),
                          Reduction(ReductionOp::SumSoftMaxWeight, -sqdist(x, y), 1, 0, b)};
  for (const Reduction& r : rs)
    for (double yv : {0.5, double(INFINITY), -double(INFINITY), double(NAN)})
      for (auto [n_red, split] : {std::pair<int64_t, int>{200, 3}, {5, 4}, {1, 1}, {0, 3}}) {
        if (kmin_family(r.op()) && n_red < r.k()) continue;
        std::vector<Array> in = {random_array(dtype(), {40, 2}, 7, -1, 1),
                                 random_array(dtype(), {n_red, 2}, 8),
                                 random_array(dtype(), {n_red, 1}, 9, 0.5, 1)};
        for (int64_t k = 0; k < in[1].size(); ++k) set(in[1], k, yv);
        for (int64_t k = 0; k < in[2].size(); ++k) set(in[2], k, 0.75);
        for (int rows : {1, 4}) {
          if (rows == 1 && yv != 0.5) continue;  // the emulator's time goes to ties
          expect_matches(
              r, in, {.block = 32, .rows_per_thread = rows, .split_j = split}, tol, tol,
              r.str() + " y = " + std::to_string(yv) + ", " + std::to_string(n_red) + " rows");
        }
      }
}

// Long sums in float32: terms near 0.1 (times powers of two, so each product is exact), where a
// float accumulator growing to ~5e3 rounds each addition the same way (its error reaches ~2e-4
// of the sum, which the test checks first). Every scheme stays within its stated bound, a tile
// being the float run (README "Accuracy of sums"); LogSumExp and SoftMax sums at float tolerance.
TEST_P(CudaEmulatedKernels, LongSumsKeepFloatAccuracy) {
  SKIP_WITHOUT_COMPILER();
  if (GetParam()) GTEST_SKIP() << "float32 only: float64 terms add in double";
  const DType t = dtype();
  const int64_t n_out = 6, n_red = 30011;
  const Formula x = vi(0, 1), y = vj(1, 1);
  std::vector<Array> in = {Array(t, {n_out, 1}), random_array(t, {n_red, 1}, 32, -0.01, 0.01)};
  for (int64_t k = 0; k < n_red; ++k) set(in[1], k, 0.1 + in[1].at(k) * 1e-6);
  for (int64_t i = 0; i < n_out; ++i) set(in[0], i, std::ldexp(1.0, static_cast<int>(i) - 2));
  std::vector<double> terms(n_red);
  for (int64_t k = 0; k < n_red; ++k) terms[k] = in[1].at(k);
  const ExactSum ref = exact_sum(terms);
  {  // what a naive float accumulator would give
    float acc = 0;
    for (double v : terms) acc += static_cast<float>(v);
    EXPECT_GT(std::fabs(acc - ref.sum), 5e-5 * ref.sum) << "the test no longer needs block sums";
  }
  for (const SumSetup& c : {SumSetup{SumScheme::Block}, SumSetup{SumScheme::Kahan},
                            SumSetup{SumScheme::Direct}, SumSetup{SumScheme::Block, true}})
    for (const CudaPlanOverrides& force :
         {CudaPlanOverrides{.block = 256}, CudaPlanOverrides{.block = 256, .split_j = 3}}) {
      SumSetup tile = c;
      tile.block_terms = force.block;
      const double tol = sum_error_bound(tile, n_red, ref.abs_sum, ref.sum) + ref.error;
      const std::vector<Array> got =
          run_emulated(Reduction(ReductionOp::Sum, x * y).impl(), in, force, {c.scheme, c.acc_f64});
      for (int64_t i = 0; i < n_out; ++i) {
        const double scale = std::ldexp(1.0, static_cast<int>(i) - 2);
        EXPECT_LE(std::fabs(got[0].at(i) / scale - ref.sum), tol)
            << "scheme " << static_cast<int>(c.scheme) << (c.acc_f64 ? " f64acc " : " ")
            << label(force) << " row " << i << ": relative error "
            << std::fabs(got[0].at(i) / scale / ref.sum - 1) << ", bound " << tol / ref.sum;
      }
    }
  const double tol = tol_of(t);
  const CudaPlanOverrides force{.block = 256};
  expect_matches(Reduction(ReductionOp::LogSumExp, x * y * 10.0), in, force, tol, tol,
                 "LogSumExp of x");
  expect_matches(Reduction(ReductionOp::SumSoftMaxWeight, -x * y, 1, 0, y), in, force, tol, tol,
                 "SoftMax of -0.1 x");
}

// Tile and block boundaries: sizes that are not multiples of the block, fewer inner rows than
// threads, a single row, no inner rows at all, with warp-sized and larger blocks. The formulas
// are continuous (no ties), so that an index computed from the wrong tile shows.
TEST_P(CudaEmulatedKernels, OddSizesAndBlockSizes) {
  SKIP_WITHOUT_COMPILER();
  const double tol = tol_of(dtype());
  const Formula x = vi(0, 2), y = vj(1, 2), b = vj(2, 3), s = pm(3, 1);
  const Reduction reductions[] = {Reduction(ReductionOp::Sum, exp(-s * sqdist(x, y)) * b),
                                  Reduction(ReductionOp::MinArgMin, (x - y) * s),
                                  Reduction(ReductionOp::KMinArgKMin, sqdist(x, y) * s, 1, 3),
                                  Reduction(ReductionOp::LogSumExp, -s * sqdist(x, y), 1, 0, b)};
  const std::pair<int64_t, int64_t> sizes[] = {{1, 1},   {1, 0},    {5, 3},     {31, 97},
                                               {64, 64}, {65, 129}, {257, 300}, {40, 1}};
  for (const Reduction& r : reductions) {
    const bool nan_ok = r.op() == ReductionOp::MinArgMin || kmin_family(r.op());
    for (int block : {32, 64, 128, 256})
      for (auto [n_out, n_red] : sizes) {
        if (kmin_family(r.op()) && n_red < r.k()) continue;  // K > rows is an input error
        expect_matches(
            r, case_inputs(dtype(), 1, n_out, n_red, nan_ok && n_red > 20), {.block = block}, tol,
            tol, r.str() + " n_out " + std::to_string(n_out) + " n_red " + std::to_string(n_red));
      }
  }
}

// LogSumExp and SumSoftMaxWeight where the naive formula overflows or has nothing to add: terms
// up to +-1000, -inf terms (log 0), a row whose terms are all -inf, a row of NaN; then a +inf
// column (one infinite term per row) and a NaN column (every row NaN).
TEST_P(CudaEmulatedKernels, SoftmaxEdgeValues) {
  SKIP_WITHOUT_COMPILER();
  const DType t = dtype();
  const Formula x = vi(0, 2), a = vi(1, 1), y = vj(2, 2), b = vj(3, 1), w = vj(4, 3), c = pm(5, 1);
  const Formula f = c * (x | y) + log(a * b);
  const int64_t N = 200, M = 150;
  std::vector<Array> in = {
      random_array(t, {N, 2}, 11),         random_array(t, {N, 1}, 12, 0.5, 2),
      random_array(t, {M, 2}, 13),         random_array(t, {M, 1}, 14, 0.5, 2),
      random_array(t, {M, 3}, 15, 0.1, 1), Array::from(std::vector<double>{500}, {1})};
  if (t == DType::Float32) in[5] = Array::from(std::vector<float>{500}, {1});
  set(in[1], 3, 0.0);     // row 3: every term is -inf
  set(in[1], 7, -1.0);    // row 7: every term is NaN
  set(in[3], 11, 0.0);    // column 11: -inf in every row
  set(in[3], 12, 1e-30);  // column 12: a very negative term
  // float32 rounds F (up to 1000) to ~1e-4, which the softmax weights inherit.
  const double tol = t == DType::Float32 ? 1e-3 : 1e-11;
  const Reduction rs[] = {Reduction(ReductionOp::LogSumExp, f),
                          Reduction(ReductionOp::LogSumExp, f, 1, 0, w),
                          Reduction(ReductionOp::SumSoftMaxWeight, f, 1, 0, w * 2.0 - 1.0)};
  for (const Reduction& r : rs) {
    expect_matches(r, in, {.block = 128}, tol, tol, r.str());
    std::vector<Array> inf_in = clone(in), nan_in = clone(in);
    set(inf_in[3], 13, INFINITY);
    set(inf_in[1], 5, INFINITY);  // row 5: every term +inf (LogSumExp +inf, SoftMax NaN)
    expect_matches(r, inf_in, {.block = 64, .split_j = 3}, tol, tol,
                   r.str() + " with a +inf column");
    set(nan_in[2], 41, NAN);  // column 20
    expect_matches(r, nan_in, {.block = 64, .split_j = 4}, tol, tol,
                   r.str() + " with a NaN column");
  }
}

namespace {

// The per-pair savings of the kernels (codegen/cuda_formula.hpp): inputs of the Gaussian sum.

// Points in [0, 1]^3 and weights in [-1, 1]; n_out outer rows, n_in inner rows.
std::vector<Array> gauss_inputs(DType t, int64_t n_out, int64_t n_in, double g) {
  Array gp(t, {1, 1});
  set(gp, 0, g);
  return {random_array(t, {n_out, 3}, 11, 0, 1), random_array(t, {n_in, 3}, 12, 0, 1),
          random_array(t, {n_in, 1}, 13), gp};
}

const Formula kX = vi(0, 3), kY = vj(1, 3), kB = vj(2, 1), kG = pm(3, 1);

}  // namespace

// exp(k v) with k = -g, -g as a division, a negation around the product, and k made of an outer
// variable: the constant is computed per thread from the parameter, so one compiled kernel
// serves every g. The same module runs with three values of g (the source does not change).
TEST_P(CudaEmulatedKernels, FoldedExpConstantFollowsTheParameter) {
  SKIP_WITHOUT_COMPILER();
  const double tol = tol_of(dtype());
  const Formula d = sqdist(kX, kY);
  const std::vector<Formula> forms = {exp(-kG * d) * kB, exp(d / -kG) * kB, exp(-(kG * d)) * kB,
                                      exp(-(kX[0] * kG) * d) * kB, exp(d * -kG) * kB};
  for (const Formula& f : forms) {
    const Reduction r(ReductionOp::Sum, f);
    for (double g : {0.5, 16.0, 100.0})
      for (const CudaPlanOverrides& force : {CudaPlanOverrides{}, CudaPlanOverrides{64, 1, 0}})
        expect_matches(r, gauss_inputs(dtype(), 200, 301, g), force, tol, tol,
                       r.str() + " g = " + std::to_string(g));
  }
  // The folded exponential inside other reductions, and in a weight.
  const std::vector<Array> in = gauss_inputs(dtype(), 130, 77, 3.0);
  expect_matches(Reduction(ReductionOp::LogSumExp, -kG * d + kB), in, {}, tol, tol, "LogSumExp");
  expect_matches(Reduction(ReductionOp::MinArgMin, exp(-kG * d) * kB), in, {}, tol, tol, "ArgMin");
  expect_matches(Reduction(ReductionOp::SumSoftMaxWeight, -kG * d, 1, 0, exp(-kG * d) * kB), in, {},
                 tol, tol, "SoftMax");
}

// The gradient of the Gaussian sum: its factor -2 g e_i multiplies each tile's sum instead of
// each pair. Rows whose factor is infinite or NaN take the per-pair product, so that a zero term
// gives NaN (0 * inf) exactly where the interpreter does; a finite factor of a zero term does not.
TEST_P(CudaEmulatedKernels, SumFactorPulledOutOfThePairs) {
  SKIP_WITHOUT_COMPILER();
  const double tol = tol_of(dtype());
  const DType t = dtype();
  const Reduction gauss(ReductionOp::Sum, exp(-kG * sqdist(kX, kY)) * kB);
  const Reduction g = grad(gauss, 0);  // appends the cotangent E = Vi(4, 1)
  std::vector<Array> in = gauss_inputs(t, 300, 250, 16.0);
  in.push_back(random_array(t, {300, 1}, 14));
  for (const CudaPlanOverrides& force :
       {CudaPlanOverrides{}, CudaPlanOverrides{128, 4, 0}, CudaPlanOverrides{64, 2, 3}})
    expect_matches(g, in, force, tol, tol, "gradient " + label(force));
  // Row 7 equals inner row 5 (a zero term x - y), rows 7 and 9 get an infinite cotangent and
  // row 200 a NaN one; b_5 = 0 makes another zero term for every row.
  for (int c = 0; c < 3; ++c) set(in[0], 7 * 3 + c, in[1].at(5 * 3 + c));
  set(in[4], 7, INFINITY);
  set(in[4], 9, -INFINITY);
  set(in[4], 200, NAN);
  for (const CudaPlanOverrides& force : {CudaPlanOverrides{}, CudaPlanOverrides{128, 4, 0}})
    expect_matches(g, in, force, tol, tol, "gradient, non-finite factors " + label(force));
  set(in[2], 5, 0.0);
  expect_matches(g, in, {}, tol, tol, "gradient, non-finite factors and b = 0");
  // An i-variable factor of a plain sum, with a parameter beside it.
  const Reduction lin(ReductionOp::Sum, kX[1] * kG * (kX - kY) * kB);
  expect_matches(lin, gauss_inputs(t, 90, 1000, 2.0), {}, tol, tol, "x1 g (x - y) b");
}

// The softmax family's optimistic tiles: terms whose maximum grows along j, slowly (every tile
// stays under the redo bound with a stale maximum: up to 2^15 per term) and fast (most tiles
// run again with the test), decreasing, and shuffled; LogSumExp and SumSoftMaxWeight.
TEST_P(CudaEmulatedKernels, OptimisticSoftmaxTiles) {
  SKIP_WITHOUT_COMPILER();
  const double tol = tol_of(dtype());
  const DType t = dtype();
  const int64_t n_in = 1000;
  const Formula a = vi(0, 1), v = vj(1, 1), w = vj(2, 1);
  for (double slope : {0.01, 0.08, 1.0, -0.5}) {
    std::vector<Array> in = {random_array(t, {37, 1}, 21, 0.5, 1.5), Array(t, {n_in, 1}),
                             random_array(t, {n_in, 1}, 22)};
    for (int64_t j = 0; j < n_in; ++j) set(in[1], (j * 7919) % n_in, slope * (j % 500));
    const std::string what = "slope " + std::to_string(slope);
    for (const CudaPlanOverrides& force : {CudaPlanOverrides{}, CudaPlanOverrides{64, 4, 3}}) {
      expect_matches(Reduction(ReductionOp::LogSumExp, a * v), {in[0], in[1]}, force, tol, tol,
                     what);
      expect_matches(Reduction(ReductionOp::SumSoftMaxWeight, a * v, 1, 0, w), in, force, tol, tol,
                     what + " softmax");
    }
    for (int64_t j = 0; j < n_in; ++j) set(in[1], j, slope * j);  // in order: the max grows
    expect_matches(Reduction(ReductionOp::LogSumExp, a * v), {in[0], in[1]}, {}, tol, tol,
                   what + " sorted");
  }
  // Weights of 1e35: terms up to ~150 (a stale maximum) times them overflow a tile's float sum,
  // which the careful fold (terms <= 1) does not.
  std::vector<Array> big = {random_array(t, {37, 1}, 21, 0.5, 1.5), Array(t, {n_in, 1}),
                            random_array(t, {n_in, 1}, 23, 0.5, 1)};
  for (int64_t j = 0; j < n_in; ++j) {
    set(big[1], j, 0.004 * j);
    set(big[2], j, big[2].at(j) * 1e35);
  }
  expect_matches(Reduction(ReductionOp::SumSoftMaxWeight, a * v, 1, 0, w), big, {.block = 128}, tol,
                 tol, "weights of 1e35");
}

// The hand-unrolled inner loop: tiles whose row count is not a multiple of the unroll (every
// remainder), one inner row, and chunk boundaries inside the unrolled part.
TEST_P(CudaEmulatedKernels, UnrolledInnerLoopRemainders) {
  SKIP_WITHOUT_COMPILER();
  const double tol = tol_of(dtype());
  const Reduction r(ReductionOp::Sum, exp(-kG * sqdist(kX, kY)) * kB);
  const Reduction k(ReductionOp::ArgKMin, sqdist(kX, kY), 1, 3);
  for (int64_t n_in : {1, 7, 8, 9, 15, 133}) {
    const std::vector<Array> in = gauss_inputs(dtype(), 40, n_in, 4.0);
    expect_matches(r, in, {}, tol, tol, "sum over " + std::to_string(n_in));
    expect_matches(r, in, {32, 4, 3}, tol, tol, "split sum over " + std::to_string(n_in));
    if (n_in >= 3) expect_matches(k, {in[0], in[1]}, {}, tol, tol, "ArgKMin");
  }
}

INSTANTIATE_TEST_SUITE_P(CudaEmulated, CudaEmulatedKernels, ::testing::Bool(), dtype_label);
