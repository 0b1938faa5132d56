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
from ..lazytensor import Pm, Vi, Vj
from ._plan import LazyPlan, SqDistPlan, softmin
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


def sqdist_cost(x, y):
    """|x - y|^2 / 2 as a LazyTensor: the built-in p = 2 cost, whose plans and softmins run on
    the few kernels of _plan at every order of derivative."""
    return cost_lazy(None, x, y, 2)


def plan_operator(a, x, b, y, f, g, eps, cost):
    """The plan's products (row and column sums, pi w, pi^T v) for the cost function `cost`."""
    if cost is sqdist_cost:
        return SqDistPlan(a, x, b, y, f, g, eps)
    return LazyPlan(plan_lazy(a, x, b, y, f, g, eps, cost))


def damping(eps, rho):
    """The damping 1 / (1 + eps / rho) of a soft marginal's softmin (1 for a hard one)."""
    return 1.0 if rho is None else 1 / (1 + eps / rho)


def plan_lazy(a, x, b, y, f, g, eps, cost):
    """pi_ij = exp(log a_i + log b_j + (f_i + g_j - C_ij) / eps) as an (N, M) LazyTensor, or
    (B, N, M) for batched inputs. `cost(x, y)` builds C as a LazyTensor. log 0 = -inf gives
    exact zeros for zero weights (never 0 * inf). eps is a parameter of the kernels, not a
    constant written in them: one set of compiled kernels serves every eps (and blur)."""
    return ((Vi(f[..., None]) + Vj(g[..., None]) - cost(x, y)) / Pm(eps)
            + Vi(torch.log(a)[..., None]) + Vj(torch.log(b)[..., None])).exp()


def _residual(a, x, b, y, z, eps, rho_x, rho_y, cost):
    """(plan, row sums, column sums, the masses the marginals ask for, r(f, g)) at z = (f, g)."""
    n = x.shape[0]
    f, g = z[:n], z[n:]
    plan = plan_operator(a, x, b, y, f, g, eps, cost)
    row, col = plan.row_sums(), plan.col_sums()
    mass_x = a if rho_x is None else a * torch.exp(-f / rho_x)
    mass_y = b if rho_y is None else b * torch.exp(-g / rho_y)
    return plan, row, col, mass_x, mass_y, torch.cat((mass_x - row, mass_y - col))


def _newton_step(a, x, b, y, z, eps, rho_x, rho_y, cost, tol, stats):
    n = x.shape[0]
    plan, row, col, mass_x, mass_y, r = _residual(a, x, b, y, z, eps, rho_x, rho_y, cost)
    stats.setdefault("residuals", []).append(float(r.detach().abs().sum()))
    diag = torch.cat((row / eps + (0 if rho_x is None else mass_x / rho_x),
                      col / eps + (0 if rho_y is None else mass_y / rho_y)))
    diag = _pin_zero_weights(diag, torch.cat((a == 0, b == 0)))
    # Balanced problems: c (1, -1)(1, -1)^T fills H's null space, the shift direction; the
    # (consistent) right-hand side has no part along it, so this fixes the gauge at no shift.
    c = float(diag.detach().mean()) / diag.shape[0] if rho_x is None and rho_y is None else 0.0
    return z + _solve_blocks(plan, diag[:n], diag[n:], c, eps, r[:n], r[n:], tol, stats)


def _pin_zero_weights(diag, zero):
    """A zero weight's row and column of the plan operator vanish (its plan entries are exact
    zeros), and so does its residual: a typical diagonal there keeps CG positive definite and
    leaves that potential unmoved (newton_potentials then sets it by its softmin)."""
    if not bool(zero.any()):
        return diag
    return torch.where(zero, diag.detach()[~zero].mean(), diag)


def _solve_blocks(plan, d1, d2, c, eps, rf, rg, tol, stats):
    """(vf, vg) solving H' (vf, vg) = (rf, rg), H' = [[A, B], [B^T, D]] with A = diag(d1) + c 11^T,
    B = plan / eps - c 11^T, D = diag(d2) + c 11^T: D is eliminated (Sherman-Morrison) and CG,
    Jacobi-preconditioned by A's diagonal, runs on the Schur complement S = A - B D^-1 B^T.
    The same two reductions per iteration as CG on H', but S's spectrum (1 - s_k^2 after
    scaling, s_k the scaled plan's singular values) needs about half the iterations of H''s
    (1 +- s_k), and the scaling removes the spread of the marginals' masses (soft marginals).
    c = 0 (unbalanced problems) leaves the plain blocks."""
    inv_d2 = 1 / d2
    sm = c / (1 + c * inv_d2.sum())  # differentiable: D^-1 moves with d2

    def solve_d(w):  # D^-1 w
        u = inv_d2 * w
        return u - sm * u.sum() * inv_d2

    def b_t(v):  # B^T v
        return plan.rmatvec(v) / eps - c * v.sum()

    def b_(w):  # B w
        return plan.matvec(w) / eps - c * w.sum()

    def schur(v):
        return d1 * v + c * v.sum() - b_(solve_d(b_t(v)))

    vf = cg_solve(schur, rf - b_(solve_d(rg)), tol=tol, atol=1e-30, on_nonconvergence="warn",
                  stats=stats, preconditioner=1 / (d1.detach() + c))
    return torch.cat((vf, solve_d(rg - b_t(vf))))


