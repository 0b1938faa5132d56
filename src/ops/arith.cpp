// Arithmetic ops (+ - * / and negation) with broadcasting, their simplification rules and VJPs.
#include "ops/op.hpp"

namespace tessel {

struct AddOp : Binary<AddOp> {
  TESSEL_OP(Add);
  static constexpr const char* infix = "+", *method = "";
  template <class S> static S f(const Node&, const S& x, const S& y) { return x + y; }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t>) {
    const int d = broadcast_dim(name, a[0].dim(), a[1].dim());
    if (is_zero(a[0]) && a[1].dim() == d) return a[1];
    if (is_zero(a[1]) && a[0].dim() == d) return a[0];
    if (a[1].node().op == OpCode::Neg) return a[0] - arg(a[1], 0);
    return {};
  }
  static std::vector<Formula> vjp(const Formula& self, const Formula& g) {
    return {unbroadcast(g, arg(self, 0).dim()), unbroadcast(g, arg(self, 1).dim())};
  }
};
Formula operator+(const Formula& a, const Formula& b) { return make(OpCode::Add, {a, b}); }

struct SubOp : Binary<SubOp> {
  TESSEL_OP_NAMED(Sub, "Subtract");
  static constexpr const char* infix = "-", *method = "";
  template <class S> static S f(const Node&, const S& x, const S& y) { return x - y; }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t>) {
    const int d = broadcast_dim(name, a[0].dim(), a[1].dim());
    if (is_zero(a[1]) && a[0].dim() == d) return a[0];
    if (is_zero(a[0]) && a[1].dim() == d) return -a[1];
    if (a[0].same(a[1])) return zero(d);
    return {};
  }
  static std::vector<Formula> vjp(const Formula& self, const Formula& g) {
    return {unbroadcast(g, arg(self, 0).dim()), unbroadcast(-g, arg(self, 1).dim())};
  }
};
Formula operator-(const Formula& a, const Formula& b) { return make(OpCode::Sub, {a, b}); }

struct MulOp : Binary<MulOp> {
  TESSEL_OP_NAMED(Mul, "Mult");
  static constexpr const char* infix = "*", *method = "";
  template <class S> static S f(const Node&, const S& x, const S& y) { return x * y; }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t>) {
    const int d = broadcast_dim(name, a[0].dim(), a[1].dim());
    if (is_zero(a[0]) || is_zero(a[1])) return zero(d);
    if (is_one(a[0]) && a[1].dim() == d) return a[1];
    if (is_one(a[1]) && a[0].dim() == d) return a[0];
    double v;
    if (is_const(a[0], &v) && v == -1.0 && a[1].dim() == d) return -a[1];
    if (is_const(a[1], &v) && v == -1.0 && a[0].dim() == d) return -a[0];
    if (a[0].same(a[1])) return square(a[0]);
    // Keep constants on the left and merge c1 * (c2 * x): derivatives produce many of these.
    if (is_const(a[1]) && !is_const(a[0])) return a[1] * a[0];
    double c;
    if (is_const(a[0], &c) && a[1].node().op == OpCode::Mul && a[1].node().args[0]->is_const())
      return constant(c * a[1].node().args[0]->value) * arg(a[1], 1);
    return {};
  }
  static std::vector<Formula> vjp(const Formula& self, const Formula& g) {
    const Formula x = arg(self, 0), y = arg(self, 1);
    return {unbroadcast(g * y, x.dim()), unbroadcast(g * x, y.dim())};
  }
};
Formula operator*(const Formula& a, const Formula& b) { return make(OpCode::Mul, {a, b}); }

struct DivOp : Binary<DivOp> {
  TESSEL_OP_NAMED(Div, "Divide");
  static constexpr const char* infix = "/", *method = "";
  template <class S> static S f(const Node&, const S& x, const S& y) { return x / y; }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t>) {
    const int d = broadcast_dim(name, a[0].dim(), a[1].dim());
    if (is_zero(a[0])) return zero(d);
    if (is_one(a[1]) && a[0].dim() == d) return a[0];
    if (is_one(a[0]) && a[1].dim() == d) return inv(a[1]);
    // x / u with u uniform over i and j: one reciprocal outside the loop, a product inside.
    if (a[0].node().varies && !a[1].node().varies && !is_const(a[1])) return a[0] * inv(a[1]);
    return {};
  }
  static std::vector<Formula> vjp(const Formula& self, const Formula& g) {
    const Formula x = arg(self, 0), y = arg(self, 1);
    return {unbroadcast(g / y, x.dim()), unbroadcast(-(g * self) / y, y.dim())};
  }
};
Formula operator/(const Formula& a, const Formula& b) { return make(OpCode::Div, {a, b}); }

struct NegOp : Unary<NegOp> {
  TESSEL_OP_NAMED(Neg, "Minus");
  static constexpr const char* method = "minus";  // also -x
  static constexpr bool zero_preserving = true;
  template <class S> static S f(const Node&, const S& x) { return -x; }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t>) {
    if (a[0].node().op == OpCode::Neg) return arg(a[0], 0);
    return {};
  }
  static std::vector<Formula> vjp(const Formula&, const Formula& g) { return {-g}; }
};
Formula operator-(const Formula& a) { return make(OpCode::Neg, {a}); }

void register_arith(std::vector<OpInfo>& t) {
  register_ops<AddOp, SubOp, MulOp, DivOp, NegOp>(t);
}

Formula operator+(const Formula& a, double b) { return a + constant(b); }
Formula operator+(double a, const Formula& b) { return constant(a) + b; }
Formula operator-(const Formula& a, double b) { return a - constant(b); }
Formula operator-(double a, const Formula& b) { return constant(a) - b; }
Formula operator*(const Formula& a, double b) { return a * constant(b); }
Formula operator*(double a, const Formula& b) { return constant(a) * b; }
Formula operator/(const Formula& a, double b) { return a / constant(b); }
Formula operator/(double a, const Formula& b) { return constant(a) / b; }

}  // namespace tessel
