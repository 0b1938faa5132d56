// Example: the Gaussian kernel product of gauss_builder.cpp written in the KeOps text syntax.
//
// Aliases without an explicit index are numbered in the order given, so here
// G = Pm(0,1), X = Vi(1,3), Y = Vj(2,3), B = Vj(3,1), and the inputs are passed as {G, X, Y, B}.
// Exits with status 1 when tessel and the plain loops below disagree.
#include <cmath>
#include <cstdio>
#include <random>
#include <tessel/tessel.hpp>
#include <vector>

namespace {

std::vector<double> random_values(size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> v(count);
  for (double& x : v) x = u(rng);
  return v;
}

}  // namespace

int main() {
  const int64_t n = 300, m = 500;
  const double g = 16.0;
  std::vector<double> x = random_values(n * 3, 5), y = random_values(m * 3, 6);
  std::vector<double> b = random_values(m, 7), e(n, 1.0);

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

    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      double sum = 0, dx[3] = {0, 0, 0}, scale = 1e-300;
      for (int64_t j = 0; j < m; ++j) {
        double d[3], sq = 0;
        for (int c = 0; c < 3; ++c) d[c] = x[i * 3 + c] - y[j * 3 + c], sq += d[c] * d[c];
        const double k = std::exp(-g * sq) * b[j];
        sum += k;
        for (int c = 0; c < 3; ++c) dx[c] += -2.0 * g * d[c] * k;
        scale += k;
      }
      worst = std::fmax(worst, std::fabs(a[0].at(i) - sum) / scale);
      for (int c = 0; c < 3; ++c)
        worst = std::fmax(worst, std::fabs(da[0].at(i * 3 + c) - dx[c]) / (2.0 * g * scale));
    }
    std::printf("a[0] = %.12f, grad x[0] = (%.9f, %.9f, %.9f)\n", a[0].at(0), da[0].at(0),
                da[0].at(1), da[0].at(2));
    std::printf("largest relative difference from the brute-force loop: %.2e\n", worst);
    if (!(worst < 1e-10)) {
      std::fprintf(stderr, "gauss_text: MISMATCH\n");
      return 1;
    }
    std::printf("gauss_text: ok\n");
  } catch (const tessel::Error& err) {
    std::fprintf(stderr, "gauss_text: %s\n", err.what());
    return 1;
  }
  return 0;
}
