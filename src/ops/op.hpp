// The op table: each op's dim rule, simplification, evaluation (generic over a scalar type) and VJP.
//
// An op is written once as `template <class S> apply(node, args, out)` over a "scalar" S that is
// one of: double (the float64 reference), Lanes (the tile interpreter) and Expr (code generation:
// operations on Expr emit source text), using the primitives declared below. That is how a new op
// touches one place: its struct, builder and register_ops entry in its family file (ops/*.cpp),
// plus its OpCode (ir/node.hpp) and its builder's declaration (include/tessel/formula.hpp).
// How its parameters are written (ParamSpec: integers or tuples, how many, defaults through
// `encode`) sits in the struct too: the parser, make_op and Python read it from the table.
// Python reads the op table (`_core.op_table()`), so needs no edit; the C++ tests fail
// until the op has a value case (tests/cpp/op_cases.hpp) and a kernel sample (test_compiled.cpp).
#pragma once

#include <array>
#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "ir/node.hpp"
#include "tessel/error.hpp"

// ---- the math primitives every scalar type provides, declared once as X-macro lists -------------
// Op definitions (ops/*.cpp) are written over a scalar S and call these as t_<name>. Each list
// entry X(name, arity, value) generates the float64 form t_<name>(double...) (the reference),
// the interpreter's lane form, the declaration of the code-generation form (codegen/emitter.cpp
// defines it as a call of v_<name>). `value` is the float64 result, written in lanes x, y, z, w.
//
// Two lists, by how the kernels implement v_<name>:
// - TESSEL_KERNEL_PRIMITIVES: hand-vectorised in each kernel prelude (codegen/cpu_prelude.cpp, the
//   CUDA prelude in codegen/cuda_codegen.cpp), because they are hot (exp, log) or need care there.
// - TESSEL_LIBM_PRIMITIVES: a libm function of the same name (arity 1 or 2), which both preludes
//   generate from this list (the CPU one lane by lane). A new libm function is one line here and
//   nothing else; an op written from existing primitives (SinXDivX) needs no line at all.
//
// Rsqrt(0) = 0, as in KeOps: the derivatives of Sqrt, Norm2 and Normalize are written through it,
// so they vanish at 0 instead of giving 0 * inf = NaN (docs/conventions.md). min/max return the
// second operand when the first is NaN, like the SIMD instructions. lt/le/eq are selections:
// (x < y) ? z : w and so on.
#define TESSEL_KERNEL_PRIMITIVES(X)                \
  X(exp, 1, std::exp(x))                           \
  X(log, 1, std::log(x))                           \
  X(sqrt, 1, std::sqrt(x))                         \
  X(rsqrt, 1, x == 0.0 ? 0.0 : 1.0 / std::sqrt(x)) \
  X(floor, 1, std::floor(x))                       \
  X(round, 1, std::round(x))                       \
  X(abs, 1, std::fabs(x))                          \
  X(min, 2, x < y ? x : y)                         \
  X(max, 2, x > y ? x : y)                         \
  X(lt, 4, x < y ? z : w)                          \
  X(le, 4, x <= y ? z : w)                         \
  X(eq, 4, x == y ? z : w)

// Rare in kernel formulas, and libm's are correctly rounded or nearly so: called lane by lane.
#define TESSEL_LIBM_PRIMITIVES(X) \
  X(sin, 1, std::sin(x))          \
  X(cos, 1, std::cos(x))          \
  X(asin, 1, std::asin(x))        \
  X(acos, 1, std::acos(x))        \
  X(atan, 1, std::atan(x))        \
  X(atan2, 2, std::atan2(x, y))

#define TESSEL_PRIMITIVES(X) TESSEL_KERNEL_PRIMITIVES(X) TESSEL_LIBM_PRIMITIVES(X)

// Parameter lists by arity, for the generated signatures: TESSEL_PARAMS_<arity>(type).
#define TESSEL_PARAMS_1(T) T x
#define TESSEL_PARAMS_2(T) T x, T y
#define TESSEL_PARAMS_4(T) T x, T y, T z, T w

#define TESSEL_ARGS_1 x
#define TESSEL_ARGS_2 x, y
#define TESSEL_ARGS_4 x, y, z, w

