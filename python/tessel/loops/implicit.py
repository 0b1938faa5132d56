"""Implicitly differentiated solvers for PyTorch: conjugate gradient and fixed-point iteration.

Both solvers iterate under `torch.no_grad` and keep no iterate for the backward pass, so memory
does not grow with the number of iterations. Gradients come from the implicit function theorem:

* `cg_solve(matvec, b)` returns x = A^{-1} b for a symmetric positive-definite operator. The
  backward solves A u = g (A is symmetric, so the transposed system is the same one) and hands u to
  the graph of the residual b - A x, whose vector-Jacobian product yields u for b and
  -(d(A x)/d theta)^T u for every tensor theta that `matvec` reads, listed or not. The backward
  solve is itself a `cg_solve`, so `create_graph=True` gives exact second derivatives (see
  _cg_solve for why the residual enters the graph twice).
* `fixed_point(f, x0, params)` returns x = f(x, *params). The backward solves the adjoint fixed
  point u = g + (df/dx)^T u by vector-Jacobian products through one graph of f at the solution,
  then hands u to a graph of f(x*, *params), which routes (df/dtheta)^T u to every tensor f reads.
"""
import math

import torch

from .._exit import keep_until_exit
from ._cg import cg_solve
from ._solver_base import (ConvergenceError, _check_int, _check_number, _check_policy,
                           _check_stats, _nonconvergence)

__all__ = ["cg_solve", "fixed_point", "ConvergenceError"]

_METHODS = ("picard", "anderson")


# ---- fixed point ---------------------------------------------------------------------------------
def _norm(ts):
    """The 2-norm of a tuple of tensors as one vector. Summing squares overflows at 1e154 in
    float64 (1e19 in float32), and inf <= tol * inf would then pass for convergence: a norm that
    overflows is redone on the tensor scaled by its largest magnitude."""
    norms = []
    for t in ts:
        n = float(torch.linalg.vector_norm(t))
        if math.isinf(n) and t.numel():
            m = float(t.abs().amax())
            if math.isfinite(m) and m > 0:
                n = m * float(torch.linalg.vector_norm(t / m))
        norms.append(n)
    return math.hypot(*norms)


class _Anderson:
    """Anderson acceleration (type II) on the flattened state, with a short history."""

    def __init__(self, memory, reg=1e-10):
        self.memory, self.reg = memory, reg
        self.dx, self.dg = [], []
        self.prev = None

    def step(self, xs, fxs):
        x = torch.cat([t.reshape(-1) for t in xs])
        fx = torch.cat([t.reshape(-1) for t in fxs])
        g = fx - x
        if self.prev is not None:
            self.dx.append(x - self.prev[0])
            self.dg.append(g - self.prev[1])
            if len(self.dx) > self.memory:
                self.dx.pop(0)
                self.dg.pop(0)
        self.prev = (x, g)
        new = fx
        if self.dg:
            dg, dx = torch.stack(self.dg, 1), torch.stack(self.dx, 1)
            h = dg.T @ dg
            # Regularised normal equations, scaled so the damping is relative to the history.
            h += self.reg * float(h.diagonal().max().clamp_min(1e-300)) * torch.eye(
                h.shape[0], dtype=h.dtype, device=h.device)
            try:
                gamma = torch.linalg.solve(h, dg.T @ g)
                cand = fx - (dx + dg) @ gamma
                if bool(torch.isfinite(cand).all()):
                    new = cand
            except RuntimeError:
                pass
            if new is fx:  # a degenerate history: restart from a plain step
                self.dx, self.dg = [], []
        out, k = [], 0
        for t in xs:
            out.append(new[k:k + t.numel()].view_as(t))
            k += t.numel()
        return tuple(out)


def _iterate(step, xs, tol, maxiter, method, memory, floor):
    """x <- step(x) until |step(x) - x| <= tol * max(|step(x)|, floor); no graph. A non-finite
    iterate or residual ends the iteration at once (more iterations cannot bring it back)."""
    acc = _Anderson(memory) if method == "anderson" else None
    res = scale = math.nan
    last = None  # the relative residual of the last finite iterate
    for k in range(1, maxiter + 1):
        fxs = step(xs)
        res = _norm([a - c for a, c in zip(fxs, xs)])
        scale = max(_norm(fxs), floor)
        if not (math.isfinite(res) and math.isfinite(scale)):
            return fxs, dict(iterations=k, residual=res, converged=False, diverged=True,
                             last_residual=last)
        if res <= tol * scale:
            return fxs, dict(iterations=k, residual=res / scale, converged=True)
        last = res / scale
        xs = fxs if acc is None else acc.step(xs, fxs)
    return fxs, dict(iterations=maxiter, residual=res / scale, converged=False)


