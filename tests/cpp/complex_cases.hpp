// Op cases of the complex ops (interleaved (re, im) pairs), against std::complex<double>
// references.
#pragma once

#include <complex>

// Included by op_cases.hpp after its helpers; adds the complex ops' cases to the table.
namespace op_cases {

using Cplx = std::complex<double>;

inline std::vector<Cplx> as_complex(const Vec& v) {
  std::vector<Cplx> z(v.size() / 2);
  for (size_t k = 0; k < z.size(); ++k) z[k] = {v[2 * k], v[2 * k + 1]};
  return z;
}
inline Vec interleave(const std::vector<Cplx>& z) {
  Vec v;
  for (const Cplx& c : z) v.push_back(c.real()), v.push_back(c.imag());
  return v;
}
// Component k of a complex operand broadcast from one complex number.
inline Cplx bck(const std::vector<Cplx>& z, size_t k) { return z.size() == 1 ? z[0] : z[k]; }

inline void add_complex_cases(std::vector<OpCase>& cs) {
  using namespace tessel;
  using GK = GradKind;
  const Draw u2 = uniform(-2, 2);
  const CaseAdder add(cs);
  // Binary: equal dims and either operand one complex number broadcast over the other.
  auto binary = [&](std::string name, OpCode op, std::function<Cplx(Cplx, Cplx)> f,
                    std::vector<Draw> d) {
    for (const std::vector<int>& dims : {std::vector{4, 4}, {2, 6}, {6, 2}}) {
      std::string s = name + "_" + std::to_string(dims[0]) + std::to_string(dims[1]);
      add(
          s, op, dims, [op](auto& v) { return make(op, v); },
          [f](const Point& p) {
            const auto x = as_complex(p[0]), y = as_complex(p[1]);
            std::vector<Cplx> r(std::max(x.size(), y.size()));
            for (size_t k = 0; k < r.size(); ++k) r[k] = f(bck(x, k), bck(y, k));
            return interleave(r);
          },
          d);
    }
  };
  binary("ComplexAdd", OpCode::ComplexAdd, [](Cplx a, Cplx b) { return a + b; }, {u2});
  binary("ComplexSubtract", OpCode::ComplexSubtract, [](Cplx a, Cplx b) { return a - b; }, {u2});
  binary("ComplexMult", OpCode::ComplexMult, [](Cplx a, Cplx b) { return a * b; }, {u2});
  binary("ComplexDivide", OpCode::ComplexDivide, [](Cplx a, Cplx b) { return a / b; },
         {u2, away0(0.3, 2)});
  // Unary, complex to complex or to real, per complex component.
  auto unary = [&](std::string name, OpCode op, std::function<Vec(Cplx)> f, Draw d,
                   GK g = GK::Smooth) {
    add(
        name, op, {6}, [op](auto& v) { return make(op, v); },
        [f](const Point& p) {
          Vec r;
          for (const Cplx& z : as_complex(p[0]))
            for (double x : f(z)) r.push_back(x);
          return r;
        },
        {d}, g);
  };
  auto cx = [](Cplx z) { return Vec{z.real(), z.imag()}; };
  unary(
      "Conj", OpCode::Conj, [=](Cplx z) { return cx(std::conj(z)); }, u2);
  unary(
      "ComplexExp", OpCode::ComplexExp, [=](Cplx z) { return cx(std::exp(z)); }, u2);
  unary(
      "ComplexReal", OpCode::ComplexReal, [](Cplx z) { return Vec{z.real()}; }, u2);
  unary(
      "ComplexImag", OpCode::ComplexImag, [](Cplx z) { return Vec{z.imag()}; }, u2);
  unary(
      "ComplexSquareAbs", OpCode::ComplexSquareAbs, [](Cplx z) { return Vec{std::norm(z)}; }, u2);
  unary(
      "ComplexAbs", OpCode::ComplexAbs, [](Cplx z) { return Vec{std::abs(z)}; }, away0(0.2, 2));
  unary(
      "ComplexAbs_at0", OpCode::ComplexAbs, [](Cplx z) { return Vec{std::abs(z)}; }, ints(-1, 1),
      GK::Skip);
  // away0 keeps im off 0, so no point sits on the branch cut along the negative reals.
  unary(
      "ComplexAngle", OpCode::ComplexAngle, [](Cplx z) { return Vec{std::arg(z)}; }, away0(0.2, 2));
  unary(
      "ComplexAngle_at0", OpCode::ComplexAngle, [](Cplx z) { return Vec{std::arg(z)}; },
      ints(-1, 1), GK::Skip);
  // Real to complex, per real component.
  auto lift = [&](std::string name, OpCode op, std::function<Cplx(double)> f) {
    add(
        name, op, {3}, [op](auto& v) { return make(op, v); },
        [f](const Point& p) {
          std::vector<Cplx> r;
          for (double x : p[0]) r.push_back(f(x));
          return interleave(r);
        },
        {u2});
  };
  lift("Real2Complex", OpCode::Real2Complex, [](double x) { return Cplx(x, 0); });
  lift("Imag2Complex", OpCode::Imag2Complex, [](double x) { return Cplx(0, x); });
  lift("ComplexExp1j", OpCode::ComplexExp1j, [](double x) { return std::exp(Cplx(0, x)); });
  for (int k : {0, 1}) {
    std::vector<int> dims = {1, 6};
    if (k) std::swap(dims[0], dims[1]);
    add(
        std::string("ComplexRealScal_") + std::to_string(dims[0]) + std::to_string(dims[1]),
        OpCode::ComplexRealScal, dims, [](auto& v) { return complex_real_scal(v[0], v[1]); },
        [k](const Point& p) {
          Vec r = p[1 - k];
          for (double& x : r) x *= p[k][0];
          return r;
        },
        {u2});
  }
  add(
      "ComplexSum", OpCode::ComplexSum, {6}, [](auto& v) { return complex_sum(v[0]); },
      [](const Point& p) {
        Cplx s = 0;
        for (const Cplx& z : as_complex(p[0])) s += z;
        return interleave({s});
      },
      {u2});
  add(
      "ComplexSumT", OpCode::ComplexSumT, {2}, [](auto& v) { return complex_sum_t(v[0], 6); },
      [](const Point& p) { return interleave(std::vector<Cplx>(3, as_complex(p[0])[0])); }, {u2});
}

}  // namespace op_cases
