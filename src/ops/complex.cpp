// Complex ops on KeOps's interleaved layout: a complex vector of dim D is 2D reals (re0, im0, ...).
//
// Every VJP is the gradient of the real inner product <self, G> on that layout, which is
// PyTorch's convention for complex tensors (the conjugate Wirtinger derivative): for a
// holomorphic h, the cotangent of z is G * conj(h'(z)). The VJPs are written in these ops, so
// the gradient of a complex formula is again a complex formula with CPU and CUDA code.
#include "ops/op.hpp"

namespace tessel {

namespace {

int even_dim(const char* op, const Formula& a, const char* what) {
  if (a.dim() % 2 != 0)
    dim_error(op, std::string(what) +
                      " must have an even dim (complex numbers as (re, im) "
                      "pairs), got " +
                      std::to_string(a.dim()));
  return a.dim();
}

// Equal even dims, or one operand of dim 2 (one complex number) broadcast over the other.
int complex_broadcast(const char* op, const Formula& a, const Formula& b) {
  const int da = even_dim(op, a, "the first argument");
  const int db = even_dim(op, b, "the second argument");
  if (da == db || db == 2) return da;
  if (da == 2) return db;
  dim_error(op, "operands have dims " + std::to_string(da) + " and " + std::to_string(db) +
                    "; expected equal dims or one of them 2 (one complex number)");
}

// A cotangent at the broadcast dim, summed back to an operand of dim 2 when it was broadcast.
Formula complex_unbroadcast(const Formula& g, int target_dim) {
  return g.dim() == target_dim ? g : complex_sum(g);
}

}  // namespace

// Two complex operands, one complex result: D supplies f(xr, xi, yr, yi, &re, &im).
template <class D>
struct ComplexBinary {
  static constexpr int arity = 2;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    return complex_broadcast(D::name, a[0], a[1]);
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    const bool b0 = n.args[0]->dim != n.dim, b1 = n.args[1]->dim != n.dim;
    for (int k = 0; k < n.dim; k += 2) {
      const S* x = a[0] + (b0 ? 0 : k);
      const S* y = a[1] + (b1 ? 0 : k);
      D::f(x[0], x[1], y[0], y[1], out[k], out[k + 1]);
    }
  }
};

// One complex operand, a complex result of the same dim: D supplies f(re, im, &re, &im).
template <class D>
struct ComplexUnary {
  static constexpr int arity = 1;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    return even_dim(D::name, a[0], "the argument");
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    for (int k = 0; k < n.dim; k += 2) D::f(a[0][k], a[0][k + 1], out[k], out[k + 1]);
  }
};

// A complex operand of dim 2D, a real result of dim D: D supplies f(re, im).
template <class D>
struct ComplexToReal {
  static constexpr int arity = 1;
  static constexpr bool zero_preserving = true;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    return even_dim(D::name, a[0], "the argument") / 2;
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    for (int c = 0; c < n.dim; ++c) out[c] = D::f(a[0][2 * c], a[0][2 * c + 1]);
  }
};

// A real operand of dim D, a complex result of dim 2D: D supplies f(x, &re, &im).
template <class D>
struct RealToComplex {
  static constexpr int arity = 1;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    return checked_dim(D::name, int64_t{2} * a[0].dim());
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    for (int c = 0; c < n.dim / 2; ++c) D::f(a[0][c], out[2 * c], out[2 * c + 1]);
  }
};

struct ComplexAddOp : ComplexBinary<ComplexAddOp> {
  TESSEL_OP(ComplexAdd);
  template <class S>
  static void f(const S& xr, const S& xi, const S& yr, const S& yi, S& r, S& i) {
    r = xr + yr;
    i = xi + yi;
  }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t>) {
    if (is_zero(a[0]) && a[1].dim() >= a[0].dim()) return a[1];
    if (is_zero(a[1]) && a[0].dim() >= a[1].dim()) return a[0];
    return {};
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    return {complex_unbroadcast(g, arg(s, 0).dim()), complex_unbroadcast(g, arg(s, 1).dim())};
  }
};
Formula complex_add(const Formula& a, const Formula& b) { return make(OpCode::ComplexAdd, {a, b}); }

