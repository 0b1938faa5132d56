// `tessel demo`: a Gaussian kernel product and its gradient on 100,000 built-in 3-D points.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.hpp"
#include "tessel/tessel.hpp"

namespace tessel::cli {

namespace {

constexpr double kScale = 0.25;  // kernel width s

// x: a noisy unit sphere; y: a noisy three-turn spiral that passes through it, with weights b
// that vary along the spiral. Deterministic, so outputs can be compared between machines.
struct DemoData {
  Array x, y, b;
};

DemoData make_data(int64_t n, int64_t m) {
  DemoData d{Array(DType::Float32, {n, 3}), Array(DType::Float32, {m, 3}),
             Array(DType::Float32, {m, 1})};
  bench::SplitMix rng(2024);
  float* x = d.x.as<float>();
  for (int64_t i = 0; i < n; ++i) {
    double p[3] = {rng.normal(), rng.normal(), rng.normal()};
    const double r = std::sqrt(p[0] * p[0] + p[1] * p[1] + p[2] * p[2]) + 1e-12;
    for (int c = 0; c < 3; ++c) x[i * 3 + c] = static_cast<float>(p[c] / r + 0.03 * rng.normal());
  }
  float* y = d.y.as<float>();
  float* b = d.b.as<float>();
  for (int64_t j = 0; j < m; ++j) {
    const double t = rng.uniform(), angle = 6 * M_PI * t;
    const double p[3] = {0.8 * std::cos(angle), 0.8 * std::sin(angle), 2 * t - 1};
    for (int c = 0; c < 3; ++c) y[j * 3 + c] = static_cast<float>(p[c] + 0.05 * rng.normal());
    b[j] = static_cast<float>(1.0 + 0.5 * std::sin(4 * M_PI * t));
  }
  return d;
}

// Row i of the product and of its gradient (cotangent 1), in float64, plus the sums of the
// absolute terms: the scale against which float32 rounding is judged.
struct RowCheck {
  double a = 0, a_scale = 0, g[3] = {0, 0, 0}, g_scale = 0;
};

RowCheck brute_row(const DemoData& d, int64_t i) {
  const double gamma = 1.0 / (kScale * kScale);
  const float* x = d.x.as<float>() + i * 3;
  const float* y = d.y.as<float>();
  const float* b = d.b.as<float>();
  RowCheck r;
  for (int64_t j = 0; j < d.y.shape()[0]; ++j) {
    double diff[3], sq = 0;
    for (int c = 0; c < 3; ++c) diff[c] = x[c] - y[j * 3 + c], sq += diff[c] * diff[c];
    const double k = std::exp(-gamma * sq) * b[j];
    r.a += k;
    r.a_scale += std::fabs(k);
    for (int c = 0; c < 3; ++c) {
      r.g[c] += -2 * gamma * diff[c] * k;
      r.g_scale += std::fabs(2 * gamma * diff[c] * k);
    }
  }
  return r;
}

struct Timed {
  std::vector<Array> out;
  double first_s = 0, second_s = 0;
  size_t compiled = 0;  // kernels added to the disk cache by the first call
};

Timed run_twice(const Reduction& r, const std::vector<Array>& in) {
  Timed t;
  const size_t before = cache_list().size();
  double t0 = bench::now_s();
  t.out = evaluate(r, in);
  t.first_s = bench::now_s() - t0;
  t.compiled = cache_list().size() - before;
  t0 = bench::now_s();
  t.out = evaluate(r, in);
  t.second_s = bench::now_s() - t0;
  return t;
}

void print_timing(const char* what, const Timed& t, double pairs) {
  std::printf("  %-16s %12s %12s    (%.2g pairs/s)\n", what, format_seconds(t.first_s).c_str(),
              format_seconds(t.second_s).c_str(), pairs / t.second_s);
}

}  // namespace

int demo_main(const Args& args) {
  int64_t n = 100000;
  for (size_t k = 0; k < args.size(); ++k) {
    if (args[k] == "-h" || args[k] == "--help") {
      std::puts(
          "usage: tessel demo [--n N]\n  --n N  number of points on each side (default 100000)");
      return 0;
    } else if (args[k] == "--n" && k + 1 < args.size()) {
      n = parse_count("--n", args[++k], 10);
    } else if (args[k].rfind("--n=", 0) == 0) {
      n = parse_count("--n", args[k].substr(4), 10);
    } else {
      throw UsageError("demo: unknown option '" + args[k] + "' (expected --n N)");
    }
  }
  const int64_t m = n;
  const DemoData d = make_data(n, m);
  Array gamma(DType::Float32, {1}), ones(DType::Float32, {n, 1});
  gamma.as<float>()[0] = static_cast<float>(1.0 / (kScale * kScale));
  for (int64_t i = 0; i < n; ++i) ones.as<float>()[i] = 1.0f;

  // a_i = sum_j exp(-g |x_i - y_j|^2) b_j, and d(sum_i a_i)/dx_i: a reduction of the same size.
  const Formula x = vi(0, 3), y = vj(1, 3), b = vj(2, 1), g = pm(3, 1);
  const Reduction product(ReductionOp::Sum, exp(-g * sqdist(x, y)) * b);
  const Reduction gradient = grad(product, 0);

  std::printf("tessel demo: Gaussian kernel product on built-in data (float32, %d threads)\n",
              num_threads());
  std::printf("  x: %lld points on a noisy sphere, y: %lld points on a noisy spiral, weights b\n",
              static_cast<long long>(n), static_cast<long long>(m));
  std::printf(
      "  a_i = sum_j exp(-|x_i - y_j|^2 / s^2) b_j with s = %.2f, and its gradient in x\n\n",
      kScale);

  const Timed a = run_twice(product, {d.x, d.y, d.b, gamma});
  const Timed da = run_twice(gradient, {d.x, d.y, d.b, gamma, ones});
  const double pairs = static_cast<double>(n) * static_cast<double>(m);
  std::printf("  %-16s %12s %12s\n", "", "first call", "second call");
  print_timing("product a", a, pairs);
  print_timing("gradient da/dx", da, pairs);
  const size_t compiled = a.compiled + da.compiled;
  if (compiled > 0)
    std::printf("  (the first calls compiled %zu kernel%s; later runs load %s from %s)\n", compiled,
                compiled == 1 ? "" : "s", compiled == 1 ? "it" : "them", cache_dir().c_str());
  else
    std::printf("  (kernels were already in the cache %s: the first calls did not compile)\n",
                cache_dir().c_str());

  const float* av = a.out[0].as<float>();
  const float* gv = da.out[0].as<float>();
  int64_t top = 0;
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    total += av[i];
    if (av[i] > av[top]) top = i;
  }
  std::printf("\n  a[0..2]          %.6g  %.6g  %.6g      sum(a) = %.6g\n", av[0], av[1], av[2],
              total);
  std::printf("  largest a        a[%lld] = %.6g, gradient there (%.5g, %.5g, %.5g)\n",
              static_cast<long long>(top), av[top], gv[top * 3], gv[top * 3 + 1], gv[top * 3 + 2]);

