// Benchmark cases: the Gaussian sum, its gradient, a log-sum-exp, a K-nearest-neighbour search
// and a sine sum (the vectorised trigonometry).
#include "bench_cases.hpp"

#include <algorithm>

#include "cli.hpp"

namespace tessel::bench {

const std::vector<std::string>& case_names() {
  static const std::vector<std::string> names = {"gauss-sum", "gauss-grad", "lse", "argkmin",
                                                 "sin-sum"};
  return names;
}

bool is_case(const std::string& name) {
  const auto& names = case_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

Array uniform_array(DType dtype, int64_t rows, int64_t dim, uint64_t seed, double lo, double hi) {
  Array a(dtype, {rows, dim});
  cli::SplitMix rng(seed);
  for (int64_t k = 0; k < a.size(); ++k) {
    const double v = lo + (hi - lo) * rng.uniform();
    if (dtype == DType::Float32)
      a.as<float>()[k] = static_cast<float>(v);
    else
      a.as<double>()[k] = v;
  }
  return a;
}

namespace {

Array scalar_param(DType dtype, double value) {
  Array a(dtype, {1});
  if (dtype == DType::Float32)
    a.as<float>()[0] = static_cast<float>(value);
  else
    a.as<double>()[0] = value;
  return a;
}

}  // namespace

BenchProblem make_problem(const std::string& name, int64_t n, int64_t m, DType dtype,
                          uint64_t seed) {
  BenchProblem p;
  p.n = n;
  p.m = m;
  const Formula x = vi(0, 3), y = vj(1, 3);
  const Array xs = uniform_array(dtype, n, 3, seed);
  const Array ys = uniform_array(dtype, m, 3, seed + 1);
  const double g = 1.0 / (kScale * kScale);
  if (name == "gauss-sum" || name == "gauss-grad") {
    const Formula b = vj(2, 1), gp = pm(3, 1);
    Reduction r(ReductionOp::Sum, exp(-gp * sqdist(x, y)) * b);
    p.inputs = {xs, ys, uniform_array(dtype, m, 1, seed + 2), scalar_param(dtype, g)};
    if (name == "gauss-grad") {
      r = grad(r, 0);  // appends the cotangent E = Vi(4, 1)
      p.inputs.push_back(uniform_array(dtype, n, 1, seed + 3, -1, 1));
    }
    p.reduction = r;
  } else if (name == "lse") {
    p.reduction = Reduction(ReductionOp::LogSumExp, -pm(2, 1) * sqdist(x, y));
    p.inputs = {xs, ys, scalar_param(dtype, g)};
  } else if (name == "argkmin") {
    if (m < kArgKMinK) detail::fail("bench", "argkmin needs m >= ", kArgKMinK, ", got ", m);
    p.reduction = Reduction(ReductionOp::ArgKMin, sqdist(x, y), 1, kArgKMinK);
    p.inputs = {xs, ys};
  } else if (name == "sin-sum") {
    // Random-feature-like: arguments spread over [0, 3 G] = [0, 48], so the range reduction runs.
    p.reduction = Reduction(ReductionOp::Sum, sin(pm(3, 1) * (x | y)) * vj(2, 1));
    p.inputs = {xs, ys, uniform_array(dtype, m, 1, seed + 2), scalar_param(dtype, g)};
  } else {
    detail::fail("bench", "unknown case '", name, "'");
  }
  return p;
}

Timing time_problem(const BenchProblem& p, int reps, const Options& opt) {
  Timing t;
  t.reps = reps;
  const double t0 = cli::now_s();
  std::vector<Array> outs = evaluate(p.reduction, p.inputs, opt);
  t.first_call_s = cli::now_s() - t0;
  // Later calls write into the same buffers, so allocation is not part of what is measured.
  std::vector<ArrayView> in_views, out_views;
  for (const Array& a : p.inputs) in_views.push_back(a.view());
  for (const Array& a : outs) out_views.push_back(a.view());
  std::vector<double> times;
  for (int k = 0; k < reps; ++k) {
    const double s = cli::now_s();
    evaluate(p.reduction, in_views, out_views, opt);
    times.push_back(cli::now_s() - s);
  }
  t.median_s = cli::median(times);
  return t;
}

}  // namespace tessel::bench