struct ComplexSubtractOp : ComplexBinary<ComplexSubtractOp> {
  TESSEL_OP(ComplexSubtract);
  template <class S>
  static void f(const S& xr, const S& xi, const S& yr, const S& yi, S& r, S& i) {
    r = xr - yr;
    i = xi - yi;
  }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t>) {
    if (is_zero(a[1]) && a[0].dim() >= a[1].dim()) return a[0];
    return {};
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    return {complex_unbroadcast(g, arg(s, 0).dim()), complex_unbroadcast(-g, arg(s, 1).dim())};
  }
};
Formula complex_sub(const Formula& a, const Formula& b) {
  return make(OpCode::ComplexSubtract, {a, b});
}

struct ComplexMultOp : ComplexBinary<ComplexMultOp> {
  TESSEL_OP(ComplexMult);
  template <class S>
  static void f(const S& xr, const S& xi, const S& yr, const S& yi, S& r, S& i) {
    r = xr * yr - xi * yi;
    i = xr * yi + xi * yr;
  }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t>) {
    if (is_zero(a[0]) || is_zero(a[1])) return zero(std::max(a[0].dim(), a[1].dim()));
    return {};
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const Formula x = arg(s, 0), y = arg(s, 1);
    return {complex_unbroadcast(complex_mult(g, conj(y)), x.dim()),
            complex_unbroadcast(complex_mult(g, conj(x)), y.dim())};
  }
};
Formula complex_mult(const Formula& a, const Formula& b) {
  return make(OpCode::ComplexMult, {a, b});
}

// x / y = x conj(y) / |y|^2, as KeOps computes it (no rescaling: |y|^2 overflows where KeOps's
// does); y = 0 gives inf or NaN components, as numpy's division does.
struct ComplexDivideOp : ComplexBinary<ComplexDivideOp> {
  TESSEL_OP(ComplexDivide);
  template <class S>
  static void f(const S& xr, const S& xi, const S& yr, const S& yi, S& r, S& i) {
    const S inv_den = S(1.0) / (yr * yr + yi * yi);
    r = (xr * yr + xi * yi) * inv_den;
    i = (xi * yr - xr * yi) * inv_den;
  }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t>) {
    if (is_zero(a[0])) return zero(std::max(a[0].dim(), a[1].dim()));
    return {};
  }
  // q = x / y: dq/dx = 1 / y, dq/dy = -q / y, so the cotangents are G / conj(y) and
  // -(G / conj(y)) conj(q).
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const Formula x = arg(s, 0), y = arg(s, 1), gx = complex_divide(g, conj(y));
    return {complex_unbroadcast(gx, x.dim()),
            complex_unbroadcast(-complex_mult(gx, conj(s)), y.dim())};
  }
};
Formula complex_divide(const Formula& a, const Formula& b) {
  return make(OpCode::ComplexDivide, {a, b});
}

struct ConjOp : ComplexUnary<ConjOp> {
  TESSEL_OP(Conj);
  static constexpr bool zero_preserving = true;
  template <class S>
  static void f(const S& xr, const S& xi, S& r, S& i) {
    r = xr;
    i = -xi;
  }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t>) {
    return a[0].node().op == OpCode::Conj ? arg(a[0], 0) : Formula{};
  }
  static std::vector<Formula> vjp(const Formula&, const Formula& g) { return {conj(g)}; }
};
Formula conj(const Formula& a) { return make(OpCode::Conj, {a}); }

struct ComplexExpOp : ComplexUnary<ComplexExpOp> {
  TESSEL_OP(ComplexExp);
  template <class S>
  static void f(const S& xr, const S& xi, S& r, S& i) {
    const S m = t_exp(xr);
    r = m * t_cos(xi);
    i = m * t_sin(xi);
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    return {complex_mult(g, conj(s))};
  }
};
Formula complex_exp(const Formula& a) { return make(OpCode::ComplexExp, {a}); }

