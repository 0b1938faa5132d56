// sinc means what it means in NumPy, PyTorch and Python's LazyTensor.sinc; sin(x)/x is sin_x_div_x.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "ops/eval_ref.hpp"
#include "ops/op.hpp"
#include "tessel/formula.hpp"

using namespace tessel;

namespace {

double at(const Formula& f, double x) { return eval_point(f, {{0, {x}}})[0]; }

constexpr double kPi = std::numbers::pi;

}  // namespace

// The formula and the values at the points that tests/python/test_lazytensor.py checks for
// x.sinc(): a C++ user and a Python user who write sinc get the same function.
TEST(SincNaming, SincIsTheNormalisedSinc) {
  const Formula x = vi(0, 1), s = sinc(x);
  EXPECT_EQ(s.str(), "SinXDivX((3.1415926535897931*Vi(0,1)))");
  const std::pair<double, double> points[] = {{0.0, 1.0},
                                              {0.5, 2 / kPi},
                                              {-0.5, 2 / kPi},
                                              {1.5, -2 / (3 * kPi)},
                                              {0.25, 2 * std::sqrt(2.0) / kPi}};
  for (const auto& [v, want] : points) EXPECT_NEAR(at(s, v), want, 1e-15) << "x = " << v;
  for (const double v : {1.0, 2.0, -3.0}) EXPECT_NEAR(at(s, v), 0.0, 1e-15) << "x = " << v;
}

TEST(SincNaming, SinXDivXIsTheUnnormalisedOpKeOpsNamesSinXDivX) {
  const Formula x = vi(0, 1), s = sin_x_div_x(x);
  EXPECT_EQ(s.node().op, OpCode::SinXDivX);
  EXPECT_STREQ(op_info(OpCode::SinXDivX).name, "SinXDivX");
  EXPECT_TRUE(parse("SinXDivX(Var(0,1,0))").same(s));
  EXPECT_EQ(at(s, 0.0), 1.0);
  EXPECT_NEAR(at(s, 0.5), 2 * std::sin(0.5), 1e-15);
  EXPECT_NEAR(at(s, kPi), 0.0, 1e-15);
  // sinc is the op at pi x, so its derivative is SinXDivX's, through the chain rule.
  EXPECT_TRUE(sinc(x).same(sin_x_div_x(kPi * x)));
}
