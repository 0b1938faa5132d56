"""Conjugate gradient for PyTorch, differentiated implicitly to second order (see
tessel.loops.implicit for how)."""
import math

import torch

from .._exit import keep_until_exit
from ._solver_base import (_check_int, _check_number, _check_policy, _check_stats,
                           _nonconvergence)


class _CGOptions:
    def __init__(self, tol, atol, maxiter, policy, precond=None):
        self.tol, self.atol, self.maxiter, self.policy = tol, atol, maxiter, policy
        self.precond = precond  # v -> M^{-1} v (checked), or None for plain CG


def _checked_matvec(matvec, b, name="matvec"):
    """Wraps matvec (or the preconditioner) so that a wrong output is reported at the call, not
    deep inside the loop."""
    shape, dtype, device = b.shape, b.dtype, b.device

    def mv(v):
        out = matvec(v)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"cg_solve: {name} returned a {type(out).__name__}; expected a tensor "
                            f"of shape {tuple(shape)}")
        if out.shape != shape:
            raise ValueError(f"cg_solve: {name} returned shape {tuple(out.shape)} for an input of "
                             f"shape {tuple(shape)}; it must return b's shape")
        if out.dtype != dtype or out.device != device:
            raise TypeError(f"cg_solve: {name} returned {out.dtype} on {out.device}; expected "
                            f"b's {dtype} on {device}")
        return out
    return mv


def _preconditioner(who, m, b):
    """A checked v -> M^{-1} v from cg_solve's preconditioner argument: a callable, or a tensor of
    b.shape[0] positive numbers (the inverse of a diagonal approximation of A, Jacobi's choice),
    applied to every column. Detached: it steers the iterations, not the solution."""
    if m is None:
        return None
    if callable(m):
        return _checked_matvec(m, b, "preconditioner")
    if not isinstance(m, torch.Tensor) or m.shape != b.shape[:1] or m.dtype != b.dtype \
            or m.device != b.device:
        got = (f"a {m.dtype} tensor of shape {tuple(m.shape)} on {m.device}"
               if isinstance(m, torch.Tensor) else f"a {type(m).__name__}")
        raise TypeError(f"{who}: preconditioner must be a callable (v -> M^-1 v) or a tensor of "
                        f"shape ({b.shape[0]},) with b's dtype and device; got {got}")
    d = m.detach()
    if not bool(torch.isfinite(d).all()) or not bool((d > 0).all()):
        raise ValueError(f"{who}: a diagonal preconditioner must be finite and positive "
                         "(M^-1 of a positive-definite A)")
    if b.dim() == 2:
        d = d[:, None]
    return lambda v: v * d


