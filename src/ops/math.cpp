// Elementwise math ops (transcendental, rounding, comparisons, conditionals) and their VJPs.
#include <array>
#include <cmath>
#include <numbers>

#include "ops/op.hpp"

namespace tessel {

namespace {

Formula x0(const Formula& self) { return arg(self, 0); }
Formula x1(const Formula& self) { return arg(self, 1); }
Formula x2(const Formula& self) { return arg(self, 2); }

// value(a) where `guard` != 0, and exactly 0 where guard == 0 (NaN guards stay NaN): a derivative
// whose limit at a singular point is 0 but whose formula there is 0 * inf. `value` reads `a` with
// `safe` in its place where guard == 0, so the branch not taken stays finite there, and so do the
// derivatives through it (its zero cotangent times a finite factor, not 0 * inf = NaN).
template <class F>
Formula zero_where_zero(const Formula& guard, const Formula& a, double safe, F value) {
  const Formula c = -abs(guard), v = value(ifelse(c, constant(safe), a));
  return ifelse(c, zero(v.dim()), v);
}

}  // namespace

struct ExpOp : Unary<ExpOp> {
  TESSEL_OP(Exp);
  template <class S> static S f(const Node&, const S& x) { return t_exp(x); }
  static Grads vjp(const Formula& s, const Formula& g) { return {g * s}; }
};
Formula exp(const Formula& a) { return make(OpCode::Exp, {a}); }

struct LogOp : Unary<LogOp> {
  TESSEL_OP(Log);
  template <class S> static S f(const Node&, const S& x) { return t_log(x); }
  static Grads vjp(const Formula& s, const Formula& g) { return {g / x0(s)}; }
};
Formula log(const Formula& a) { return make(OpCode::Log, {a}); }

struct XLogXOp : Unary<XLogXOp> {
  TESSEL_OP(XLogX);
  static constexpr bool zero_preserving = true;
  template <class S> static S f(const Node&, const S& x) {
    return t_eq(x, S(0.0), S(0.0), x * t_log(x));
  }
  static Grads vjp(const Formula& s, const Formula& g) { return {g * (log(x0(s)) + 1.0)}; }
};
Formula xlogx(const Formula& a) { return make(OpCode::XLogX, {a}); }

struct SqrtOp : Unary<SqrtOp> {
  TESSEL_OP(Sqrt);
  static constexpr bool zero_preserving = true;
  template <class S> static S f(const Node&, const S& x) { return t_sqrt(x); }
  static Grads vjp(const Formula& s, const Formula& g) {
    return {(0.5 * g) * rsqrt(x0(s))};  // through Rsqrt: 0 at 0, not 0.5 / 0
  }
};
Formula sqrt(const Formula& a) { return make(OpCode::Sqrt, {a}); }

struct RsqrtOp : Unary<RsqrtOp> {
  TESSEL_OP(Rsqrt);
  template <class S> static S f(const Node&, const S& x) { return t_rsqrt(x); }
  static Grads vjp(const Formula& s, const Formula& g) {
    return {(-0.5 * g) * pow(s, 3)};  // Rsqrt(x)^3, not Rsqrt(x) / x: 0 at 0, not 0 / 0
  }
};
Formula rsqrt(const Formula& a) { return make(OpCode::Rsqrt, {a}); }

struct InvOp : Unary<InvOp> {
  TESSEL_OP(Inv);
  template <class S> static S f(const Node&, const S& x) { return S(1.0) / x; }
  static Grads vjp(const Formula& s, const Formula& g) { return {-(g * square(s))}; }
};
Formula inv(const Formula& a) { return make(OpCode::Inv, {a}); }

struct PowOp : Unary<PowOp> {
  TESSEL_OP(Pow);
  static constexpr const char* method = "pow";  // also x ** n
  static constexpr int n_ip = 1;
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t> ip) {
    if (ip[0] == 0) return a[0].dim() == 1 ? int_cst(1) : zero(a[0].dim()) + 1.0;
    if (ip[0] == 1) return a[0];
    if (ip[0] == 2) return square(a[0]);
    if (ip[0] == -1) return inv(a[0]);
    return {};
  }
  template <class S> static S f(const Node& n, const S& x) {
    int64_t e = n.ip[0];
    const bool neg = e < 0;
    if (neg) e = -e;
    S r(1.0), b = x;
    bool first = true;
    while (e > 0) {  // square-and-multiply keeps the emitted code short
      if (e & 1) r = first ? b : r * b, first = false;
      e >>= 1;
      if (e) b = b * b;
    }
    return neg ? S(1.0) / r : r;
  }
  static Grads vjp(const Formula& s, const Formula& g) {
    const int64_t n = s.node().ip[0];
    return {(static_cast<double>(n) * g) * pow(x0(s), static_cast<int>(n - 1))};
  }
};
Formula pow(const Formula& a, int n) { return make(OpCode::Pow, {a}, {n}); }

