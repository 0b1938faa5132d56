// Example: a Gaussian kernel product and its gradient with the C++ builder, checked by brute force.
//
//   a_i = sum_j exp(-g |x_i - y_j|^2) b_j          (x_i, y_j in R^3, b_j scalar)
//   d/dx_i of sum_i e_i a_i                         (e: the cotangent, one value per i)
//
// Exits with status 1 when tessel and the plain loops of gauss_check.hpp disagree.
#include <cstdio>
#include <tessel/tessel.hpp>
#include <vector>

#include "gauss_check.hpp"

using gauss_check::random_values;

int main() {
  const int64_t n = 400, m = 600;
  const float g = 16.0f;  // 1 / s^2 with s = 0.25
  std::vector<float> x = random_values<float>(n * 3, 1), y = random_values<float>(m * 3, 2);
  std::vector<float> b = random_values<float>(m, 3), e = random_values<float>(n, 4);

  try {
    // Variables: Vi follows i (one row per output), Vj follows j (summed over), Pm is a parameter.
    // The first argument is the variable's index: the position of its array in the inputs.
    tessel::Formula xi = tessel::vi(0, 3), yj = tessel::vj(1, 3), bj = tessel::vj(2, 1);
    tessel::Formula gamma = tessel::pm(3, 1);
    tessel::Reduction product(tessel::ReductionOp::Sum,
                              tessel::exp(-gamma * tessel::sqdist(xi, yj)) * bj);
    std::printf("formula: %s\n", product.str().c_str());

    std::vector<tessel::Array> inputs = {
        tessel::Array::from(x, {n, 3}), tessel::Array::from(y, {m, 3}),
        tessel::Array::from(b, {m, 1}), tessel::Array::from(std::vector<float>{g}, {1})};
    std::vector<tessel::Array> a = tessel::evaluate(product, inputs);

    // The gradient is another reduction; its last input is the cotangent e (shape (n, 1)).
    tessel::Reduction gradient = tessel::grad(product, 0);
    inputs.push_back(tessel::Array::from(e, {n, 1}));
    std::vector<tessel::Array> da = tessel::evaluate(gradient, inputs);

    const double worst = gauss_check::worst_difference(x, y, b, e, g, a[0], da[0]);
    std::printf("a[0] = %.6f, grad x[0] = (%.6f, %.6f, %.6f)\n", a[0].at(0), da[0].at(0),
                da[0].at(1), da[0].at(2));
    return gauss_check::report("gauss_builder", worst, 1e-4);
  } catch (const tessel::Error& err) {
    std::fprintf(stderr, "gauss_builder: %s\n", err.what());
    return 1;
  }
}
