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
import torch

from .. import _core
from ._implicit import damping
from ._potentials import bounding_diameter, first_order_only

_WHO = "tessel.ot.SamplesLoss"


def _softmin(eps, cost, h):
    """-eps log sum_j exp(h_j - C_ij / eps), batched: cost (B, N, M), h (B, M) -> (B, N)."""
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
    la, lb = torch.log(a.detach()), torch.log(b.detach())

    def sweep(pots, eps, grad):
        dx, dy = damping(eps, rho_x), damping(eps, rho_y)
        f, g, p, q = pots
        cm = (lambda t: t) if grad else (lambda t: t.detach())
        out = [dx * _softmin(eps, cm(c_xy), lb + g / eps),
               dy * _softmin(eps, cm(c_yx), la + f / eps)]
        if debias:
            out += [dx * _softmin(eps, cm(c_xx), la + p / eps),
                    dy * _softmin(eps, cm(c_yy), lb + q / eps)]
        return out

    with torch.no_grad():
        eps = schedule[0]
        dx, dy = damping(eps, rho_x), damping(eps, rho_y)
        pots = [dx * _softmin(eps, c_xy, lb), dy * _softmin(eps, c_yx, la)]
        pots += ([dx * _softmin(eps, c_xx, la), dy * _softmin(eps, c_yy, lb)] if debias
                 else [None, None])
        for eps in schedule:
            new = sweep(pots, eps, False)
            pots = [(o + n) / 2 for o, n in zip(pots, new)] + ([] if debias else [None, None])
    with torch.enable_grad():
        out = sweep([t if t is None else t.detach() for t in pots], schedule[-1], True)
    if not debias:
        out += [x.new_zeros(x.shape[0], 0), x.new_zeros(x.shape[0], 0)]
    return out