class _FPSpec:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    def call(self, xs, params):
        """f on a tuple state, its output checked against the state's layout."""
        out = self.f(xs[0] if self.single else xs, *params)
        outs = (out,) if self.single else out
        if not isinstance(outs, (tuple, list)) or len(outs) != len(self.layout) or not all(
                isinstance(o, torch.Tensor) and (o.shape, o.dtype, o.device) == lay
                for o, lay in zip(outs, self.layout)):
            want = [(tuple(s), str(d)) for s, d, _ in self.layout]
            what, want = ("a tensor", want[0]) if self.single else ("a tuple", want)
            raise ValueError(f"fixed_point: f must return {what} laid out as the state {want}")
        return tuple(outs)

    def report(self, info, stats, key, tol, maxiter, label):
        if stats is not None:
            stats[key + "iterations"] = info["iterations"]
            stats[key + "residual"] = info["residual"]
            stats[key + "converged"] = info["converged"]
        if info["converged"]:
            return
        if info.get("diverged"):
            before = ("" if info["last_residual"] is None else
                      f" (relative residual {info['last_residual']:.3e} at the iteration before)")
            msg = (f"{label}: the iteration diverged: f gave non-finite values (residual "
                   f"{info['residual']}) at iteration {info['iterations']}{before}; tol={tol:g}, "
                   f"maxiter={maxiter}")
        else:
            msg = (f"{label}: no convergence after {info['iterations']} iterations: relative "
                   f"residual {info['residual']:.3e} > tol {tol:g} (maxiter={maxiter})")
        _nonconvergence(self.policy, msg, 3)


class _AdjointIdentity(torch.autograd.Function):
    """Returns the solution; its backward maps g to u = (I - df/dx^T)^{-1} g, which the graph of
    f(x*, *params) it was applied to then turns into gradients for everything f reads."""

    @staticmethod
    def forward(ctx, spec, xs, *zs):
        ctx.spec, ctx.xs = spec, xs
        keep_until_exit(ctx)  # it holds the user's function: freed at exit
        return tuple(x.clone() for x in xs)

    @staticmethod
    def backward(ctx, *gs):
        spec = ctx.spec
        if torch.is_grad_enabled():
            raise RuntimeError("fixed_point: double backward (create_graph=True) is not supported;"
                               " use first derivatives, or unroll the iteration with autograd")
        gnorm = _norm(gs)
        if gnorm == 0.0:
            return (None, None) + tuple(torch.zeros_like(g) for g in gs)
        with torch.enable_grad():
            xr = tuple(x.detach().requires_grad_() for x in ctx.xs)
            # Explicit params are detached here (their gradient comes from the forward's graph);
            # tensors f closes over still get a graph, which is unused and freed with zr.
            zr = spec.call(xr, tuple(p.detach() if isinstance(p, torch.Tensor) else p
                                     for p in spec.params))

        def adjoint_step(us):
            vj = torch.autograd.grad(zr, xr, us, retain_graph=True, allow_unused=True)
            return tuple(g + (torch.zeros_like(g) if v is None else v) for g, v in zip(gs, vj))

        us, info = _iterate(adjoint_step, tuple(g.clone() for g in gs), spec.btol, spec.bmaxiter,
                            spec.method, spec.memory, gnorm)
        spec.report(info, spec.stats, "backward_", spec.btol, spec.bmaxiter,
                    "fixed_point (backward)")
        return (None, None) + us


