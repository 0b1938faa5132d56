// Regrouped products (codegen/hoist.hpp): fewer multiplies in the inner loop, the same values.
#include <gtest/gtest.h>

#include <cmath>
#include <unordered_set>

#include "codegen/hoist.hpp"
#include "ops/op.hpp"
#include "reduction_helpers.hpp"
#include "tessel/tessel.hpp"

using namespace tessel;

namespace {

bool has_inner(const NodePtr& n, Category inner) {
  if (n->is_var()) return n->var_cat() == inner;
  for (const NodePtr& a : n->args)
    if (has_inner(a, inner)) return true;
  return false;
}

// Multiplies per pair in the inner loop: components of every product that depends on j.
int inner_multiplies(const Formula& f, Category inner = Category::J) {
  int count = 0;
  for (const NodePtr& n : topo_order(f.ptr()))
    if (n->op == OpCode::Mul && has_inner(n, inner)) count += n->dim;
  return count;
}

// Sum_j f over random data through the interpreter, in float64.
std::vector<double> values(const Formula& f, int64_t n, int64_t m) {
  std::vector<Array> in;
  for (const AliasInfo& v : variable_info(f)) {
    const int64_t rows = v.cat == Category::I ? n : v.cat == Category::J ? m : 1;
    Array a(DType::Float64, {rows, v.dim});
    for (int64_t k = 0; k < a.size(); ++k)
      a.as<double>()[k] = std::sin(1.7 * static_cast<double>(k + 3 * v.index) + 0.3);
    in.push_back(a);
  }
  const Array out = evaluate(Reduction(ReductionOp::Sum, f), in, tessel::testing::with(Backend::Interpreter))[0];
  return std::vector<double>(out.as<double>(), out.as<double>() + out.size());
}

}  // namespace

TEST(Hoist, GaussianGradientLosesTwoMultipliesPerPair) {
  const Formula x = vi(0, 3), y = vj(1, 3), b = vj(2, 1), g = pm(3, 1);
  const Reduction r = grad(Reduction(ReductionOp::Sum, exp(-g * sqdist(x, y)) * b), 0);
  const Formula f = r.formula();
  const Formula h = hoist_invariant_factors(f, Category::J);
  EXPECT_LT(inner_multiplies(h), inner_multiplies(f)) << f.str() << "\n" << h.str();
  EXPECT_EQ(inner_multiplies(h), inner_multiplies(f) - 2) << f.str() << "\n" << h.str();
  const std::vector<double> want = values(f, 7, 11), got = values(h, 7, 11);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_NEAR(got[k], want[k], 1e-13 * (1 + std::fabs(want[k])));
}

TEST(Hoist, FixedFactorsAreGroupedWithoutTheInnerIndex) {
  const Formula x = vi(0, 1), e = vi(1, 1), y = vj(2, 1), b = vj(3, 1), c = pm(4, 1);
  // (((x * y) * e) * c) * b: x*y and b move with j, e*c does not.
  const Formula f = x * y * e * c * b;
  const Formula h = hoist_invariant_factors(f, Category::J);
  EXPECT_EQ(inner_multiplies(f), 4);
  // The product of the moving factors (y, b), then one multiply by the fixed part (x, e, c).
  EXPECT_EQ(inner_multiplies(h), 2);
  bool found_fixed = false;
  for (const NodePtr& n : topo_order(h.ptr()))
    if (n->op == OpCode::Mul && !has_inner(n, Category::J)) found_fixed = true;
  EXPECT_TRUE(found_fixed) << h.str();
  const std::vector<double> want = values(f, 5, 6), got = values(h, 5, 6);
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_NEAR(got[k], want[k], 1e-14 * (1 + std::fabs(want[k])));
}

TEST(Hoist, FormulasWithoutRegroupableProductsStayTheSame) {
  const Formula x = vi(0, 3), y = vj(1, 3), g = pm(2, 1);
  for (const Formula& f : {exp(-sqdist(x, y)), sqdist(x, y), g * sqdist(x, y), x * y,
                           log(sum(x * x) + 1.0) * sum(y)})
    EXPECT_TRUE(hoist_invariant_factors(f, Category::J).same(f)) << f.str();
  // Reducing over i (the other axis), j-only factors are the fixed ones.
  const Formula fi = vj(1, 1) * vi(0, 1) * vj(2, 1) * vi(3, 1);
  EXPECT_EQ(inner_multiplies(fi, Category::I), 3);
  EXPECT_EQ(inner_multiplies(hoist_invariant_factors(fi, Category::I), Category::I), 2);
}

TEST(Hoist, VectorFactorsAndSharedProductsKeepTheirValues) {
  const Formula x = vi(0, 3), y = vj(1, 3), e = vi(2, 3), c = pm(3, 1), b = vj(4, 1);
  const Formula k = exp(-sqdist(x, y));
  // A shared inner product used twice, vectors on both sides, and a fixed vector factor.
  const Formula shared = (k * b) * c;
  const Formula f = shared * e * (x - y) + shared * 2.0 * y;
  const Formula h = hoist_invariant_factors(f, Category::J);
  EXPECT_LE(inner_multiplies(h), inner_multiplies(f));
  const std::vector<double> want = values(f, 4, 9), got = values(h, 4, 9);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k2 = 0; k2 < want.size(); ++k2)
    EXPECT_NEAR(got[k2], want[k2], 1e-13 * (1 + std::fabs(want[k2])));
}
