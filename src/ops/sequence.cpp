// B-spline bases (De Boor's recursion, KeOps's BSpline) and the difference matrix of two vectors.
//
// BSpline is a loop over the knots, unrolled when the code is generated (dims are known). Its
// derivative is the same recursion run backwards, written over a scalar `Sym` that is a dim-1
// formula: the VJP is then a formula of ordinary ops (Elem, IfElse, ...), so derivatives of every
// order and forward mode come from the autodiff of those ops (keopscore 2.3 has none). The text of
// that formula grows about 3x per order of the spline (the printer writes shared sub-formulas out
// each time): 76 KB of text for order 3 and 8 knots.
#include <optional>

#include "ops/dual.hpp"

namespace tessel {

namespace {

// ---- a dim-1 formula as the scalar of the generic recursions
// --------------------------------------
struct Sym {
  Formula f;
  Sym(double c) : f(constant(c)) {}  // NOLINT: constants broadcast, as for the other scalars
  explicit Sym(Formula g) : f(std::move(g)) {}
};
// Operators beside Sym, where argument-dependent lookup finds them.
Sym operator+(const Sym& a, const Sym& b) { return Sym(a.f + b.f); }
Sym operator-(const Sym& a, const Sym& b) { return Sym(a.f - b.f); }
Sym operator*(const Sym& a, const Sym& b) { return Sym(a.f * b.f); }
Sym operator/(const Sym& a, const Sym& b) { return Sym(a.f / b.f); }
Sym operator-(const Sym& a) { return Sym(-a.f); }

}  // namespace

// The primitives beside the other scalars' (in the unnamed namespace they would hide those from
// the generic code); internal all the same, as Sym is.
// Selections through the exact 1/0 of a comparison: IfElse on x - y would round.
Sym t_lt(const Sym& x, const Sym& y, const Sym& z, const Sym& w) {
  return Sym(ifelse(less(x.f, y.f) - 0.5, z.f, w.f));
}
Sym t_le(const Sym& x, const Sym& y, const Sym& z, const Sym& w) {
  return Sym(ifelse(less_eq(x.f, y.f) - 0.5, z.f, w.f));
}

namespace {

std::vector<Sym> components(const Formula& v) {
  std::vector<Sym> c;
  for (int k = 0; k < v.dim(); ++k) c.emplace_back(elem(v, k));
  return c;
}
Formula stack(const std::vector<Sym>& c) {
  Formula r = c[0].f;
  for (size_t k = 1; k < c.size(); ++k) r = concat(r, c[k].f);
  return r;
}

// ---- De Boor's recursion with KeOps's conventions
// -------------------------------------------------- Level 0 holds the indicators of the half-open
// intervals [t_j, t_j+1), j < K-1. Level k holds B_i,k = w_i,k B_i,k-1 + (1 - w_i+1,k) B_i+1,k-1
// for i < K-1-k, with the ratio w_i,k = (x - t_i) / (t_i+k - t_i) where t_i < t_i+k and 0 elsewhere
// (coincident knots). The denominator is replaced by 1 where the ratio is not used, so that the
// branch not taken stays finite and so do the derivatives through it.
template <class S>
struct DeBoor {
  std::vector<std::vector<S>> b;    // b[k][i]: the basis functions of level k
  std::vector<std::vector<S>> w;    // w[k][i], i <= K-1-k: the ratios of level k (w[0] empty)
  std::vector<std::vector<S>> inv;  // 1 / (t_i+k - t_i) where the ratio is used, else 0 (Sym only)

