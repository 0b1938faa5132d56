// KMin / ArgKMin / KMin_ArgKMin of vector formulas: each component keeps its own K best, laid out
// as KeOps does (column k * D + c is component c's k-th best), on every backend, with gradients
// that route each component's cotangent to the index that attained it.
#include <cmath>
#include <numeric>

#include "codegen/layout.hpp"
#include "reduction_helpers.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

// x: Vi(0,3), y: Vj(1,3), b: Vj(2,2), s: Pm(3,1); float64 unless asked.
std::vector<Array> inputs(int64_t n, int64_t m, DType t = DType::Float64) {
  return {random_array(t, {n, 3}, 31), random_array(t, {m, 3}, 32),
          random_array(t, {m, 2}, 33, 0.2, 1.0), random_array(t, {1}, 34, 0.5, 1.5)};
}

const Formula X = vi(0, 3), Y = vj(1, 3), B = vj(2, 2), S = pm(3, 1);
// Three components that rank the j rows differently, so that each picks its own indices.
const Formula kF = S * (X - Y) * (X - Y) + B[0];

// Component c of row o of the values (or indices) of `r` by a stable sort of F's component c.
std::vector<std::pair<double, int64_t>> sorted_component(const Reduction& r,
                                                         const std::vector<Array>& in, int64_t o,
                                                         int c) {
  const int64_t n_red = in[r.axis() == 1 ? 1 : 0].shape()[0];
  std::vector<std::pair<double, int64_t>> v;
  for (int64_t q = 0; q < n_red; ++q) {
    const int64_t i = r.axis() == 1 ? o : q, j = r.axis() == 1 ? q : o;
    v.push_back({eval_pair(r, in, i, j, r.formula())[c], q});
  }
  std::stable_sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.first < b.first; });
  return v;
}

}  // namespace

TEST(KMinVector, ColumnsAreKeOpsLayout) {
  // The layout written out by hand once (the table tests compare against the helper's reference).
  const Reduction r(ReductionOp::KMinArgKMin, kF, 1, 2);
  EXPECT_EQ(r.output_dim(0), 6);
  EXPECT_EQ(r.output_dim(1), 6);
  const auto in = inputs(4, 9);
  for (const Backend b : {Backend::Interpreter, Backend::Auto}) {
    const auto got = evaluate(r, in, with(b));
    for (int64_t o = 0; o < 4; ++o)
      for (int c = 0; c < 3; ++c) {
        const auto want = sorted_component(r, in, o, c);
        for (int k = 0; k < 2; ++k) {
          EXPECT_NEAR(got[0].at(o * 6 + k * 3 + c), want[k].first, 1e-12) << o << " " << c;
          EXPECT_EQ(got[1].at(o * 6 + k * 3 + c), static_cast<double>(want[k].second));
        }
      }
  }
}

// Small integers (and s = 1): every value of F is exact in float32, and equal values are common,
// so the lowest-index rule for ties is checked exactly on every backend.
std::vector<Array> tied_inputs(int64_t n, int64_t m, DType t) {
  std::vector<Array> in = inputs(n, m, t);
  for (int q = 0; q < 3; ++q)
    for (int64_t e = 0; e < in[q].size(); ++e) {
      const double v = in[q].at(e);
      const double r = std::round(v * 4.0);
      if (t == DType::Float32)
        in[q].as<float>()[e] = static_cast<float>(r);
      else
        in[q].as<double>()[e] = r;
    }
  if (t == DType::Float32)
    in[3].as<float>()[0] = 1.0f;
  else
    in[3].as<double>()[0] = 1.0;
  return in;
}

