// Generated kernel size: contractions (TensorDot, MatVecMult, VecMatMult and their gradients)
// become loop nests instead of code that grows with the product of the dims, wide outputs keep
// their accumulators in arrays walked by loops, and the size estimate that sends kernels far too
// large to compile to the interpreter without generating them.
#include <algorithm>
#include <string>
#include <vector>

#include "backend/cpu/compiled.hpp"
#include "codegen/cpu_codegen.hpp"
#include "reduction_helpers.hpp"
#include "tessel/runtime.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

CpuKernelSpec spec_of(const Reduction& r, bool f64 = false) {
  CpuKernelSpec s;
  s.r = &r.impl();
  s.f64 = f64;
  s.vbytes = 32;
  return s;
}

std::string source_of(const Reduction& r) {
  KernelLayout lay;
  return generate_cpu_kernel(spec_of(r), lay);
}

int64_t count_of(const std::string& text, const std::string& what) {
  int64_t n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

// The tutorial's shapes: (4,5,6) x (5,6,7) contracted over (5,6): 4 * 7 outputs of 30 terms.
Formula big_tensordot(const Formula& a, const Formula& b) {
  return tensordot(a, b, {4, 5, 6}, {5, 6, 7}, {1, 2}, {0, 1}, {1, 0});
}

void expect_matches_interpreter(const Reduction& r, const std::vector<Array>& in, bool f64,
                                const std::string& what) {
  int used = 0;  // variables 0..used-1 must be passed
  for (const VarSlot& v : r.inputs()) used = std::max(used, v.index + 1);
  expect_compiled_matches_interpreter(r, {in.begin(), in.begin() + used}, f64, what);
}

// A wide output of a loop-nest contraction: d outputs of 30 terms each.
Formula outer_product(int d) {
  return tensordot(vi(0, 30 * d), vj(1, 30), {d, 30}, {30}, {1}, {0});
}

}  // namespace

TEST(ContractionCodegen, LargeContractionsAreLoopNestsNotProductsOfDims) {
  const Formula x = vi(0, 120), y = vj(1, 210);
  for (const Formula& f : {big_tensordot(x, y), matvecmult(vi(0, 64 * 48), vj(1, 48)),
                           vecmatmult(vj(1, 64), vi(0, 64 * 48))}) {
    const Reduction r(ReductionOp::Sum, f);
    const std::string src = source_of(r);
    // Unrolled, each of the three tile bodies had two statements per term (840, 3072, 3072).
    EXPECT_LT(count_of(src, "const V t"), 400) << r.str();
    EXPECT_EQ(count_of(src, "V s_ = bc(0.0);"), 3) << r.str();
    // Wide operands are arrays filled by a loop: one load statement per tile body and variable.
    EXPECT_LE(count_of(src, "vload(yt"), 6) << r.str();
  }
  // A few hundred terms stay straight-line code, which the compiler schedules best.
  const Reduction small(ReductionOp::Sum, matvecmult(vi(0, 9), vj(1, 3)));
  EXPECT_EQ(count_of(source_of(small), "V s_ = bc(0.0);"), 0);
}

TEST(ContractionCodegen, LoopNestsMatchTheInterpreterWithGradients) {
  if (!compiler_info().usable) GTEST_SKIP() << "no compiler";
  // 324 terms for 4 outputs (a loop nest), and few outputs throughout: a kernel's accumulators
  // grow with its output's dim, and these compile in about a second each.
  const Formula x = vi(0, 162), y = vj(1, 162), g = vi(2, 4);
  const Formula td = tensordot(x, y, {2, 9, 9}, {9, 9, 2}, {1, 2}, {0, 1}, {1, 0});
  // Another contraction order and permutation, the gradients in x and y (TensorDots with g),
  // and a contraction (324 terms) that reads another's output array as it is.
  const Formula other = tensordot(x, y, {2, 9, 9}, {9, 9, 2}, {2, 1}, {1, 0}, {1, 0});
  const Formula gx = sum(grad(td, x, g)), gy = sum(grad(td, y, g)) * elem(y, 3);
  const Formula chain =
      sum(matvecmult(tensordot(x, y, {18, 9}, {9, 18}, {1}, {0}), extract(y, 7, 18)));
  for (bool f64 : {false, true}) {
    const DType t = f64 ? DType::Float64 : DType::Float32;
    const std::vector<Array> in = {random_array(t, {7, 162}, 11), random_array(t, {9, 162}, 12),
                                   random_array(t, {7, 4}, 13)};
    for (const Formula& f : {td, other, gx, gy, chain}) {
      if (!f64 && f.ptr() != td.ptr()) continue;  // float32 once: the loops are the same
      const Reduction r(ReductionOp::Sum, f);
      expect_matches_interpreter(r, in, f64, r.str());
    }
  }
}

TEST(KernelEstimate, WideVariablesAreFarPastTheLimitWithoutGenerating) {
  // sqdist in D = 2e6 and a Vi(4000000): hundreds of MiB of C++ each, known from the dims alone.
  const Reduction wide(ReductionOp::Sum, exp(-sqdist(vi(0, 2000000), vj(1, 2000000))));
  EXPECT_GT(estimate_cpu_kernel_bytes(spec_of(wide)), size_t{100} << 20);
  const Reduction wider(ReductionOp::Sum, vi(0, 4000000) * vj(1, 1));
  EXPECT_GT(estimate_cpu_kernel_bytes(spec_of(wider)), size_t{100} << 20);
}

