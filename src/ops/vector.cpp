// Vector ops: component reductions, indexing, norms, distances and quadratic forms, with VJPs.
#include "ops/op.hpp"

namespace tessel {

namespace {

// g (dim 1) repeated to dim d: the VJP of every "sum over components".
Formula spread(const Formula& g, int d) { return g.dim() == d ? g : sum_t(g, d); }

// g (dim 1) in component `which` (a float-encoded index) of a dim-d vector, 0 elsewhere. A select,
// not g * OneHot: an infinite g must not turn the other components into inf * 0 = NaN.
Formula scatter(const Formula& g, const Formula& which, int d) {
  return ifelse(one_hot(which, d) - 0.5, spread(g, d), zero(d));
}
int need_dim1(const char* op, const Formula& a, const char* what) {
  if (a.dim() != 1) dim_error(op, std::string(what) + " must have dim 1, got " + std::to_string(a.dim()));
  return 1;
}
// term(0) + term(1) + ... + term(n-1), without a leading 0 + (the emitted code stays short).
// From 8 terms on, as four interleaved partial sums added pairwise at the end: a single chain
// of n dependent adds (FMAs once contracted) leaves a kernel waiting on their latency for high
// dimensions (a 64-d SqDist would be 64 FMAs deep), and the shorter chains round less.
template <class S, class F>
S sum_terms(int n, F term) {
  if (n < 8) {
    S r = term(0);
    for (int c = 1; c < n; ++c) r = r + term(c);
    return r;
  }
  S p[4] = {term(0), term(1), term(2), term(3)};
  for (int c = 4; c < n; ++c) p[c % 4] = p[c % 4] + term(c);
  return (p[0] + p[1]) + (p[2] + p[3]);
}
template <class S>
S sum_of(const S* a, int d) {
  return sum_terms<S>(d, [&](int c) { return a[c]; });
}
template <class S>
S dot_of(const S* a, const S* b, int d) {
  return sum_terms<S>(d, [&](int c) { return a[c] * b[c]; });
}

}  // namespace

// Two arguments of equal dims, a scalar result.
template <class D>
struct SameToScalar {
  static constexpr int arity = 2;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    same_dim(D::name, a[0].dim(), a[1].dim());
    return 1;
  }
};

// A vector to a scalar, 0 for the zero vector: D supplies f(components, dim).
template <class D>
struct ToScalar {
  static constexpr int arity = 1;
  static constexpr bool zero_preserving = true;
  static constexpr auto dim = dim_scalar;
  template <class S> static void apply(const Node& n, const S* const* a, S* out) {
    out[0] = D::f(a[0], n.args[0]->dim);
  }
};

struct SumOp : ToScalar<SumOp> {
  TESSEL_OP(Sum);
  template <class S> static S f(const S* a, int d) { return sum_of(a, d); }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    return {spread(g, arg(s, 0).dim())};
  }
};
Formula sum(const Formula& a) { return make(OpCode::Sum, {a}); }

// Max/Min/ArgMax/ArgMin over components; the first extreme component wins ties.
template <OpCode C, bool IsMax, bool IsArg>
struct Extreme {
  static constexpr OpCode code = C;
  static constexpr const char* name =
      IsArg ? (IsMax ? "ArgMax" : "ArgMin") : (IsMax ? "Max" : "Min");
  static constexpr int arity = 1;
  static constexpr auto dim = dim_scalar;
  template <class S> static void apply(const Node& n, const S* const* a, S* out) {
    S best = a[0][0], idx(0.0);
    for (int c = 1; c < n.args[0]->dim; ++c) {
      const S& v = a[0][c];
      // strict: a later component equal to the extreme does not replace it
      const S& lo = IsMax ? best : v;
      const S& hi = IsMax ? v : best;
      idx = t_lt(lo, hi, S(static_cast<double>(c)), idx);
      best = t_lt(lo, hi, v, best);
    }
    out[0] = IsArg ? idx : best;
  }
  // The extreme's cotangent goes to the first extreme component; indices have no derivative.
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    if (IsArg) return no_grad(s, g);
    const Formula a = arg(s, 0);
    return {scatter(g, IsMax ? argmax(a) : argmin(a), a.dim())};
  }
};
using MaxOp = Extreme<OpCode::Max, true, false>;
Formula max(const Formula& a) { return make(OpCode::Max, {a}); }
using MinOp = Extreme<OpCode::Min, false, false>;
Formula min(const Formula& a) { return make(OpCode::Min, {a}); }
using ArgMaxOp = Extreme<OpCode::ArgMax, true, true>;
Formula argmax(const Formula& a) { return make(OpCode::ArgMax, {a}); }
using ArgMinOp = Extreme<OpCode::ArgMin, false, true>;
Formula argmin(const Formula& a) { return make(OpCode::ArgMin, {a}); }