  // A float64 loop over three rows: the numbers above are not taken on trust.
  double worst = 0;
  for (const int64_t i : {int64_t{0}, n / 2, top}) {
    const RowCheck r = brute_row(d, i);
    worst = std::fmax(worst, std::fabs(av[i] - r.a) / (r.a_scale + 1e-30));
    for (int c = 0; c < 3; ++c)
      worst = std::fmax(worst, std::fabs(gv[i * 3 + c] - r.g[c]) / (r.g_scale + 1e-30));
  }
  const bool ok = worst < 1e-4;
  std::printf("  check            rows 0, %lld, %lld against a float64 loop: %s (error %.1e)\n",
              static_cast<long long>(n / 2), static_cast<long long>(top), ok ? "match" : "MISMATCH",
              worst);

  const double rss = peak_rss_mib(), dense = pairs * 4.0;
  std::printf("\n  peak memory      %.0f MiB for the whole process\n", rss);
  std::printf("  dense matrix     a %lld x %lld float32 kernel matrix would need %s: %.0fx more\n",
              static_cast<long long>(n), static_cast<long long>(m), format_si_bytes(dense).c_str(),
              dense / (rss * 1024 * 1024));
  if (!ok)
    detail::fail("demo", "the result differs from the float64 reference (error ", worst, ")");
  return 0;
}

}  // namespace tessel::cli
