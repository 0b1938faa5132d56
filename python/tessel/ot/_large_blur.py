"""Sinkhorn at a temperature far above the costs: each softmin as a series in C / eps.

When eps = blur^p dwarfs the costs, exp(-C / eps) rounds to 1 and the log-sum-exp softmin
-eps log sum_j b_j exp((g_j - C_ij) / eps) keeps nothing of its O(C) value: it is the
difference of O(eps) numbers (past eps ~ C / rounding the loss read 0, or garbage in float32).
With h_ij = C_ij - g_j, nu_i = E_beta[h_i.] (beta = b / sum b) and w = h - nu, it equals
    -eps log(sum b) + nu_i - eps log1p(t_i),   t_i = sum_k E_beta[(-w_i. / eps)^k] / k!,
whose terms are all O(C): nu is a plain weighted mean and eps log1p(t) = E[w^2] / (2 eps) + ...
The moments of w / span (span: the costs' range) are Sum reductions (memory O(N + M)); with
_TERMS of them the series is exact to float64's rounding wherever span / eps <= _SWITCH, and
the log-sum-exp loses at most rounding * eps / span there: both agree at the switch.

The loop is the core's, replayed (tessel.ot._unrolled's order): cold start at the schedule's
first eps, the schedule's updates, then the last extrapolation; each softmin by the series where
its eps is past the switch, else by the log-sum-exp. Balanced problems run on the normalised
measures, whose potentials carry no -eps log(mass) terms: those cancel between f and g (and in
the divergence), and with debias=False their sum -eps log(sqrt(mass_a mass_b)) is added to f and
g at the end. Everything runs in float64 (float32 inputs are cast, and the results rounded once).
"""
import math

import torch

from .. import _core
from ..lazytensor import Vi, Vj
from ._implicit import cost_lazy, damping
from ._potentials import bounding_diameter, first_order_only
from ._ranges import to_float32

_TERMS = 6
# span / eps below which the softmins are series: the float64 loop's rounding there is
# ~1e-16 eps / span = 3e-15 of the costs, the series' truncation ~(2 span / eps)^7 / 7! below
# that; float32's loop loses ~2e-8 eps / span, so the (float64) series takes over earlier.
_SWITCH = {torch.float64: 1 / 32, torch.float32: 1 / 4}
_LOG_ZERO = -1e5  # the core's log of a zero weight


def cost_span(x, y, formula, p):
    """A bound on max - min of the cost over every pair of points of x and y together: from
    the bounding box for the built-in costs (|x-y|^2 / 2, |x-y|), else by two reductions."""
    if formula is None:
        d = bounding_diameter(x, y) or 0.0
        return d * d / 2 if p == 2 else d
    z = torch.cat((x.detach(), y.detach())).double()
    c = cost_lazy(formula, z, z, p)
    return float(c.max(1).max() - c.min(1).min())


def in_series_regime(x, y, settings):
    """Whether the last eps = blur^p is past the switch for these clouds (1-D problem)."""
    eps = settings["blur"] ** settings["p"]
    span = cost_span(x, y, settings["cost"], settings["p"])
    return span <= _SWITCH[x.dtype] * eps


class _Problem:
    """One pair of clouds in float64, with the softmin that suits each eps."""

    def __init__(self, a, x, b, y, settings, one_sided=False):
        pw = settings["p"]
        # Envelope gradients: each potential moves with its own points only (the core's rule).
        self.one_sided = one_sided
        self.pw, self.formula = pw, settings["cost"]
        self.rho_x = None if settings["reach_x"] is None else settings["reach_x"] ** pw
        self.rho_y = None if settings["reach_y"] is None else settings["reach_y"] ** pw
        self.balanced = self.rho_x is None and self.rho_y is None
        if self.balanced:  # the normalised measures (see the module's docstring)
            self.mass = (a.sum(), b.sum())
            a, b = a / self.mass[0], b / self.mass[1]
        self.a, self.x, self.b, self.y = a, x, b, y
        self.span = cost_span(x, y, self.formula, pw) or 1.0
        self.switch = _SWITCH[settings["dtype"]]

    def cost(self, u, v):
        return cost_lazy(self.formula, u, v, self.pw)

    def softmin(self, eps, u, v, w, pot):
        """-eps log sum_j w_j exp((pot_j - C(u_i, v_j)) / eps), undamped: (N,)."""
        v = v.detach() if self.one_sided else v
        if self.span > self.switch * eps:
            logw = torch.log(w).clamp_min(_LOG_ZERO)
            lse = (Vj((logw + pot / eps)[:, None]) - self.cost(u, v) / eps).logsumexp(1)
            return -eps * lse[:, 0]
        log_mass = None if self.balanced else torch.log(w.sum())
        return series_softmin(eps, self.cost(u, v), w, pot, self.span, log_mass)


