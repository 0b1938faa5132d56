// KeOps's linear injections, DiffClampInt, Kron and IntInv: simplifications, VJPs, text and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ir/node.hpp"
#include "ops/eval_ref.hpp"
#include "ops/op.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;

namespace {

using Vec = std::vector<double>;

void expect_error(const std::function<void()>& f, const std::string& piece) {
  try {
    f();
    ADD_FAILURE() << "no error; wanted \"" << piece << "\"";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(piece), std::string::npos) << e.what();
  }
}

const Formula x = vi(0, 3), s = vj(1, 1);

}  // namespace

TEST(OpsLinear, SimplifyToTheirArgumentOrToZero) {
  EXPECT_TRUE(elem_t(s, 1, 0).same(s));
  EXPECT_TRUE(extract_t(x, 0, 3).same(x));
  EXPECT_TRUE(sum_t(s, 1).same(s));
  EXPECT_TRUE(sum_t(zero(1), 4).same(zero(4)));
  EXPECT_TRUE(elem_t(zero(1), 4, 2).same(zero(4)));
  EXPECT_TRUE(extract_t(zero(3), 1, 5).same(zero(5)));
  // Elem and Extract undo their transposes (the pattern second derivatives produce).
  EXPECT_TRUE(elem(elem_t(s, 4, 2), 2).same(s));
  EXPECT_TRUE(is_zero(elem(elem_t(s, 4, 2), 1)));
  EXPECT_TRUE(extract(extract_t(x, 2, 7), 2, 3).same(x));
  const Formula part = extract(extract_t(x, 2, 7), 1, 3);  // straddles: not simplified
  EXPECT_EQ(part.node().op, OpCode::Extract);
  const std::map<int, Vec> v = {{0, {0.5, -1.5, 2.0}}};
  EXPECT_EQ(eval_point(part, v), (Vec{0.0, 0.5, -1.5}));
}

TEST(OpsLinear, VjpsOfElemExtractSumAreTheirTransposes) {
  const Formula g1 = vj(2, 1), g2 = vj(3, 2), g3 = vj(4, 3);
  EXPECT_TRUE(grad(elem(x, 1), x, g1).same(elem_t(g1, 3, 1)));
  EXPECT_TRUE(grad(extract(x, 1, 2), x, g2).same(extract_t(g2, 1, 3)));
  EXPECT_TRUE(grad(sum(x), x, g1).same(sum_t(g1, 3)));
  EXPECT_TRUE(grad(elem_t(s, 4, 2), s, vj(5, 4)).same(elem(vj(5, 4), 2)));
  EXPECT_TRUE(grad(extract_t(x, 1, 5), x, vj(5, 5)).same(extract(vj(5, 5), 1, 3)));
  EXPECT_TRUE(grad(sum_t(s, 3), s, g3).same(sum(g3)));
  EXPECT_TRUE(grad(clampint(x, -1, 2), x, g3).same(g3 * diff_clampint(x, -1, 2)));
  EXPECT_TRUE(is_zero(grad(diff_clampint(x, -1, 2), x, g3)));
}

TEST(OpsLinear, DiffClampIntIncludesBothBoundsAndPassesNaN) {
  const std::map<int, Vec> v = {{0, {-1.0, 2.0, -1.0000001}}};
  EXPECT_EQ(eval_point(diff_clampint(x, -1, 2), v), (Vec{1.0, 1.0, 0.0}));
  const std::map<int, Vec> w = {{0, {2.0000001, std::nan(""), 0.0}}};
  EXPECT_EQ(eval_point(diff_clampint(x, -1, 2), w), (Vec{0.0, 1.0, 1.0}));
  // crossed bounds: 0 everywhere except NaN, as KeOps's two comparisons give
  EXPECT_EQ(eval_point(diff_clampint(x, 1, 0), w), (Vec{0.0, 1.0, 0.0}));
}

TEST(OpsLinear, TextSpellings) {
  const std::vector<std::string> al = {"X = Vi(6)", "Y = Vj(4)"};
  const Formula a = vi(0, 6), b = vj(1, 4);
  const Formula k = kron(a, b, {2, 3}, {2, 2});
  EXPECT_TRUE(parse("Kron(X, Y, [2, 3], [2, 2])", al).same(k));
  EXPECT_TRUE(parse("Kron(X, Y, (2,3), (2,2),)", al).same(k));
  EXPECT_TRUE(parse("TensorDot(X, Y, [2, 3], [2, 2], [], [], [0, 2, 1, 3])", al).same(k));
  EXPECT_TRUE(parse(k.str()).same(k));  // printed as the TensorDot it is
  EXPECT_EQ(k.dim(), 24);
  const Formula scalars = parse("Kron(X, Y, [], [])", {"X = Vi(1)", "Y = Vj(1)"});
  EXPECT_EQ(eval_point(scalars, {{0, {1.5}}, {1, {-3.0}}}), (Vec{-4.5}));
  EXPECT_TRUE(parse("IntInv(3)").same(rational(1, 3)));
  EXPECT_TRUE(parse("IntInv(-6)").same(rational(-1, 6)));
  EXPECT_TRUE(parse("IntInv(1)").same(int_cst(1)));
  EXPECT_TRUE(int_inv(4).same(rational(1, 4)));
  EXPECT_TRUE(parse("ElemT(Sum(X), 4, 3)", al).same(elem_t(sum(a), 4, 3)));
  EXPECT_TRUE(parse("SumT(Sum(X), 2,)", al).same(sum_t(sum(a), 2)));
}

TEST(OpsLinear, BadArgumentsNameFunctionArgumentAndExpectation) {
  expect_error([] { (void)elem_t(x, 4, 1); }, "ElemT: the argument (argument 1) must have dim 1");
  expect_error([] { (void)elem_t(s, 4, -1); }, "position m (argument 3) must lie in [0, 4)");
  expect_error([] { (void)elem_t(s, 0, 0); }, "output dim n (argument 2) must be >= 1, got 0");
  expect_error([] { (void)extract_t(x, 3, 5); },
               "ExtractT: the argument of dim 3 placed at start 3 (argument 2) does not fit in "
               "dim 5; expected 0 <= start <= 2");
  expect_error([] { (void)extract_t(x, 0, 0); }, "ExtractT: the output dim (argument 3) must be");
  expect_error([] { (void)sum_t(x, 3); }, "SumT: the argument (argument 1) must have dim 1");
  expect_error([] { (void)sum_t(s, -2); }, "SumT: the output dim (argument 2) must be >= 1");
  expect_error([] { (void)kron(x, s, {3}, {}); }, "Kron: the dims of the two tensors");
  expect_error([] { (void)kron(x, s, {1, 3}, {1, 2}); },
               "Kron: the dims of the second tensor multiply to 2 but that formula has dim 1");
  expect_error([] { (void)kron(x, s, {-3}, {1}); }, "Kron: the dims of the first tensor must be");
  expect_error([] { (void)kron(Formula{}, s, {}, {}); }, "Kron: null formula argument");
  expect_error([] { (void)int_inv(0); }, "IntInv: n must be non-zero");
  expect_error([] { (void)int_inv(INT64_MIN); }, "IntInv: n must lie within");
  expect_error([] { (void)parse("IntInv(2, 3)"); }, "too many arguments: 'IntInv' takes 1");
  expect_error([] { (void)parse("Kron(Vi(0,2), Vj(1,2), [2])"); }, "'Kron' takes 4 arguments");
  expect_error([] { (void)parse("Kron(Vi(0,2), Vj(1,2), [2], 2)"); },
               "expected a tuple like (2,3) or a list like [2,3], found");
}