// ComplexReal (Im false) and ComplexImag (Im true), one template as the two mirror each other:
// the part of a Real2Complex or Imag2Complex is its argument or 0, and the adjoint of taking a
// part is putting it back as that part.
template <bool Im>
struct ComplexPart : ComplexToReal<ComplexPart<Im>> {
  static constexpr OpCode code = Im ? OpCode::ComplexImag : OpCode::ComplexReal;
  static constexpr const char* name = Im ? "ComplexImag" : "ComplexReal";
  template <class S>
  static S f(const S& xr, const S& xi) {
    return Im ? xi : xr;
  }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t>) {
    const OpCode op = a[0].node().op;
    if (op == (Im ? OpCode::Imag2Complex : OpCode::Real2Complex)) return arg(a[0], 0);
    if (op == OpCode::Real2Complex || op == OpCode::Imag2Complex) return zero(a[0].dim() / 2);
    return {};
  }
  static std::vector<Formula> vjp(const Formula&, const Formula& g) {
    return {Im ? imag2complex(g) : real2complex(g)};
  }
};

// Real2Complex (Im false) and Imag2Complex (Im true): x as the real or the imaginary part, the
// adjoints of ComplexReal and ComplexImag.
template <bool Im>
struct PartToComplex : RealToComplex<PartToComplex<Im>> {
  static constexpr OpCode code = Im ? OpCode::Imag2Complex : OpCode::Real2Complex;
  static constexpr const char* name = Im ? "Imag2Complex" : "Real2Complex";
  static constexpr bool zero_preserving = true;
  template <class S>
  static void f(const S& x, S& r, S& i) {
    r = Im ? S(0.0) : x;
    i = Im ? x : S(0.0);
  }
  static std::vector<Formula> vjp(const Formula&, const Formula& g) {
    return {Im ? complex_imag(g) : complex_real(g)};
  }
};
using ComplexRealOp = ComplexPart<false>;
using ComplexImagOp = ComplexPart<true>;
using Real2ComplexOp = PartToComplex<false>;
using Imag2ComplexOp = PartToComplex<true>;
Formula complex_real(const Formula& a) { return make(OpCode::ComplexReal, {a}); }
Formula complex_imag(const Formula& a) { return make(OpCode::ComplexImag, {a}); }
Formula real2complex(const Formula& a) { return make(OpCode::Real2Complex, {a}); }
Formula imag2complex(const Formula& a) { return make(OpCode::Imag2Complex, {a}); }

struct ComplexSquareAbsOp : ComplexToReal<ComplexSquareAbsOp> {
  TESSEL_OP(ComplexSquareAbs);
  template <class S>
  static S f(const S& xr, const S& xi) {
    return xr * xr + xi * xi;
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    return {complex_mult(real2complex(2.0 * g), arg(s, 0))};
  }
};
Formula complex_square_abs(const Formula& a) { return make(OpCode::ComplexSquareAbs, {a}); }

// |z|; its cotangent G z / |z| goes through Rsqrt, so it is 0 at z = 0 (PyTorch's sgn(0) = 0).
struct ComplexAbsOp : ComplexToReal<ComplexAbsOp> {
  TESSEL_OP(ComplexAbs);
  template <class S>
  static S f(const S& xr, const S& xi) {
    return t_sqrt(xr * xr + xi * xi);
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const Formula z = arg(s, 0);
    return {complex_mult(real2complex(g * rsqrt(complex_square_abs(z))), z)};
  }
};
Formula complex_abs(const Formula& a) { return make(OpCode::ComplexAbs, {a}); }

// atan2(im, re), 0 at z = 0. Its cotangent G i z / |z|^2 uses Rsqrt(|z|^2)^2, which is 0 at
// z = 0: PyTorch's angle backward gives 0 there too.
struct ComplexAngleOp : ComplexToReal<ComplexAngleOp> {
  TESSEL_OP(ComplexAngle);
  template <class S>
  static S f(const S& xr, const S& xi) {
    return t_atan2(xi, xr);
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const Formula z = arg(s, 0);
    return {complex_mult(imag2complex(g * square(rsqrt(complex_square_abs(z)))), z)};
  }
};
Formula complex_angle(const Formula& a) { return make(OpCode::ComplexAngle, {a}); }