TEST(KMinVector, EveryBackendAndDtypeMatchTheSort) {
  const bool compiled = compiler_info().usable;
  for (const int axis : {0, 1})
    for (const int k : {1, 4})
      for (const ReductionOp op :
           {ReductionOp::KMin, ReductionOp::ArgKMin, ReductionOp::KMinArgKMin}) {
        const Formula f =
            axis == 1 ? kF : substitute(kF, {X, Y, B}, {vj(0, 3), vi(1, 3), vi(2, 2)});
        const Reduction r(op, f, axis, k);
        for (const DType t : {DType::Float64, DType::Float32}) {
          const auto in = tied_inputs(axis == 1 ? 13 : 37, axis == 1 ? 37 : 13, t);
          const auto want = dense_reduction(r, in);
          for (const Backend b : {Backend::Interpreter, Backend::Compiled}) {
            if (b == Backend::Compiled && !compiled) continue;
            const std::string what = r.str() + (t == DType::Float32 ? " f32 " : " f64 ") +
                                     (b == Backend::Compiled ? "compiled" : "interpreter");
            const auto got = evaluate(r, in, with(b));
            ASSERT_EQ(got.size(), want.size()) << what;
            for (size_t o = 0; o < got.size(); ++o) expect_close(got[o], want[o], 0, 0, what);
          }
        }
      }
}

TEST(KMinVector, HeapKeptListsPerComponent) {
  // Past the sorted-list size the interpreter keeps a heap per component.
  const int k = 100;
  const Reduction r(ReductionOp::KMinArgKMin, kF, 1, k);
  const auto in = inputs(3, 150);
  const auto got = evaluate(r, in, with(Backend::Interpreter));
  for (int64_t o = 0; o < 3; ++o)
    for (int c = 0; c < 3; ++c) {
      const auto want = sorted_component(r, in, o, c);
      for (int q = 0; q < k; ++q)
        ASSERT_EQ(got[1].at(o * 3 * k + q * 3 + c), static_cast<double>(want[q].second))
            << "row " << o << " component " << c << " slot " << q;
    }
}

TEST(KMinVector, CompiledLimitCountsEveryComponent) {
  // K = 400 fits the compiled kernels for one component, not for three.
  const int k = 400;
  const Reduction r(ReductionOp::ArgKMin, kF, 1, k);
  const auto in = inputs(2, 450);
  expect_error([&] { evaluate(r, in, with(Backend::Compiled)); },
               {"evaluate", "ArgKMin", "K = 400", "dim 3", "K * dim <= 1024"});
  const auto got = evaluate(r, in);  // the default backend falls back to the interpreter
  for (int c = 0; c < 3; ++c) {
    const auto want = sorted_component(r, in, 1, c);
    for (int q = 0; q < k; ++q)
      ASSERT_EQ(got[0].at(3 * k + q * 3 + c), static_cast<double>(want[q].second)) << q;
  }
}

TEST(KMinVector, GradientsMatchFiniteDifferences) {
  for (const int axis : {0, 1})
    for (const int k : {1, 3})
      for (const ReductionOp op : {ReductionOp::KMin, ReductionOp::KMinArgKMin}) {
        const Formula f =
            axis == 1 ? kF : substitute(kF, {X, Y, B}, {vj(0, 3), vi(1, 3), vi(2, 2)});
        const Reduction r(op, f, axis, k);
        for (int v = 0; v < 4; ++v) {
          SCOPED_TRACE(r.str() + " variable " + std::to_string(v));
          check_grad_fd(r, axis == 1 ? inputs(5, 8) : inputs(8, 5), v, with(Backend::Interpreter));
        }
      }
}

TEST(KMinVector, SecondDerivatives) {
  // grad of the gradient: in x, y, the parameter and the cotangent (var 4), whose slot entries
  // reach component k % D of the formula's derivative.
  const Reduction r(ReductionOp::KMin, kF, 1, 2);
  for (int v1 : {0, 1}) {
    const Reduction g = grad(r, v1);
    auto in = inputs(5, 8);
    in.push_back(random_array(DType::Float64, {5, 6}, 99));
    for (int v2 : {0, 1, 3, 4}) {
      SCOPED_TRACE("d/d" + std::to_string(v1) + " d/d" + std::to_string(v2));
      check_grad_fd(g, in, v2, with(Backend::Interpreter), 2e-6);
    }
  }
}
