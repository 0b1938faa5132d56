// Benchmark cases: the Gaussian sum, its gradient, a log-sum-exp, a K-nearest-neighbour search,
// the kernel Hamiltonian with its gradients and a sine sum (the vectorised trigonometry).
#include "bench_cases.hpp"

#include <algorithm>
#include <cmath>

#include "timing.hpp"

namespace tessel::bench {

const std::vector<std::string>& case_names() {
  static const std::vector<std::string> names = {
      "gauss-sum", "gauss-grad", "lse", "argkmin", "hamiltonian", "sin-sum", "gauss-sum-64d"};
  return names;
}

bool has_pykeops_case(const std::string& name) { return name != "hamiltonian"; }

int case_dim(const std::string& name) { return name == "gauss-sum-64d" ? kWideDim : 3; }

bool is_case(const std::string& name) {
  const auto& names = case_names();
  return std::find(names.begin(), names.end(), name) != names.end();
}

Array uniform_array(DType dtype, int64_t rows, int64_t dim, uint64_t seed, double lo, double hi) {
  Array a(dtype, {rows, dim});
  SplitMix rng(seed);
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

// The number of leading inputs `r` reads (its highest variable index + 1).
size_t input_count(const Reduction& r) {
  int n = 0;
  for (const VarSlot& v : r.inputs()) n = std::max(n, v.index + 1);
  return static_cast<size_t>(n);
}

}  // namespace

BenchProblem make_problem(const std::string& name, int64_t n, int64_t m, DType dtype,
                          uint64_t seed) {
  BenchProblem p;
  p.n = n;
  p.m = m;
  const int d = case_dim(name);
  const Formula x = vi(0, d), y = vj(1, d);
  const Array xs = uniform_array(dtype, n, d, seed);
  const Array ys = uniform_array(dtype, m, d, seed + 1);
  const double g = d == 3 ? 1.0 / (kScale * kScale) : kWideG;
  if (name == "gauss-sum" || name == "gauss-grad" || name == "gauss-sum-64d") {
    const Formula b = vj(2, 1), gp = pm(3, 1);
    Reduction r(ReductionOp::Sum, exp(-gp * sqdist(x, y)) * b);
    p.inputs = {xs, ys, uniform_array(dtype, m, 1, seed + 2), scalar_param(dtype, g)};
    if (name == "gauss-grad") {
      r = grad(r, 0);  // appends the cotangent E = Vi(4, 1)
      p.inputs.push_back(uniform_array(dtype, n, 1, seed + 3, -1, 1));
    }
    p.reductions = {r};
  } else if (name == "lse") {
    p.reductions = {Reduction(ReductionOp::LogSumExp, -pm(2, 1) * sqdist(x, y))};
    p.inputs = {xs, ys, scalar_param(dtype, g)};
  } else if (name == "argkmin") {
    if (m < kArgKMinK) detail::fail("bench", "argkmin needs m >= ", kArgKMinK, ", got ", m);
    p.reductions = {Reduction(ReductionOp::ArgKMin, sqdist(x, y), 1, kArgKMinK)};
    p.inputs = {xs, ys};
  } else if (name == "hamiltonian") {
    // One point set: q and p bound as Vi and as Vj (m = n); momenta of size 1/sqrt(n), as in
    // bench/python_bench.py, and the width 0.1 used there (G = 100).
    if (m != n) detail::fail("bench", "hamiltonian needs m == n, got n = ", n, ", m = ", m);
    const Formula pi = vi(2, 3), pj = vj(3, 3);
    const Reduction k(ReductionOp::Sum, exp(-pm(4, 1) * sqdist(x, vj(1, 3))) * scalprod(pi, pj));
    Array ps = uniform_array(dtype, n, 3, seed + 2, -1, 1);
    const double scale = 1.0 / std::sqrt(static_cast<double>(n));
    for (int64_t q = 0; q < ps.size(); ++q) {
      if (dtype == DType::Float32)
        ps.as<float>()[q] *= static_cast<float>(scale);
      else
        ps.as<double>()[q] *= scale;
    }
    Array half(dtype, {n, 1});
    for (int64_t q = 0; q < n; ++q) {
      if (dtype == DType::Float32)
        half.as<float>()[q] = 0.5f;
      else
        half.as<double>()[q] = 0.5;
    }
    p.inputs = {xs, xs, ps, ps, scalar_param(dtype, 100.0), half};
    // H's row sums, then the cotangent 1/2 pulled back to each binding of q and p: the i-side
    // gradients (Qi, Pi) in one reduction and the j-side ones (Qj, Pj) in another, as
    // tessel.torch's backward fuses them (the exponential is computed once per pair).
    auto fused = [&](int a, int b) {
      const Reduction ga = grad(k, a), gb = grad(k, b);
      return Reduction(ReductionOp::Sum, concat(ga.formula(), gb.formula()), ga.axis());
    };
    p.reductions = {k, fused(0, 2), fused(1, 3)};
  } else if (name == "sin-sum") {
    // Random-feature-like: arguments spread over [0, 3 G] = [0, 48], so the range reduction runs.
    p.reductions = {Reduction(ReductionOp::Sum, sin(pm(3, 1) * (x | y)) * vj(2, 1))};
    p.inputs = {xs, ys, uniform_array(dtype, m, 1, seed + 2), scalar_param(dtype, g)};
  } else {
    detail::fail("bench", "unknown case '", name, "'");
  }
  return p;
}

std::vector<std::vector<Array>> run_problem(const BenchProblem& p, const Options& opt) {
  std::vector<std::vector<Array>> outs;
  for (const Reduction& r : p.reductions) {
    const size_t n = input_count(r);
    std::vector<ArrayView> in;
    for (size_t q = 0; q < n && q < p.inputs.size(); ++q) in.push_back(p.inputs[q].view());
    outs.push_back(evaluate(r, in, opt));
  }
  return outs;
}

Timing time_problem(const BenchProblem& p, int reps, const Options& opt) {
  Timing t;
  t.reps = reps;
  const double t0 = now_s();
  const std::vector<std::vector<Array>> outs = run_problem(p, opt);
  t.first_call_s = now_s() - t0;
  // Later calls write into the same buffers, so allocation is not part of what is measured.
  std::vector<std::vector<ArrayView>> in_views, out_views;
  for (size_t s = 0; s < p.reductions.size(); ++s) {
    const size_t n = std::min(input_count(p.reductions[s]), p.inputs.size());
    in_views.emplace_back();
    out_views.emplace_back();
    for (size_t q = 0; q < n; ++q) in_views.back().push_back(p.inputs[q].view());
    for (const Array& a : outs[s]) out_views.back().push_back(a.view());
  }
  std::vector<double> times;
  for (int k = 0; k < reps; ++k) {
    const double s = now_s();
    for (size_t r = 0; r < p.reductions.size(); ++r)
      evaluate(p.reductions[r], in_views[r], out_views[r], opt);
    times.push_back(now_s() - s);
  }
  t.median_s = median(times);
  return t;
}

}  // namespace tessel::bench