struct ElemOp {
  TESSEL_OP(Elem);
  static constexpr int arity = 1, n_ip = 1;
  static constexpr bool zero_preserving = true;
  static int dim(std::span<const Formula> a, std::span<const int64_t> ip) {
    if (ip[0] < 0 || ip[0] >= a[0].dim())
      dim_error(name, "index " + std::to_string(ip[0]) + " is out of range for dim " +
                          std::to_string(a[0].dim()));
    return 1;
  }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t> ip) {
    if (a[0].dim() == 1) return a[0];
    if (a[0].node().op == OpCode::ElemT)  // component m of ElemT(f, n, m) is f, the others 0
      return a[0].node().ip[1] == ip[0] ? arg(a[0], 0) : zero(1);
    return {};
  }
  template <class S> static void apply(const Node& n, const S* const* a, S* out) {
    out[0] = a[0][n.ip[0]];
  }
  // zeros around g (ElemT), not g * OneHot: that would make inf * 0 = NaN
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    return {elem_t(g, arg(s, 0).dim(), static_cast<int>(s.node().ip[0]))};
  }
};
Formula elem(const Formula& a, int m) { return make(OpCode::Elem, {a}, {m}); }

struct ExtractOp {
  TESSEL_OP(Extract);
  static constexpr int arity = 1, n_ip = 2;
  static constexpr bool zero_preserving = true;
  static int dim(std::span<const Formula> a, std::span<const int64_t> ip) {
    if (ip[0] < 0 || ip[1] < 1 || ip[0] > a[0].dim() || ip[1] > a[0].dim() - ip[0])
      dim_error(name, "range [" + std::to_string(ip[0]) + ", " + std::to_string(ip[0] + ip[1]) +
                          ") does not fit in dim " + std::to_string(a[0].dim()));
    return static_cast<int>(ip[1]);
  }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t> ip) {
    if (ip[0] == 0 && ip[1] == a[0].dim()) return a[0];
    const Node& n = a[0].node();  // Extract(ExtractT(f, s, d), s, dim f) is f
    if (n.op == OpCode::ExtractT && n.ip[0] == ip[0] && n.args[0]->dim == ip[1])
      return arg(a[0], 0);
    // A range inside one part of a Concat (as the VJP of a Concat of VJPs takes): that part.
    if (a[0].node().op != OpCode::Concat) return {};
    const Formula p = arg(a[0], 0), q = arg(a[0], 1);
    const int start = static_cast<int>(ip[0]), len = static_cast<int>(ip[1]);
    if (start + len <= p.dim()) return extract(p, start, len);
    if (start >= p.dim()) return extract(q, start - p.dim(), len);
    return {};
  }
  template <class S> static void apply(const Node& n, const S* const* a, S* out) {
    for (int c = 0; c < n.dim; ++c) out[c] = a[0][n.ip[0] + c];
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    return {extract_t(g, static_cast<int>(s.node().ip[0]), arg(s, 0).dim())};
  }
};
Formula extract(const Formula& a, int start, int len) {
  return make(OpCode::Extract, {a}, {start, len});
}