def _sym_residual(a, x, p, eps, rho, cost):
    """(plan, row sums, masses, r(p)) of a symmetric (x-x) problem at f = g = p."""
    plan = plan_operator(a, x, a, x, p, p, eps, cost)
    row = plan.row_sums()
    mass = a if rho is None else a * torch.exp(-p / rho)
    return plan, row, mass, mass - row


def _sym_newton_step(a, x, p, eps, rho, cost, tol, stats):
    """p + J^{-1} r(p), J = diag(row / eps + mass / rho) + plan / eps: the Jacobian of the
    symmetric problem's residual (r_i = mass_i - sum_j pi_ij, pi_ij = a_i a_j
    exp((p_i + p_j - C_ij) / eps)) restricted to f = g. On that subspace the plan operator is
    D + P (scaled: I + K, K's spectrum in (-1, 1]) where the full one, D +- P, is near singular
    along the antisymmetric shifts of far-apart clusters: those directions change neither p nor
    the loss, but an autograd right-hand side has parts there that CG cannot resolve."""
    plan, row, mass, r = _sym_residual(a, x, p, eps, rho, cost)
    stats.setdefault("residuals", []).append(float(r.detach().abs().sum()))
    diag = _pin_zero_weights(row / eps + (0 if rho is None else mass / rho), a == 0)

    def matvec(v):
        return diag * v + plan.matvec(v) / eps

    return p + cg_solve(matvec, r, tol=tol, atol=1e-30, on_nonconvergence="warn", stats=stats,
                        preconditioner=1 / diag.detach())


def _refine(step, residual, z, eps, steps, mass, target=None, errors=None, most=8):
    """`steps` Newton steps z <- step(z, stats) from z (detached), checked: the marginal error
    residual(z) must end no larger than it began (or at rounding level for the total `mass`).
    A start whose marginal error is above `target` (the loop stopped at max_iter) first gets up
    to `most` steps without a graph while they lower it: the derivatives of the last `steps` are
    exact only from a start inside Newton's quadratic region. The final marginal error is
    appended to the list `errors`."""
    z = z.detach()
    stats = {}
    why = None
    try:
        with torch.no_grad():
            err = float(residual(z).abs().sum())
            for _ in range(most if target is not None and err > target else 0):
                dz = step(z, {}) - z
                # Damped: the full step overshoots outside the quadratic region.
                for t in (1.0, 0.5, 0.25, 0.125):
                    err1 = float(residual(z + t * dz).abs().sum())
                    if err1 < err:
                        break
                if not err1 < err:  # also stops at NaN: the checked steps below report it
                    break
                z, err = z + t * dz, err1
                if err <= target:
                    break
        for _ in range(steps):
            z = step(z, stats)
    except ValueError as e:  # CG met a non-finite or indefinite product: z was far from the point
        why = str(e)
    if why is None:
        with torch.no_grad():
            final = float(residual(z.detach()).abs().sum())
        # Newton converges from a start close enough to the fixed point; from too far it may
        # jump away (steps that did not lower the marginals' error), or overflow.
        floor = 100 * torch.finfo(z.dtype).eps * mass
        if not (math.isfinite(final) and final <= max(stats["residuals"][0], floor)):
            why = (f"the marginal error went from {stats['residuals'][0]:.3g} to {final:.3g} "
                   "instead of down")
    if why is not None:
        raise RuntimeError(
            f"tessel.ot: gradient='implicit' could not refine the Sinkhorn potentials by Newton "
            f"steps at eps = {eps:.3g} ({why}): the plan operator they invert gets ill-"
            "conditioned as eps shrinks (about 1/eps). Raise blur, or use gradient='envelope' "
            "or 'unrolled'")
    if errors is not None:
        errors.append(final)
    return z


