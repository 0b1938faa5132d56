// Test helpers: random arrays, brute-force reductions, and finite-difference gradient checks.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ops/eval_ref.hpp"
#include "reduction/reduction_impl.hpp"
#include "reduction/reduction_info.hpp"
#include "tessel/tessel.hpp"

namespace tessel::testing {

// Runs f, expects tessel::Error, and checks that each fragment occurs in its message.
template <class F>
void expect_error(F f, std::initializer_list<const char*> fragments) {
  try {
    f();
    ADD_FAILURE() << "expected tessel::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* frag : fragments)
      EXPECT_NE(msg.find(frag), std::string::npos) << "missing '" << frag << "' in: " << msg;
  }
}

inline Array random_array(DType t, std::vector<int64_t> shape, uint64_t seed, double lo = -1,
                          double hi = 1) {
  Array a(t, std::move(shape));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  for (int64_t k = 0; k < a.size(); ++k) {
    if (t == DType::Float32)
      a.as<float>()[k] = static_cast<float>(u(rng));
    else
      a.as<double>()[k] = u(rng);
  }
  return a;
}

// An (n / dim, dim) array of type t holding the values v (rounded to float32 for that type).
inline Array array_of(const std::vector<double>& v, DType t, int64_t dim = 1) {
  Array a(t, {static_cast<int64_t>(v.size()) / dim, dim});
  for (size_t k = 0; k < v.size(); ++k) {
    if (t == DType::Float32)
      a.as<float>()[k] = static_cast<float>(v[k]);
    else
      a.as<double>()[k] = v[k];
  }
  return a;
}

inline Array clone(const Array& a) {
  Array c(a.dtype(), a.shape());
  std::memcpy(c.data(), a.data(), static_cast<size_t>(a.size()) * dtype_size(a.dtype()));
  return c;
}
// Every SIMD level of every architecture, highest first: a test instantiated over them skips the
// ones this machine cannot run (see simd_level_runs).
inline const char* const kSimdLevels[] = {"avx512", "avx2", "sse2", "neon", "scalar"};

// Whether TESSEL_SIMD=level is accepted here (a level of this architecture, at or below the CPU's).
inline bool simd_level_runs(const std::string& level) {
  const char* old = std::getenv("TESSEL_SIMD");
  const std::string saved = old ? old : "";
  ::setenv("TESSEL_SIMD", level.c_str(), 1);
  bool ok = true;
  try {
    simd_level();
  } catch (const Error&) {
    ok = false;
  }
  if (old)
    ::setenv("TESSEL_SIMD", saved.c_str(), 1);
  else
    ::unsetenv("TESSEL_SIMD");
  return ok;
}

inline Options with(Backend b) {
  Options o;
  o.backend = b;
  return o;
}

inline std::vector<Array> clone(const std::vector<Array>& v) {
  std::vector<Array> r;
  for (const Array& a : v) r.push_back(clone(a));
  return r;
}

// Row `row` of a (rows × dim) array (or the whole of a parameter) as doubles.
inline std::vector<double> row_of(const Array& a, int64_t row, int dim) {
  std::vector<double> v(dim);
  for (int c = 0; c < dim; ++c) v[c] = a.at(row * dim + c);
  return v;
}

// F evaluated at (i, j) with the float64 reference evaluator.
inline std::vector<double> eval_pair(const Reduction& r, const std::vector<Array>& in, int64_t i,
                                     int64_t j, const Formula& f) {
  std::map<int, std::vector<double>> vals;
  for (const VarSlot& v : r.inputs()) {
    const int64_t row = v.cat == Category::I ? i : v.cat == Category::J ? j : 0;
    vals[v.index] = row_of(in[v.index], row, v.dim);
  }
  return eval_point(f, vals);
}

// Dense float64 reference of a reduction built by name: F (and the weight) on every (i, j) pair
// with the reference evaluator, reduced by the row's family with the documented semantics (Min/Max:
// first NaN wins, ties to the lowest index; KMin: stable sort per component, NaN last). One vector
// per output, indices as doubles. Written apart from the library's folds so that it can judge them.
inline std::vector<std::vector<double>> dense_reduction(const Reduction& r,
                                                        const std::vector<Array>& in) {
  const ReductionInfo& info = reduction_info(r.op());
  int64_t rows[2] = {0, 0};  // i, j
  for (const VarSlot& v : r.inputs())
    if (v.cat != Category::Param) rows[v.cat == Category::I ? 0 : 1] = in[v.index].shape()[0];
  const int64_t n_out = rows[r.axis() == 1 ? 0 : 1], n_red = rows[r.axis() == 1 ? 1 : 0];
  const double inf = std::numeric_limits<double>::infinity();
  const int D = r.formula().dim(), K = r.k();
  std::vector<std::vector<double>> out(r.num_outputs());
  for (int64_t o = 0; o < n_out; ++o) {
    std::vector<std::vector<double>> f, w;
    for (int64_t q = 0; q < n_red; ++q) {
      const int64_t i = r.axis() == 1 ? o : q, j = r.axis() == 1 ? q : o;
      f.push_back(eval_pair(r, in, i, j, r.formula()));
      if (r.weight().valid()) w.push_back(eval_pair(r, in, i, j, r.weight()));
    }
    std::vector<double> val, idx;  // per output column
    switch (info.family) {
      case ReductionFamily::Sum:
        for (int d = 0; d < D; ++d) {
          double s = 0;
          for (int64_t q = 0; q < n_red; ++q) s += f[q][d];
          val.push_back(s);
        }
        break;
      case ReductionFamily::Select:
        for (int d = 0; d < D; ++d) {
          double best = info.is_max ? -inf : inf;
          int64_t bi = -1;
          for (int64_t q = 0; q < n_red; ++q) {
            const double v = f[q][d];
            if (std::isnan(v)) {
              if (!std::isnan(best)) best = v, bi = q;
              continue;
            }
            if (bi < 0 || (!std::isnan(best) && (info.is_max ? v > best : v < best)))
              best = v, bi = q;
          }
          val.push_back(best);
          idx.push_back(static_cast<double>(bi));
        }
        break;
      case ReductionFamily::KSelect: {
        // Each component sorted on its own; column q * D + d is component d's q-th (KeOps).
        std::vector<std::vector<std::pair<double, int64_t>>> all(D);
        for (int d = 0; d < D; ++d) {
          for (int64_t q = 0; q < n_red; ++q) all[d].push_back({f[q][d], q});
          std::stable_sort(all[d].begin(), all[d].end(), [](auto& a, auto& b) {
            return !std::isnan(a.first) && (std::isnan(b.first) || a.first < b.first);
          });
        }
        for (int q = 0; q < K; ++q)
          for (int d = 0; d < D; ++d) {
            val.push_back(all[d][q].first);
            idx.push_back(static_cast<double>(all[d][q].second));
          }
        break;
      }
      case ReductionFamily::SoftMax: {
        double m = -inf;
        for (int64_t q = 0; q < n_red; ++q) m = std::max(m, f[q][0]);
        double s = 0;
        for (int64_t q = 0; q < n_red; ++q) s += std::exp(f[q][0] - m);
        const int W = r.weight().valid() ? r.weight().dim() : 1;
        for (int d = 0; d < W; ++d) {
          double a = 0;
          for (int64_t q = 0; q < n_red; ++q)
            a += std::exp(f[q][0] - m) * (r.weight().valid() ? w[q][d] : 1.0);
          val.push_back(r.op() == ReductionOp::LogSumExp ? m + std::log(a) : a / s);
        }
        break;
      }
      case ReductionFamily::Indexed:
        ADD_FAILURE() << info.name << " has no dense reference: it is not built by name";
        return out;
    }
    for (int k = 0; k < r.num_outputs(); ++k) {
      const std::vector<double>& src = r.output_is_index(k) ? idx : val;
      out[k].insert(out[k].end(), src.begin(), src.end());
    }
  }
  return out;
}

inline void expect_close(const Array& got, const std::vector<double>& want, double rtol,
                         double atol, const std::string& what) {
  ASSERT_EQ(got.size(), static_cast<int64_t>(want.size())) << what;
  for (size_t k = 0; k < want.size(); ++k) {
    const double g = got.at(static_cast<int64_t>(k)), w = want[k];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(g)) << what << " entry " << k;
      continue;
    }
    if (std::isinf(w)) {
      EXPECT_EQ(g, w) << what << " entry " << k;
      continue;
    }
    EXPECT_NEAR(g, w, atol + rtol * std::fabs(w)) << what << " entry " << k;
  }
}