struct ConcatOp {
  TESSEL_OP(Concat);
  static constexpr int arity = 2;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    return checked_dim(name, int64_t{a[0].dim()} + a[1].dim());
  }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t>) {
    if (is_zero(a[0]) && is_zero(a[1])) return zero(a[0].dim() + a[1].dim());
    return {};
  }
  template <class S> static void apply(const Node& n, const S* const* a, S* out) {
    const int da = n.args[0]->dim;
    for (int c = 0; c < da; ++c) out[c] = a[0][c];
    for (int c = 0; c < n.args[1]->dim; ++c) out[da + c] = a[1][c];
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const int da = arg(s, 0).dim(), db = arg(s, 1).dim();
    return {extract(g, 0, da), extract(g, da, db)};
  }
};
Formula concat(const Formula& a, const Formula& b) { return make(OpCode::Concat, {a, b}); }

struct OneHotOp {
  TESSEL_OP(OneHot);  // OneHot(x, d): x holds a float-encoded integer
  static constexpr int arity = 1, n_ip = 1;
  static int dim(std::span<const Formula> a, std::span<const int64_t> ip) {
    need_dim1(name, a[0], "the index argument");
    return checked_dim(name, ip[0]);
  }
  template <class S> static void apply(const Node& n, const S* const* a, S* out) {
    const S r = t_round(a[0][0]);
    for (int c = 0; c < n.dim; ++c) out[c] = t_eq(r, S(static_cast<double>(c)), S(1.0), S(0.0));
  }
  static constexpr auto vjp = no_grad;
};
Formula one_hot(const Formula& a, int dim) { return make(OpCode::OneHot, {a}, {dim}); }

struct SqNorm2Op : ToScalar<SqNorm2Op> {
  TESSEL_OP(SqNorm2);
  template <class S> static S f(const S* a, int d) { return dot_of(a, a, d); }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    return {(2.0 * g) * arg(s, 0)};
  }
};
Formula sqnorm2(const Formula& a) { return make(OpCode::SqNorm2, {a}); }

struct Norm2Op : ToScalar<Norm2Op> {
  TESSEL_OP(Norm2);
  template <class S> static S f(const S* a, int d) { return t_sqrt(dot_of(a, a, d)); }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const Formula a = arg(s, 0);  // through Rsqrt: 0 at a = 0 (KeOps's convention), not 0 / 0
    return {(g * rsqrt(sqnorm2(a))) * a};
  }
};
Formula norm2(const Formula& a) { return make(OpCode::Norm2, {a}); }

struct NormalizeOp {
  TESSEL_OP(Normalize);
  static constexpr int arity = 1;
  static constexpr auto dim = dim_same_as_arg;
  template <class S> static void apply(const Node& n, const S* const* a, S* out) {
    const S r = t_rsqrt(dot_of(a[0], a[0], n.dim));
    for (int c = 0; c < n.dim; ++c) out[c] = a[0][c] * r;
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const Formula a = arg(s, 0);
    return {(g - (s | g) * s) * rsqrt(sqnorm2(a))};
  }
};
Formula normalize(const Formula& a) { return make(OpCode::Normalize, {a}); }

struct SqDistOp : SameToScalar<SqDistOp> {
  TESSEL_OP(SqDist);
  template <class S> static void apply(const Node& n, const S* const* a, S* out) {
    out[0] = sum_terms<S>(n.args[0]->dim, [&](int c) {
      const S d = a[0][c] - a[1][c];
      return d * d;
    });
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const Formula d = (2.0 * g) * (arg(s, 0) - arg(s, 1));
    return {d, -d};
  }
};
Formula sqdist(const Formula& a, const Formula& b) { return make(OpCode::SqDist, {a, b}); }