def series_softmin(eps, cost, w, pot, span, log_mass=None):
    """The softmin of the module's docstring for the (N, M) LazyTensor cost, weights w (M,)
    and potentials pot (M,), by _TERMS moments of (h - nu) / span. log_mass: log(sum w), or
    None for weights that are a normalised measure (its rounding times eps would be garbage)."""
    mass = w.sum()
    beta = Vj((w / mass)[:, None])
    h = cost - Vj(pot[:, None])
    nu = (h * beta).sum(1)
    z = (h - Vi(nu)) / span
    powers, zk = z, z
    for _ in range(_TERMS - 1):
        zk = zk * z
        powers = powers.concat(zk)
    moments = (powers * beta).sum(1)
    out = from_moments(nu[:, 0], moments, span, eps)
    return out if log_mass is None else out - eps * log_mass


def from_moments(nu, moments, span, eps):
    """nu_i - eps log1p(t_i) (the module's docstring) from the weighted mean nu (N,) of
    h = C - g and the moments (N, _TERMS) of (h - nu) / span: the softmin, less -eps log(mass)."""
    ratio = span / eps
    # t = E[exp(-ratio z)] - 1 = ratio u, u = sum_k (-1)^k ratio^(k-1) E[z^k] / k! (Horner);
    # eps log1p(t) = span u (log1p(t) / t): no eps-sized number on the way.
    v = torch.zeros_like(moments[..., 0])
    for k in range(_TERMS, 0, -1):
        v = moments[..., k - 1] / math.factorial(k) - ratio * v
    u = -v
    t = ratio * u
    flat = t == 0
    safe = torch.where(flat, torch.ones_like(t), t)
    per_t = torch.where(flat, torch.ones_like(t), torch.log1p(safe) / safe)
    return nu - span * u * per_t


def dense_series_softmin(eps, cost, logw, pot, span):
    """series_softmin on stored (B, N, M) cost matrices, logw (B, M) the log-weights of a
    normalised measure: (B, N), less -eps log(mass)."""
    beta = torch.exp(logw)[:, None, :]
    h = cost - pot[:, None, :]
    nu = (beta * h).sum(-1)
    z = (h - nu[..., None]) / span
    moments = torch.stack([(beta * z ** k).sum(-1) for k in range(1, _TERMS + 1)], -1)
    return from_moments(nu, moments, span, eps)


def _marginal_error(w, pot, s, eps, rho, mass=1.0):
    """sum_i w_i |exp((pot_i - s_i) / eps) - exp(-pot_i / rho)| (the core's), by expm1: the two
    terms are 1 + O(C / eps)."""
    target = 0.0 if rho is None else torch.expm1(-pot / rho)
    return mass * float((w * (torch.expm1((pot - s) / eps) - target).abs()).sum())


class _Loop:
    """The core's loop (cold start, schedule, tolerance, last extrapolation) on a _Problem."""

    def __init__(self, prob, debias, alternating):
        self.prob, self.debias, self.alternating = prob, debias, alternating
        ma, mb = prob.mass if prob.balanced else (1.0, 1.0)
        self.masses = (float(ma), float(mb))

    def softmins(self, st, eps, alternate=False):
        """The undamped softmins of the state (g's from the new f when alternating)."""
        pr = self.prob
        sf = pr.softmin(eps, pr.x, pr.y, pr.b, st[1])
        f = damping(eps, pr.rho_x) * sf if alternate else st[0]
        out = [sf, pr.softmin(eps, pr.y, pr.x, pr.a, f)]
        if self.debias:
            out += [pr.softmin(eps, pr.x, pr.x, pr.a, st[2]),
                    pr.softmin(eps, pr.y, pr.y, pr.b, st[3])]
        return out

    def extrapolate(self, st, eps):
        """Every potential as the (damped) softmin of the state: cold start, last step."""
        dx, dy = damping(eps, self.prob.rho_x), damping(eps, self.prob.rho_y)
        s = self.softmins(st, eps)
        return [d * t for d, t in zip((dx, dy, dx, dy), s)]

    def errors(self, st, s, eps, alternate):
        pr, (ma, mb) = self.prob, self.masses
        err = _marginal_error(pr.b, st[1], s[1], eps, pr.rho_y, mb)
        if not alternate:
            err += _marginal_error(pr.a, st[0], s[0], eps, pr.rho_x, ma)
        if not self.debias:
            return [eps, err, 0.0, 0.0]
        return [eps, err, 2 * _marginal_error(pr.a, st[2], s[2], eps, pr.rho_x, ma),
                2 * _marginal_error(pr.b, st[3], s[3], eps, pr.rho_y, mb)]

    def finish(self, st, s, eps, alternate):
        dx, dy = damping(eps, self.prob.rho_x), damping(eps, self.prob.rho_y)
        if alternate:
            out = [dx * s[0], dy * s[1]]
        else:
            out = [(st[0] + dx * s[0]) / 2, (st[1] + dy * s[1]) / 2]
        if self.debias:  # the symmetric problems always average (their plain map oscillates)
            out += [(st[2] + dx * s[2]) / 2, (st[3] + dy * s[3]) / 2]
        return out

    def run(self, schedule, eps_last, tol, max_iter, history):
        """The state after the schedule (and, with tol > 0, until the errors are <= tol);
        appends one [eps, error, error_x, error_y] per iteration. Returns (state, converged)."""
        pr = self.prob
        zero = [pr.x.new_zeros(pr.x.shape[0]), pr.y.new_zeros(pr.y.shape[0])]
        st = self.extrapolate(zero * 2, schedule[0])
        n_max = max(len(schedule), max_iter) if tol > 0 else len(schedule)
        for k in range(n_max):
            eps = schedule[k] if k < len(schedule) else eps_last
            s = self.softmins(st, eps, self.alternating)
            history.append(self.errors(st, s, eps, self.alternating))
            # Past the switch the marginal errors shrink as span / eps at a fixed error of the
            # potentials (the plan tends to a x b whatever they are): the loop stops on the
            # errors scaled back by eps / span, the potentials' own relative error.
            scaled = max(history[-1][1:]) * max(1.0, eps / pr.span)
            if tol > 0 and k >= len(schedule) - 1 and scaled <= tol:
                return st, True
            st = self.finish(st, s, eps, self.alternating)
        return st, False