def newton_potentials(a, x, b, y, f0, g0, eps, rho_x, rho_y, cost, steps=2, tol=1e-10,
                      target=None, errors=None):
    """(f, g) after `steps` Newton steps from (f0, g0) (detached), differentiable in a, x, b, y
    to order 2 ** steps - 1 (2 steps: first and second derivatives exact). 1-D inputs a (N),
    b (M), f0 (N), g0 (M); x (N, D), y (M, D); rho None for a hard marginal; target: the
    marginal error (l1) below which (f0, g0) counts as converged, errors: a list that receives
    the final one (see _refine)."""
    z = _refine(lambda z, st: _newton_step(a, x, b, y, z, eps, rho_x, rho_y, cost, tol, st),
                lambda z: _residual(a, x, b, y, z, eps, rho_x, rho_y, cost)[-1],
                torch.cat((f0, g0)), eps, steps, float(a.detach().sum() + b.detach().sum()),
                target, errors)
    n = x.shape[0]
    f, g = z[:n], z[n:]
    # The potential of a zero-weight point is not pinned by the dual's stationarity (its mass
    # is 0) but by its softmin against the other cloud: f_i = damp softmin_j (C_ij - g_j).
    if bool((a == 0).any()):
        f = torch.where(a == 0, _softmin(x, y, b, g, eps, rho_x, cost), f)
    if bool((b == 0).any()):
        transposed = cost if cost is sqdist_cost else lambda u, v: cost(v, u).t()  # symmetric
        g = torch.where(b == 0, _softmin(y, x, a, f, eps, rho_y, transposed), g)
    return f, g


def newton_symmetric(a, x, p0, eps, rho, cost, steps=2, tol=1e-10, target=None, errors=None):
    """The potential p of the symmetric problem (a, x) against itself (the debiasing terms),
    by Newton steps on f = g = p from p0: as newton_potentials, at half the unknowns, one
    reduction per CG iteration, and well conditioned (see _sym_newton_step)."""
    p = _refine(lambda z, st: _sym_newton_step(a, x, z, eps, rho, cost, tol, st),
                lambda z: _sym_residual(a, x, z, eps, rho, cost)[-1],
                p0, eps, steps, 2 * float(a.detach().sum()), target, errors)
    if bool((a == 0).any()):
        p = torch.where(a == 0, _softmin(x, x, a, p, eps, rho, cost), p)
    return p


def _softmin(x, y, b, g, eps, rho, cost):
    """damp * (-eps log sum_j b_j exp((g_j - C(x_i, y_j)) / eps)), damp = 1 / (1 + eps / rho)."""
    damp = damping(eps, rho)
    if cost is sqdist_cost:
        return damp * softmin(x, y, torch.log(b) + g / eps, eps)
    lse = (Vj((torch.log(b) + g / eps)[:, None]) - cost(x, y) / Pm(eps)).logsumexp(1)[:, 0]
    return -damp * eps * lse


def canonical_gauge(a, f, b, g):
    """(f - t, g + t) with t = (<a, f> - <b, g>) / (sum a + sum b), so that <a, f> = <b, g>.

    A balanced problem's potentials are defined up to the shift (f + c, g - c); the loop's is set
    by its whole path, which the fixed point does not remember, so the Newton steps' derivative
    along the shift (none) is not that of the returned potentials (a 110 % error on sums of
    them). Returned in this gauge, a differentiable function of the fixed point, the potentials
    and their implicit derivatives agree. The value <a, f> + <b, g> is unchanged for equal
    masses; f_i + g_j, and so the plan, always."""
    t = ((a * f).sum(-1) - (b * g).sum(-1)) / (a.sum(-1) + b.sum(-1))
    return f - t[..., None], g + t[..., None]


def implicit_potentials(a, x, b, y, solve, settings, report=None):
    """(f, g, p, q) of one problem, differentiable to second order through newton_potentials: the
    core solves to convergence (solve: the core's options), then two Newton steps per problem
    (x-y, and with debias the symmetric x-x and y-y, each with its own marginal penalty)."""
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

    if formula is None and pw == 2:
        cost = sqdist_cost

    def pot(t):
        return torch.from_numpy(t).to(dtype=x.dtype, device=x.device)

    tol = 1e-11 if x.dtype == torch.float64 else 1e-5
    target = solve["tol"] if solve["tol"] > 0 else None
    errors = []
    try:
        f, g = newton_potentials(a, x, b, y, pot(res.f), pot(res.g), eps, rho_x, rho_y, cost,
                                 tol=tol, target=target, errors=errors)
        if settings["debias"]:
            p = newton_symmetric(a, x, pot(res.p), eps, rho_x, cost, tol=tol, target=target,
                                 errors=errors)
            q = newton_symmetric(b, y, pot(res.q), eps, rho_y, cost, tol=tol, target=target,
                                 errors=errors)
    except RuntimeError as e:
        if solve["tol"] > 0 and not res.converged:  # the likely cause: say it first
            worst = max(res.history[-1][1:]) if len(res.history) else math.nan
            raise RuntimeError(
                f"tessel.ot: the Sinkhorn loop stopped at max_iter={solve['max_iter']} with a "
                f"marginal error of {worst:.3g} > tol={solve['tol']:g} (a small blur slows each "
                f"iteration down), too far from the fixed point for the implicit gradient. {e}. "
                "Raising max_iter may do") from None
        raise
    if report is not None and target is not None:
        # Newton steps may finish what the loop left at max_iter: converged is what they reached.
        report.update(refined_error=max(errors), converged=max(errors) <= target)
    if not settings["debias"]:
        return f, g, x.new_zeros(0), x.new_zeros(0)
    return f, g, p, q
