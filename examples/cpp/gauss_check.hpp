// The Gaussian kernel examples' inputs and their check against plain loops, kept apart so that
// each example shows only how the product is written and evaluated.
//
//   a_i = sum_j exp(-g |x_i - y_j|^2) b_j          (x_i, y_j in R^3, b_j scalar)
//   d/dx_i of sum_i e_i a_i                         (e: the cotangent, one value per i)
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <tessel/tessel.hpp>
#include <vector>

namespace gauss_check {

// `count` values drawn uniformly from [0, 1).
template <class T>
std::vector<T> random_values(size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<T> u(0, 1);
  std::vector<T> v(count);
  for (T& x : v) x = u(rng);
  return v;
}

// The largest difference of a (n values) and da (n x 3) from the brute-force loop, relative to
// the size of each row's sum, so that one tolerance serves rows with large and tiny sums.
template <class T>
double worst_difference(const std::vector<T>& x, const std::vector<T>& y, const std::vector<T>& b,
                        const std::vector<T>& e, double g, const tessel::Array& a,
                        const tessel::Array& da) {
  const int64_t n = static_cast<int64_t>(e.size()), m = static_cast<int64_t>(b.size());
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    // The smallest normal T keeps a row whose terms all underflow from dividing by 0.
    double sum = 0, dx[3] = {0, 0, 0}, scale = std::numeric_limits<T>::min();
    for (int64_t j = 0; j < m; ++j) {
      double d[3], sq = 0;
      for (int c = 0; c < 3; ++c) d[c] = x[i * 3 + c] - y[j * 3 + c], sq += d[c] * d[c];
      const double k = std::exp(-g * sq) * b[j];
      sum += k;
      for (int c = 0; c < 3; ++c) dx[c] += -2.0 * g * d[c] * k * e[i];
      scale += k;
    }
    worst = std::fmax(worst, std::fabs(a.at(i) - sum) / scale);
    for (int c = 0; c < 3; ++c)
      worst = std::fmax(worst, std::fabs(da.at(i * 3 + c) - dx[c]) / (2.0 * g * scale));
  }
  return worst;
}

// Prints the verdict; the exit status: 1 when `worst` is not below `tol`.
inline int report(const char* example, double worst, double tol) {
  std::printf("largest relative difference from the brute-force loop: %.2e\n", worst);
  if (!(worst < tol)) {
    std::fprintf(stderr, "%s: MISMATCH\n", example);
    return 1;
  }
  std::printf("%s: ok\n", example);
  return 0;
}

}  // namespace gauss_check
