// Tensor ops on row-major matrices stored as flat vectors: MatVecMult, VecMatMult, TensorProd,
// TensorDot.
#include <numeric>

#include "ops/op.hpp"
#include "ops/tensordot.hpp"

namespace tessel {

namespace {

// The dim of an (m×n)·n or m·(m×n) product: the matrix dim over the vector dim.
int product_dim(const char* op, int dm, int dv) {
  if (dm % dv != 0)
    dim_error(op, "matrix dim " + std::to_string(dm) + " is not a multiple of vector dim " +
                      std::to_string(dv));
  return dm / dv;
}
// An (m×n)·n product (`matrix_first`) or an m·(m×n) one, as a Contraction.
Contraction matrix_vector(bool matrix_first, int64_t rows, int64_t cols) {
  Contraction c;
  if (matrix_first) {
    c.out = {{rows, cols, 0}};
    c.con = {{cols, 1, 1}};
  } else {
    c.out = {{cols, 0, 1}};
    c.con = {{rows, 1, cols}};
  }
  return c;
}

}  // namespace

struct MatVecOp {
  TESSEL_OP(MatVecMult);  // (m×n) · n -> m
  static constexpr int arity = 2;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    return product_dim(name, a[0].dim(), a[1].dim());
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    contract(matrix_vector(true, n.dim, n.args[1]->dim), a[0], a[1], out);
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const Formula m = arg(s, 0), v = arg(s, 1);
    return {tensorprod(g, v), vecmatmult(g, m)};
  }
};
Formula matvecmult(const Formula& a, const Formula& v) { return make(OpCode::MatVecMult, {a, v}); }

struct VecMatOp {
  TESSEL_OP(VecMatMult);  // m · (m×n) -> n
  static constexpr int arity = 2;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    return product_dim(name, a[1].dim(), a[0].dim());
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    contract(matrix_vector(false, n.args[0]->dim, n.dim), a[0], a[1], out);
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const Formula v = arg(s, 0), m = arg(s, 1);
    return {matvecmult(m, g), tensorprod(v, g)};
  }
};
Formula vecmatmult(const Formula& v, const Formula& a) { return make(OpCode::VecMatMult, {v, a}); }

struct TensorProdOp : Outer<TensorProdOp> {
  TESSEL_OP(TensorProd);  // outer product, row-major
  template <class S>
  static S f(const S& x, const S& y) {
    return x * y;
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const Formula x = arg(s, 0), y = arg(s, 1);
    return {matvecmult(g, y), vecmatmult(x, g)};
  }
};
Formula tensorprod(const Formula& a, const Formula& b) { return make(OpCode::TensorProd, {a, b}); }

struct TensorDotOp {
  TESSEL_OP(TensorDot);
  static constexpr int arity = 2;
  // TensorDot(a, b, dims_a, dims_b, contr_a, contr_b[, perm]), with pykeops's names; the
  // permutation defaults to the identity, as in the builder, so both spellings give one node.
  static constexpr ParamSpec params{true, 4, 5, "dimfa dimfb contfa contfb permute"};
  static constexpr const char* method = "keops_tensordot";
  static std::vector<int64_t> encode(WrittenParams p) {
    TensorDotSpec t{p[0], p[1], p[2], p[3], {}};
    if (t.contr_a.size() != t.contr_b.size())
      detail::fail("TensorDot", "the contracted axis lists have lengths ", t.contr_a.size(),
                   " and ", t.contr_b.size());
    const size_t axes = t.dims_a.size() + t.dims_b.size();
    if (2 * t.contr_a.size() > axes)
      detail::fail("TensorDot", "more contracted axes than the tensors have");
    if (p.size() == 5) {
      t.perm = p[4];
    } else {
      t.perm.resize(axes - 2 * t.contr_a.size());
      std::iota(t.perm.begin(), t.perm.end(), 0);
    }
    return t.encode();
  }
  static int dim(std::span<const Formula> a, std::span<const int64_t> ip) {
    TensorDotSpec t = TensorDotSpec::decode(ip);
    t.check(a[0].dim(), a[1].dim());
    return t.out_size();
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    contract(TensorDotSpec::decode(n.ip).contraction(), a[0], a[1], out);
  }
  static std::vector<Formula> vjp(const Formula& s, const Formula& g) {
    const TensorDotSpec t = TensorDotSpec::decode(s.node().ip);
    const Formula x = arg(s, 0), y = arg(s, 1);
    return {make(OpCode::TensorDot, {g, y}, t.vjp_a().encode()),
            make(OpCode::TensorDot, {x, g}, t.vjp_b().encode())};
  }
};
Formula tensordot(const Formula& a, const Formula& b, const std::vector<int>& dims_a,
                  const std::vector<int>& dims_b, const std::vector<int>& contr_a,
                  const std::vector<int>& contr_b, const std::vector<int>& perm) {
  std::vector<std::vector<int64_t>> written;
  for (const std::vector<int>* v : {&dims_a, &dims_b, &contr_a, &contr_b, &perm})
    if (v != &perm || !perm.empty()) written.emplace_back(v->begin(), v->end());
  return make_written(op_info(OpCode::TensorDot), {a, b}, written);
}

void register_tensor(std::vector<OpInfo>& t) {
  register_ops<MatVecOp, VecMatOp, TensorProdOp, TensorDotOp>(t);
}

}  // namespace tessel
