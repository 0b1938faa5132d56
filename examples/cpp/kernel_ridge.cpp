// Example: kernel ridge regression with the C++ kernel solve, and the validation loss's gradient in
// the kernel scale.
//
//   (alpha I + K) c = y,  K_ij = exp(-g |x_i - x_j|^2)       fit on noisy samples of sin(3x)
//   f(t) = sum_j exp(-g |t - x_j|^2) c_j                      prediction, a Sum reduction
//   dL/dg for L = sum_t (f(t) - sin(3t))^2, by implicit differentiation of the solve
//
// Exits with status 1 when the fit is poor or the gradient disagrees with finite differences.
#include <cmath>
#include <cstdio>
#include <random>
#include <tessel/tessel.hpp>
#include <vector>

using namespace tessel;

namespace {

const Reduction kKernel(ReductionOp::Sum, exp(-pm(3, 1) * sqdist(vi(0, 1), vj(1, 1))) * vj(2, 1));

struct Data {
  std::vector<double> x, y, t, truth;
};

Data make_data(int n, int m) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::normal_distribution<double> noise(0.0, 0.05);
  Data d;
  for (int i = 0; i < n; ++i) {
    d.x.push_back(u(rng));
    d.y.push_back(std::sin(3 * d.x.back()) + noise(rng));
  }
  for (int i = 0; i < m; ++i) {
    d.t.push_back(-1.0 + 2.0 * (i + 0.5) / m);
    d.truth.push_back(std::sin(3 * d.t.back()));
  }
  return d;
}

struct Fit {
  Array c, pred;
  double loss = 0;
  SolveReport report;
};

Fit fit(const Data& d, double g, const SolveOptions& opt) {
  const int64_t n = static_cast<int64_t>(d.x.size()), m = static_cast<int64_t>(d.t.size());
  const Array x = Array::from(d.x, {n, 1}), y = Array::from(d.y, {n, 1});
  const Array gs = Array::from(std::vector<double>{g}, {1});
  Fit f;
  f.c = Array(DType::Float64, {n, 1});
  const ArrayView in[4] = {x.view(), x.view(), y.view(), gs.view()};
  f.report = kernel_solve(kKernel, 2, in, f.c.view(), opt);
  const Array t = Array::from(d.t, {m, 1});
  f.pred = evaluate(kKernel, std::vector<Array>{t, x, f.c, gs}).at(0);
  for (int64_t i = 0; i < m; ++i) f.loss += std::pow(f.pred.at(i) - d.truth[i], 2);
  return f;
}

}  // namespace

int main() {
  const Data d = make_data(2000, 500);
  const double g = 20.0;
  SolveOptions opt;
  opt.alpha = 1e-2;
  opt.tol = 1e-12;
  opt.maxiter = 2000;
  opt.raise_on_nonconvergence = true;
  const Fit f = fit(d, g, opt);
  const double rms = std::sqrt(f.loss / d.t.size());
  std::printf("kernel ridge, n = %zu: %s; test RMS error %.4f\n", d.x.size(),
              f.report.str().c_str(), rms);

  // dL/dg: the prediction's own gradient (a reduction) plus the solve's, whose cotangent is
  // dL/dc = K(t, x)^T (2 (f - truth)): a gradient reduction of the prediction with respect to c.
  const int64_t n = static_cast<int64_t>(d.x.size()), m = static_cast<int64_t>(d.t.size());
  std::vector<double> r(m);
  for (int64_t i = 0; i < m; ++i) r[i] = 2 * (f.pred.at(i) - d.truth[i]);
  const Array t = Array::from(d.t, {m, 1}), x = Array::from(d.x, {n, 1});
  const Array y = Array::from(d.y, {n, 1}), gs = Array::from(std::vector<double>{g}, {1});
  const Array ra = Array::from(r, {m, 1});
  const std::vector<Array> pred_in = {t, x, f.c, gs, ra};
  const double direct = evaluate(grad(kKernel, 3), pred_in).at(0).at(0);
  const Array dc = evaluate(grad(kKernel, 2), pred_in).at(0);
  const ArrayView in[4] = {x.view(), x.view(), y.view(), gs.view()};
  Array dg(DType::Float64, {1});
  const int wrt[1] = {3};
  const ArrayView grads[1] = {dg.view()};
  kernel_solve_grad(kKernel, 2, in, f.c.view(), dc.view(), wrt, grads, opt);
  const double analytic = direct + dg.at(0);
  const double h = 1e-4;
  const double fd = (fit(d, g + h, opt).loss - fit(d, g - h, opt).loss) / (2 * h);
  std::printf("dL/dg: implicit %.8e, finite differences %.8e\n", analytic, fd);
  const bool ok = rms < 0.05 && std::abs(analytic - fd) <= 1e-3 * std::abs(fd) + 1e-10;
  std::printf("%s\n", ok ? "OK" : "MISMATCH");
  return ok ? 0 : 1;
}
