"""Implicitly differentiated Sinkhorn potentials: Newton steps on the dual, any order of derivative.

At eps fixed, the potentials (f, g) make the gradient of the (concave) dual vanish:
    r(f, g) = (a e^{-f/rho_x} - pi 1,  b e^{-g/rho_y} - pi^T 1) = 0,
    pi_ij = a_i b_j exp((f_i + g_j - C(x_i, y_j)) / eps)
(a e^{-f/rho} reads a for a hard marginal). Its Jacobian is -H, H the symmetric positive
semi-definite plan operator
    H = [[diag(pi 1) / eps + diag(a e^{-f/rho_x}) / rho_x,  pi / eps],
         [pi^T / eps,  diag(pi^T 1) / eps + diag(b e^{-g/rho_y}) / rho_y]],
singular for balanced problems only, along the shift (f + c, g - c), which changes neither the
plan nor the loss: H + (1, -1)(1, -1)^T (scaled) removes it.

Starting from the core's converged potentials z* (held constant), a Newton step
z1 = z* + H(z*)^{-1} r(z*) has the value of z* (r(z*) ~ 0) and the exact first derivatives of the
solution map (implicit function theorem); a second step from z1 squares the error again, so its
first and second derivatives are exact: Hessian-vector products of any loss built on them. Each
H^{-1} is a conjugate-gradient solve (tessel.loops.cg_solve, differentiable to second order)
whose products with pi are tessel reductions: memory O(N + M), the plan is never stored.
"""
import math

import torch

from .. import _core
from ..loops.implicit import cg_solve
from ..lazytensor import Vi, Vj
from ._potentials import core_sinkhorn


def cost_lazy(cost, x, y, p):
    """C(x_i, y_j) as a LazyTensor (batched like x, y): the core's p-cost (|x - y|^2 / 2 for
    p = 2, |x - y| for p = 1) or the given core Formula in one i- and one j-variable."""
    xi, yj = Vi(x), Vj(y)
    if cost is None:
        return xi.sqdist(yj) / 2 if p == 2 else (xi - yj).norm2()
    base = xi - yj  # its variables: x is 0 (i), y is 1 (j)
    dim = x.shape[-1]
    by_cat = {cat: index for index, cat, _ in cost.variables()}
    f = cost.substitute([_core.var(by_cat[0], dim, 0), _core.var(by_cat[1], dim, 1)],
                        [_core.var(0, dim, 0), _core.var(1, dim, 1)])
    return base._new(f, base.variables, [base])


def damping(eps, rho):
    """The damping 1 / (1 + eps / rho) of a soft marginal's softmin (1 for a hard one)."""
    return 1.0 if rho is None else 1 / (1 + eps / rho)


def plan_lazy(a, x, b, y, f, g, eps, cost):
    """pi_ij = exp(log a_i + log b_j + (f_i + g_j - C_ij) / eps) as an (N, M) LazyTensor, or
    (B, N, M) for batched inputs. `cost(x, y)` builds C as a LazyTensor. log 0 = -inf gives
    exact zeros for zero weights (never 0 * inf)."""
    return ((Vi(f[..., None]) + Vj(g[..., None]) - cost(x, y)) / eps
            + Vi(torch.log(a)[..., None]) + Vj(torch.log(b)[..., None])).exp()


def _residual(a, x, b, y, z, eps, rho_x, rho_y, cost):
    """(plan, row sums, column sums, the masses the marginals ask for, r(f, g)) at z = (f, g)."""
    n = x.shape[0]
    f, g = z[:n], z[n:]
    plan = plan_lazy(a, x, b, y, f, g, eps, cost)
    row, col = plan.sum(1)[:, 0], plan.sum(0)[:, 0]
    mass_x = a if rho_x is None else a * torch.exp(-f / rho_x)
    mass_y = b if rho_y is None else b * torch.exp(-g / rho_y)
    return plan, row, col, mass_x, mass_y, torch.cat((mass_x - row, mass_y - col))


def _newton_step(a, x, b, y, z, eps, rho_x, rho_y, cost, tol, stats):
    n = x.shape[0]
    f, g = z[:n], z[n:]
    plan, row, col, mass_x, mass_y, r = _residual(a, x, b, y, z, eps, rho_x, rho_y, cost)
    stats.setdefault("residuals", []).append(float(r.detach().abs().sum()))
    diag = torch.cat((row / eps + (0 if rho_x is None else mass_x / rho_x),
                      col / eps + (0 if rho_y is None else mass_y / rho_y)))
    zero = torch.cat((a == 0, b == 0))
    if bool(zero.any()):
        # A zero weight's row and column of H vanish (its plan entries are exact zeros), and so
        # does its residual: a unit diagonal there keeps CG positive definite and leaves that
        # potential unmoved (newton_potentials then sets it by its softmin).
        diag = torch.where(zero, diag.detach()[~zero].mean(), diag)
    if rho_x is None and rho_y is None:
        # The shift direction: H's null space; its (consistent) right-hand side has no part
        # along it, so adding it changes nothing but the gauge, which is fixed at no shift.
        shift = torch.cat((torch.ones_like(f), -torch.ones_like(g)))
        scale = float(diag.detach().mean()) / (shift.shape[0])
    else:
        shift, scale = None, 0.0

    def matvec(v):
        vf, vg = v[:n], v[n:]
        out = diag * v + torch.cat(((plan @ vg[:, None])[:, 0], (plan.t() @ vf[:, None])[:, 0])) / eps
        if shift is not None:
            out = out + scale * (shift @ v) * shift
        return out

    return z + cg_solve(matvec, r, tol=tol, atol=1e-30, on_nonconvergence="warn", stats=stats)