// Every output of two evaluations of one reduction, entry by entry: NaN where `want` has NaN,
// indices and infinities (rows reducing nothing) exactly, other values within tol * (1 + |want|);
// tol = 0: every entry equal, as == compares doubles.
inline void expect_outputs_near(const std::vector<Array>& got, const std::vector<Array>& want,
                                double tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].size(), want[k].size()) << what;
    for (int64_t q = 0; q < got[k].size(); ++q) {
      const double a = got[k].at(q), b = want[k].at(q);
      if (std::isnan(b)) {
        EXPECT_TRUE(std::isnan(a)) << what << " output " << k << " entry " << q;
      } else if (got[k].dtype() == DType::Int64 || std::isinf(b)) {
        EXPECT_EQ(a, b) << what << " output " << k << " entry " << q;
      } else {
        EXPECT_NEAR(a, b, tol * (1 + std::abs(b))) << what << " output " << k << " entry " << q;
      }
    }
  }
}

// Output 0 of r on the compiled backend against the interpreter. float32: the inputs are exact
// in both paths, but the interpreter computes in float64.
inline void expect_compiled_matches_interpreter(const Reduction& r, const std::vector<Array>& in,
                                                bool f64, const std::string& what) {
  const Array want = evaluate(r, in, with(Backend::Interpreter))[0];
  const Array got = evaluate(r, in, with(Backend::Compiled))[0];
  std::vector<double> w(want.size());
  for (int64_t k = 0; k < want.size(); ++k) w[k] = want.at(k);
  const double tol = f64 ? 1e-12 : 3e-5;
  expect_close(got, w, tol, tol * 10, what + (f64 ? " f64" : " f32"));
}

