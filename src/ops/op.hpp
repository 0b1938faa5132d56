// The op table: each op's dim rule, simplification, evaluation (generic over a scalar type) and VJP.
//
// An op is written once as `template <class S> apply(node, args, out)` over a "scalar" S that is
// one of: double (the float64 reference), Lanes (the tile interpreter) and Expr (code generation:
// operations on Expr emit source text). That is how a new op touches one place.
#pragma once

#include <array>
#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ir/node.hpp"
#include "tessel/error.hpp"

namespace tessel {

// ---- the scalar vocabulary every S provides (double's version here) ------------------------------
inline double t_exp(double a) { return std::exp(a); }
inline double t_log(double a) { return std::log(a); }
inline double t_sqrt(double a) { return std::sqrt(a); }
// Rsqrt(0) = 0, as in KeOps: the derivatives of Sqrt, Norm2 and Normalize are written through it,
// so they vanish at 0 instead of giving 0 * inf = NaN (docs/conventions.md).
inline double t_rsqrt(double a) { return a == 0.0 ? 0.0 : 1.0 / std::sqrt(a); }
inline double t_sin(double a) { return std::sin(a); }
inline double t_cos(double a) { return std::cos(a); }
inline double t_asin(double a) { return std::asin(a); }
inline double t_acos(double a) { return std::acos(a); }
inline double t_atan(double a) { return std::atan(a); }
inline double t_atan2(double y, double x) { return std::atan2(y, x); }
inline double t_floor(double a) { return std::floor(a); }
inline double t_round(double a) { return std::round(a); }
inline double t_abs(double a) { return std::fabs(a); }
// min/max return the second operand when the first is NaN, like the SIMD instructions
inline double t_min(double a, double b) { return a < b ? a : b; }
inline double t_max(double a, double b) { return a > b ? a : b; }
// selections: (a < b) ? x : y, (a <= b) ? x : y, (a == b) ? x : y
inline double t_lt(double a, double b, double x, double y) { return a < b ? x : y; }
inline double t_le(double a, double b, double x, double y) { return a <= b ? x : y; }
inline double t_eq(double a, double b, double x, double y) { return a == b ? x : y; }

// ---- the tile interpreter's scalar: a fixed number of lanes of double ----------------------------
constexpr int kLanes = 32;
struct Lanes {
  std::array<double, kLanes> v;
  Lanes() = default;
  Lanes(double c) { v.fill(c); }  // NOLINT: constants broadcast implicitly, as in generated code
};
#define TESSEL_LANES_UN(name, expr)                 \
  inline Lanes name(const Lanes& a) {               \
    Lanes r;                                        \
    for (int l = 0; l < kLanes; ++l) {              \
      double x = a.v[l];                            \
      r.v[l] = (expr);                              \
    }                                               \
    return r;                                       \
  }
#define TESSEL_LANES_BIN(name, expr)                \
  inline Lanes name(const Lanes& a, const Lanes& b) { \
    Lanes r;                                        \
    for (int l = 0; l < kLanes; ++l) {              \
      double x = a.v[l], y = b.v[l];                \
      r.v[l] = (expr);                              \
    }                                               \
    return r;                                       \
  }
TESSEL_LANES_BIN(operator+, x + y)
TESSEL_LANES_BIN(operator-, x - y)
TESSEL_LANES_BIN(operator*, x* y)
TESSEL_LANES_BIN(operator/, x / y)
TESSEL_LANES_UN(operator-, -x)
TESSEL_LANES_UN(t_exp, std::exp(x))
TESSEL_LANES_UN(t_log, std::log(x))
TESSEL_LANES_UN(t_sqrt, std::sqrt(x))
TESSEL_LANES_UN(t_rsqrt, x == 0.0 ? 0.0 : 1.0 / std::sqrt(x))
TESSEL_LANES_UN(t_sin, std::sin(x))
TESSEL_LANES_UN(t_cos, std::cos(x))
TESSEL_LANES_UN(t_asin, std::asin(x))
TESSEL_LANES_UN(t_acos, std::acos(x))
TESSEL_LANES_UN(t_atan, std::atan(x))
TESSEL_LANES_UN(t_floor, std::floor(x))
TESSEL_LANES_UN(t_round, std::round(x))
TESSEL_LANES_UN(t_abs, std::fabs(x))
TESSEL_LANES_BIN(t_atan2, std::atan2(x, y))
TESSEL_LANES_BIN(t_min, x < y ? x : y)
TESSEL_LANES_BIN(t_max, x > y ? x : y)
#undef TESSEL_LANES_UN
#undef TESSEL_LANES_BIN
#define TESSEL_LANES_SEL(name, cmp)                                                       \
  inline Lanes name(const Lanes& a, const Lanes& b, const Lanes& x, const Lanes& y) {     \
    Lanes r;                                                                              \
    for (int l = 0; l < kLanes; ++l) r.v[l] = (a.v[l] cmp b.v[l]) ? x.v[l] : y.v[l];      \
    return r;                                                                             \
  }
TESSEL_LANES_SEL(t_lt, <)
TESSEL_LANES_SEL(t_le, <=)
TESSEL_LANES_SEL(t_eq, ==)
#undef TESSEL_LANES_SEL

// ---- code generation's scalar: operations append statements to the current emitter -------------
class Emitter;
struct Expr {
  std::string s;  // a temporary's name or a literal
  Expr() = default;
  Expr(double c);  // NOLINT: a literal broadcast to the lane vector
  explicit Expr(std::string name) : s(std::move(name)) {}
};
Expr operator+(const Expr& a, const Expr& b);
Expr operator-(const Expr& a, const Expr& b);
Expr operator*(const Expr& a, const Expr& b);
Expr operator/(const Expr& a, const Expr& b);
Expr operator-(const Expr& a);
Expr t_exp(const Expr& a);
Expr t_log(const Expr& a);
Expr t_sqrt(const Expr& a);
Expr t_rsqrt(const Expr& a);
Expr t_sin(const Expr& a);
Expr t_cos(const Expr& a);
Expr t_asin(const Expr& a);
Expr t_acos(const Expr& a);
Expr t_atan(const Expr& a);
Expr t_atan2(const Expr& y, const Expr& x);
Expr t_floor(const Expr& a);
Expr t_round(const Expr& a);
Expr t_abs(const Expr& a);
Expr t_min(const Expr& a, const Expr& b);
Expr t_max(const Expr& a, const Expr& b);
Expr t_lt(const Expr& a, const Expr& b, const Expr& x, const Expr& y);
Expr t_le(const Expr& a, const Expr& b, const Expr& x, const Expr& y);
Expr t_eq(const Expr& a, const Expr& b, const Expr& x, const Expr& y);

// ---- the table -------------------------------------------------------------------------------------
template <class S>
using ApplyFn = void (*)(const Node& n, const S* const* args, S* out);

using DimFn = int (*)(std::span<const Formula> args, std::span<const int64_t> ip);
// Returns an equivalent simpler formula, or an invalid one when no rule applies.
using SimplifyFn = Formula (*)(std::span<const Formula> args, std::span<const int64_t> ip);
// Gradient of <self, g> with respect to each argument; an invalid formula means zero.
using VjpFn = std::vector<Formula> (*)(const Formula& self, const Formula& g);

struct OpInfo {
  OpCode code = OpCode::Count_;
  const char* name = nullptr;  // KeOps text name
  int arity = 0;               // number of formula arguments
  int n_ip = 0;                // number of integer parameters (TensorDot: variable)
  const char* infix = nullptr;  // "+", "-", "*", "/", "|" for operators printed infix
  bool zero_preserving = false;  // f(0) = 0 (unary ops): Zero in gives Zero out
  DimFn dim = nullptr;
  SimplifyFn simplify = nullptr;
  VjpFn vjp = nullptr;
  ApplyFn<double> apply_d = nullptr;
  ApplyFn<Lanes> apply_l = nullptr;
  ApplyFn<Expr> apply_e = nullptr;
};

const OpInfo& op_info(OpCode code);
const OpInfo* op_by_name(const std::string& name);  // nullptr when unknown

// Builds a node through the table: checks arity and dims, simplifies, interns.
Formula make(OpCode code, std::vector<Formula> args, std::vector<int64_t> ip = {});

// Fills an OpInfo from a struct with static members name, arity, dim, vjp and template apply<S>.
template <class Impl>
OpInfo describe(OpCode code) {
  OpInfo o;
  o.code = code;
  o.name = Impl::name;
  o.arity = Impl::arity;
  o.dim = Impl::dim;
  o.vjp = Impl::vjp;
  o.apply_d = &Impl::template apply<double>;
  o.apply_l = &Impl::template apply<Lanes>;
  o.apply_e = &Impl::template apply<Expr>;
  if constexpr (requires { Impl::n_ip; }) o.n_ip = Impl::n_ip;
  if constexpr (requires { Impl::infix; }) o.infix = Impl::infix;
  if constexpr (requires { Impl::zero_preserving; }) o.zero_preserving = Impl::zero_preserving;
  if constexpr (requires { Impl::simplify; }) o.simplify = Impl::simplify;
  return o;
}

// Registration hooks, one per op family file.
void register_arith(std::vector<OpInfo>& t);
void register_math(std::vector<OpInfo>& t);
void register_vector(std::vector<OpInfo>& t);
void register_tensor(std::vector<OpInfo>& t);

// ---- helpers shared by op definitions ------------------------------------------------------------
[[noreturn]] void dim_error(const char* op, const std::string& what);
// The largest dim a formula may have. Dims are C ints and kernels unroll over components, so dim
// rules that add or multiply dims compute in 64 bits and narrow through checked_dim.
constexpr int64_t kMaxDim = int64_t{1} << 24;
int checked_dim(const char* op, int64_t d);
int broadcast_dim(const char* op, int a, int b);  // dims equal or one of them 1
int same_dim(const char* op, int a, int b);        // dims must be equal
// Sums a gradient computed at the broadcast dim back to an argument's dim.
Formula unbroadcast(const Formula& g, int target_dim);
bool is_const(const Formula& f, double* value = nullptr);
bool is_zero(const Formula& f);
bool is_one(const Formula& f);

// Argument k of a formula, as a handle.
inline Formula arg(const Formula& f, int k) { return Formula(f.node().args[k]); }

// Elementwise application with dim-1 broadcasting: component c of an argument of dim 1 is its 0.
template <class S, class F>
void ew1(const Node& n, const S* const* a, S* out, F f) {
  for (int c = 0; c < n.dim; ++c) out[c] = f(a[0][c]);
}
template <class S, class F>
void ew2(const Node& n, const S* const* a, S* out, F f) {
  const bool b0 = n.args[0]->dim == 1, b1 = n.args[1]->dim == 1;
  for (int c = 0; c < n.dim; ++c) out[c] = f(a[0][b0 ? 0 : c], a[1][b1 ? 0 : c]);
}
template <class S, class F>
void ew3(const Node& n, const S* const* a, S* out, F f) {
  const bool b0 = n.args[0]->dim == 1, b1 = n.args[1]->dim == 1, b2 = n.args[2]->dim == 1;
  for (int c = 0; c < n.dim; ++c)
    out[c] = f(a[0][b0 ? 0 : c], a[1][b1 ? 0 : c], a[2][b2 ? 0 : c]);
}
// Dim rules shared by many ops.
inline int dim_same_as_arg(std::span<const Formula> a, std::span<const int64_t>) {
  return a[0].dim();
}
inline int dim_scalar(std::span<const Formula>, std::span<const int64_t>) { return 1; }

}  // namespace tessel
