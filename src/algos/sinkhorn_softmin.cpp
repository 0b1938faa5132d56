// Input checks of the Sinkhorn solver, its cost in canonical form, and the softmin reductions.
#include "algos/sinkhorn_softmin.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>

#include "tessel/error.hpp"

namespace tessel::ot_detail {

namespace {

// The shortest text that reads back to v: two masses 1 +- 1e-6 print as 1.000001 and 0.999999,
// where the stream's 6 digits printed 1 and 1.
std::string shortest(double v) {
  char buf[32];
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

template <class T>
void read_as(const ArrayView& v, std::vector<double>& out) {
  const T* p = static_cast<const T*>(v.data);
  const int64_t s0 = v.stride(0);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(p[i * s0]);
}

template <class T>
void write_as(const std::vector<double>& in, const ArrayView& v) {
  T* p = static_cast<T*>(v.data);
  const int64_t rows = v.shape[0], cols = v.shape.size() == 2 ? v.shape[1] : 1;
  const int64_t s0 = v.stride(0), s1 = v.shape.size() == 2 ? v.stride(1) : 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) p[r * s0 + c * s1] = static_cast<T>(in[r * cols + c]);
}

void check_positive(const char* what, double v) {
  if (!(v > 0) || !std::isfinite(v))
    detail::fail(kWho, what, " must be a finite number > 0, got ", v);
}

// The cost as C(vi(0, D), vj(1, D)), from the caller's formula or p.
Formula canonical_cost(const SinkhornOptions& opt, int64_t dim) {
  const int d = static_cast<int>(dim);
  const Formula x = vi(0, d), y = vj(1, d);
  if (!opt.cost.valid()) {
    if (opt.p == 2) return sqdist(x, y) * 0.5;
    if (opt.p == 1) return norm2(x - y);
    detail::fail(kWho, "p = ", opt.p, " needs a cost formula: the built-in costs are |x - y| ",
                 "(p = 1) and |x - y|^2 / 2 (p = 2)");
  }
  const Formula& c = opt.cost;
  if (c.dim() != 1)
    detail::fail(kWho, "the cost ", c.str(), " has dim ", c.dim(), "; expected a scalar (dim 1)");
  const std::vector<AliasInfo> vars = variable_info(c);
  const AliasInfo* xi = nullptr;
  const AliasInfo* yj = nullptr;
  for (const AliasInfo& v : vars) {
    const AliasInfo*& slot = v.cat == Category::I ? xi : v.cat == Category::J ? yj : xi;
    if (v.cat == Category::Param || slot != nullptr)
      detail::fail(kWho, "the cost ", c.str(), " must have exactly one i-variable (x) and one ",
                   "j-variable (y) and no parameter; variable ", v.index, " is one too many");
    if (v.dim != d)
      detail::fail(kWho, "the cost's variable ", v.index, " has dim ", v.dim,
                   " but the points have dim ", d);
    slot = &v;
  }
  if (xi == nullptr || yj == nullptr)
    detail::fail(kWho, "the cost ", c.str(), " must depend on one i-variable (x) and one ",
                 "j-variable (y)");
  return substitute(c, {var(xi->index, d, Category::I), var(yj->index, d, Category::J)}, {x, y});
}

}  // namespace

std::vector<double> read_vector(const ArrayView& v) {
  std::vector<double> out(static_cast<size_t>(v.shape.empty() ? 0 : v.shape[0]));
  v.dtype == DType::Float32 ? read_as<float>(v, out) : read_as<double>(v, out);
  return out;
}

void write_view(const std::vector<double>& v, const ArrayView& out) {
  out.dtype == DType::Float32 ? write_as<float>(v, out) : write_as<double>(v, out);
}

Cloud read_cloud(const ArrayView& w, const ArrayView& pts, const char* wname, const char* pname) {
  for (const auto& [v, name] : {std::pair{&w, wname}, std::pair{&pts, pname}})
    if (v->dtype != DType::Float32 && v->dtype != DType::Float64)
      detail::fail_type(kWho, name, " has dtype ", dtype_name(v->dtype),
                        "; expected float32 or float64");
  // The points are only read by the reductions (on their device); the weights by the loop.
  if (w.device.kind != DeviceKind::CPU)
    detail::fail(kWho, wname, " is on a CUDA device; expected a CPU array (the loop reads the ",
                 "weights on the host; the points may be on the GPU)");
  if (pts.shape.size() != 2 || pts.shape[0] < 1 || pts.shape[1] < 1)
    detail::fail(kWho, pname, " has shape ", shape_str(pts.shape),
                 "; expected (n, D) with n >= 1 points of dimension D >= 1");
  if (pts.data == nullptr) detail::fail(kWho, pname, " has no data");
  Cloud c;
  c.pts = pts;
  c.n = pts.shape[0];
  const bool col = w.shape.size() == 2 && w.shape[1] == 1;
  if (!(w.shape.size() == 1 || col) || w.shape[0] != c.n)
    detail::fail(kWho, wname, " has shape ", shape_str(w.shape), "; expected (", c.n, ",) or (",
                 c.n, ", 1): one weight per point of ", pname);
  if (w.dtype != pts.dtype)
    detail::fail_type(kWho, wname, " has dtype ", dtype_name(w.dtype), " but ", pname, " has ",
                      dtype_name(pts.dtype), "; expected the same dtype");
  if (w.data == nullptr) detail::fail(kWho, wname, " has no data");
  c.w = read_vector(w);
  c.logw.resize(c.w.size());
  for (size_t i = 0; i < c.w.size(); ++i) {
    const double v = c.w[i];
    if (!(v >= 0) || !std::isfinite(v))
      detail::fail(kWho, wname, "[", i, "] = ", v, "; weights must be finite and >= 0");
    c.mass += v;
    c.logw[i] = v > 0 ? std::log(v) : kLogZero;
  }
  if (!(c.mass > 0)) detail::fail(kWho, wname, " sums to 0; expected a positive total mass");
  return c;
}

Setup make_setup(const Cloud& cx, const Cloud& cy, const SinkhornOptions& opt) {
  Setup s;
  if (cx.pts.dtype != cy.pts.dtype)
    detail::fail_type(kWho, "x has dtype ", dtype_name(cx.pts.dtype), " but y has ",
                      dtype_name(cy.pts.dtype), "; expected the same dtype");
  if (cx.pts.shape[1] != cy.pts.shape[1])
    detail::fail(kWho, "x has points of dimension ", cx.pts.shape[1], " but y of dimension ",
                 cy.pts.shape[1], "; expected the same");
  if (cx.pts.device.kind != cy.pts.device.kind ||
      (cx.pts.device.kind == DeviceKind::CUDA && cx.pts.device.index != cy.pts.device.index))
    detail::fail(kWho, "x and y must be on the same device (both CPU, or one CUDA device)");
  s.dim = cx.pts.shape[1];
  s.dtype = cx.pts.dtype;
  check_positive("p", opt.p);
  check_positive("blur", opt.blur);
  if (!(opt.scaling > 0 && opt.scaling < 1))
    detail::fail(kWho, "scaling must be in (0, 1), got ", opt.scaling);
  if (opt.diameter) check_positive("diameter", *opt.diameter);
  if (!(opt.tol >= 0) || !std::isfinite(opt.tol))
    detail::fail(kWho, "tol must be a finite number >= 0, got ", opt.tol);
  if (opt.max_iter < 1) detail::fail(kWho, "max_iter must be >= 1, got ", opt.max_iter);
  s.eps = std::pow(opt.blur, opt.p);
  const std::optional<double> rx = opt.reach_x ? opt.reach_x : opt.reach;
  const std::optional<double> ry = opt.reach_y ? opt.reach_y : opt.reach;
  if (rx) check_positive(opt.reach_x ? "reach_x" : "reach", *rx);
  if (ry) check_positive(opt.reach_y ? "reach_y" : "reach", *ry);
  if (rx) s.rho_x = std::pow(*rx, opt.p);
  if (ry) s.rho_y = std::pow(*ry, opt.p);
  if (!rx && !ry) {
    // Balanced OT has no solution between different masses: the potentials would drift.
    const double tol = s.dtype == DType::Float32 ? 1e-4 : 1e-8;
    if (std::abs(cx.mass - cy.mass) > tol * std::max(cx.mass, cy.mass))
      detail::fail(kWho, "balanced OT (no reach) needs equal total masses; a sums to ",
                   shortest(cx.mass), " and b to ", shortest(cy.mass),
                   ": normalise the weights or give a reach");
  }
  s.cost = canonical_cost(opt, s.dim);
  const int d = static_cast<int>(s.dim);
  s.cost_t = substitute(s.cost, {vi(0, d), vj(1, d)}, {vj(1, d), vi(0, d)});
  s.symmetric = !opt.cost.valid() || s.cost_t.same(s.cost);
  return s;
}

Softmin::Softmin(const Formula& cost, int64_t dim) : dim_(dim), cost_(cost) {
  // h_j - C(u_i, v_j) / eps with h = vj(2, 1) and 1 / eps = pm(3, 1).
  lse_ = Reduction(ReductionOp::LogSumExp, vj(2, 1) - pm(3, 1) * cost_);
}

void Softmin::apply(const Cloud& u, const Cloud& v, const std::vector<double>& pot, double eps,
                    std::vector<double>& out, const Options& eval) const {
  const DType t = u.pts.dtype;
  Array h(t, {v.n, 1}), inv(t, {1}), lse(t, {u.n, 1});
  std::vector<double> hv(static_cast<size_t>(v.n));
  for (size_t j = 0; j < hv.size(); ++j) hv[j] = v.logw[j] + pot[j] / eps;
  write_view(hv, h.view());
  write_view({1.0 / eps}, inv.view());
  const ArrayView in[4] = {u.pts, v.pts, h.view(), inv.view()};
  const ArrayView outs[1] = {lse.view()};
  evaluate(lse_, std::span<const ArrayView>(in), std::span<const ArrayView>(outs), eval);
  out.resize(static_cast<size_t>(u.n));
  for (size_t i = 0; i < out.size(); ++i) out[i] = -eps * lse.at(static_cast<int64_t>(i));
}

void Softmin::grad_rows(const Cloud& u, const Cloud& v, const std::vector<double>& pot,
                        const std::vector<double>& out, double eps, double damp,
                        const std::vector<double>& coef, std::vector<double>& grad,
                        const Options& eval) const {
  const int d = static_cast<int>(dim_);
  if (!grad_) {
    // exp(h_j + w_i - C / eps) dC/du, w_i = -lse_i = vi(4, 1): each row's softmax weights.
    const Formula dc = tessel::grad(cost_, vi(0, d), constant(1.0));
    grad_ = Reduction(ReductionOp::Sum, exp(vj(2, 1) + vi(4, 1) - pm(3, 1) * cost_) * dc);
  }
  const DType t = u.pts.dtype;
  Array h(t, {v.n, 1}), inv(t, {1}), w(t, {u.n, 1}), g(t, {u.n, dim_});
  std::vector<double> hv(static_cast<size_t>(v.n)), wv(static_cast<size_t>(u.n));
  for (size_t j = 0; j < hv.size(); ++j) hv[j] = v.logw[j] + pot[j] / eps;
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = out[i] / (damp * eps);
  write_view(hv, h.view());
  write_view(wv, w.view());
  write_view({1.0 / eps}, inv.view());
  const ArrayView in[5] = {u.pts, v.pts, h.view(), inv.view(), w.view()};
  const ArrayView outs[1] = {g.view()};
  evaluate(*grad_, std::span<const ArrayView>(in), std::span<const ArrayView>(outs), eval);
  for (int64_t i = 0; i < u.n; ++i) {
    const double c = coef[i] * damp;
    if (c == 0) continue;
    for (int64_t k = 0; k < dim_; ++k) grad[i * dim_ + k] += c * g.at(i * dim_ + k);
  }
}

}  // namespace tessel::ot_detail
