// KeOps's derivative operators (GradMatrix, Diff, Divergence, Laplacian, TraceOperator) against
// central differences in float64, their text forms, their errors, and the sharing behind Factorize.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "codegen/emitter.hpp"
#include "ops/eval_ref.hpp"
#include "tessel/error.hpp"
#include "tessel/formula.hpp"

using namespace tessel;

namespace {

using Vec = std::vector<double>;
using Values = std::map<int, Vec>;

// x (index 0, dim 3) is the variable of differentiation; y (1, dim 3), b (2, dim 2), a (3, dim 9).
const Values kAt = {{0, {0.3, -0.7, 0.5}},
                    {1, {-0.2, 0.4, 0.9}},
                    {2, {1.3, -0.6}},
                    {3, {0.5, -1.2, 0.3, 0.8, 0.1, -0.4, 1.1, 0.7, -0.9}}};

Formula x() { return vi(0, 3); }
Formula y() { return vj(1, 3); }
Formula b() { return vj(2, 2); }

// The formulas of the tests: a Gaussian kernel times a vector (dim 2), a norm (dim 1), and a
// nonlinear vector field of x's dim.
Formula gaussian() { return exp(-sqdist(x(), y())) * b(); }
Formula norm_of() { return norm2(x() - y()) * sqnorm2(x()); }
Formula field() { return sin(x() * y()) + x() * sum(x() * x()) / (1.0 + sqnorm2(y())); }

// d f_k / d x_l by central differences of the float64 reference evaluator.
double partial(const Formula& f, int k, int l, Values at) {
  const double h = 1e-5, x0 = at[0][l];
  at[0][l] = x0 + h;
  const double up = eval_point(f, at)[k];
  at[0][l] = x0 - h;
  return (up - eval_point(f, at)[k]) / (2 * h);
}

void expect_close(double got, double want, double tol, const std::string& what) {
  EXPECT_LE(std::abs(got - want), tol * (1 + std::abs(want)))
      << what << ": " << got << " vs " << want;
}

TEST(DerivativeOps, GradMatrixIsTheRowMajorJacobian) {
  for (const Formula& f : {gaussian(), norm_of(), field()}) {
    const Formula g = grad_matrix(f, x());
    ASSERT_EQ(g.dim(), f.dim() * 3);
    const Vec v = eval_point(g, kAt);
    for (int k = 0; k < f.dim(); ++k)
      for (int l = 0; l < 3; ++l)
        expect_close(v[k * 3 + l], partial(f, k, l, kAt), 1e-7,
                     f.str() + " [" + std::to_string(k) + "," + std::to_string(l) + "]");
  }
}

TEST(DerivativeOps, DivergenceAndLaplacianAreTraces) {
  const Formula f = field();
  double trace = 0;
  for (int k = 0; k < 3; ++k) trace += partial(f, k, k, kAt);
  expect_close(eval_point(divergence(f, x()), kAt)[0], trace, 1e-7, "divergence");
  for (const Formula& s : {norm_of(), exp(-sqdist(x(), y())) * elem(b(), 1)}) {
    const Formula g = grad(s, x(), int_cst(1));
    double lap = 0;
    for (int k = 0; k < 3; ++k) lap += partial(g, k, k, kAt);
    expect_close(eval_point(laplacian(s, x()), kAt)[0], lap, 1e-6, "laplacian of " + s.str());
  }
}

TEST(DerivativeOps, DiffIsTheDirectionalDerivative) {
  const Formula u = pm(4, 3);
  Values at = kAt;
  at[4] = {0.2, -0.5, 0.8};
  for (const Formula& f : {gaussian(), norm_of(), field()}) {
    const Vec d = eval_point(diff(f, x(), u), at);
    ASSERT_EQ(static_cast<int>(d.size()), f.dim());
    for (int k = 0; k < f.dim(); ++k) {
      double want = 0;
      for (int l = 0; l < 3; ++l) want += partial(f, k, l, kAt) * at[4][l];
      expect_close(d[k], want, 1e-7, "diff of " + f.str());
    }
  }
}

TEST(DerivativeOps, TraceOperatorOfLinearFormulas) {
  const Formula a = pm(3, 9);
  const Vec& av = kAt.at(3);
  // MatVecMult(A, x): the trace of A; x * y: sum(y); the scalar (x | y): the sum of y's entries.
  expect_close(eval_point(trace_operator(matvecmult(a, x()), x()), kAt)[0], av[0] + av[4] + av[8],
               1e-14, "trace of A x");
  const Vec& yv = kAt.at(1);
  expect_close(eval_point(trace_operator(x() * y() - 2.0 * x(), x()), kAt)[0],
               yv[0] + yv[1] + yv[2] - 6, 1e-14, "trace of x * y - 2 x");
  expect_close(eval_point(trace_operator(x() | y(), x()), kAt)[0], yv[0] + yv[1] + yv[2], 1e-14,
               "trace of (x | y)");
}

void expect_error(const std::function<void()>& fn, const std::vector<std::string>& words) {
  try {
    fn();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const std::string& w : words)
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what() << " lacks " << w;
  }
}