def _refined(loop, st, eps, sweeps=6):
    """The fixed point at eps, differentiable (gradient="implicit"): alternating sweeps of f, g
    and, for p and q, T = (S^2 + S^3) / 2 of their symmetric softmin S, from the converged state
    (detached). Past the switch each contracts everything but the balanced shift (f + c, g - c)
    by (span / eps)^2 <= 1e-3 (S alone flips the mean of p; T cancels it), so the derivatives of
    the last sweeps are the implicit ones to rounding."""
    pr = loop.prob
    dx, dy = damping(eps, pr.rho_x), damping(eps, pr.rho_y)
    f, g = st[0].detach(), st[1].detach()
    for _ in range(sweeps):
        f = dx * pr.softmin(eps, pr.x, pr.y, pr.b, g)
        g = dy * pr.softmin(eps, pr.y, pr.x, pr.a, f)
    out = [f, g]
    for w, u, d, p in ((pr.a, pr.x, dx, st[2]), (pr.b, pr.y, dy, st[3]))[:2 if loop.debias else 0]:
        p = p.detach()
        for _ in range(sweeps):
            s1 = d * pr.softmin(eps, u, u, w, p)
            s2 = d * pr.softmin(eps, u, u, w, s1)
            p = (s2 + d * pr.softmin(eps, u, u, w, s2)) / 2
        out.append(p)
    return out


def series_potentials(gradient, a, x, b, y, solve, settings, report=None):
    """(f, g, p, q) of one problem whose blur is past the switch (in_series_regime), in x's
    dtype, differentiable as `gradient` says ("envelope": the last extrapolation with the state
    and the weights held constant; "unrolled": through every iteration; "implicit": the fixed
    point's derivatives, see _refined). solve: the core's options (tol, max_iter, alternating)."""
    dtype = x.dtype
    if gradient == "envelope":
        x, y = first_order_only(x, y)
    a, x, b, y = (t.double() for t in (a, x, b, y))
    pw, blur = settings["p"], settings["blur"]
    diameter = settings["diameter"] or bounding_diameter(x, y) or blur
    schedule = _core.epsilon_schedule(pw, diameter, blur, settings["scaling"])
    eps = blur ** pw
    debias = settings["debias"]
    settings = dict(settings, dtype=dtype)
    history = []
    with torch.set_grad_enabled(torch.is_grad_enabled() and gradient == "unrolled"):
        held = [t.detach() for t in (a, x, b, y)] if gradient != "unrolled" else (a, x, b, y)
        loop = _Loop(_Problem(*held, settings), debias, solve["alternating"])
        st, converged = loop.run(schedule, eps, solve["tol"], solve["max_iter"], history)
    if gradient == "unrolled":
        out = loop.extrapolate(st, eps)
    else:  # envelope: x and y live, the weights constant (tessel.ot's envelope convention)
        live = (a.detach(), x, b.detach(), y) if gradient == "envelope" else (a, x, b, y)
        prob = _Problem(*live, settings, one_sided=gradient == "envelope")
        loop = _Loop(prob, debias, solve["alternating"])
        out = loop.extrapolate(st, eps) if gradient == "envelope" else _refined(loop, st, eps)
    out = _with_masses(loop.prob, out, eps, debias)
    if report is not None:
        report.update(history=history, converged=converged, eps=eps, diameter=diameter,
                      series=True)
    if not debias:
        out = out[:2] + [x.new_zeros(0), x.new_zeros(0)]
    return [t if dtype == torch.float64 else to_float32(t, "tessel.ot") for t in out]


def _with_masses(prob, out, eps, debias):
    """A balanced problem's potentials from the normalised measures': + -eps log(mass) / 2 on f
    and g (masses equal to the core's check; their geometric mean) for OT_eps; with debias
    these terms cancel in F = f - p, G = g - q and the value, and are left out (added, they
    would round away O(C) digits of numbers of size eps log(mass))."""
    if not prob.balanced or debias:
        return out
    shift = -eps * (torch.log(prob.mass[0]) + torch.log(prob.mass[1])) / 4
    return [out[0] + shift, out[1] + shift] + out[2:]