def newton_potentials(a, x, b, y, f0, g0, eps, rho_x, rho_y, cost, steps=2, tol=1e-10):
    """(f, g) after `steps` Newton steps from (f0, g0) (detached), differentiable in a, x, b, y
    to order 2 ** steps - 1 (2 steps: first and second derivatives exact). 1-D inputs a (N),
    b (M), f0 (N), g0 (M); x (N, D), y (M, D); rho None for a hard marginal."""
    z = torch.cat((f0, g0)).detach()
    stats = {}
    why = None
    try:
        for _ in range(steps):
            z = _newton_step(a, x, b, y, z, eps, rho_x, rho_y, cost, tol, stats)
    except ValueError as e:  # CG met a non-finite or indefinite product: z was far from the point
        why = str(e)
    if why is None:
        with torch.no_grad():
            final = float(_residual(a, x, b, y, z.detach(), eps, rho_x, rho_y, cost)[-1]
                          .abs().sum())
        # Newton converges from a start close enough to the fixed point; from too far it may
        # jump away (steps that did not lower the marginals' error), or overflow.
        floor = 100 * torch.finfo(z.dtype).eps * float(a.detach().sum() + b.detach().sum())
        if not (math.isfinite(final) and final <= max(stats["residuals"][0], floor)):
            why = (f"the marginal error went from {stats['residuals'][0]:.3g} to {final:.3g} "
                   "instead of down")
    if why is not None:
        raise RuntimeError(
            f"tessel.ot: gradient='implicit' could not refine the Sinkhorn potentials by Newton "
            f"steps at eps = {eps:.3g} ({why}): the plan operator they invert gets ill-"
            "conditioned as eps shrinks (about 1/eps). Raise blur, or use gradient='envelope' "
            "or 'unrolled'")
    n = x.shape[0]
    f, g = z[:n], z[n:]
    # The potential of a zero-weight point is not pinned by the dual's stationarity (its mass
    # is 0) but by its softmin against the other cloud: f_i = damp softmin_j (C_ij - g_j).
    if bool((a == 0).any()):
        f = torch.where(a == 0, _softmin(x, y, b, g, eps, rho_x, cost), f)
    if bool((b == 0).any()):
        g = torch.where(b == 0, _softmin(y, x, a, f, eps, rho_y, lambda u, v: cost(v, u).t()), g)
    return f, g


def _softmin(x, y, b, g, eps, rho, cost):
    """damp * (-eps log sum_j b_j exp((g_j - C(x_i, y_j)) / eps)), damp = 1 / (1 + eps / rho)."""
    damp = damping(eps, rho)
    lse = (Vj((torch.log(b) + g / eps)[:, None]) - cost(x, y) / eps).logsumexp(1)[:, 0]
    return -damp * eps * lse


def implicit_potentials(a, x, b, y, solve, settings, report=None):
    """(f, g, p, q) of one problem, differentiable to second order through newton_potentials: the
    core solves to convergence (solve: the core's options), then two Newton steps per problem
    (x-y, and with debias x-x and y-y, each with its own marginal penalty on both sides)."""
    res = core_sinkhorn(a, x, b, y, solve)
    if report is not None:
        report.update(history=res.history, converged=res.converged, eps=res.eps,
                      diameter=res.diameter)
    pw = settings["p"]
    eps = settings["blur"] ** pw
    rho_x = None if settings["reach_x"] is None else settings["reach_x"] ** pw
    rho_y = None if settings["reach_y"] is None else settings["reach_y"] ** pw
    formula = settings["cost"]

    def cost(u, v):
        return cost_lazy(formula, u, v, pw)

    def pot(t):
        return torch.from_numpy(t).to(dtype=x.dtype, device=x.device)

    tol = 1e-11 if x.dtype == torch.float64 else 1e-5
    try:
        f, g = newton_potentials(a, x, b, y, pot(res.f), pot(res.g), eps, rho_x, rho_y, cost,
                                 tol=tol)
        if not settings["debias"]:
            return f, g, x.new_zeros(0), x.new_zeros(0)
        p1, p2 = newton_potentials(a, x, a, x, pot(res.p), pot(res.p), eps, rho_x, rho_x, cost,
                                   tol=tol)
        q1, q2 = newton_potentials(b, y, b, y, pot(res.q), pot(res.q), eps, rho_y, rho_y, cost,
                                   tol=tol)
    except RuntimeError as e:
        if solve["tol"] > 0 and not res.converged:  # the likely cause: say it first
            worst = max(res.history[-1][1:]) if len(res.history) else math.nan
            raise RuntimeError(
                f"tessel.ot: the Sinkhorn loop stopped at max_iter={solve['max_iter']} with a "
                f"marginal error of {worst:.3g} > tol={solve['tol']:g} (a small blur slows each "
                f"iteration down), too far from the fixed point for the implicit gradient. {e}. "
                "Raising max_iter may do") from None
        raise
    return f, g, (p1 + p2) / 2, (q1 + q2) / 2
