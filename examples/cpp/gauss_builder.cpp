// Example: a Gaussian kernel product and its gradient with the C++ builder, checked by brute force.
//
//   a_i = sum_j exp(-g |x_i - y_j|^2) b_j          (x_i, y_j in R^3, b_j scalar)
//   d/dx_i of sum_i e_i a_i                         (e: the cotangent, one value per i)
//
// Exits with status 1 when tessel and the plain loops below disagree.
#include <cmath>
#include <cstdio>
#include <random>
#include <tessel/tessel.hpp>
#include <vector>

namespace {

std::vector<float> random_values(size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = u(rng);
  return v;
}

}  // namespace

int main() {
  const int64_t n = 400, m = 600;
  const float g = 16.0f;  // 1 / s^2 with s = 0.25
  std::vector<float> x = random_values(n * 3, 1), y = random_values(m * 3, 2);
  std::vector<float> b = random_values(m, 3), e = random_values(n, 4);

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

    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0, dx[3] = {0, 0, 0}, scale = 1e-30;
      for (int64_t j = 0; j < m; ++j) {
        double d[3], sq = 0;
        for (int c = 0; c < 3; ++c) d[c] = x[i * 3 + c] - y[j * 3 + c], sq += d[c] * d[c];
        const double k = std::exp(-g * sq) * b[j];
        sum += k;
        for (int c = 0; c < 3; ++c) dx[c] += -2.0 * g * d[c] * k * e[i];
        scale += k;
      }
      worst = std::fmax(worst, std::fabs(a[0].at(i) - sum) / scale);
      for (int c = 0; c < 3; ++c)
        worst = std::fmax(worst, std::fabs(da[0].at(i * 3 + c) - dx[c]) / (2.0 * g * scale));
    }
    std::printf("a[0] = %.6f, grad x[0] = (%.6f, %.6f, %.6f)\n", a[0].at(0), da[0].at(0),
                da[0].at(1), da[0].at(2));
    std::printf("largest relative difference from the brute-force loop: %.2e\n", worst);
    if (!(worst < 1e-4)) {
      std::fprintf(stderr, "gauss_builder: MISMATCH\n");
      return 1;
    }
    std::printf("gauss_builder: ok\n");
  } catch (const tessel::Error& err) {
    std::fprintf(stderr, "gauss_builder: %s\n", err.what());
    return 1;
  }
  return 0;
}
