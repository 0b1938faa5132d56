// Gradients of reductions (any variable, any order, forward mode) against finite differences.
#include "reduction_helpers.hpp"

using namespace tessel;
using namespace tessel::testing;

namespace {

Options interp() {
  Options o;
  o.backend = Backend::Interpreter;
  return o;
}

// x: Vi(0,3), y: Vj(1,3), b: Vj(2,2), s: Pm(3,1); inputs in float64.
std::vector<Array> inputs(int64_t n = 6, int64_t m = 9) {
  return {random_array(DType::Float64, {n, 3}, 11), random_array(DType::Float64, {m, 3}, 12),
          random_array(DType::Float64, {m, 2}, 13, 0.2, 1.0),
          random_array(DType::Float64, {1}, 14, 0.5, 1.5)};
}

const Formula X = vi(0, 3), Y = vj(1, 3), B = vj(2, 2), S = pm(3, 1);

void check_all_vars(const Reduction& r, double tol = 1e-6) {
  for (int v = 0; v < 4; ++v) {
    if (!r.impl().find_var(v)) continue;
    SCOPED_TRACE("variable " + std::to_string(v));
    check_grad_fd(r, inputs(), v, interp(), tol);
  }
}

}  // namespace

TEST(ReductionGrad, SumGaussianAllVariables) {
  check_all_vars(Reduction(ReductionOp::Sum, exp(-S * sqdist(X, Y)) * B));
}

TEST(ReductionGrad, SumOverI) {
  check_all_vars(Reduction(ReductionOp::Sum, exp(-S * sqdist(X, Y)) * B, 0));
}

TEST(ReductionGrad, LogSumExp) {
  check_all_vars(Reduction(ReductionOp::LogSumExp, -S * sqdist(X, Y) + sum(B)));
}

TEST(ReductionGrad, LogSumExpWeighted) {
  check_all_vars(Reduction(ReductionOp::LogSumExp, -S * sqdist(X, Y), 1, 0, B));
}

TEST(ReductionGrad, SumSoftMaxWeight) {
  check_all_vars(Reduction(ReductionOp::SumSoftMaxWeight, -S * sqdist(X, Y), 1, 0, B * X[0]));
}

TEST(ReductionGrad, MinMaxThroughSelectedIndex) {
  // Random continuous data: no ties, so the argmin is locally constant and FD applies.
  check_all_vars(Reduction(ReductionOp::Min, S * sqdist(X, Y) + B[0]));
  check_all_vars(Reduction(ReductionOp::Max, S * sqdist(X, Y) * B[1]));
  check_all_vars(Reduction(ReductionOp::MinArgMin, S * (X - Y)));  // vector formula: per component
  check_all_vars(Reduction(ReductionOp::Max, S * (X - Y), 0));
}

TEST(ReductionGrad, KMin) {
  check_all_vars(Reduction(ReductionOp::KMin, S * sqdist(X, Y) + B[0], 1, 3));
  check_all_vars(Reduction(ReductionOp::KMinArgKMin, S * sqdist(X, Y), 0, 2));
}

TEST(ReductionGrad, IndicesHaveNoGradient) {
  EXPECT_THROW(grad(Reduction(ReductionOp::ArgMin, sqdist(X, Y)), 0), Error);
  EXPECT_THROW(grad(Reduction(ReductionOp::Sum, sqdist(X, Y)), 7), Error);
}

TEST(ReductionGrad, SecondOrder) {
  // grad of grad: each first gradient is a reduction with one more input (its cotangent).
  for (const Reduction& r :
       {Reduction(ReductionOp::Sum, exp(-S * sqdist(X, Y)) * B),
        Reduction(ReductionOp::LogSumExp, -S * sqdist(X, Y)),
        Reduction(ReductionOp::SumSoftMaxWeight, -S * sqdist(X, Y), 1, 0, B),
        Reduction(ReductionOp::Min, S * sqdist(X, Y) + B[0])}) {
    for (int v1 : {0, 1, 3}) {
      const Reduction g = grad(r, v1);
      auto in = inputs();
      in.push_back(random_array(DType::Float64, {r.impl().full_sum ? 1 : 6, r.output_dim(0)}, 99));
      for (int v2 : {0, 1, 3, 4}) {
        SCOPED_TRACE(r.str() + " d/d" + std::to_string(v1) + " d/d" + std::to_string(v2));
        if (!g.impl().find_var(v2) || g.impl().find_var(v2)->computed) continue;
        check_grad_fd(g, in, v2, interp(), 2e-6);
      }
    }
  }
}

TEST(ReductionGrad, ThirdOrder) {
  Reduction r(ReductionOp::Sum, exp(-S * sqdist(X, Y)) * B);
  Reduction g2 = grad(grad(r, 0), 1);
  auto in = inputs();
  in.push_back(random_array(DType::Float64, {6, 2}, 21));
  in.push_back(random_array(DType::Float64, {6, 3}, 22));
  check_grad_fd(g2, in, 0, interp(), 5e-6);
}

TEST(ReductionGrad, ForwardMode) {
  for (const Reduction& r : {Reduction(ReductionOp::Sum, exp(-S * sqdist(X, Y)) * B),
                             Reduction(ReductionOp::LogSumExp, -S * sqdist(X, Y), 1, 0, B),
                             Reduction(ReductionOp::SumSoftMaxWeight, -S * sqdist(X, Y), 1, 0, B),
                             Reduction(ReductionOp::Min, S * sqdist(X, Y) + B[0])}) {
    for (int v : {0, 1, 3}) {
      SCOPED_TRACE(r.str() + " along " + std::to_string(v));
      auto in = inputs();
      const Array t = random_array(DType::Float64, in[v].shape(), 5);
      auto jin = in;
      jin.push_back(t);
      const Array got = evaluate(jvp(r, v), jin, interp())[0];
      const double h = 1e-6;
      auto plus = clone(in), minus = clone(in);
      for (int64_t k = 0; k < t.size(); ++k) {
        plus[v].as<double>()[k] += h * t.at(k);
        minus[v].as<double>()[k] -= h * t.at(k);
      }
      const Array fp = evaluate(r, plus, interp())[0], fm = evaluate(r, minus, interp())[0];
      std::vector<double> fd(fp.size());
      for (int64_t k = 0; k < fp.size(); ++k) fd[k] = (fp.at(k) - fm.at(k)) / (2 * h);
      expect_close(got, fd, 1e-6, 1e-7, "jvp");
    }
  }
}
