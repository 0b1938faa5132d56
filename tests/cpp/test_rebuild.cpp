// Rebuilding formulas for front ends: ops by table name, relabelling, substitution, variable lists.
#include <gtest/gtest.h>

#include "tessel/tessel.hpp"

using namespace tessel;

TEST(Rebuild, MakeOpByNameEqualsTheBuilder) {
  const Formula x = vi(0, 3), y = vj(1, 3);
  EXPECT_TRUE(
      make_op("Exp", {make_op("Minus", {make_op("SqDist", {x, y})})}).same(exp(-sqdist(x, y))));
  EXPECT_TRUE(make_op("Round", {x}).same(round(x)));  // decimals default to 0
  EXPECT_TRUE(make_op("Elem", {x}, {2}).same(elem(x, 2)));
  EXPECT_THROW(make_op("NoSuchOp", {x}), Error);
  EXPECT_THROW(make_op("Elem", {x}), Error);           // a missing parameter
  EXPECT_THROW(make_op("Add", {x, vj(1, 2)}), Error);  // the op's dim rule
  EXPECT_THROW(make_op("TensorDot", {x, y}), Error);   // none of its 4 tuple parameters
}

TEST(Rebuild, RelabelRenumbersAndTransposes) {
  const Formula f = exp(-sqdist(vi(0, 3), vj(1, 3))) * pm(2, 1);
  EXPECT_TRUE(relabel(f, {2, 0, 1}).same(exp(-sqdist(vi(2, 3), vj(0, 3))) * pm(1, 1)));
  EXPECT_TRUE(relabel(f, {}, true).same(exp(-sqdist(vj(0, 3), vi(1, 3))) * pm(2, 1)));
  EXPECT_TRUE(relabel(f, {0, 1, 2}).same(f));
  EXPECT_TRUE(relabel(vi(0, 3), {4}).same(vi(4, 3)));
  EXPECT_TRUE(relabel(pm(0, 2), {}, true).same(pm(0, 2)));
  EXPECT_THROW(relabel(f, {0}), Error);  // the map misses variables 1 and 2
}

TEST(Rebuild, SubstituteRebuildsThroughTheTable) {
  const Formula x = vi(0, 3), y = vj(1, 3);
  const Formula f = sqdist(x, y) + sum(x);
  EXPECT_TRUE(substitute(f, {y}, {x}).same(sqdist(x, x) + sum(x)));
  EXPECT_TRUE(substitute(x, {x}, {pm(3, 3)}).same(pm(3, 3)));
  EXPECT_THROW(substitute(f, {x}, {vi(0, 2)}), Error);
  EXPECT_THROW(substitute(f, {sum(x)}, {pm(0, 1)}), Error);
}

TEST(Rebuild, VariableInfoListsEachVariableOnceByIndex) {
  const std::vector<AliasInfo> v = variable_info(vj(2, 1) * sqdist(vi(0, 3), vi(0, 3)));
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0].index, 0);
  EXPECT_EQ(v[0].cat, Category::I);
  EXPECT_EQ(v[0].dim, 3);
  EXPECT_EQ(v[1].index, 2);
  EXPECT_EQ(v[1].cat, Category::J);
}