TEST(DerivativeOps, BadArgumentsAreNamed) {
  expect_error([] { trace_operator(exp(x()), x()); }, {"TraceOperator", "not linear"});
  expect_error([] { trace_operator(x() + 1.0, x()); }, {"TraceOperator", "not linear"});
  expect_error([] { divergence(gaussian(), x()); }, {"Divergence", "dim 2", "dim 3"});
  expect_error([] { laplacian(field(), x()); }, {"Laplacian", "dim 3", "scalar"});
  expect_error([] { grad_matrix(field(), x() + 1.0); }, {"GradMatrix", "second argument"});
  expect_error([] { diff(field(), x(), b()); }, {"Diff", "dim 2", "dim 3"});
  expect_error([] { parse("Divergence(Exp(X), X + X)", {"X = Vi(3)"}); }, {"Divergence"});
}

TEST(DerivativeOps, TextFormsAreTheBuilders) {
  const std::vector<std::string> al = {"X = Vi(0, 3)", "Y = Vj(1, 3)", "B = Vj(2, 2)",
                                       "U = Pm(4, 3)"};
  const Formula f = gaussian(), s = norm_of();
  EXPECT_TRUE(parse("GradMatrix(Exp(-SqDist(X, Y)) * B, X)", al).same(grad_matrix(f, x())));
  EXPECT_TRUE(parse("Diff(Exp(-SqDist(X, Y)) * B, X, U)", al).same(diff(f, x(), pm(4, 3))));
  EXPECT_TRUE(parse("Divergence(Sin(X * Y), X)", al).same(divergence(sin(x() * y()), x())));
  EXPECT_TRUE(parse("Laplacian(Norm2(X - Y) * SqNorm2(X), X)", al).same(laplacian(s, x())));
  EXPECT_TRUE(parse("TraceOperator(X * Y, X)", al).same(trace_operator(x() * y(), x())));
  EXPECT_TRUE(parse("Factorize(Exp(-SqDist(X, Y)) * B, SqDist(X, Y))", al).same(f));
  EXPECT_TRUE(parse("AutoFactorize(Exp(-SqDist(X, Y)) * B)", al).same(f));
}

// Factorize(f, g) is f in tessel because equal sub-formulas are one node and the code generator
// emits each node once: a Jacobian's rows all read exp(-|x - y|^2), emitted a single time.
TEST(DerivativeOps, RepeatedSubformulaIsEmittedOnce) {
  auto count = [](const Formula& f, const std::string& what) {
    Emitter em;
    ExprMemo memo;
    emit_formula(
        f,
        [](const Node& n, int c) {
          return "v" + std::to_string(n.var_index()) + "_" + std::to_string(c);
        },
        memo);
    int n = 0;
    for (size_t at = em.code().find(what); at != std::string::npos;
         at = em.code().find(what, at + 1))
      ++n;
    return n;
  };
  const Formula k = exp(-sqdist(x(), y()));
  EXPECT_EQ(count(k * b() + k * sqnorm2(b()), "v_exp("), 1);
  EXPECT_EQ(count(grad_matrix(gaussian(), x()), "v_exp("), 1);
  EXPECT_EQ(count(laplacian(k * elem(b(), 0), x()), "v_exp("), 1);
}

}  // namespace