def fixed_point(f, x0, params=(), *, tol=1e-8, maxiter=1000, method="picard",
                on_nonconvergence="raise", backward_tol=None, backward_maxiter=None, stats=None,
                anderson_memory=5):
    """Solves x = f(x, *params) by iteration, differentiably in params and in every tensor f uses.

    Parameters
    ----------
    f : callable
        ``f(x, *params)`` returning the next iterate, with the structure of ``x0``.
    x0 : tensor or tuple of tensors
        The starting point (not differentiated).
    params : tuple of tensors, optional
        Tensors passed to f; tensors f reads from its closure receive gradients as well.
    tol : float, default 1e-8
        Stop when ``norm(f(x) - x) <= tol * max(norm(f(x)), 1)``.
    maxiter : int, default 1000
        The most iterations.
    method : {"picard", "anderson"}
        Plain iteration, or Anderson acceleration over the last ``anderson_memory`` steps.
    on_nonconvergence : {"raise", "warn", "ignore"}
        What happens when maxiter passes first.
    backward_tol, backward_maxiter : float and int, optional
        The adjoint iteration's settings (default: tol and maxiter).
    stats : dict, optional
        Receives iterations, residual, converged, and backward_* after a backward pass.
    anderson_memory : int, default 5
        Steps Anderson acceleration mixes.

    Returns
    -------
    tensor or tuple of tensors
        The fixed point x* (f of the last iterate), differentiable in params and in every
        tensor f reads.

    Raises
    ------
    ConvergenceError
        No convergence within maxiter with ``on_nonconvergence="raise"`` (forward or adjoint).
    ValueError
        An unknown method or on_nonconvergence, a negative tol, a maxiter below 1, or an f
        whose result is not laid out as the state.
    TypeError
        f not callable, x0 not a floating-point tensor (or tuple of them), params not a tuple,
        stats not a dict.
    RuntimeError
        A double backward (``create_graph=True``).

    Notes
    -----
    x0: a tensor, or a tuple of tensors for a state of several parts (f then takes and returns a
    tuple). The iteration stops when |f(x) - x| <= tol * max(|f(x)|, 1) (norms over the whole
    state): relative for large states, absolute for small ones. method: "picard" (x <- f(x)) or
    "anderson" (Anderson acceleration over the last `anderson_memory` steps). The returned x is
    f of the last iterate. on_nonconvergence: "raise" (ConvergenceError), "warn" or "ignore".
    `stats` receives iterations, residual, converged, and backward_* after a backward pass.

    The forward runs without a graph; x0 is a starting point and is not differentiated. Under
    grad mode, f is evaluated once more at x* with a graph (x* held constant), and the result is
    returned through an identity whose backward (implicit function theorem) solves the adjoint
    fixed point u = g + (df/dx)^T u by the same method, with vector-Jacobian products through one
    further graph of f at x*, stopping at |step| <= backward_tol * max(|u|, |g|) (defaults: tol,
    maxiter). u then flows back through f(x*, *params): tensors reached by f, listed in params or
    captured by its closure, receive gradients alike; listing them only documents the dependence.
    The adjoint iteration converges when f is a contraction near x* (spectral radius of df/dx
    below 1), as the forward iteration needs anyway. Double backward (create_graph=True) raises
    RuntimeError.


    Examples
    --------
    >>> import torch
    >>> from tessel.loops import fixed_point
    >>> a = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    >>> x = fixed_point(lambda x: torch.cos(a * x), torch.zeros((), dtype=torch.float64))
    >>> (g,) = torch.autograd.grad(x, a)
    >>> # implicit function theorem: dx/da = -x sin(a x) / (1 + a sin(a x))
    >>> xs = x.detach()
    >>> expected = -xs * torch.sin(a * xs) / (1 + a * torch.sin(a * xs))
    >>> bool(torch.allclose(g, expected))
    True
    """
    who = "fixed_point"
    if not callable(f):
        raise TypeError(f"{who}: f must be callable (x, *params) -> x; got {type(f).__name__}")
    single = isinstance(x0, torch.Tensor)
    xs = (x0,) if single else x0
    if not isinstance(xs, (tuple, list)) or not xs or not all(
            isinstance(t, torch.Tensor) and t.is_floating_point() for t in xs):
        raise TypeError(f"{who}: x0 must be a floating-point tensor or a non-empty tuple of them")
    if not isinstance(params, (tuple, list)):
        raise TypeError(f"{who}: params must be a tuple (passed to f as f(x, *params)); got "
                        f"{type(params).__name__}")
    tol = _check_number(who, "tol", tol)
    maxiter = _check_int(who, "maxiter", maxiter)
    btol = tol if backward_tol is None else _check_number(who, "backward_tol", backward_tol)
    bmax = maxiter if backward_maxiter is None else _check_int(who, "backward_maxiter",
                                                               backward_maxiter)
    if method not in _METHODS:
        raise ValueError(f"{who}: method must be one of {_METHODS}; got {method!r}")
    memory = _check_int(who, "anderson_memory", anderson_memory)
    if method == "anderson" and len({(t.dtype, t.device) for t in xs}) > 1:
        raise TypeError(f"{who}: method='anderson' needs all state tensors on one dtype and device")
    spec = _FPSpec(f=f, single=single, params=tuple(params), layout=[(t.shape, t.dtype, t.device)
                   for t in xs], policy=_check_policy(who, on_nonconvergence), btol=btol,
                   bmaxiter=bmax, method=method, memory=memory, stats=_check_stats(who, stats))

    with torch.no_grad():
        sol, info = _iterate(lambda s: spec.call(s, spec.params), tuple(t.detach() for t in xs),
                             tol, maxiter, method, memory, 1.0)
    spec.report(info, stats, "", tol, maxiter, who)
    if torch.is_grad_enabled():
        # x* held fixed: this graph reaches params and closure tensors, never the iterates.
        zs = spec.call(sol, spec.params)
        if any(z.requires_grad for z in zs):
            sol = _AdjointIdentity.apply(spec, sol, *zs)
    return sol[0] if single else tuple(sol)