struct ScalprodOp : SameToScalar<ScalprodOp> {
  TESSEL_OP(Scalprod);
  static constexpr const char* infix = "|";
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t>) {
    return is_zero(a[0]) || is_zero(a[1]) ? zero(1) : Formula{};
  }
  template <class S> static void apply(const Node& n, const S* const* a, S* out) {
    out[0] = dot_of(a[0], a[1], n.args[0]->dim);
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    return {g * arg(s, 1), g * arg(s, 0)};
  }
};
Formula scalprod(const Formula& a, const Formula& b) { return make(OpCode::Scalprod, {a, b}); }

// Quadratic forms a^T S a with S isotropic (dim 1), diagonal (dim d) or full (dim d*d).

struct SqNormIsoOp {
  TESSEL_OP(SqNormIso);
  static constexpr int arity = 2;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    return need_dim1(name, a[0], "the weight (first argument)");
  }
  template <class S> static void apply(const Node& n, const S* const* a, S* out) {
    out[0] = a[0][0] * dot_of(a[1], a[1], n.args[1]->dim);
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const Formula w = arg(s, 0), x = arg(s, 1);
    return {g * sqnorm2(x), (2.0 * g * w) * x};
  }
};
Formula sqnorm_iso(const Formula& s, const Formula& a) { return make(OpCode::SqNormIso, {s, a}); }

struct SqNormDiagOp : SameToScalar<SqNormDiagOp> {
  TESSEL_OP(SqNormDiag);
  template <class S> static void apply(const Node& n, const S* const* a, S* out) {
    out[0] = sum_terms<S>(n.args[1]->dim, [&](int c) { return a[0][c] * (a[1][c] * a[1][c]); });
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const Formula w = arg(s, 0), x = arg(s, 1);
    return {g * square(x), (2.0 * g) * (w * x)};
  }
};
Formula sqnorm_diag(const Formula& s, const Formula& a) {
  return make(OpCode::SqNormDiag, {s, a});
}

struct SymSqNormOp {
  TESSEL_OP(SymSqNorm);
  static constexpr int arity = 2;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    const int64_t d = a[1].dim();
    if (a[0].dim() != d * d)
      dim_error(name, "the matrix has dim " + std::to_string(a[0].dim()) + "; expected " +
                          std::to_string(d * d) + " for a vector of dim " + std::to_string(d));
    return 1;
  }
  template <class S> static void apply(const Node& n, const S* const* a, S* out) {
    const int d = n.args[1]->dim;
    out[0] = sum_terms<S>(d * d, [&](int k) {
      const int p = k / d, q = k % d;
      return a[0][k] * (a[1][p] * a[1][q]);
    });
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const Formula w = arg(s, 0), x = arg(s, 1);
    return {g * tensorprod(x, x), g * (matvecmult(w, x) + vecmatmult(x, w))};
  }
};
Formula sym_sqnorm(const Formula& s, const Formula& a) { return make(OpCode::SymSqNorm, {s, a}); }

void register_vector(std::vector<OpInfo>& t) {
  register_ops<SumOp, MaxOp, MinOp, ArgMaxOp, ArgMinOp, ElemOp, ExtractOp, ConcatOp, OneHotOp,
               SqNorm2Op, Norm2Op, NormalizeOp, SqDistOp, ScalprodOp, SqNormIsoOp, SqNormDiagOp,
               SymSqNormOp>(t);
}

Formula operator|(const Formula& a, const Formula& b) { return scalprod(a, b); }
Formula weighted_sqnorm(const Formula& w, const Formula& a) {
  if (!w.valid() || !a.valid()) detail::fail("WeightedSqNorm", "null formula argument");
  const int64_t d = a.dim();
  if (w.dim() == 1) return sqnorm_iso(w, a);
  if (w.dim() == d) return sqnorm_diag(w, a);
  if (w.dim() == d * d) return sym_sqnorm(w, a);
  detail::fail("WeightedSqNorm", "the weight has dim ", w.dim(), "; expected 1, ", d, " or ", d * d,
               " for a vector of dim ", d);
}
Formula weighted_sqdist(const Formula& w, const Formula& a, const Formula& b) {
  return weighted_sqnorm(w, a - b);
}

}  // namespace tessel
