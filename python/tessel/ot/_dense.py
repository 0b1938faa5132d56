"""Sinkhorn with a cost given as a function of dense tensors (GeomLoss's tensorized backend):
cost(x, y) maps (B, N, D) and (B, M, D) to the (B, N, M) cost matrix, so the matrices are
stored (memory O(N M), the price of a cost that is not a formula).

The loop is the core's (and GeomLoss's): GeomLoss's epsilon schedule, symmetric averaged updates
of the x-y potentials and, with debias, of the x-x and y-y ones, each softmin damped by
1 / (1 + eps / rho) of its own side's reach; then one last extrapolation at eps = blur^p with
autograd on, the potentials it starts from held constant. That is the envelope gradient: the
cost matrices are built as cost(x, y.detach()) and cost(y, x.detach()), so each potential is
differentiated through its own points only, as GeomLoss does.
"""
import functools

import torch

from .. import _core
from ._implicit import damping
from ._large_blur import _SWITCH, dense_series_softmin
from ._potentials import bounding_diameter, first_order_only

_WHO = "tessel.ot.SamplesLoss"


def _softmin(eps, cost, logw, pot, span, with_mass):
    """-eps log sum_j exp(logw_j + pot_j / eps - C_ij / eps), batched: cost (B, N, M), logw and
    pot (B, M) (pot None: zero) -> (B, N); past tessel.ot._large_blur's switch (span: the
    costs' range) by its series, in float64 (with_mass: logw is not a normalised measure's,
    whose -eps log(mass) is added)."""
    pot = torch.zeros_like(logw) if pot is None else pot
    if span <= _SWITCH[cost.dtype] * eps:
        lw = logw.double()
        mass = torch.logsumexp(lw, -1, keepdim=True) if with_mass else 0.0
        out = dense_series_softmin(eps, cost.double(), lw - mass, pot.double(), span)
        return (out - eps * mass).to(cost.dtype)
    h = (logw + pot / eps).to(cost.dtype)
    return -eps * torch.logsumexp(h[:, None, :] - cost / eps, dim=2)


def _matrix(cost, u, v):
    c = cost(u, v)
    want = (u.shape[0], u.shape[1], v.shape[1])
    if not isinstance(c, torch.Tensor) or tuple(c.shape) != want:
        raise ValueError(f"{_WHO}: the cost function returned "
                         f"{tuple(getattr(c, 'shape', ())) or type(c).__name__} for clouds of "
                         f"shapes {tuple(u.shape)} and {tuple(v.shape)}; expected a tensor of "
                         f"shape {want} (GeomLoss's convention for a cost function)")
    return c


def dense_potentials(a, x, b, y, cost, settings):
    """(f, g, p, q) stacked over the batch, with envelope gradients in x and y; a (B, N),
    x (B, N, D), b (B, M), y (B, M, D). p, q are empty without debias."""
    pw, blur, debias = settings["p"], settings["blur"], settings["debias"]
    # Envelope gradients: differentiating them again would drop the potentials' dependence.
    x, y = first_order_only(x, y, hint="give the cost as a formula string and pass "
                            "gradient='implicit' (exact) or 'unrolled'")
    rho_x = None if settings["reach_x"] is None else settings["reach_x"] ** pw
    rho_y = None if settings["reach_y"] is None else settings["reach_y"] ** pw
    diameter = settings["diameter"]
    if diameter is None:
        diameter = bounding_diameter(x, y) or blur
    schedule = _core.epsilon_schedule(pw, diameter, blur, settings["scaling"])
    c_xy, c_yx = _matrix(cost, x, y.detach()), _matrix(cost, y, x.detach())
    c_xx = _matrix(cost, x, x.detach()) if debias else None
    c_yy = _matrix(cost, y, y.detach()) if debias else None
    mats = [c for c in (c_xy, c_xx, c_yy) if c is not None]
    span = max(float(c.detach().max() - c.detach().min()) for c in mats) or 1.0
    balanced = rho_x is None and rho_y is None
    # Past the switch a balanced problem runs on the normalised measures (_large_blur).
    series = balanced and span <= _SWITCH[x.dtype] * schedule[-1]
    ma, mb = ((a.detach().double().sum(-1, keepdim=True), b.detach().double().sum(-1, keepdim=True))
              if series else (1, 1))
    softmin = functools.partial(_softmin, span=span, with_mass=not balanced)
    # In float64: float32's rounding of log(1/16) times eps ~ 1e16 would be garbage.
    la, lb = (torch.log(w.detach().double() / m) for w, m in ((a, ma), (b, mb)))

    def sweep(pots, eps, grad):
        dx, dy = damping(eps, rho_x), damping(eps, rho_y)
        f, g, p, q = pots
        cm = (lambda t: t) if grad else (lambda t: t.detach())
        out = [dx * softmin(eps, cm(c_xy), lb, g),
               dy * softmin(eps, cm(c_yx), la, f)]
        if debias:
            out += [dx * softmin(eps, cm(c_xx), la, p),
                    dy * softmin(eps, cm(c_yy), lb, q)]
        return out

    with torch.no_grad():
        eps = schedule[0]
        dx, dy = damping(eps, rho_x), damping(eps, rho_y)
        pots = [dx * softmin(eps, c_xy, lb, None), dy * softmin(eps, c_yx, la, None)]
        pots += ([dx * softmin(eps, c_xx, la, None),
                  dy * softmin(eps, c_yy, lb, None)] if debias
                 else [None, None])
        for eps in schedule:
            new = sweep(pots, eps, False)
            pots = [(o + n) / 2 for o, n in zip(pots, new)] + ([] if debias else [None, None])
    with torch.enable_grad():
        out = sweep([t if t is None else t.detach() for t in pots], schedule[-1], True)
    if not debias:
        if series:  # OT_eps's -eps log(mass) terms, split evenly (see _large_blur)
            shift = (-schedule[-1] * (torch.log(ma) + torch.log(mb)) / 4).to(out[0].dtype)
            out = [out[0] + shift, out[1] + shift]
        out += [x.new_zeros(x.shape[0], 0), x.new_zeros(x.shape[0], 0)]
    return out
