// The log-domain Sinkhorn loop with ε-scaling (balanced, unbalanced, debiased) and the envelope
// gradient of its potentials.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "algos/sinkhorn_softmin.hpp"
#include "tessel/error.hpp"
#include "tessel/ot.hpp"

namespace tessel {

using namespace ot_detail;

namespace {

using Vec = std::vector<double>;

// sum_i w_i |exp((pot_i - s_i) / eps) - exp(-pot_i / rho)|: how far the plan's marginal on this
// side (w_i exp((pot_i - s_i) / eps), s the softmin the potential would be updated from) is from
// the fixed point's (w_i, shrunk by exp(-pot_i / rho) when unbalanced).
double marginal_error(const Cloud& c, const Vec& pot, const Vec& s, double eps,
                      const std::optional<double>& rho) {
  double err = 0;
  for (size_t i = 0; i < pot.size(); ++i) {
    if (c.w[i] == 0) continue;
    const double target = rho ? std::exp(-pot[i] / *rho) : 1.0;
    err += c.w[i] * std::abs(std::exp((pot[i] - s[i]) / eps) - target);
  }
  return err;
}

void average_into(Vec& pot, const Vec& s, double damp) {
  for (size_t i = 0; i < pot.size(); ++i) pot[i] = 0.5 * (pot[i] + damp * s[i]);
}

void scale_into(Vec& pot, const Vec& s, double damp) {
  pot.resize(s.size());
  for (size_t i = 0; i < s.size(); ++i) pot[i] = damp * s[i];
}

Array to_array(const Vec& v, DType t) {
  Array a(t, {static_cast<int64_t>(v.size())});
  write_view(v, a.view());
  return a;
}

// The bounding-box diagonal of both clouds (GeomLoss's estimate), checking the points are finite.
double bbox_diameter(const Cloud& cx, const Cloud& cy, int64_t dim) {
  double d2 = 0;
  for (int64_t k = 0; k < dim; ++k) {
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& [c, name] : {std::pair{&cx, "x"}, std::pair{&cy, "y"}}) {
      const ArrayView& p = c->pts;
      const int64_t s0 = p.stride(0), s1 = p.stride(1);
      for (int64_t i = 0; i < c->n; ++i) {
        const int64_t at = i * s0 + k * s1;
        const double v = p.dtype == DType::Float32 ? static_cast<const float*>(p.data)[at]
                                                   : static_cast<const double*>(p.data)[at];
        if (!std::isfinite(v))
          detail::fail(kWho, name, "[", i, ", ", k, "] = ", v, "; points must be finite");
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
    d2 += (hi - lo) * (hi - lo);
  }
  return std::sqrt(d2);
}

}  // namespace

std::vector<double> epsilon_schedule(double p, double diameter, double blur, double scaling) {
  // As NumPy's arange(start, stop, step) reads them: ceil((stop - start) / step) values.
  const double start = p * std::log(diameter), stop = p * std::log(blur),
               step = p * std::log(scaling);
  std::vector<double> eps{std::pow(diameter, p)};
  const double count = std::ceil((stop - start) / step);
  const double delta = (start + step) - start;
  for (int64_t k = 0; k < static_cast<int64_t>(std::max(count, 0.0)); ++k)
    eps.push_back(std::exp(start + static_cast<double>(k) * delta));
  eps.push_back(std::pow(blur, p));
  return eps;
}

std::string SinkhornResult::str() const {
  char buf[160];
  const SinkhornIteration last = history.empty() ? SinkhornIteration{} : history.back();
  std::snprintf(buf, sizeof buf, "%zu iterations, eps %.3g, marginal error %.3g%s", history.size(),
                eps, last.error + last.error_x + last.error_y, converged ? " (converged)" : "");
  return buf;
}

SinkhornResult sinkhorn(const ArrayView& a, const ArrayView& x, const ArrayView& b,
                        const ArrayView& y, const SinkhornOptions& opt) {
  const Cloud cx = read_cloud(a, x, "a", "x"), cy = read_cloud(b, y, "b", "y");
  const Setup s = make_setup(cx, cy, opt);
  SinkhornResult r;
  r.eps = s.eps;
  r.rho_x = s.rho_x;
  r.rho_y = s.rho_y;
  // Host points are read once here, which also checks that they are finite; the core reads no
  // device memory, so points on a GPU need the diameter from the caller.
  const bool on_device = cx.pts.device.kind == DeviceKind::CUDA;
  if (on_device && !opt.diameter)
    detail::fail(kWho, "x and y are on a CUDA device: give the diameter (the loop reads no ",
                 "device memory to measure the clouds)");
  const double bbox = on_device ? 0 : bbox_diameter(cx, cy, s.dim);
  // Coincident clouds have no scale to descend from: start at blur.
  r.diameter = opt.diameter ? *opt.diameter : bbox > 0 ? bbox : opt.blur;
  const Vec schedule = epsilon_schedule(opt.p, r.diameter, opt.blur, opt.scaling);

  const Softmins sm(s);
  const Softmin &fwd = sm.xy(), &bwd = sm.yx();
  const Options& ev = opt.eval;
  const bool alternating = opt.update == SinkhornUpdate::Alternating;

  // Initialisation at the first temperature, from zero potentials.
  double eps = schedule[0];
  const Vec zx(static_cast<size_t>(cx.n), 0.0), zy(static_cast<size_t>(cy.n), 0.0);
  Vec f, g, p, q, sf, sg, sp, sq;
  fwd.apply(cx, cy, zy, eps, sf, ev);
  bwd.apply(cy, cx, zx, eps, sg, ev);
  scale_into(f, sf, damping(eps, s.rho_x));
  scale_into(g, sg, damping(eps, s.rho_y));
  if (opt.debias) {
    fwd.apply(cx, cx, zx, eps, sp, ev);
    fwd.apply(cy, cy, zy, eps, sq, ev);
    scale_into(p, sp, damping(eps, s.rho_x));
    scale_into(q, sq, damping(eps, s.rho_y));
  }

  const int64_t n_sched = static_cast<int64_t>(schedule.size());
  const int64_t n_max = opt.tol > 0 ? std::max(n_sched, opt.max_iter) : n_sched;
  for (int64_t k = 0; k < n_max; ++k) {
    eps = k < n_sched ? schedule[k] : s.eps;
    const double dx = damping(eps, s.rho_x), dy = damping(eps, s.rho_y);
    SinkhornIteration it;
    it.eps = eps;
    fwd.apply(cx, cy, g, eps, sf, ev);
    if (alternating) {
      // The pair (new f, g): its row marginal is exact, the error is the columns'.
      scale_into(f, sf, dx);
      bwd.apply(cy, cx, f, eps, sg, ev);
      it.error = marginal_error(cy, g, sg, eps, s.rho_y);
    } else {
      bwd.apply(cy, cx, f, eps, sg, ev);
      it.error = marginal_error(cx, f, sf, eps, s.rho_x) + marginal_error(cy, g, sg, eps, s.rho_y);
    }
    if (opt.debias) {
      fwd.apply(cx, cx, p, eps, sp, ev);
      fwd.apply(cy, cy, q, eps, sq, ev);
      // Both marginals of a symmetric plan are equal.
      it.error_x = 2 * marginal_error(cx, p, sp, eps, s.rho_x);
      it.error_y = 2 * marginal_error(cy, q, sq, eps, s.rho_y);
    }
    r.history.push_back(it);
    const bool at_final = k >= n_sched - 1;
    if (opt.tol > 0 && at_final && it.error <= opt.tol && it.error_x <= opt.tol &&
        it.error_y <= opt.tol) {
      r.converged = true;
      break;  // the potentials entering this iteration meet the tolerance: keep them
    }
    if (alternating) {
      scale_into(g, sg, dy);
    } else {
      average_into(f, sf, dx);
      average_into(g, sg, dy);
    }
    // The symmetric problems always average: their plain fixed-point map oscillates.
    if (opt.debias) {
      average_into(p, sp, dx);
      average_into(q, sq, dy);
    }
  }

  r.f_in = f;
  r.g_in = g;
  r.p_in = p;
  r.q_in = q;
  if (opt.last_extrapolation) {
    // Every potential from the converged ones at blur^p: one softmin away from x and y.
    eps = s.eps;
    fwd.apply(cx, cy, r.g_in, eps, sf, ev);
    bwd.apply(cy, cx, r.f_in, eps, sg, ev);
    scale_into(f, sf, damping(eps, s.rho_x));
    scale_into(g, sg, damping(eps, s.rho_y));
    if (opt.debias) {
      fwd.apply(cx, cx, r.p_in, eps, sp, ev);
      fwd.apply(cy, cy, r.q_in, eps, sq, ev);
      scale_into(p, sp, damping(eps, s.rho_x));
      scale_into(q, sq, damping(eps, s.rho_y));
    }
  }
  r.f = to_array(f, s.dtype);
  r.g = to_array(g, s.dtype);
  // Without debias p and q are empty (shape (0,)).
  r.p = to_array(p, s.dtype);
  r.q = to_array(q, s.dtype);
  return r;
}

void sinkhorn_potentials_vjp(const ArrayView& a, const ArrayView& x, const ArrayView& b,
                             const ArrayView& y, const SinkhornOptions& opt,
                             const SinkhornResult& result, const ArrayView& cot_f,
                             const ArrayView& cot_g, const ArrayView& cot_p, const ArrayView& cot_q,
                             const ArrayView& grad_x, const ArrayView& grad_y) {
  constexpr const char* who = "sinkhorn_potentials_vjp";
  const Cloud cx = read_cloud(a, x, "a", "x"), cy = read_cloud(b, y, "b", "y");
  const Setup s = make_setup(cx, cy, opt);
  if (!opt.last_extrapolation)
    detail::fail(who, "the envelope gradient needs potentials from the last extrapolation; ",
                 "solve with last_extrapolation = true");
  if (result.f_in.size() != static_cast<size_t>(cx.n) ||
      result.g_in.size() != static_cast<size_t>(cy.n) || result.f.size() != cx.n ||
      result.g.size() != cy.n)
    detail::fail(who, "the result holds potentials for ", result.f.size(), " and ", result.g.size(),
                 " points but x and y have ", cx.n, " and ", cy.n,
                 ": pass the inputs the result was solved from");
  for (const auto& [v, name, rows] :
       {std::tuple{&grad_x, "grad_x", cx.n}, std::tuple{&grad_y, "grad_y", cy.n}})
    if (v->dtype != s.dtype || v->shape != std::vector<int64_t>{rows, s.dim} ||
        v->device.kind != DeviceKind::CPU || v->data == nullptr)
      detail::fail(who, name, " must be a CPU array of shape (", rows, ", ", s.dim, ") and dtype ",
                   dtype_name(s.dtype));
  // A cotangent is given when it has data; each must match its potential.
  auto cot = [&](const ArrayView& c, const char* name, int64_t rows, bool allowed) -> Vec {
    if (c.data == nullptr) return {};
    if (!allowed) detail::fail(who, name, " is given but the problem was solved without debias");
    const bool ok = c.dtype == s.dtype && c.device.kind == DeviceKind::CPU && !c.shape.empty() &&
                    c.shape[0] == rows &&
                    (c.shape.size() == 1 || (c.shape.size() == 2 && c.shape[1] == 1));
    if (!ok)
      detail::fail(who, name, " must be a CPU array of shape (", rows, ",) and dtype ",
                   dtype_name(s.dtype));
    return read_vector(c);
  };
  const bool deb = result.p.size() > 0;
  const Vec cf = cot(cot_f, "cot_f", cx.n, true), cg = cot(cot_g, "cot_g", cy.n, true);
  const Vec cp = cot(cot_p, "cot_p", cx.n, deb), cq = cot(cot_q, "cot_q", cy.n, deb);

  const double eps = s.eps, dx = damping(eps, s.rho_x), dy = damping(eps, s.rho_y);
  const Softmins sm(s);
  const Softmin &fwd = sm.xy(), &bwd = sm.yx();
  auto values = [](const Array& arr) {
    Vec v(static_cast<size_t>(arr.size()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = arr.at(static_cast<int64_t>(i));
    return v;
  };
  Vec gx(static_cast<size_t>(cx.n * s.dim), 0.0), gy(static_cast<size_t>(cy.n * s.dim), 0.0);
  const Options& ev = opt.eval;
  if (!cf.empty()) fwd.grad_rows(cx, cy, result.g_in, values(result.f), eps, dx, cf, gx, ev);
  if (!cg.empty()) bwd.grad_rows(cy, cx, result.f_in, values(result.g), eps, dy, cg, gy, ev);
  if (!cp.empty()) fwd.grad_rows(cx, cx, result.p_in, values(result.p), eps, dx, cp, gx, ev);
  if (!cq.empty()) fwd.grad_rows(cy, cy, result.q_in, values(result.q), eps, dy, cq, gy, ev);
  write_view(gx, grad_x);
  write_view(gy, grad_y);
}

}  // namespace tessel