struct PowfOp : Binary<PowfOp> {
  TESSEL_OP(Powf);
  static constexpr const char* method = "power";
  // C's pow (as KeOps, torch and NumPy): |x|^y carries the sign (-1)^y for an integer y and a
  // negative or -0 base, and is NaN for a finite negative base and a non-integer y. Exp(y Log x)
  // alone was NaN for every negative base. The IEEE cases exp(y log|x|) misses are selected:
  // pow(x, 0) = pow(1, y) = 1 (even NaN), pow(-1, +-inf) = 1, pow(-inf, 0.5) = +inf.
  template <class S> static S f(const Node&, const S& x, const S& y) {
    const S r = t_exp(y * t_log(t_abs(x))), h = y * S(0.5);
    const S integer = t_eq(t_floor(y), y, S(1.0), S(0.0));  // +-inf count as (even) integers
    const S signed_r = t_eq(integer, S(1.0), t_eq(t_floor(h), h, r, -r), r);
    // x - x != 0 only for x = -inf, where a non-integer y gives |x|^y; t_sqrt(x < 0) is NaN.
    const S neg = t_eq(integer, S(1.0), signed_r, t_eq(x - x, S(0.0), t_sqrt(x), r));
    const S zero = t_lt(S(1.0) / x, S(0.0), signed_r, r);  // x = -0 keeps an odd y's sign
    const S v = t_lt(x, S(0.0), neg, t_eq(x, S(0.0), zero, r));
    const S one_base = t_eq(x, S(1.0), S(1.0), t_eq(y, y, S(1.0), v));  // |x| = 1, y = +-inf
    const S v1 = t_eq(t_abs(x), S(1.0), t_eq(y - y, S(0.0), v, one_base), v);
    return t_eq(y, S(0.0), S(1.0), v1);
  }
  // d/dx = y x^(y-1) (not y s / x, which is 0 / 0 at x = 0): its limit at 0 for every y, and 0
  // for y = 0. d/dy = s log x, 0 where s = 0 (x = 0, y > 0), its limit there.
  static Grads vjp(const Formula& s, const Formula& g) {
    const Formula x = x0(s), y = x1(s);
    const Formula dx = zero_where_zero(y, y, 1.0, [&](const Formula& p) {
      return p * powf(x, p - 1.0);
    });
    const Formula dy = zero_where_zero(s, x, 1.0, [&](const Formula& b) { return s * log(b); });
    return {unbroadcast(g * dx, x.dim()), unbroadcast(g * dy, y.dim())};
  }
};
Formula powf(const Formula& a, const Formula& b) { return make(OpCode::Powf, {a, b}); }

struct SquareOp : Unary<SquareOp> {
  TESSEL_OP(Square);
  static constexpr bool zero_preserving = true;
  template <class S> static S f(const Node&, const S& x) { return x * x; }
  static Grads vjp(const Formula& s, const Formula& g) { return {2.0 * (g * x0(s))}; }
};
Formula square(const Formula& a) { return make(OpCode::Square, {a}); }

struct AbsOp : Unary<AbsOp> {
  TESSEL_OP(Abs);
  static constexpr bool zero_preserving = true;
  template <class S> static S f(const Node&, const S& x) { return t_abs(x); }
  static Grads vjp(const Formula& s, const Formula& g) { return {g * sign(x0(s))}; }
};
Formula abs(const Formula& a) { return make(OpCode::Abs, {a}); }

struct SignOp : Unary<SignOp> {
  TESSEL_OP(Sign);
  static constexpr bool zero_preserving = true;
  template <class S> static S f(const Node&, const S& x) {
    return t_lt(S(0.0), x, S(1.0), t_lt(x, S(0.0), S(-1.0), S(0.0)));
  }
  static constexpr auto vjp = no_grad;
};
Formula sign(const Formula& a) { return make(OpCode::Sign, {a}); }

struct StepOp : Unary<StepOp> {
  TESSEL_OP(Step);
  template <class S> static S f(const Node&, const S& x) {
    return t_lt(x, S(0.0), S(0.0), S(1.0));
  }
  static constexpr auto vjp = no_grad;
};
Formula step(const Formula& a) { return make(OpCode::Step, {a}); }

