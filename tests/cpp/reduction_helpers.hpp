// Test helpers: random arrays, brute-force reductions, and finite-difference gradient checks.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "ops/eval_ref.hpp"
#include "reduction/reduction_impl.hpp"
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

inline Array clone(const Array& a) {
  Array c(a.dtype(), a.shape());
  std::memcpy(c.data(), a.data(), static_cast<size_t>(a.size()) * dtype_size(a.dtype()));
  return c;
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