TEST(KernelEstimate, WithinASmallFactorOfTheSource) {
  const size_t prelude = source_of(Reduction(ReductionOp::Sum, vi(0, 1) * vj(1, 1))).size();
  for (int d : {500, 2000, 6000}) {
    const Formula x = vi(0, d), y = vj(1, d);
    for (const Formula& f : {exp(-sqdist(x, y)), x * y + sin(x), sum(abs(x - y)) * y}) {
      const Reduction r(ReductionOp::Sum, f);
      const double est = static_cast<double>(estimate_cpu_kernel_bytes(spec_of(r)));
      const double got = static_cast<double>(source_of(r).size() - prelude);
      EXPECT_GT(est, got / 4) << r.str() << ": " << got << " bytes";
      EXPECT_LT(est, got * 2) << r.str() << ": " << got << " bytes";
    }
  }
}

TEST(KernelEstimate, WideVariableRunsInTheInterpreterAndIsRight) {
  const int64_t d = 300000;
  const std::vector<Array> in = {random_array(DType::Float32, {3, d}, 21),
                                 random_array(DType::Float32, {4, d}, 22)};
  const Reduction r(ReductionOp::Sum,
                    sqdist(vi(0, static_cast<int>(d)), vj(1, static_cast<int>(d))));
  const Array got = evaluate(r, in, Options{})[0];  // backend auto
  for (int64_t i = 0; i < 3; ++i) {
    double want = 0;
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t c = 0; c < d; ++c) {
        const double v = double(in[0].as<float>()[i * d + c]) - in[1].as<float>()[j * d + c];
        want += v * v;
      }
    EXPECT_NEAR(got.at(i), want, 1e-4 * want) << i;
  }
}

TEST(WideOutputCodegen, AccumulatorCodeDoesNotGrowWithTheOutputDim) {
  for (ReductionOp op : {ReductionOp::Sum, ReductionOp::MinArgMin}) {
    const std::string narrow = source_of(Reduction(op, outer_product(48)));
    const std::string wide = source_of(Reduction(op, outer_product(480)));
    // Ten times the outputs: the same accumulator statements, in loops.
    for (const char* what : {"__builtin_convertvector", "fold_select_takes", "hsum"})
      EXPECT_EQ(count_of(wide, what), count_of(narrow, what)) << what;
    EXPECT_LT(wide.size(), narrow.size() + (size_t{30} << 10));
  }
  // Small outputs stay straight-line code, one statement per component.
  const std::string d3 = source_of(Reduction(ReductionOp::Sum, vi(0, 3) * vj(1, 3)));
  EXPECT_EQ(count_of(d3, "c_ <"), 0);
  EXPECT_EQ(count_of(d3, "hsum_d(acc_0_2)"), 2);  // the kernel's finish and the merge's
}

TEST(WideOutputCodegen, MatchesTheInterpreterInEveryFamilyChunkedAndSplit) {
  if (!compiler_info().usable) GTEST_SKIP() << "no compiler";
  const Formula td = tensordot(vi(0, 360), vj(1, 9), {40, 9}, {9}, {1}, {0});
  auto opt = [](SumScheme s, bool f64acc) {
    Options o = with(Backend::Compiled);
    o.sum_scheme = s;
    o.accumulate_f64 = f64acc;
    return o;
  };
  struct Case {
    Reduction r;
    Options opt;
  };
  const Formula d = td * td + td;
  const std::vector<Case> cases = {
      {Reduction(ReductionOp::Sum, td), with(Backend::Compiled)},
      {Reduction(ReductionOp::Sum, td), opt(SumScheme::Kahan, false)},
      {Reduction(ReductionOp::Sum, td), opt(SumScheme::Direct, false)},
      {Reduction(ReductionOp::Sum, td), opt(SumScheme::Block, true)},
      {Reduction(ReductionOp::MinArgMin, d), with(Backend::Compiled)},
      {Reduction(ReductionOp::Max, -d), with(Backend::Compiled)},
  };
  for (DType t : {DType::Float32, DType::Float64}) {
    // 7 rows: a masked last block; 1 row: the inner range split across threads and merged.
    for (int64_t rows : {7, 1}) {
      const std::vector<Array> in = {random_array(t, {rows, 360}, 31),
                                     random_array(t, {1003, 9}, 32)};
      for (const Case& c : cases) {
        const std::string what =
            c.r.str() + (t == DType::Float32 ? " f32" : " f64") + " rows " + std::to_string(rows);
        const std::vector<Array> want = evaluate(c.r, in, with(Backend::Interpreter));
        Options o = c.opt;
        o.threads = 3;
        std::vector<Array> got;
        // Chunks of 64 tiles: the state is saved and restored between them.
        const int64_t old_chunk = set_cpu_chunk_bytes(1);
        got = evaluate(c.r, in, o);
        set_cpu_chunk_bytes(old_chunk);
        const std::vector<Array> whole = evaluate(c.r, in, c.opt);
        ASSERT_EQ(got.size(), want.size()) << what;
        for (size_t k = 0; k < want.size(); ++k) {
          // The interpreter computes float32 data in float64, which may break a near tie the
          // other way: float32 indices are checked against the unsplit run only.
          if (want[k].dtype() == DType::Int64 && t == DType::Float32) {
            for (int64_t e = 0; e < want[k].size(); ++e)
              EXPECT_EQ(got[k].at(e), whole[k].at(e)) << what << " entry " << e;
            continue;
          }
          std::vector<double> w(want[k].size());
          for (int64_t e = 0; e < want[k].size(); ++e) w[e] = want[k].at(e);
          // Direct float32 sums of 1003 terms that cancel: M u times the sum of |terms|.
          const bool exact = want[k].dtype() == DType::Int64;
          const double rtol = exact ? 0 : 1e-5, atol = exact                 ? 0
                                                       : t == DType::Float32 ? 2e-3
                                                                             : 1e-9;
          expect_close(got[k], w, rtol, atol, what + " chunked");
          expect_close(whole[k], w, rtol, atol, what);
        }
      }
    }
  }
}