// <output 0 of r, cot> as a function of the inputs, in float64 through the interpreter.
inline double pairing(const Reduction& r, const std::vector<Array>& in, const Array& cot,
                      const Options& opt) {
  auto out = evaluate(r, in, opt);
  double s = 0;
  for (int64_t k = 0; k < out[0].size(); ++k) s += out[0].at(k) * cot.at(k);
  return s;
}

// Checks grad(r, var) against central finite differences of <r(in), cot>.
inline void check_grad_fd(const Reduction& r, std::vector<Array> in, int var, const Options& opt,
                          double tol = 1e-6, double h = 1e-6) {
  auto out = evaluate(r, in, opt);
  const Array cot = random_array(DType::Float64, out[0].shape(), 1234);
  const Reduction g = grad(r, var);
  std::vector<Array> gin = in;
  gin.push_back(cot);
  const Array gv = evaluate(g, gin, opt)[0];
  Array& x = in[var];
  ASSERT_EQ(gv.size(), x.size()) << "gradient shape for variable " << var;
  for (int64_t k = 0; k < x.size(); ++k) {
    const double x0 = x.as<double>()[k];
    x.as<double>()[k] = x0 + h;
    const double fp = pairing(r, in, cot, opt);
    x.as<double>()[k] = x0 - h;
    const double fm = pairing(r, in, cot, opt);
    x.as<double>()[k] = x0;
    const double fd = (fp - fm) / (2 * h);
    EXPECT_NEAR(gv.at(k), fd, tol * (1 + std::fabs(fd)))
        << "d/d(var " << var << ")[" << k << "] of " << r.str();
  }
}

}  // namespace tessel::testing
