// KeOps's ElemT, ExtractT, SumT (adjoints of Elem, Extract, Sum), DiffClampInt, Kron and IntInv.
#include <cstdint>
#include <string>

#include "ops/op.hpp"

namespace tessel {

namespace {

// The argument of ElemT and SumT must be a scalar, as in KeOps.
void need_scalar(const char* op, const Formula& a) {
  if (a.dim() != 1)
    dim_error(op, "the argument (argument 1) must have dim 1, got " + std::to_string(a.dim()));
}
// A dim given as an integer parameter: the name says which one in the error.
int dim_param(const char* op, const char* what, int64_t d) {
  if (d < 1) dim_error(op, std::string(what) + " must be >= 1, got " + std::to_string(d));
  return checked_dim(op, d);
}

}  // namespace

// ElemT(f, n, m): the scalar f in component m of a dim-n vector, zeros elsewhere.
struct ElemTOp {
  TESSEL_OP(ElemT);
  static constexpr int arity = 1, n_ip = 2;
  static constexpr bool zero_preserving = true;
  static int dim(std::span<const Formula> a, std::span<const int64_t> ip) {
    need_scalar(name, a[0]);
    const int n = dim_param(name, "the output dim n (argument 2)", ip[0]);
    if (ip[1] < 0 || ip[1] >= n)
      dim_error(name, "the position m (argument 3) must lie in [0, " + std::to_string(n) +
                          "), got " + std::to_string(ip[1]));
    return n;
  }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t> ip) {
    return ip[0] == 1 ? a[0] : Formula{};
  }
  template <class S> static void apply(const Node& n, const S* const* a, S* out) {
    for (int c = 0; c < n.dim; ++c) out[c] = c == n.ip[1] ? a[0][0] : S(0.0);
  }
  static Grads vjp(const Formula& s, const Formula& g) {
    return {elem(g, static_cast<int>(s.node().ip[1]))};
  }
};
Formula elem_t(const Formula& a, int n, int m) { return make(OpCode::ElemT, {a}, {n, m}); }

// ExtractT(f, start, dim): f (dim D) in components [start, start + D) of a dim-`dim` vector.
struct ExtractTOp {
  TESSEL_OP(ExtractT);
  static constexpr int arity = 1, n_ip = 2;
  static constexpr bool zero_preserving = true;
  static int dim(std::span<const Formula> a, std::span<const int64_t> ip) {
    const int d = dim_param(name, "the output dim (argument 3)", ip[1]);
    if (ip[0] < 0 || ip[0] > d - a[0].dim())
      dim_error(name, "the argument of dim " + std::to_string(a[0].dim()) + " placed at start " +
                          std::to_string(ip[0]) + " (argument 2) does not fit in dim " +
                          std::to_string(d) + "; expected 0 <= start <= " +
                          std::to_string(d - a[0].dim()));
    return d;
  }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t> ip) {
    return ip[0] == 0 && ip[1] == a[0].dim() ? a[0] : Formula{};
  }
  template <class S> static void apply(const Node& n, const S* const* a, S* out) {
    const int start = static_cast<int>(n.ip[0]), len = n.args[0]->dim;
    for (int c = 0; c < n.dim; ++c)
      out[c] = c >= start && c < start + len ? a[0][c - start] : S(0.0);
  }
  static Grads vjp(const Formula& s, const Formula& g) {
    return {extract(g, static_cast<int>(s.node().ip[0]), arg(s, 0).dim())};
  }
};
Formula extract_t(const Formula& a, int start, int dim) {
  return make(OpCode::ExtractT, {a}, {start, dim});
}

// SumT(f, dim): the scalar f in every component of a dim-`dim` vector.
struct SumTOp {
  TESSEL_OP(SumT);
  static constexpr int arity = 1, n_ip = 1;
  static constexpr bool zero_preserving = true;
  static int dim(std::span<const Formula> a, std::span<const int64_t> ip) {
    need_scalar(name, a[0]);
    return dim_param(name, "the output dim (argument 2)", ip[0]);
  }
  static Formula simplify(std::span<const Formula> a, std::span<const int64_t> ip) {
    return ip[0] == 1 ? a[0] : Formula{};
  }
  template <class S> static void apply(const Node& n, const S* const* a, S* out) {
    for (int c = 0; c < n.dim; ++c) out[c] = a[0][0];
  }
  static Grads vjp(const Formula&, const Formula& g) { return {sum(g)}; }
};
Formula sum_t(const Formula& a, int dim) { return make(OpCode::SumT, {a}, {dim}); }

