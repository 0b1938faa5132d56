// Soft-DTW between two series with the squared difference as cost (KeOps's SoftDTW_SqDist), with
// derivative ops of every order up to 4.
//
// The value is a loop over the cells of the n x m alignment grid, unrolled when the code is
// generated. Its gradient is the reverse sweep of that loop, written once over a scalar S: the op
// SoftDTW_SqDist_Grad(x, y, gamma) (dim n + m + 1: x's, y's and gamma's components). Higher
// derivatives run the same sweep over nested dual numbers: SoftDTW_SqDist_GradDir(x, y, gamma, W)
// is the gradient of the k-th derivative of the value along the k directions packed in W (dim
// k (n + m + 1)), i.e. the (k+1)-th derivative tensor contracted k times. The tensor is symmetric,
// so the VJP of each of these ops is another of them and formulas stay a few nodes long (a VJP
// built from elementary ops would print exponentially long: the grid's cells share predecessors).
#include <array>
#include <vector>

#include "ops/dual.hpp"

namespace tessel {

namespace {

// The recursion is unrolled in the kernel: bound the code it makes.
constexpr int64_t kMaxCells = int64_t{1} << 14;
// Directions GradDir takes: derivatives of order up to kMaxDirections + 1.
constexpr int kMaxDirections = 3;

// r(i, j) = (x_i - y_j)^2 + softmin(r(i-1, j-1), r(i, j-1), r(i-1, j)) inside, plain sums along
// the first row and column; softmin(a) = mn - gamma log sum_k exp((mn - a_k) / gamma) with
// mn = min_k a_k, so every exponent is <= 0 and one is 0: no overflow, and gamma -> 0 tends to the
// hard minimum. The result is r(n-1, m-1), as in keopscore.
template <class S>
struct Grid {
  int n, m;
  bool keep_all;
  std::vector<S> r;                 // every cell (keep_all) or a rolling pair of columns
  std::vector<std::array<S, 3>> p;  // keep_all: the softmin weights of the three predecessors

  size_t at(int i, int j) const {
    return (keep_all ? static_cast<size_t>(j) : static_cast<size_t>(j & 1)) * n + i;
  }
  Grid(const S* x, const S* y, const S& gamma, int n_, int m_, bool all)
      : n(n_), m(m_), keep_all(all) {
    r.resize((keep_all ? static_cast<size_t>(m) : 2) * n, S(0.0));
    if (keep_all) p.resize(static_cast<size_t>(n) * m, {S(0.0), S(0.0), S(0.0)});
    for (int j = 0; j < m; ++j)
      for (int i = 0; i < n; ++i) {
        const S d = x[i] - y[j], c = d * d;
        S v = c;
        if (i > 0 && j > 0) {
          const std::array<S, 3> a = {r[at(i - 1, j - 1)], r[at(i, j - 1)], r[at(i - 1, j)]};
          const S mn = t_min(t_min(a[0], a[1]), a[2]);
          const std::array<S, 3> e = {t_exp((mn - a[0]) / gamma), t_exp((mn - a[1]) / gamma),
                                      t_exp((mn - a[2]) / gamma)};
          const S sum = e[0] + e[1] + e[2];
          v = c + (mn - gamma * t_log(sum));
          if (keep_all) p[at(i, j)] = {e[0] / sum, e[1] / sum, e[2] / sum};
        } else if (i > 0) {
          v = c + r[at(i - 1, j)];
        } else if (j > 0) {
          v = c + r[at(i, j - 1)];
        }
        r[at(i, j)] = v;
      }
  }
  const S& last() const { return r[at(n - 1, m - 1)]; }
};

// The gradient (x's, y's, gamma's components): the adjoint e(i, j) of each cell flows back to its
// predecessors with the softmin weights (the soft alignment), and d softmin / d gamma at fixed
// predecessors is sum_k p_k log p_k.
template <class S>
void gradient(const S* x, const S* y, const S& gamma, int n, int m, S* out) {
  const Grid<S> f(x, y, gamma, n, m, true);
  std::vector<std::optional<S>> e(static_cast<size_t>(n) * m), gx(n), gy(m);
  std::optional<S> gg;
  e.back() = S(1.0);
  auto xlogx = [](const S& q) { return t_eq(q, S(0.0), S(0.0), q * t_log(q)); };
  for (int j = m - 1; j >= 0; --j)
    for (int i = n - 1; i >= 0; --i) {
      if (!e[f.at(i, j)]) continue;
      const S eij = *e[f.at(i, j)], two_d = S(2.0) * (x[i] - y[j]) * eij;
      accumulate(gx[i], two_d);
      accumulate(gy[j], -two_d);
      if (i > 0 && j > 0) {
        const auto& p = f.p[f.at(i, j)];
        accumulate(e[f.at(i - 1, j - 1)], eij * p[0]);
        accumulate(e[f.at(i, j - 1)], eij * p[1]);
        accumulate(e[f.at(i - 1, j)], eij * p[2]);
        accumulate(gg, eij * (xlogx(p[0]) + xlogx(p[1]) + xlogx(p[2])));
      } else if (i > 0) {
        accumulate(e[f.at(i - 1, j)], eij);
      } else if (j > 0) {
        accumulate(e[f.at(i, j - 1)], eij);
      }
    }
  for (int i = 0; i < n; ++i) out[i] = value_or_zero(gx[i]);
  for (int j = 0; j < m; ++j) out[n + j] = value_or_zero(gy[j]);
  out[n + m] = value_or_zero(gg);
}

// The gradient's mixed derivative along the k directions of W, over Dual^k<S>.
template <class T, class S>
void gradient_along(const Node& nd, const S* const* a, S* out, int k) {
  const int n = nd.args[0]->dim, m = nd.args[1]->dim, len = n + m + 1;
  std::vector<S> w(k);
  auto input = [&](const S& v, int slot) {
    for (int q = 0; q < k; ++q) w[q] = a[3][q * len + slot];
    return seed<T>(v, w.data(), k);
  };
  std::vector<T> x, y, r(len, T(0.0));
  for (int i = 0; i < n; ++i) x.push_back(input(a[0][i], i));
  for (int j = 0; j < m; ++j) y.push_back(input(a[1][j], n + j));
  const T gamma = input(a[2][0], n + m);
  gradient(x.data(), y.data(), gamma, n, m, r.data());
  for (int c = 0; c < len; ++c) out[c] = mixed<S>(r[c]);
}

// The three arguments' dims: two series and a scalar gamma, the grid within bounds.
int check_series(const char* op, std::span<const Formula> a) {
  if (a[2].dim() != 1)
    dim_error(op, "gamma (argument 3) must have dim 1, got " + std::to_string(a[2].dim()));
  const int64_t cells = int64_t{a[0].dim()} * a[1].dim();
  if (cells > kMaxCells)
    dim_error(op, "series of lengths " + std::to_string(a[0].dim()) + " and " +
                      std::to_string(a[1].dim()) + " make " + std::to_string(cells) +
                      " cells; the recursion is unrolled in the kernel, which takes at most " +
                      std::to_string(kMaxCells));
  return a[0].dim() + a[1].dim() + 1;
}
// A vector of dim n + m + 1 cut into x's, y's and gamma's parts.
Grads split(const Formula& s, const Formula& v) {
  const int n = arg(s, 0).dim(), m = arg(s, 1).dim();
  return {extract(v, 0, n), extract(v, n, m), elem(v, n + m)};
}
Formula grad_along(const Formula& s, const Formula& w) {
  return make(OpCode::SoftDTWGradDir, {arg(s, 0), arg(s, 1), arg(s, 2), w});
}

}  // namespace

struct SoftDtwOp {
  TESSEL_OP_NAMED(SoftDTW, "SoftDTW_SqDist");
  static constexpr const char* method = "softdtw_sqdist";
  static constexpr int arity = 3;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    check_series(name, a);
    return 1;
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    out[0] = Grid<S>(a[0], a[1], a[2][0], n.args[0]->dim, n.args[1]->dim, false).last();
  }
  static Grads vjp(const Formula& s, const Formula& g) {
    const Formula x = arg(s, 0), y = arg(s, 1), gamma = arg(s, 2);
    Grads parts = split(s, make(OpCode::SoftDTWGrad, {x, y, gamma}));
    for (Formula& p : parts) p = g * p;
    return parts;
  }
};
Formula softdtw_sqdist(const Formula& x, const Formula& y, const Formula& gamma) {
  return make(OpCode::SoftDTW, {x, y, gamma});
}