namespace tessel {

// ---- the float64 reference's scalar: double ------------------------------------------------------
#define TESSEL_DOUBLE_PRIMITIVE(name, ar, value) \
  inline double t_##name(TESSEL_PARAMS_##ar(double)) { return (value); }
TESSEL_PRIMITIVES(TESSEL_DOUBLE_PRIMITIVE)
#undef TESSEL_DOUBLE_PRIMITIVE

// ---- the tile interpreter's scalar: a fixed number of lanes of double ----------------------------
constexpr int kLanes = 32;
struct Lanes {
  std::array<double, kLanes> v;
  Lanes() = default;
  Lanes(double c) { v.fill(c); }  // NOLINT: constants broadcast implicitly, as in generated code
};
// f applied lane by lane.
template <class F, class... A>
inline Lanes lanewise(F f, const A&... a) {
  Lanes r;
  for (int l = 0; l < kLanes; ++l) r.v[l] = f(a.v[l]...);
  return r;
}
inline Lanes operator+(const Lanes& a, const Lanes& b) {
  return lanewise([](double x, double y) { return x + y; }, a, b);
}
inline Lanes operator-(const Lanes& a, const Lanes& b) {
  return lanewise([](double x, double y) { return x - y; }, a, b);
}
inline Lanes operator*(const Lanes& a, const Lanes& b) {
  return lanewise([](double x, double y) { return x * y; }, a, b);
}
inline Lanes operator/(const Lanes& a, const Lanes& b) {
  return lanewise([](double x, double y) { return x / y; }, a, b);
}
inline Lanes operator-(const Lanes& a) {
  return lanewise([](double x) { return -x; }, a);
}
#define TESSEL_LANES_PRIMITIVE(name, ar, value)                              \
  inline Lanes t_##name(TESSEL_PARAMS_##ar(const Lanes&)) {                  \
    return lanewise([](auto... v) { return t_##name(v...); }, TESSEL_ARGS_##ar); \
  }
TESSEL_PRIMITIVES(TESSEL_LANES_PRIMITIVE)
#undef TESSEL_LANES_PRIMITIVE

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
#define TESSEL_EXPR_PRIMITIVE(name, ar, value) Expr t_##name(TESSEL_PARAMS_##ar(const Expr&));
TESSEL_PRIMITIVES(TESSEL_EXPR_PRIMITIVE)
#undef TESSEL_EXPR_PRIMITIVE

// ---- the table -------------------------------------------------------------------------------------
template <class S>
using ApplyFn = void (*)(const Node& n, const S* const* args, S* out);

using DimFn = int (*)(std::span<const Formula> args, std::span<const int64_t> ip);
// Returns an equivalent simpler formula, or an invalid one when no rule applies.
using SimplifyFn = Formula (*)(std::span<const Formula> args, std::span<const int64_t> ip);
// Gradient of <self, g> with respect to each argument; an invalid formula means zero.
using Grads = std::vector<Formula>;
using VjpFn = Grads (*)(const Formula& self, const Formula& g);

// How a caller writes an op's parameters (the text syntax, make_op and Python's generated
// methods all read this): integers, or tuples of integers (TensorDot's axes), `min` to `max` of
// them (-1: the op's n_ip, all given). `names` (space-separated, pykeops's where it has them)
// name them in Python's keyword arguments.
struct ParamSpec {
  bool tuples = false;
  int min = -1, max = -1;
  const char* names = "";
};
// The parameters as written, one vector each (an integer is a vector of one).
using WrittenParams = std::span<const std::vector<int64_t>>;
// The node's integer parameters from the written ones: defaults, and tuples encoded (TensorDot).
using EncodeFn = std::vector<int64_t> (*)(WrittenParams);
// A composite's builder: a table entry with no node of its own (Kron builds a TensorDot).
using BuildFn = Formula (*)(std::span<const Formula> args, WrittenParams);

struct OpInfo {
  OpCode code = OpCode::Count_;
  const char* name = nullptr;  // KeOps text name
  // Other spellings the parser accepts (KeOps's names where tessel's differ), space-separated;
  // the printer writes `name`.
  const char* also = nullptr;
  int arity = 0;               // number of formula arguments
  int n_ip = 0;                // number of integer parameters (TensorDot: variable)
  const char* infix = nullptr;  // "+", "-", "*", "/", "|" for operators printed infix
  // The Python method name when it is not the lower-case name ("" when none: infix ops and
  // internal derivative ops).
  const char* method = nullptr;
  bool zero_preserving = false;  // f(0) = 0 (unary ops): Zero in gives Zero out
  ParamSpec params;               // as written; min and max are filled in by describe()
  EncodeFn encode = nullptr;      // null: the node's parameters are the integers as written
  BuildFn build = nullptr;        // set for composites only (code Count_, no apply)
  DimFn dim = nullptr;
  SimplifyFn simplify = nullptr;
  VjpFn vjp = nullptr;
  ApplyFn<double> apply_d = nullptr;
  ApplyFn<Lanes> apply_l = nullptr;
  ApplyFn<Expr> apply_e = nullptr;
};

const OpInfo& op_info(OpCode code);
// An op or a composite by its text name or another spelling; nullptr when unknown.
const OpInfo* op_by_name(const std::string& name);
// The composites (Kron), after the ops in op_table().
const std::vector<OpInfo>& composites();

// Op or composite `o` on its arguments and its parameters as written, checked against its
// ParamSpec: the one way the parser, make_op and the Python builders build a named op.
Formula make_written(const OpInfo& o, std::vector<Formula> args, WrittenParams params);

// Builds a node through the table: checks arity and dims, simplifies, interns.
Formula make(OpCode code, std::vector<Formula> args, std::vector<int64_t> ip = {});

// Fills an OpInfo from a struct with static members code, name, arity, dim, vjp and template
// apply<S>, or, for a composite, name, arity, params and build; the optional members keep their
// defaults when absent.
template <class Impl>
OpInfo describe() {
  OpInfo o;
  o.name = Impl::name;
  o.arity = Impl::arity;
  if constexpr (requires { Impl::build; }) {
    o.build = Impl::build;
  } else {
    o.code = Impl::code;
    o.dim = Impl::dim;
    o.vjp = Impl::vjp;
    o.apply_d = &Impl::template apply<double>;
    o.apply_l = &Impl::template apply<Lanes>;
    o.apply_e = &Impl::template apply<Expr>;
  }
  if constexpr (requires { Impl::n_ip; }) o.n_ip = Impl::n_ip;
  if constexpr (requires { Impl::infix; }) o.infix = Impl::infix;
  if constexpr (requires { Impl::also; }) o.also = Impl::also;
  if constexpr (requires { Impl::method; }) o.method = Impl::method;
  if constexpr (requires { Impl::zero_preserving; }) o.zero_preserving = Impl::zero_preserving;
  if constexpr (requires { Impl::simplify; }) o.simplify = Impl::simplify;
  if constexpr (requires { Impl::params; }) o.params = Impl::params;
  if constexpr (requires { Impl::encode; }) o.encode = Impl::encode;
  if (o.params.max < 0) o.params.max = o.n_ip;
  if (o.params.min < 0) o.params.min = o.params.max;
  return o;
}
// Registers a family's ops (or composites): register_ops<AddOp, SubOp, ...>(t).
template <class... Impl>
void register_ops(std::vector<OpInfo>& t) {
  (t.push_back(describe<Impl>()), ...);
}
// An op struct's code and KeOps text name: TESSEL_OP(Exp) inside `struct ExpOp`, or
// TESSEL_OP_NAMED(Sub, "Subtract") where the text name differs.
#define TESSEL_OP(op)                             \
  static constexpr OpCode code = OpCode::op; \
  static constexpr const char* name = #op
#define TESSEL_OP_NAMED(op, text)               \
  static constexpr OpCode code = OpCode::op; \
  static constexpr const char* name = text

// Registration hooks, one per op family file.
void register_arith(std::vector<OpInfo>& t);
void register_math(std::vector<OpInfo>& t);
void register_vector(std::vector<OpInfo>& t);
void register_tensor(std::vector<OpInfo>& t);
void register_complex(std::vector<OpInfo>& t);
void register_linear(std::vector<OpInfo>& t);
void register_sequence(std::vector<OpInfo>& t);
void register_soft_dtw(std::vector<OpInfo>& t);
void register_linear_composites(std::vector<OpInfo>& t);  // Kron

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
// CRTP bases of elementwise ops: D supplies name, `f(node, x...)` (the scalar function) and its
// vjp; the base gives the arity, the broadcasting dim rule and apply.
template <class D>
struct Unary {
  static constexpr int arity = 1;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) { return a[0].dim(); }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    ew1(n, a, out, [&](const S& x) { return D::f(n, x); });
  }
};
template <class D>
struct Binary {
  static constexpr int arity = 2;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    return broadcast_dim(D::name, a[0].dim(), a[1].dim());
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    ew2(n, a, out, [&](const S& x, const S& y) { return D::f(n, x, y); });
  }
};
template <class D>
struct Ternary {
  static constexpr int arity = 3;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    return broadcast_dim(D::name, broadcast_dim(D::name, a[0].dim(), a[1].dim()), a[2].dim());
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    ew3(n, a, out, [&](const S& x, const S& y, const S& z) { return D::f(n, x, y, z); });
  }
};
// CRTP base of outer ops (TensorProd, DifferenceMatrix): D supplies name, `f(x, y)` and its
// vjp; component r * dim(y) + c (row-major) is f(x[r], y[c]).
template <class D>
struct Outer {
  static constexpr int arity = 2;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    return checked_dim(D::name, int64_t{a[0].dim()} * a[1].dim());
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    const int da = n.args[0]->dim, db = n.args[1]->dim;
    for (int r = 0; r < da; ++r)
      for (int c = 0; c < db; ++c) out[r * db + c] = D::f(a[0][r], a[1][c]);
  }
};
// The VJP of an op without a derivative (piecewise constant, or an index).
inline std::vector<Formula> no_grad(const Formula& self, const Formula&) {
  return std::vector<Formula>(self.node().args.size());
}
// Dim rules shared by many ops.
inline int dim_same_as_arg(std::span<const Formula> a, std::span<const int64_t>) {
  return a[0].dim();
}
inline int dim_scalar(std::span<const Formula>, std::span<const int64_t>) { return 1; }

}  // namespace tessel
