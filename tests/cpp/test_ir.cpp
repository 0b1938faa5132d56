// IR basics: hash-consing, stable hashes, simplification rules, dims and dim errors.
#include <gtest/gtest.h>

#include "ir/node.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;

TEST(IR, HashConsingMakesEqualFormulasOneNode) {
  Formula a = exp(-sqdist(vi(0, 3), vj(1, 3))) * vj(2, 1);
  Formula b = exp(-sqdist(vi(0, 3), vj(1, 3))) * vj(2, 1);
  EXPECT_TRUE(a.same(b));
  EXPECT_EQ(a.hash(), b.hash());
  EXPECT_FALSE(a.same(exp(-sqdist(vi(0, 3), vj(1, 3))) * vj(3, 1)));
}

TEST(IR, SimplificationRules) {
  Formula x = vi(0, 3);
  EXPECT_TRUE((x + zero(3)).same(x));
  EXPECT_TRUE((x * 1.0).same(x));
  EXPECT_TRUE((x * x).same(square(x)));
  EXPECT_TRUE((-(-x)).same(x));
  EXPECT_TRUE((x - x).same(zero(3)));
  EXPECT_TRUE((zero(3) * x).same(zero(3)));
  double v = 0;
  Formula c = constant(2.0) * constant(3.0);
  ASSERT_EQ(c.node().op, tessel::OpCode::Const);
  v = c.node().value;
  EXPECT_EQ(v, 6.0);
}

TEST(IR, DimsAndErrors) {
  EXPECT_EQ(sqdist(vi(0, 3), vj(1, 3)).dim(), 1);
  EXPECT_EQ((vi(0, 3) * vj(1, 1)).dim(), 3);
  EXPECT_EQ(tensorprod(vi(0, 2), vj(1, 3)).dim(), 6);
  EXPECT_EQ(matvecmult(vi(0, 6), vj(1, 3)).dim(), 2);
  try {
    (void)(vi(0, 3) + vj(1, 2));
    FAIL() << "expected a dim error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Add"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("3 and 2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(elem(vi(0, 3), 3), Error);
  EXPECT_THROW(extract(vi(0, 3), 2, 2), Error);
  EXPECT_THROW(vi(-1, 3), Error);
  EXPECT_THROW(vi(0, 0), Error);
}

TEST(IR, GradientOfGaussianKernel) {
  Formula x = vi(0, 3), y = vj(1, 3), b = vj(2, 1);
  Formula f = exp(-sqdist(x, y)) * b;
  Formula e = vi(3, 1);
  Formula g = grad(f, x, e);
  EXPECT_EQ(g.dim(), 3);
  Formula gz = grad(f, vi(7, 2), e);
  EXPECT_TRUE(gz.same(zero(2)));
}
