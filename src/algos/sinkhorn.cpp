// The one log-domain Sinkhorn loop (ε-scaling; balanced, unbalanced, debiased; warm-started and
// block-sparse for multiscale solves) and the envelope gradient of its potentials.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "algos/sinkhorn_softmin.hpp"
#include "algos/sinkhorn_truncation.hpp"
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

void check_start(const SinkhornStart& st, int64_t n, int64_t m, bool debias) {
  if (!(st.eps > 0) || !std::isfinite(st.eps))
    detail::fail(kWho, "start.eps must be the finite temperature > 0 of the start's potentials, ",
                 "got ", st.eps);
  for (const auto& [v, name, rows, needed] :
       {std::tuple{&st.f, "f", n, true}, std::tuple{&st.g, "g", m, true},
        std::tuple{&st.p, "p", n, debias}, std::tuple{&st.q, "q", m, debias}}) {
    const size_t want = needed ? static_cast<size_t>(rows) : 0;
    if (v->size() != want)
      detail::fail(kWho, "start.", name, " has ", v->size(), " values; expected ", want,
                   needed ? " (one per point)" : " (p and q are the debiasing problems')");
    for (size_t i = 0; i < v->size(); ++i)
      if (!std::isfinite((*v)[i]))
        detail::fail(kWho, "start.", name, "[", i, "] = ", (*v)[i], "; expected finite values");
  }
  for (double e : st.schedule)
    if (!(e > 0) || !std::isfinite(e))
      detail::fail(kWho, "start.schedule holds ", e, "; temperatures must be finite and > 0");
}

// The loop's potentials (f, g of the x-y problem; p, q of the x-x and y-y ones) and the softmins
// that update them, each over the blocks its truncation keeps when the solve has clusters.
class Loop {
 public:
  struct Pots {
    Vec f, g, p, q;
  };
  Pots st;  // the potentials

  Loop(const Cloud& cx, const Cloud& cy, const Setup& s, const SinkhornOptions& opt,
       const SinkhornClusters& cl)
      : cx_(cx), cy_(cy), s_(s), opt_(opt), sm_(s) {
    if (cl.bounds_x.empty()) return;
    xy_.emplace(cl.bounds_x, cl.bounds_y, cl.cmin_xy, cl.tau, opt.eval);
    if (!opt.debias) return;
    xx_.emplace(cl.bounds_x, cl.bounds_x, cl.cmin_xx, cl.tau, opt.eval);
    yy_.emplace(cl.bounds_y, cl.bounds_y, cl.cmin_yy, cl.tau, opt.eval);
  }

  // The softmin of x's points against (y, g), of y's against (x, f), and the symmetric ones.
  void f_from(const Vec& g, double eps, Vec& out) const {
    sm_.xy().apply(cx_, cy_, g, eps, out, xy_ ? xy_->rows() : opt_.eval);
  }
  void g_from(const Vec& f, double eps, Vec& out) const {
    sm_.yx().apply(cy_, cx_, f, eps, out, xy_ ? xy_->cols() : opt_.eval);
  }
  void p_from(const Vec& p, double eps, Vec& out) const {
    sm_.xy().apply(cx_, cx_, p, eps, out, xx_ ? xx_->rows() : opt_.eval);
  }
  void q_from(const Vec& q, double eps, Vec& out) const {
    sm_.xy().apply(cy_, cy_, q, eps, out, yy_ ? yy_->rows() : opt_.eval);
  }

  // Every potential replaced by its damped softmin of the others at eps (the initialisation from
  // zero, and the last extrapolation).
  void sweep(double eps) {
    f_from(st.g, eps, sm_out_.f);
    g_from(st.f, eps, sm_out_.g);
    scale_into(st.f, sm_out_.f, damping(eps, s_.rho_x));
    scale_into(st.g, sm_out_.g, damping(eps, s_.rho_y));
    if (!opt_.debias) return;
    p_from(st.p, eps, sm_out_.p);
    q_from(st.q, eps, sm_out_.q);
    scale_into(st.p, sm_out_.p, damping(eps, s_.rho_x));
    scale_into(st.q, sm_out_.q, damping(eps, s_.rho_y));
  }

  void cold_start(double eps) {
    st.f.assign(static_cast<size_t>(cx_.n), 0.0);
    st.g.assign(static_cast<size_t>(cy_.n), 0.0);
    if (opt_.debias) {
      st.p = st.f;
      st.q = st.g;
    }
    sweep(eps);
    retruncate(eps);
  }

  // The masks from the potentials at eps (nothing without clusters).
  void retruncate(double eps) {
    if (xy_) xy_->update(st.f, st.g, eps);
    if (xx_) xx_->update(st.p, st.p, eps);
    if (yy_) yy_->update(st.q, st.q, eps);
  }

  void keep_into(SinkhornResult& r) const {
    if (xy_) r.keep_xy = xy_->keep();
    if (xx_) r.keep_xx = xx_->keep();
    if (yy_) r.keep_yy = yy_->keep();
  }