struct ReluOp : Unary<ReluOp> {
  TESSEL_OP(ReLU);
  static constexpr bool zero_preserving = true;
  template <class S> static S f(const Node&, const S& x) { return t_lt(x, S(0.0), S(0.0), x); }
  static Grads vjp(const Formula& s, const Formula& g) { return {g * step(x0(s))}; }
};
Formula relu(const Formula& a) { return make(OpCode::ReLU, {a}); }

struct SinOp : Unary<SinOp> {
  TESSEL_OP(Sin);
  static constexpr bool zero_preserving = true;
  template <class S> static S f(const Node&, const S& x) { return t_sin(x); }
  static Grads vjp(const Formula& s, const Formula& g) { return {g * cos(x0(s))}; }
};
Formula sin(const Formula& a) { return make(OpCode::Sin, {a}); }

struct CosOp : Unary<CosOp> {
  TESSEL_OP(Cos);
  template <class S> static S f(const Node&, const S& x) { return t_cos(x); }
  static Grads vjp(const Formula& s, const Formula& g) { return {-(g * sin(x0(s)))}; }
};
Formula cos(const Formula& a) { return make(OpCode::Cos, {a}); }

struct AsinOp : Unary<AsinOp> {
  TESSEL_OP(Asin);
  static constexpr bool zero_preserving = true;
  template <class S> static S f(const Node&, const S& x) { return t_asin(x); }
  static Grads vjp(const Formula& s, const Formula& g) { return {g * rsqrt(1.0 - square(x0(s)))}; }
};
Formula asin(const Formula& a) { return make(OpCode::Asin, {a}); }

struct AcosOp : Unary<AcosOp> {
  TESSEL_OP(Acos);
  template <class S> static S f(const Node&, const S& x) { return t_acos(x); }
  static Grads vjp(const Formula& s, const Formula& g) {
    return {-(g * rsqrt(1.0 - square(x0(s))))};
  }
};
Formula acos(const Formula& a) { return make(OpCode::Acos, {a}); }

struct AtanOp : Unary<AtanOp> {
  TESSEL_OP(Atan);
  static constexpr bool zero_preserving = true;
  template <class S> static S f(const Node&, const S& x) { return t_atan(x); }
  static Grads vjp(const Formula& s, const Formula& g) { return {g / (1.0 + square(x0(s)))}; }
};
Formula atan(const Formula& a) { return make(OpCode::Atan, {a}); }

// sin(x)/x, KeOps's SinXDivX, with its limit 1 at 0 (the normalised sinc, sinc(), is this op at
// pi x). Its derivative (cos x - sin(x)/x) / x cancels near 0 (relative error ~6 eps / x^2), so for
// |x| < 1 it is the Taylor series x P(x^2), sum_k (-1)^k 2k x^(2k-1) / (2k+1)!, to k = 9: the first
// omitted term is below 1.2e-18 of the sum there, and at |x| >= 1 the closed form loses at most
// ~6 eps. Each branch reads an input that the select replaces where it is not taken (1 and 0),
// so neither evaluates 0/0 or overflows and second derivatives stay finite (0 * NaN otherwise).
struct SinXDivXOp : Unary<SinXDivXOp> {
  TESSEL_OP(SinXDivX);
  template <class S> static S f(const Node&, const S& x) {
    return t_eq(x, S(0.0), S(1.0), t_sin(x) / x);
  }
  static Grads vjp(const Formula& s, const Formula& g) {
    const Formula x = x0(s), far = abs(x) - 1.0;
    const Formula xf = ifelse(far, x, constant(1.0)), xn = ifelse(far, constant(0.0), x);
    const Formula u = square(xn);
    Formula p;
    for (int k = 9; k >= 1; --k) {
      double f = 1.0;  // (2k+1)!, exact in double up to 19!
      for (int m = 2; m <= 2 * k + 1; ++m) f *= m;
      const double c = (k % 2 ? -2.0 : 2.0) * k / f;
      p = p.valid() ? p * u + c : constant(c);
    }
    const Formula near = xn * p, closed = (cos(xf) - s) / xf;
    return {g * ifelse(far, closed, near)};
  }
};
Formula sin_x_div_x(const Formula& a) { return make(OpCode::SinXDivX, {a}); }
// Named as NumPy, PyTorch and pykeops name it, so that C++ sinc(x) and Python's x.sinc() agree.
Formula sinc(const Formula& a) { return sin_x_div_x(std::numbers::pi * a); }