def _pow2_scale(z, r):
    """A power of two c with |c z| about |r| (largest entries), as a pair of factors that are
    each representable in z's dtype. CG's iterates do not change when M^-1 is scaled by a
    positive constant (alpha takes 1/c, p takes c), so scaling by c costs no rounding and keeps
    r^T M^-1 r and p^T A p inside the dtype's range for a preconditioner of any valid size."""
    zmax, rmax = float(z.detach().abs().max()), float(r.detach().abs().max())
    if not (0.0 < zmax < math.inf and 0.0 < rmax < math.inf):
        return ()
    e = math.frexp(rmax)[1] - math.frexp(zmax)[1]
    return () if e == 0 else (2.0 ** (e // 2), 2.0 ** (e - e // 2))


def _apply_precond(opts, r, rs, limit, it, scale=(), z=None):
    """z = c M^{-1} r and r^T z per column (z = r without a preconditioner; c = the product of
    `scale`, see _pow2_scale; `z`: M^{-1} r when already applied). The stopping test stays on
    |r|, so tol means the same with or without one."""
    if opts.precond is None:
        return r, rs
    z = opts.precond(r) if z is None else z
    for c in scale:
        z = z * c
    rz = (r * z).sum(0)
    bad = ~(rs.sqrt() <= limit) & ~(rz > 0)
    if bool(bad.any()):
        val = float(rz.reshape(-1)[int(bad.reshape(-1).nonzero()[0])])
        raise ValueError(f"cg_solve: the preconditioner is not positive definite or not finite: "
                         f"r^T M^-1 r = "
                         f"{val:.3e} at iteration {it}; it must approximate A^-1 by a symmetric "
                         "positive-definite operator")
    return z, rz


def _cg_iterate(mv, b, x0, opts, extra_atol):
    """(Preconditioned) CG, every column of b at once with its own step sizes; no graph,
    O(1) iterates."""
    bnorm = torch.linalg.vector_norm(b, dim=0)
    limit = torch.clamp(opts.tol * bnorm, min=opts.atol)
    if extra_atol is not None:
        limit = torch.maximum(limit, extra_atol)
    if x0 is None:
        x, r = torch.zeros_like(b), b.clone()
    else:
        x = x0.detach().clone()
        r = b - mv(x)
    rs = torch.linalg.vector_norm(r, dim=0) ** 2
    z = None if opts.precond is None else opts.precond(r)
    scale = () if z is None else _pow2_scale(z, r)
    z, rz = _apply_precond(opts, r, rs, limit, 0, scale, z)
    p = z.clone()
    it = 0
    while True:
        done = rs.sqrt() <= limit
        if bool(done.all()) or it >= opts.maxiter:
            break
        ap = mv(p)
        it += 1
        pap = (p * ap).sum(0)
        bad = ~done & ~(pap > 0)  # also catches NaN
        if bool(bad.any()):
            j = int(bad.reshape(-1).nonzero()[0])
            val = float(pap.reshape(-1)[j])
            col = f", column {j}" if b.dim() == 2 else ""
            if not math.isfinite(val):
                raise ValueError(f"cg_solve: matvec produced non-finite values (p^T A p = {val}) "
                                 f"at iteration {it}{col}")
            why = (" (0: A is singular along p, or p^T A p underflowed: scale A nearer to "
                   "unit size)" if val == 0.0 else "")
            raise ValueError(f"cg_solve: the operator is not positive definite: p^T A p = "
                             f"{val:.3e} <= 0 at iteration {it}{col}{why}; CG needs a symmetric "
                             "positive-definite matvec")
        # Converged columns get zero steps so that they stay put while the others go on.
        alpha = (rz / pap).masked_fill(done, 0.0)
        # In place: one n-sized temporary per iteration besides matvec's (and M^-1's) output.
        x.addcmul_(p, alpha)
        r.addcmul_(ap, alpha, value=-1.0)
        rs = torch.linalg.vector_norm(r, dim=0) ** 2
        z, rz_new = _apply_precond(opts, r, rs, limit, it, scale)
        beta = (rz_new / rz).masked_fill(done, 0.0)
        p.mul_(beta).add_(z)
        rz = rz_new
    res = rs.sqrt()
    return x, dict(iterations=it, residual=res, bnorm=bnorm, limit=limit,
                   converged=bool((res <= limit).all()))


def _cg_report(info, opts, stats, who):
    res, bnorm, limit = info["residual"], info["bnorm"], info["limit"]
    rel = res / bnorm.clamp_min(torch.finfo(res.dtype).tiny)
    if stats is not None:
        as_py = (lambda t: t.tolist()) if res.dim() else float
        stats.update(iterations=info["iterations"], residual=as_py(res),
                     relative_residual=as_py(rel), converged=info["converged"])
    if info["converged"]:
        return
    # The column furthest from its target names the failure.
    over = torch.where(limit > 0, res / limit.clamp_min(torch.finfo(res.dtype).tiny),
                       torch.full_like(res, math.inf)).reshape(-1)
    j = int(torch.argmax(torch.nan_to_num(over, nan=math.inf)))
    r, q, lim = float(res.reshape(-1)[j]), float(rel.reshape(-1)[j]), float(limit.reshape(-1)[j])
    col = f" (column {j} of {res.numel()})" if res.dim() else ""
    if lim > opts.tol * float(bnorm.reshape(-1)[j]):
        detail = f"residual {r:.3e} > atol {lim:.3e}"
    else:
        detail = f"relative residual {q:.3e} > tol {opts.tol:g}"
    _nonconvergence(opts.policy, f"{who}: no convergence after {info['iterations']} "
                                 f"iterations: {detail}{col}", 4)


class _Link:
    """What the two correction nodes of one solve share (see _cg_solve)."""

    def __init__(self, mv, opts, stats):
        self.mv, self.opts, self.stats = mv, opts, stats
        self.gnorm = None


class _Correction(torch.autograd.Function):
    """Value zero; its vector-Jacobian product is A^{-1} g, computed by cg_solve itself."""

    @staticmethod
    def forward(ctx, r, link, outer):
        ctx.link, ctx.outer = link, outer
        keep_until_exit(ctx)  # it holds the user's function: freed at exit
        return torch.zeros_like(r)

    @staticmethod
    def backward(ctx, g):
        link = ctx.link
        extra_atol = None
        if ctx.outer:
            link.gnorm = torch.linalg.vector_norm(g.detach(), dim=0)
        elif link.gnorm is not None:
            # The inner node receives g - A u: the outer solve's residual. Solving it only to the
            # outer tolerance makes this an iterative-refinement step, usually of zero iterations.
            extra_atol, link.gnorm = link.opts.tol * link.gnorm, None
        info = {}
        u = _cg_solve(link.mv, g, link.opts, None, info, extra_atol, "cg_solve (backward)")
        if link.stats is not None:
            prev = 0 if ctx.outer else link.stats.get("backward_iterations", 0)
            link.stats["backward_iterations"] = prev + info["iterations"]
            if ctx.outer:
                link.stats["backward_converged"] = info["converged"]
        if info["iterations"] == 0 and not u.requires_grad:
            return None, None, None  # exactly zero: lets autograd skip the residual's graph
        return u, None, None


def _cg_solve(mv, b, opts, x0, stats, extra_atol=None, who="cg_solve"):
    with torch.no_grad():
        x, info = _cg_iterate(mv, b.detach(), x0, opts, extra_atol)
    _cg_report(info, opts, stats, who)
    if not torch.is_grad_enabled():
        return x
    # The residual's graph reaches b and every tensor matvec reads; its value is ~0.
    r1 = b - mv(x)
    if not r1.requires_grad:
        return x
    link = _Link(mv, opts, stats)
    # First level: p = x + A^{-1} r1 has the exact Jacobian of A^{-1} b, but a backward graph in
    # which x is a constant, so d/d(b, theta) of the gradient would miss x's own dependence.
    p = x + _Correction.apply(r1, link, False)
    # Second level: the residual at p (value ~0, first derivative ~0) re-enters the operator at a
    # differentiable point. Its correction's backward gives u = A^{-1} g and the theta-gradient
    # -(d(A p)/d theta)^T u; the first level then only receives g - A u (refinement), so second
    # derivatives are exact. Cost when create_graph=False: one solve plus a few matvecs.
    r2 = b - mv(p)
    return p + _Correction.apply(r2, link, True)


def cg_solve(matvec, b, *, tol=1e-6, atol=0.0, maxiter=None, x0=None, on_nonconvergence="raise",
             stats=None, preconditioner=None):
    """Solves A x = b by conjugate gradient for a symmetric positive-definite operator
    `matvec(v) = A @ v`, differentiably in b and in every tensor matvec uses.

    Parameters
    ----------
    matvec : callable
        ``matvec(v)`` returns ``A @ v`` for v shaped like b (column-wise for (n, k)).
    b : (n,) or (n, k) tensor
        The right-hand side(s); each column is solved with its own steps and test.
    tol, atol : float
        Stop a column when ``norm(r_j) <= max(tol * norm(b_j), atol)`` (defaults 1e-6, 0).
    maxiter : int, optional
        The most iterations (default 10 n).
    x0 : tensor, optional
        A warm start (not differentiated).
    on_nonconvergence : {"raise", "warn", "ignore"}
        What happens when maxiter passes first.
    stats : dict, optional
        Receives iterations, residual, relative_residual and converged (lists for several
        columns), and after a backward pass backward_iterations and backward_converged.
    preconditioner : callable or (n,) tensor, optional
        An approximation of A^{-1}, symmetric positive definite: ``preconditioner(v)`` returns
        ``M^{-1} @ v`` (column-wise like matvec), or a tensor of n positive numbers multiplies
        every column (Jacobi: ``1 / diag(A)``). It changes the iterations, not the solution or
        its gradients; the backward solves use it too. Not differentiated.

    Returns
    -------
    tensor
        x, shaped like b, differentiable in b and in every tensor matvec reads.

    Raises
    ------
    ConvergenceError
        No convergence within maxiter with ``on_nonconvergence="raise"``.
    ValueError
        An operator or preconditioner found not positive definite (p^T A p <= 0) or giving
        non-finite values, a b not shaped (n,) or (n, k), an x0 not shaped like b, or a diagonal
        preconditioner with an entry that is not finite and positive.
    TypeError
        matvec (or the preconditioner) not callable or returning something other than a tensor
        of b's dtype and device, b not a floating-point tensor, a preconditioner neither a
        callable nor a tensor of b's length, dtype and device.

    Notes
    -----
    Each column of an (n, k) b is an independent right-hand side with its own step sizes and
    stopping test |r_j| <= max(tol * |b_j|, atol), on the residual itself, so tol means the same
    with a preconditioner. CG's iterations grow like the square root of A's condition number; a
    diagonal that spans orders of magnitude (unequal weights, mixed units) is what Jacobi's
    ``preconditioner=1 / diag(A)`` removes.

    The forward runs without a graph; the backward solves A u = g with the same settings and gives
    u to b and -(d(A x)/d theta)^T u to every tensor theta in matvec's closure, with no need to
    list them. Memory does not depend on the iterations. Backward with create_graph=True is
    supported: first and second derivatives are exact (up to the solver tolerance); third and
    higher derivatives are not (they miss terms of the solution's own dependence).

    Examples
    --------
    >>> import torch
    >>> from tessel.loops import cg_solve
    >>> m = torch.randn(6, 6, dtype=torch.float64)
    >>> a = (m @ m.T + 6 * torch.eye(6, dtype=torch.float64)).requires_grad_(True)
    >>> b = torch.ones(6, dtype=torch.float64)
    >>> x = cg_solve(lambda v: a @ v, b, tol=1e-12)        # a is found in the closure
    >>> bool(torch.allclose(x, torch.linalg.solve(a, b)))
    True
    >>> (ga,) = torch.autograd.grad(x.sum(), a)
    >>> (ga_ref,) = torch.autograd.grad(torch.linalg.solve(a, b).sum(), a)
    >>> bool(torch.allclose(ga, ga_ref))
    True
    """
    who = "cg_solve"
    if not callable(matvec):
        raise TypeError(f"{who}: matvec must be callable (v -> A @ v); got "
                        f"{type(matvec).__name__}")
    if not isinstance(b, torch.Tensor):
        raise TypeError(f"{who}: b must be a torch.Tensor; got {type(b).__name__}")
    if not b.is_floating_point():
        raise TypeError(f"{who}: b must be a floating-point tensor; got {b.dtype}")
    if b.dim() not in (1, 2) or b.shape[0] == 0:
        raise ValueError(f"{who}: b must have shape (n,) or (n, k) with n >= 1; got "
                         f"{tuple(b.shape)}")
    tol = _check_number(who, "tol", tol)
    atol = _check_number(who, "atol", atol)
    maxiter = 10 * b.shape[0] if maxiter is None else _check_int(who, "maxiter", maxiter)
    if x0 is not None and (not isinstance(x0, torch.Tensor) or x0.shape != b.shape
                           or x0.dtype != b.dtype or x0.device != b.device):
        raise ValueError(f"{who}: x0 must be a tensor of b's shape {tuple(b.shape)}, dtype and "
                         "device")
    opts = _CGOptions(tol, atol, maxiter, _check_policy(who, on_nonconvergence),
                      _preconditioner(who, preconditioner, b))
    return _cg_solve(_checked_matvec(matvec, b), b, opts, x0, _check_stats(who, stats))