// exp(i x) for a real x: (cos x, sin x). d/dx = (-sin x, cos x), i.e. Imag(G conj(self)).
struct ComplexExp1jOp : RealToComplex<ComplexExp1jOp> {
  TESSEL_OP(ComplexExp1j);
  template <class S>
  static void f(const S& x, S& r, S& i) {
    r = t_cos(x);
    i = t_sin(x);
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    return {complex_imag(complex_mult(g, conj(s)))};
  }
};
Formula complex_exp1j(const Formula& a) { return make(OpCode::ComplexExp1j, {a}); }

// A real scalar (dim 1) times a complex vector, in either order as KeOps accepts it.
struct ComplexRealScalOp {
  TESSEL_OP(ComplexRealScal);
  static constexpr int arity = 2;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    const int k = a[0].dim() == 1 ? 1 : 0;
    if (a[1 - k].dim() != 1)
      dim_error(name, "one argument must be a real scalar (dim 1); got dims " +
                          std::to_string(a[0].dim()) + " and " + std::to_string(a[1].dim()));
    return even_dim(name, a[k], "the complex argument");
  }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t>) {
    if (is_zero(a[0]) || is_zero(a[1])) return zero(std::max(a[0].dim(), a[1].dim()));
    return {};
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    const int k = n.args[0]->dim == 1 ? 1 : 0;
    for (int c = 0; c < n.dim; ++c) out[c] = a[1 - k][0] * a[k][c];
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const int k = arg(s, 0).dim() == 1 ? 1 : 0;
    Grads r(2);
    r[1 - k] = scalprod(arg(s, k), g);
    r[k] = arg(s, 1 - k) * g;
    return r;
  }
};
Formula complex_real_scal(const Formula& a, const Formula& b) {
  return make(OpCode::ComplexRealScal, {a, b});
}

// The sum of the complex components of a vector: one complex number (dim 2).
struct ComplexSumOp {
  TESSEL_OP(ComplexSum);
  static constexpr int arity = 1;
  static constexpr bool zero_preserving = true;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    even_dim(name, a[0], "the argument");
    return 2;
  }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t>) {
    return a[0].dim() == 2 ? a[0] : Formula{};
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    S r = a[0][0], i = a[0][1];
    for (int k = 2; k < n.args[0]->dim; k += 2) {
      r = r + a[0][k];
      i = i + a[0][k + 1];
    }
    out[0] = r;
    out[1] = i;
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    return {complex_sum_t(g, arg(s, 0).dim())};
  }
};
Formula complex_sum(const Formula& a) { return make(OpCode::ComplexSum, {a}); }

// ComplexSum's adjoint: one complex number repeated to a complex vector of dim `d` (reals).
struct ComplexSumTOp {
  TESSEL_OP(ComplexSumT);
  static constexpr int arity = 1, n_ip = 1;
  static constexpr bool zero_preserving = true;
  static int dim(std::span<const Formula> a, std::span<const int64_t> ip) {
    if (a[0].dim() != 2)
      dim_error(name, "the argument must have dim 2 (one complex number), got " +
                          std::to_string(a[0].dim()));
    const int d = checked_dim(name, ip[0]);
    if (d % 2 != 0) dim_error(name, "the output dim must be even, got " + std::to_string(d));
    return d;
  }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t> ip) {
    return ip[0] == 2 ? a[0] : Formula{};
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    for (int k = 0; k < n.dim; k += 2) {
      out[k] = a[0][0];
      out[k + 1] = a[0][1];
    }
  }
  static std::vector<Formula> vjp(const Formula&, const Formula& g) { return {complex_sum(g)}; }
};
Formula complex_sum_t(const Formula& a, int dim) { return make(OpCode::ComplexSumT, {a}, {dim}); }

void register_complex(std::vector<OpInfo>& t) {
  register_ops<ComplexAddOp, ComplexSubtractOp, ComplexMultOp, ComplexDivideOp, ConjOp,
               ComplexExpOp, ComplexRealOp, ComplexImagOp, ComplexSquareAbsOp, ComplexAbsOp,
               ComplexAngleOp, Real2ComplexOp, Imag2ComplexOp, ComplexExp1jOp, ComplexRealScalOp,
               ComplexSumOp, ComplexSumTOp>(t);
}

}  // namespace tessel
