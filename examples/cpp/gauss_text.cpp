// Example: the Gaussian kernel product of gauss_builder.cpp written in the KeOps text syntax.
//
// Aliases without an explicit index are numbered in the order given, so here
// G = Pm(0,1), X = Vi(1,3), Y = Vj(2,3), B = Vj(3,1), and the inputs are passed as {G, X, Y, B}.
// Exits with status 1 when tessel and the plain loops of gauss_check.hpp disagree.
#include <cstdio>
#include <tessel/tessel.hpp>
#include <vector>

#include "gauss_check.hpp"

using gauss_check::random_values;

int main() {
  const int64_t n = 300, m = 500;
  const double g = 16.0;
  std::vector<double> x = random_values<double>(n * 3, 5), y = random_values<double>(m * 3, 6);
  std::vector<double> b = random_values<double>(m, 7), e(n, 1.0);

  try {
    tessel::Formula f = tessel::parse("Exp(-G*SqDist(X,Y)) * B",
                                      {"G = Pm(1)", "X = Vi(3)", "Y = Vj(3)", "B = Vj(1)"});
    tessel::Reduction product(tessel::ReductionOp::Sum, f);
    std::printf("formula: %s\n", product.str().c_str());

    // float64 arrays: the whole computation runs in double precision.
    std::vector<tessel::Array> inputs = {
        tessel::Array::from(std::vector<double>{g}, {1}), tessel::Array::from(x, {n, 3}),
        tessel::Array::from(y, {m, 3}), tessel::Array::from(b, {m, 1})};
    std::vector<tessel::Array> a = tessel::evaluate(product, inputs);

    // X is variable 1; the cotangent (all ones: the gradient of sum_i a_i) is appended as input 4.
    tessel::Reduction gradient = tessel::grad(product, 1);
    inputs.push_back(tessel::Array::from(e, {n, 1}));
    std::vector<tessel::Array> da = tessel::evaluate(gradient, inputs);

    const double worst = gauss_check::worst_difference(x, y, b, e, g, a[0], da[0]);
    std::printf("a[0] = %.12f, grad x[0] = (%.9f, %.9f, %.9f)\n", a[0].at(0), da[0].at(0),
                da[0].at(1), da[0].at(2));
    return gauss_check::report("gauss_text", worst, 1e-10);
  } catch (const tessel::Error& err) {
    std::fprintf(stderr, "gauss_text: %s\n", err.what());
    return 1;
  }
}