struct Atan2Op : Binary<Atan2Op> {
  TESSEL_OP(Atan2);
  template <class S> static S f(const Node&, const S& y, const S& x) { return t_atan2(y, x); }
  static Grads vjp(const Formula& s, const Formula& g) {
    const Formula y = x0(s), x = x1(s);
    // 1 / (x^2 + y^2) as Rsqrt(.)^2: 0 at the origin, where the gradient has no limit.
    const Formula r = g * square(rsqrt(square(x) + square(y)));
    return {unbroadcast(r * x, y.dim()), unbroadcast(-(r * y), x.dim())};
  }
};
Formula atan2(const Formula& y, const Formula& x) { return make(OpCode::Atan2, {y, x}); }

struct FloorOp : Unary<FloorOp> {
  TESSEL_OP(Floor);
  static constexpr bool zero_preserving = true;
  template <class S> static S f(const Node&, const S& x) { return t_floor(x); }
  static constexpr auto vjp = no_grad;
};
Formula floor(const Formula& a) { return make(OpCode::Floor, {a}); }

struct RoundOp : Unary<RoundOp> {
  TESSEL_OP(Round);  // Round(x, d): to d decimal places, halves away from zero
  static constexpr int n_ip = 1;
  static constexpr ParamSpec params{false, 0, 1, "decimals"};  // Round(x) is Round(x, 0)
  static std::vector<int64_t> encode(WrittenParams p) { return {p.empty() ? 0 : p[0][0]}; }
  static constexpr bool zero_preserving = true;
  template <class S> static S f(const Node& n, const S& x) {
    if (n.ip[0] == 0) return t_round(x);
    const double scale = std::pow(10.0, static_cast<double>(n.ip[0]));
    return t_round(x * S(scale)) * S(1.0 / scale);
  }
  static constexpr auto vjp = no_grad;
};
Formula round(const Formula& a) { return make(OpCode::Round, {a}, {0}); }

struct ModOp : Ternary<ModOp> {
  TESSEL_OP(Mod);  // Mod(a, n, d) = a - n * floor((a - d) / n), as in KeOps
  template <class S> static S f(const Node&, const S& a, const S& n, const S& d) {
    return a - n * t_floor((a - d) / n);
  }
  static Grads vjp(const Formula& s, const Formula& g) {
    const Formula a = x0(s), n = x1(s), d = x2(s);
    return {unbroadcast(g, a.dim()), unbroadcast(-(g * floor((a - d) / n)), n.dim()), Formula{}};
  }
};
Formula mod(const Formula& a, const Formula& n, const Formula& d) {
  return make(OpCode::Mod, {a, n, d});
}

struct ClampOp : Ternary<ClampOp> {
  TESSEL_OP(Clamp);
  template <class S> static S f(const Node&, const S& x, const S& lo, const S& hi) {
    return t_lt(x, lo, lo, t_lt(hi, x, hi, x));
  }
  static Grads vjp(const Formula& s, const Formula& g) {
    const Formula x = x0(s), lo = x1(s), hi = x2(s);
    const Formula glo = g * less(x, lo), ghi = g * (greater(x, hi) * (1.0 - less(x, lo)));
    return {unbroadcast(g - glo - ghi, x.dim()), unbroadcast(glo, lo.dim()),
            unbroadcast(ghi, hi.dim())};
  }
};
Formula clamp(const Formula& a, const Formula& lo, const Formula& hi) {
  return make(OpCode::Clamp, {a, lo, hi});
}

struct ClampIntOp : Unary<ClampIntOp> {
  TESSEL_OP(ClampInt);
  static constexpr int n_ip = 2;
  template <class S> static S f(const Node& n, const S& x) {
    const S lo(static_cast<double>(n.ip[0])), hi(static_cast<double>(n.ip[1]));
    return t_lt(x, lo, lo, t_lt(hi, x, hi, x));
  }
  static Grads vjp(const Formula& s, const Formula& g) {
    const int lo = static_cast<int>(s.node().ip[0]), hi = static_cast<int>(s.node().ip[1]);
    return {g * diff_clampint(x0(s), lo, hi)};
  }
};
Formula clampint(const Formula& a, int lo, int hi) {
  if (lo > hi) detail::fail("ClampInt", "lower bound ", lo, " is above upper bound ", hi);
  return make(OpCode::ClampInt, {a}, {lo, hi});
}

struct IfElseOp : Ternary<IfElseOp> {
  // IfElse(c, a, b) = c >= 0 ? a : b, as KeOps: a NaN condition selects b.
  TESSEL_OP(IfElse);
  template <class S> static S f(const Node&, const S& c, const S& a, const S& b) {
    return t_le(S(0.0), c, a, b);
  }
  // The cotangent is selected, not multiplied by a 0/1 mask: an infinite g would give inf * 0 =
  // NaN to the branch not taken.
  static Grads vjp(const Formula& s, const Formula& g) {
    const Formula c = x0(s), a = x1(s), b = x2(s), z = zero(g.dim());
    return {Formula{}, unbroadcast(ifelse(c, g, z), a.dim()),
            unbroadcast(ifelse(c, z, g), b.dim())};
  }
};
Formula ifelse(const Formula& c, const Formula& a, const Formula& b) {
  return make(OpCode::IfElse, {c, a, b});
}