// DiffClampInt(x, a, b) = 1 where a <= x <= b, else 0, as KeOps's: a NaN x compares false both
// ways and gives 1, exactly as ClampInt passes it through (its derivative there is 1).
struct DiffClampIntOp : Unary<DiffClampIntOp> {
  TESSEL_OP(DiffClampInt);
  static constexpr int n_ip = 2;
  template <class S> static S f(const Node& n, const S& x) {
    const S lo(static_cast<double>(n.ip[0])), hi(static_cast<double>(n.ip[1]));
    return t_lt(x, lo, S(0.0), t_lt(hi, x, S(0.0), S(1.0)));
  }
  static constexpr auto vjp = no_grad;
};
Formula diff_clampint(const Formula& a, int lo, int hi) {
  return make(OpCode::DiffClampInt, {a}, {lo, hi});
}

void register_linear(std::vector<OpInfo>& t) {
  register_ops<ElemTOp, ExtractTOp, SumTOp, DiffClampIntOp>(t);
}

// KeOps's Kron is a TensorDot without contraction whose output interleaves the axes, a0 b0 a1 b1
// ...: pre-permutation axis q of a goes to 2q, of b to 2q + 1 (KeOps's permutation convention,
// which TensorDot's parameters follow), so the flattened result is numpy.kron's.
Formula kron(const Formula& a, const Formula& b, const std::vector<int>& dims_a,
             const std::vector<int>& dims_b) {
  if (!a.valid() || !b.valid()) detail::fail("Kron", "null formula argument");
  if (dims_a.size() != dims_b.size())
    detail::fail("Kron", "the dims of the two tensors (arguments 3 and 4) must have the same "
                         "length, got ", dims_a.size(), " and ", dims_b.size());
  auto check = [](const Formula& f, const std::vector<int>& dims, const char* which) {
    int64_t p = 1;
    for (int d : dims) {
      if (d < 1) detail::fail("Kron", "the dims of the ", which, " tensor must be >= 1, got ", d);
      p = detail::checked_mul(p, d, "Kron", "the product of the dims");
    }
    if (p != f.dim())
      detail::fail("Kron", "the dims of the ", which, " tensor multiply to ", p,
                   " but that formula has dim ", f.dim());
  };
  check(a, dims_a, "first");
  check(b, dims_b, "second");
  const int n = static_cast<int>(dims_a.size());
  std::vector<int> perm(2 * n);
  for (int q = 0; q < n; ++q) perm[q] = 2 * q, perm[n + q] = 2 * q + 1;
  return tensordot(a, b, dims_a, dims_b, {}, {}, perm);
}

namespace {

std::vector<int> ints(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

// Kron(a, b, dims_a, dims_b) is a TensorDot, so a composite: an entry of the table that the
// parser and the front ends build by name, with no node of its own.
struct KronComposite {
  static constexpr const char* name = "Kron";
  static constexpr const char* method = "keops_kron";
  static constexpr int arity = 2;
  static constexpr ParamSpec params{true, 2, 2, "dimfself dimfother"};
  static Formula build(std::span<const Formula> a, WrittenParams p) {
    return kron(a[0], a[1], ints(p[0]), ints(p[1]));
  }
};

}  // namespace

void register_linear_composites(std::vector<OpInfo>& t) {
  register_ops<KronComposite>(t);
}

Formula int_inv(int64_t n) {
  if (n == 0) detail::fail("IntInv", "n must be non-zero, got 0");
  if (n == INT64_MIN) detail::fail("IntInv", "n must lie within +-", INT64_MAX, ", got ", n);
  return rational(1, n);
}

}  // namespace tessel