  // One iteration per temperature of the schedule, then at blur^p while tol asks (max_iter in
  // all); each records its eps and marginal errors in r.history.
  void iterate(const Vec& schedule, SinkhornResult& r) {
    const int64_t n_sched = static_cast<int64_t>(schedule.size());
    const int64_t n_max = opt_.tol > 0 ? std::max(n_sched, opt_.max_iter) : n_sched;
    for (int64_t k = 0; k < n_max; ++k) {
      const bool on_schedule = k < n_sched;
      const double eps = on_schedule ? schedule[k] : s_.eps;
      const SinkhornIteration it = step(eps, alternating(on_schedule));
      r.history.push_back(it);
      if (opt_.tol > 0 && k >= n_sched - 1 && it.error <= opt_.tol && it.error_x <= opt_.tol &&
          it.error_y <= opt_.tol) {
        r.converged = true;
        return;  // the potentials entering this iteration meet the tolerance: keep them
      }
      finish_step(eps, alternating(on_schedule));
      // Past the schedule the masks hold: the errors the loop stops on are of one problem.
      if (on_schedule) retruncate(eps);
    }
  }

 private:
  bool alternating(bool on_schedule) const {
    return opt_.update == SinkhornUpdate::Alternating ||
           (opt_.update == SinkhornUpdate::SymmetricThenAlternating && !on_schedule);
  }

  // The softmins of one iteration and the marginal errors of the potentials entering it.
  SinkhornIteration step(double eps, bool alternate) {
    SinkhornIteration it;
    it.eps = eps;
    f_from(st.g, eps, sm_out_.f);
    if (alternate) {
      // The pair (new f, g): its row marginal is exact, the error is the columns'.
      scale_into(st.f, sm_out_.f, damping(eps, s_.rho_x));
      g_from(st.f, eps, sm_out_.g);
      it.error = marginal_error(cy_, st.g, sm_out_.g, eps, s_.rho_y);
    } else {
      g_from(st.f, eps, sm_out_.g);
      it.error = marginal_error(cx_, st.f, sm_out_.f, eps, s_.rho_x) +
                 marginal_error(cy_, st.g, sm_out_.g, eps, s_.rho_y);
    }
    if (opt_.debias) {
      p_from(st.p, eps, sm_out_.p);
      q_from(st.q, eps, sm_out_.q);
      // Both marginals of a symmetric plan are equal.
      it.error_x = 2 * marginal_error(cx_, st.p, sm_out_.p, eps, s_.rho_x);
      it.error_y = 2 * marginal_error(cy_, st.q, sm_out_.q, eps, s_.rho_y);
    }
    return it;
  }

  // The potentials after the iteration's softmins: g from the new f, or both averaged.
  void finish_step(double eps, bool alternate) {
    const double dx = damping(eps, s_.rho_x), dy = damping(eps, s_.rho_y);
    if (alternate) {
      scale_into(st.g, sm_out_.g, dy);
    } else {
      average_into(st.f, sm_out_.f, dx);
      average_into(st.g, sm_out_.g, dy);
    }
    // The symmetric problems always average: their plain fixed-point map oscillates.
    if (opt_.debias) {
      average_into(st.p, sm_out_.p, dx);
      average_into(st.q, sm_out_.q, dy);
    }
  }

  const Cloud &cx_, &cy_;
  const Setup& s_;
  const SinkhornOptions& opt_;
  const Softmins sm_;
  std::optional<Truncation> xy_, xx_, yy_;
  Pots sm_out_;  // the softmins of the last sweep or step
};

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
                        const ArrayView& y, const SinkhornOptions& opt, const SinkhornStart& start,
                        const SinkhornClusters& clusters) {
  const Cloud cx = read_cloud(a, x, "a", "x"), cy = read_cloud(b, y, "b", "y");
  const Setup s = make_setup(cx, cy, opt);
  const bool warm = !start.f.empty();
  if (warm) check_start(start, cx.n, cy.n, opt.debias);
  if (!clusters.bounds_x.empty() || !clusters.bounds_y.empty())
    check_clusters(clusters, cx.n, cy.n, opt.debias);
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
  const Vec schedule =
      warm ? start.schedule : epsilon_schedule(opt.p, r.diameter, opt.blur, opt.scaling);

  Loop loop(cx, cy, s, opt, clusters);
  if (warm) {
    loop.st = {start.f, start.g, start.p, start.q};
    loop.retruncate(start.eps);
  } else {
    loop.cold_start(schedule[0]);
  }
  loop.iterate(schedule, r);
  r.f_in = loop.st.f;
  r.g_in = loop.st.g;
  r.p_in = loop.st.p;
  r.q_in = loop.st.q;
  // Every potential from the converged ones at blur^p: one softmin away from x and y.
  if (opt.last_extrapolation) loop.sweep(s.eps);
  loop.keep_into(r);
  r.f = to_array(loop.st.f, s.dtype);
  r.g = to_array(loop.st.g, s.dtype);
  // Without debias p and q are empty (shape (0,)).
  r.p = to_array(loop.st.p, s.dtype);
  r.q = to_array(loop.st.q, s.dtype);
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
