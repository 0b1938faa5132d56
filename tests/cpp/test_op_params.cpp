// Op parameters as the table describes them: the parser, make_op and the summary read one spec.
#include <gtest/gtest.h>

#include "ops/op.hpp"
#include "tessel/error.hpp"
#include "tessel/formula.hpp"

using namespace tessel;

namespace {

const OpSummary& summary(const std::string& name) {
  static const std::vector<OpSummary> t = op_table();
  for (const OpSummary& o : t)
    if (o.name == name) return o;
  throw std::runtime_error("no op " + name);
}

}  // namespace

// Every parameter count the parser and make_op accept comes from the table, no name tested.
TEST(OpParams, TheTableSaysHowParametersAreWritten) {
  EXPECT_TRUE(summary("TensorDot").tuple_params);
  EXPECT_EQ(summary("TensorDot").min_params, 4);
  EXPECT_EQ(summary("TensorDot").max_params, 5);
  EXPECT_EQ(summary("Round").min_params, 0);
  EXPECT_EQ(summary("Round").max_params, 1);
  EXPECT_EQ(summary("BSpline").min_params, 1);
  EXPECT_FALSE(summary("BSpline").tuple_params);
  // Kron is a composite of the table: listed, parsed and built by name, with no node of its own.
  EXPECT_TRUE(summary("Kron").tuple_params);
  EXPECT_EQ(summary("Kron").method, "keops_kron");
  for (const OpSummary& o : op_table()) EXPECT_LE(o.min_params, o.max_params) << o.name;
}

TEST(OpParams, ParserMakeOpAndBuildersGiveOneNode) {
  const Formula a = vi(0, 6), b = vj(1, 4);
  const std::vector<std::string> aliases = {"a = Vi(0, 6)", "b = Vj(1, 4)"};
  const Formula k = kron(a, b, {2, 3}, {2, 2});
  EXPECT_TRUE(parse("Kron(a, b, (2, 3), (2, 2))", aliases).same(k));
  EXPECT_TRUE(make_op_written("Kron", {a, b}, {{2, 3}, {2, 2}}).same(k));
  const Formula t = tensordot(a, b, {2, 3}, {2, 2}, {0}, {1});
  EXPECT_TRUE(parse("TensorDot(a, b, (2, 3), (2, 2), (0,), (1,))", aliases).same(t));
  EXPECT_TRUE(make_op_written("TensorDot", {a, b}, {{2, 3}, {2, 2}, {0}, {1}}).same(t));
  EXPECT_TRUE(make_op_written("TensorDot", {a, b}, {{2, 3}, {2, 2}, {0}, {1}, {0, 1}}).same(t));
  EXPECT_TRUE(make_op_written("Round", {a}, {}).same(round(a)));
  EXPECT_TRUE(parse("Round(a)", aliases).same(round(a)));
  EXPECT_THROW(make_op_written("Kron", {a, b}, {{2, 3}}), Error);
  EXPECT_THROW(make_op_written("Elem", {a}, {{1, 2}}), Error);  // an integer, not a tuple
  EXPECT_THROW(make_op_written("Kron", {a}, {{6}, {4}}), Error);
  EXPECT_THROW(make_op("Elem", {a}, {int64_t{1} << 40}), Error);  // beyond an int
}
