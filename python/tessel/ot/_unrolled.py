"""Unrolled Sinkhorn potentials: the core's iterations replayed in torch and differentiated
through every one of them (tessel.torch.checkpoint_loop keeps at most `snapshots` states).

The core runs first, without a graph: it fixes the eps schedule and, with a tolerance, the number
of iterations the loop took. The same iterations then run again as tessel LogSumExp reductions
(softmin_j [C_ij - g_j] = -eps log sum_j b_j exp((g_j - C_ij) / eps)), in the core's order:
initialisation at the first eps from zero potentials, symmetric averaged or alternating updates
(the debiasing problems always average), and the last extrapolation. The result is the exact
derivative of what the loop computed, converged or not, to any order (double backward through
checkpoint_loop recomputes the loop with a full graph), with the eps schedule held fixed: the
schedule starts at the clouds' diameter, which moves with the points (a given diameter= makes
the derivative exact).
"""
import torch

from ..loops.checkpoint import checkpoint_loop
from ..lazytensor import Pm, Vj
from ._implicit import cost_lazy, damping
from ._plan import softmin as sqdist_softmin
from ._potentials import core_sinkhorn

_LOG_ZERO = -1e5  # the core's log of a zero weight


def unrolled_potentials(a, x, b, y, solve, settings, report=None, snapshots=None):
    """(f, g, p, q) of one problem, differentiable through the loop's iterations."""
    res = core_sinkhorn(a, x, b, y, solve)
    if report is not None:
        report.update(history=res.history, converged=res.converged, eps=res.eps,
                      diameter=res.diameter)
    hist = res.history
    # A loop that met its tolerance stopped before updating with its last iteration.
    eps_list = [h[0] for h in (hist[:-1] if res.converged else hist)]
    pw = settings["p"]
    rho_x = None if settings["reach_x"] is None else settings["reach_x"] ** pw
    rho_y = None if settings["reach_y"] is None else settings["reach_y"] ** pw
    debias, alternating = settings["debias"], solve["alternating"]
    formula = settings["cost"]
    la, lb = torch.log(a).clamp_min(_LOG_ZERO), torch.log(b).clamp_min(_LOG_ZERO)

    def softmin(eps, u, v, logw, pot):
        if formula is None and pw == 2:  # the few kernels of _plan at every order
            return sqdist_softmin(u, v, logw + pot / eps, eps)
        # eps a parameter, not a constant of the formula: each eps of the schedule compiled its
        # own kernels, and so did each of their derivatives (a cold HVP built over 1500).
        lse = (Vj((logw + pot / eps)[:, None]) - cost_lazy(formula, u, v, pw) / Pm(eps)
               ).logsumexp(1)
        return -eps * lse[:, 0]

    def sweep(state, eps):
        """One iteration at eps (the core's order); state (f, g) or (f, g, p, q)."""
        dx, dy = damping(eps, rho_x), damping(eps, rho_y)
        f, g = state[0], state[1]
        if alternating:
            f = dx * softmin(eps, x, y, lb, g)
            g = dy * softmin(eps, y, x, la, f)
        else:
            sf, sg = softmin(eps, x, y, lb, g), softmin(eps, y, x, la, f)
            f, g = (f + dx * sf) / 2, (g + dy * sg) / 2
        if not debias:
            return f, g
        p, q = state[2], state[3]
        return (f, g, (p + dx * softmin(eps, x, x, la, p)) / 2,
                (q + dy * softmin(eps, y, y, lb, q)) / 2)

    def extrapolate(state, eps):
        """Every potential from the state, one softmin each (the init and the last step)."""
        dx, dy = damping(eps, rho_x), damping(eps, rho_y)
        f, g = state[0], state[1]
        out = (dx * softmin(eps, x, y, lb, g), dy * softmin(eps, y, x, la, f))
        if debias:
            out += (dx * softmin(eps, x, x, la, state[2]), dy * softmin(eps, y, y, lb, state[3]))
        return out

    zero = (x.new_zeros(x.shape[0]), y.new_zeros(y.shape[0]))
    state = extrapolate(zero * (2 if debias else 1), hist[0][0] if hist else res.eps)

    def step(st, k):
        return sweep(st, eps_list[k])

    if snapshots is None:
        for k in range(len(eps_list)):
            state = step(state, k)
    else:
        state = checkpoint_loop(step, state, len(eps_list), snapshots)
    state = extrapolate(state, res.eps)
    if not debias:
        state += (x.new_zeros(0), x.new_zeros(0))
    return state