struct ElemMinOp : Binary<ElemMinOp> {
  TESSEL_OP(ElemMin);
  template <class S> static S f(const Node&, const S& a, const S& b) { return t_lt(a, b, a, b); }
  static Grads vjp(const Formula& s, const Formula& g) {
    const Formula a = x0(s), b = x1(s), ga = g * less(a, b);
    return {unbroadcast(ga, a.dim()), unbroadcast(g - ga, b.dim())};
  }
};
Formula elem_min(const Formula& a, const Formula& b) { return make(OpCode::ElemMin, {a, b}); }

struct ElemMaxOp : Binary<ElemMaxOp> {
  TESSEL_OP(ElemMax);
  template <class S> static S f(const Node&, const S& a, const S& b) { return t_lt(b, a, a, b); }
  static Grads vjp(const Formula& s, const Formula& g) {
    const Formula a = x0(s), b = x1(s), ga = g * less(b, a);
    return {unbroadcast(ga, a.dim()), unbroadcast(g - ga, b.dim())};
  }
};
Formula elem_max(const Formula& a, const Formula& b) { return make(OpCode::ElemMax, {a, b}); }

// Comparisons give 1 or 0 through one selection each (NaN compares false) and have no derivative.
enum class Cmp { Less, LessEq, Greater, GreaterEq, Equal, NotEqual };
template <Cmp K>
struct CompareOp : Binary<CompareOp<K>> {
  static constexpr OpCode code = std::array{OpCode::Less,      OpCode::LessEq, OpCode::Greater,
                                            OpCode::GreaterEq, OpCode::Equal,  OpCode::NotEqual}
      [static_cast<int>(K)];
  static constexpr const char* name = std::array{"Less",      "LessEq", "Greater",
                                                 "GreaterEq", "Equal",  "NotEqual"}
      [static_cast<int>(K)];
  static constexpr const char* also =
      std::array{"LessThan", "LessOrEqual", "", "", "", ""}[static_cast<int>(K)];
  template <class S> static S f(const Node&, const S& a, const S& b) {
    const S one(1.0), zero(0.0);
    if constexpr (K == Cmp::Less) return t_lt(a, b, one, zero);
    if constexpr (K == Cmp::LessEq) return t_le(a, b, one, zero);
    if constexpr (K == Cmp::Greater) return t_lt(b, a, one, zero);
    if constexpr (K == Cmp::GreaterEq) return t_le(b, a, one, zero);
    if constexpr (K == Cmp::Equal) return t_eq(a, b, one, zero);
    if constexpr (K == Cmp::NotEqual) return t_eq(a, b, zero, one);
  }
  static constexpr auto vjp = no_grad;
};
Formula less(const Formula& a, const Formula& b) { return make(OpCode::Less, {a, b}); }
Formula less_eq(const Formula& a, const Formula& b) { return make(OpCode::LessEq, {a, b}); }
Formula greater(const Formula& a, const Formula& b) { return make(OpCode::Greater, {a, b}); }
Formula greater_eq(const Formula& a, const Formula& b) { return make(OpCode::GreaterEq, {a, b}); }
Formula equal(const Formula& a, const Formula& b) { return make(OpCode::Equal, {a, b}); }
Formula not_equal(const Formula& a, const Formula& b) { return make(OpCode::NotEqual, {a, b}); }

void register_math(std::vector<OpInfo>& t) {
  register_ops<ExpOp, LogOp, XLogXOp, SqrtOp, RsqrtOp, InvOp, PowOp, PowfOp, SquareOp, AbsOp,
               SignOp, StepOp, ReluOp, SinOp, CosOp, AsinOp, AcosOp, AtanOp, SinXDivXOp, Atan2Op,
               FloorOp, RoundOp, ModOp, ClampOp, ClampIntOp, IfElseOp, ElemMinOp, ElemMaxOp,
               CompareOp<Cmp::Less>, CompareOp<Cmp::LessEq>, CompareOp<Cmp::Greater>,
               CompareOp<Cmp::GreaterEq>, CompareOp<Cmp::Equal>, CompareOp<Cmp::NotEqual>>(t);
}

}  // namespace tessel