struct SoftDtwGradOp {
  TESSEL_OP_NAMED(SoftDTWGrad, "SoftDTW_SqDist_Grad");
  static constexpr const char* method = "";
  static constexpr int arity = 3;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    return check_series(name, a);
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    gradient(a[0], a[1], a[2][0], n.args[0]->dim, n.args[1]->dim, out);
  }
  // The Hessian is symmetric: the VJP along u is the derivative along u.
  static Grads vjp(const Formula& s, const Formula& u) { return split(s, grad_along(s, u)); }
};

struct SoftDtwGradDirOp {
  TESSEL_OP_NAMED(SoftDTWGradDir, "SoftDTW_SqDist_GradDir");
  static constexpr const char* method = "";
  static constexpr int arity = 4;
  static int dim(std::span<const Formula> a, std::span<const int64_t>) {
    const int len = check_series(name, a);
    const int k = a[3].dim() / len;
    if (a[3].dim() % len != 0 || k < 1)
      dim_error(name, "the directions (argument 4) must have dim k * " + std::to_string(len) +
                          " (k directions of x, y and gamma), got " + std::to_string(a[3].dim()));
    if (k > kMaxDirections)
      dim_error("SoftDTW_SqDist", "derivatives of order above " +
                                      std::to_string(kMaxDirections + 1) + " are not supported");
    return len;
  }
  template <class S>
  static void apply(const Node& n, const S* const* a, S* out) {
    const int len = n.dim, k = n.args[3]->dim / len;
    static_assert(kMaxDirections == 3, "one case per number of directions");
    if (k == 1) gradient_along<Dual<S>>(n, a, out, k);
    if (k == 2) gradient_along<Dual<Dual<S>>>(n, a, out, k);
    if (k == 3) gradient_along<Dual<Dual<Dual<S>>>>(n, a, out, k);
  }
  // Symmetric in every slot: along u for the series and gamma (one more direction), and for the
  // directions, each slot in turn replaced by u.
  static Grads vjp(const Formula& s, const Formula& u) {
    const Formula w = arg(s, 3);
    const int len = s.dim(), k = w.dim() / len;
    Grads g = split(s, grad_along(s, concat(w, u)));
    Formula gw;
    for (int q = 0; q < k; ++q) {
      Formula wq = u;
      if (q > 0) wq = concat(extract(w, 0, q * len), wq);
      if (q + 1 < k) wq = concat(wq, extract(w, (q + 1) * len, (k - q - 1) * len));
      const Formula part = grad_along(s, wq);
      gw = gw.valid() ? concat(gw, part) : part;
    }
    g.push_back(gw);
    return g;
  }
};

void register_soft_dtw(std::vector<OpInfo>& t) {
  register_ops<SoftDtwOp, SoftDtwGradOp, SoftDtwGradDirOp>(t);
}

}  // namespace tessel