  DeBoor(const S* t, const S& x, int n_knots, int order, bool with_inv) {
    const int d = n_knots - 1;
    b.resize(order + 1);
    w.resize(order + 1);
    inv.resize(order + 1);
    for (int j = 0; j < d; ++j)
      b[0].push_back(t_le(t[j], x, t_lt(x, t[j + 1], S(1.0), S(0.0)), S(0.0)));
    for (int k = 1; k <= order; ++k) {
      for (int i = 0; i <= d - k; ++i) {
        const S den = t_lt(t[i], t[i + k], t[i + k] - t[i], S(1.0));
        w[k].push_back(t_lt(t[i], t[i + k], (x - t[i]) / den, S(0.0)));
        if (with_inv) inv[k].push_back(t_lt(t[i], t[i + k], S(1.0) / den, S(0.0)));
      }
      for (int i = 0; i < d - k; ++i)
        b[k].push_back(w[k][i] * b[k - 1][i] + (S(1.0) - w[k][i + 1]) * b[k - 1][i + 1]);
    }
  }
};

// The recursion run backwards: the gradients of <B_order, g> w.r.t. the knots and x.
std::pair<Formula, Formula> bspline_vjp(const Formula& knots, const Formula& x, int order,
                                        const Formula& g) {
  const int n_knots = knots.dim();
  const std::vector<Sym> t = components(knots);
  const DeBoor<Sym> r(t.data(), Sym(x), n_knots, order, true);
  std::vector<std::optional<Sym>> gt(n_knots), gb_next;
  std::optional<Sym> gx;
  for (int i = 0; i < g.dim(); ++i) gb_next.emplace_back(Sym(elem(g, i)));
  for (int k = order; k >= 1; --k) {
    const int width = n_knots - 1 - k;  // entries of level k
    std::vector<std::optional<Sym>> gb(width + 1), gw(width + 1);
    for (int i = 0; i < width; ++i) {
      if (!gb_next[i]) continue;
      const Sym& c = *gb_next[i];
      accumulate(gb[i], r.w[k][i] * c);
      accumulate(gb[i + 1], (Sym(1.0) - r.w[k][i + 1]) * c);
      accumulate(gw[i], r.b[k - 1][i] * c);
      accumulate(gw[i + 1], -(r.b[k - 1][i + 1] * c));
    }
    // w = (x - t_i) / (t_i+k - t_i): dw/dx = 1/den, dw/dt_i = (w - 1)/den, dw/dt_i+k = -w/den.
    for (int i = 0; i <= width; ++i) {
      if (!gw[i]) continue;
      const Sym gi = *gw[i] * r.inv[k][i];
      accumulate(gx, gi);
      accumulate(gt[i], gi * (r.w[k][i] - Sym(1.0)));
      accumulate(gt[i + k], -(gi * r.w[k][i]));
    }
    gb_next = std::move(gb);
  }
  // The level-0 indicators are piecewise constant: no derivative.
  if (!gx) return {Formula{}, Formula{}};
  std::vector<Sym> knots_grad;
  for (const auto& c : gt) knots_grad.push_back(value_or_zero(c));
  return {stack(knots_grad), gx->f};
}

}  // namespace

struct BSplineOp {
  TESSEL_OP(BSpline);  // BSpline(knots, x, order): the K - order - 1 basis functions at x
  static constexpr int arity = 2, n_ip = 1;
  static int dim(std::span<const Formula> a, std::span<const int64_t> ip) {
    if (ip[0] < 0) dim_error(name, "the order must be >= 0, got " + std::to_string(ip[0]));
    if (a[1].dim() != 1)
      dim_error(name, "the sampling point x (argument 2) must have dim 1, got " +
                          std::to_string(a[1].dim()));
    if (a[0].dim() < ip[0] + 2)
      dim_error(name,
                "order " + std::to_string(ip[0]) + " needs at least " + std::to_string(ip[0] + 2) +
                    " knots, but the knots (argument 1) have dim " + std::to_string(a[0].dim()));
    return static_cast<int>(a[0].dim() - ip[0] - 1);
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    const int order = static_cast<int>(n.ip[0]);
    const DeBoor<S> r(a[0], a[1][0], n.args[0]->dim, order, false);
    for (int i = 0; i < n.dim; ++i) out[i] = r.b[order][i];
  }
  static Grads vjp(const Formula& s, const Formula& g) {
    auto [gk, gx] = bspline_vjp(arg(s, 0), arg(s, 1), static_cast<int>(s.node().ip[0]), g);
    return {gk, gx};
  }
};
Formula bspline(const Formula& knots, const Formula& x, int order) {
  return make(OpCode::BSpline, {knots, x}, {order});
}

// DifferenceMatrix(x, y)[a * dim(y) + b] = x[a] - y[b], row-major. pykeops 2.3 names the method
// (dim(x) * dim(y)) but keopscore 2.3 has no such op; this is the layout of TensorProd.
struct DifferenceMatrixOp : Outer<DifferenceMatrixOp> {
  TESSEL_OP(DifferenceMatrix);
  static constexpr const char* method = "difference_matrix";
  template <class S>
  static S f(const S& x, const S& y) {
    return x - y;
  }
  static Grads vjp(const Formula& s, const Formula& g) {
    const int da = arg(s, 0).dim(), db = arg(s, 1).dim();
    return {matvecmult(g, zero(db) + 1.0), -vecmatmult(zero(da) + 1.0, g)};
  }
};
Formula difference_matrix(const Formula& x, const Formula& y) {
  return make(OpCode::DifferenceMatrix, {x, y});
}

void register_sequence(std::vector<OpInfo>& t) { register_ops<BSplineOp, DifferenceMatrixOp>(t); }

}  // namespace tessel
