// TextKernel, the argument lists the R and Octave bindings share: alias order, which arguments
// the reduction reads, the count message and gradients' arguments. Structure only: nothing here
// compiles or evaluates a kernel.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tessel/tessel.hpp"

using namespace tessel;

namespace {

// U is declared but never read: KeOps callers still pass it, in its place.
const std::vector<std::string> kAliases = {"X = Vi(2)", "Y = Vj(2)", "U = Vi(4)"};
const char* kText = "Sum_Reduction(SqDist(X,Y), 0)";

void expect_arg(const TextKernel::Arg& a, const std::string& name, int index, int dim, Category cat,
                bool used) {
  EXPECT_EQ(a.name, name);
  EXPECT_EQ(a.index, index) << name;
  EXPECT_EQ(a.dim, dim) << name;
  EXPECT_EQ(a.cat, cat) << name;
  EXPECT_EQ(a.used, used) << name;
}

std::string count_error(const TextKernel& k, size_t given, const std::string& who) {
  try {
    k.check_count(given, who);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(TextKernel, ArgumentsInAliasOrderWithUsedFlags) {
  const TextKernel k(kText, kAliases);
  EXPECT_EQ(k.text(), kText);
  EXPECT_EQ(k.reduction().op(), ReductionOp::Sum);
  ASSERT_EQ(k.args().size(), 3u);
  expect_arg(k.args()[0], "X", 0, 2, Category::I, true);
  expect_arg(k.args()[1], "Y", 1, 2, Category::J, true);
  expect_arg(k.args()[2], "U", 2, 4, Category::I, false);
  EXPECT_EQ(k.arg_names(), "X, Y, U");
  // The unread U needs no slot: evaluate() sees X and Y only.
  EXPECT_EQ(k.num_slots(), 2u);
  EXPECT_EQ(k.args()[2].label(), "argument 'U' (Vi(4))");
}

TEST(TextKernel, VariablesWithoutAliasComeLast) {
  // Var(3,1,2) is a parameter no alias declares; an unnamed alias is named by its index.
  const TextKernel k("Sum_Reduction(X * Var(3,1,2), 0)", {"X = Vi(1)", "Vj(5, 2)"});
  ASSERT_EQ(k.args().size(), 3u);
  expect_arg(k.args()[0], "X", 0, 1, Category::I, true);
  expect_arg(k.args()[1], "Var5", 5, 2, Category::J, false);
  expect_arg(k.args()[2], "Var3", 3, 1, Category::Param, true);
  EXPECT_EQ(k.num_slots(), 4u);
  EXPECT_EQ(k.args()[2].label(), "argument 'Var3' (Pm(1))");
}

TEST(TextKernel, CountErrorNamesTheCallerAndTheArguments) {
  const TextKernel k(kText, kAliases);
  EXPECT_EQ(count_error(k, 3, "keops_kernel"), "(no error)");
  EXPECT_EQ(count_error(k, 2, "keops_kernel"),
            "keops_kernel: expected 3 arguments (X, Y, U), got 2");
  EXPECT_EQ(count_error(k, 5, "my_fun"), "my_fun: expected 3 arguments (X, Y, U), got 5");
}

TEST(TextKernel, GradientAppendsTheCotangent) {
  const TextKernel k(kText, kAliases);
  const TextKernel g = k.grad(0, "eta");
  EXPECT_EQ(g.text(), "Grad(Sum_Reduction(SqDist(X,Y), 0), X)");
  ASSERT_EQ(g.args().size(), 4u);
  expect_arg(g.args()[0], "X", 0, 2, Category::I, true);
  expect_arg(g.args()[1], "Y", 1, 2, Category::J, true);
  // The cotangent may take the index of the unread U: U stays unread, the cotangent is read.
  expect_arg(g.args()[2], "U", 2, 4, Category::I, false);
  const TextKernel::Arg& eta = g.args()[3];
  EXPECT_EQ(eta.name, "eta");
  EXPECT_EQ(eta.index, 2);  // grad() numbers it after the reduction's own variables
  EXPECT_EQ(eta.dim, 1);    // the shape of output 0: one value per point x_i
  EXPECT_EQ(eta.cat, Category::I);
  EXPECT_TRUE(eta.used);
  EXPECT_EQ(g.num_slots(), static_cast<size_t>(eta.index) + 1);
  EXPECT_EQ(count_error(g, 3, "keops_grad"),
            "keops_grad: expected 4 arguments (X, Y, U, eta), got 3");
  // The original kernel is unchanged.
  EXPECT_EQ(k.args().size(), 3u);
}

TEST(TextKernel, GradientForAJArgumentSumsOverI) {
  const TextKernel g = TextKernel(kText, kAliases).grad(1, "e");
  ASSERT_EQ(g.args().size(), 4u);
  EXPECT_EQ(g.text(), "Grad(Sum_Reduction(SqDist(X,Y), 0), Y)");
  EXPECT_EQ(g.args()[3].name, "e");
  EXPECT_EQ(g.args()[3].cat, Category::I);
  EXPECT_EQ(g.reduction().axis(), 0);  // the gradient for y_j reduces over i
}

TEST(TextKernel, SecondOrderGradient) {
  const TextKernel g = TextKernel(kText, kAliases).grad(0, "eta");
  const TextKernel::Arg eta = g.args()[3];
  const TextKernel h = g.grad(1, "eta2");
  EXPECT_EQ(h.text(), "Grad(Grad(Sum_Reduction(SqDist(X,Y), 0), X), Y)");
  ASSERT_EQ(h.args().size(), 5u);
  EXPECT_EQ(h.arg_names(), "X, Y, U, eta, eta2");
  EXPECT_FALSE(h.args()[2].used);
  EXPECT_TRUE(h.args()[3].used);
  const TextKernel::Arg& eta2 = h.args()[4];
  EXPECT_TRUE(eta2.used);
  // The cotangent of the first gradient's output: a Vi(2), as that gradient's result for X.
  EXPECT_EQ(eta2.dim, 2);
  EXPECT_EQ(eta2.cat, Category::I);
  EXPECT_NE(eta2.index, eta.index);
  EXPECT_EQ(h.num_slots(), static_cast<size_t>(std::max(eta.index, eta2.index)) + 1);
}

TEST(TextKernel, GradientPositionOutOfRangeIsAnError) {
  const TextKernel k(kText, kAliases);
  try {
    (void)k.grad(3, "eta");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no argument at position 3"), std::string::npos)
        << e.what();
  }
}

TEST(TextKernel, BadTextsThrowTheParsersError) {
  EXPECT_THROW(TextKernel("Sum_Reduction(X+Z, 0)", {"X = Vi(3)"}), Error);
  EXPECT_THROW(TextKernel("Sum_Reduction(X, 0)", {"X = Vq(3)"}), Error);
}
