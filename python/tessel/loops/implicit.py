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
import numbers
import warnings

import torch

from .._exit import keep_until_exit

__all__ = ["cg_solve", "fixed_point", "ConvergenceError"]

_POLICIES = ("raise", "warn", "ignore")
_METHODS = ("picard", "anderson")


class ConvergenceError(RuntimeError):
    """An iterative solver stopped at `maxiter` before meeting its tolerance."""


# ---- shared helpers ------------------------------------------------------------------------------
def _check_number(who, name, v, *, minimum=0.0):
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) \
            or v < minimum:
        raise ValueError(f"{who}: {name} must be a finite number >= {minimum:g}; got {v!r}")
    return float(v)


def _check_int(who, name, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise ValueError(f"{who}: {name} must be an integer >= 1; got {v!r}")
    return int(v)


def _check_policy(who, v):
    if v not in _POLICIES:
        raise ValueError(f"{who}: on_nonconvergence must be one of {_POLICIES}; got {v!r}")
    return v


def _check_stats(who, v):
    if v is not None and not isinstance(v, dict):
        raise TypeError(f"{who}: stats must be a dict (filled in place) or None")
    return v


def _nonconvergence(policy, msg, stacklevel):
    if policy == "raise":
        raise ConvergenceError(msg)
    if policy == "warn":
        warnings.warn(msg, RuntimeWarning, stacklevel=stacklevel + 1)


# ---- conjugate gradient --------------------------------------------------------------------------
class _CGOptions:
    def __init__(self, tol, atol, maxiter, policy):
        self.tol, self.atol, self.maxiter, self.policy = tol, atol, maxiter, policy


def _checked_matvec(matvec, b):
    """Wraps matvec so that a wrong output is reported at the call, not deep inside the loop."""
    shape, dtype, device = b.shape, b.dtype, b.device

    def mv(v):
        out = matvec(v)
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"cg_solve: matvec returned a {type(out).__name__}; expected a tensor "
                            f"of shape {tuple(shape)}")
        if out.shape != shape:
            raise ValueError(f"cg_solve: matvec returned shape {tuple(out.shape)} for an input of "
                             f"shape {tuple(shape)}; it must return b's shape")
        if out.dtype != dtype or out.device != device:
            raise TypeError(f"cg_solve: matvec returned {out.dtype} on {out.device}; expected "
                            f"b's {dtype} on {device}")
        return out
    return mv


def _cg_iterate(mv, b, x0, opts, extra_atol):
    """Plain CG, every column of b at once with its own step sizes; no graph, O(1) iterates."""
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
    p = r.clone()
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
            raise ValueError(f"cg_solve: the operator is not positive definite: p^T A p = "
                             f"{val:.3e} <= 0 at iteration {it}{col}; CG needs a symmetric "
                             "positive-definite matvec")
        # Converged columns get zero steps so that they stay put while the others go on.
        alpha = (rs / pap).masked_fill(done, 0.0)
        # In place: one n-sized temporary per iteration besides matvec's output.
        x.addcmul_(p, alpha)
        r.addcmul_(ap, alpha, value=-1.0)
        rs_new = torch.linalg.vector_norm(r, dim=0) ** 2
        beta = (rs_new / rs).masked_fill(done, 0.0)
        p.mul_(beta).add_(r)
        rs = rs_new
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
             stats=None):
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

    Returns
    -------
    tensor
        x, shaped like b, differentiable in b and in every tensor matvec reads.

    Raises
    ------
    ConvergenceError
        No convergence within maxiter with ``on_nonconvergence="raise"``.
    ValueError
        An operator found not positive definite (p^T A p <= 0) or giving non-finite values, a
        b not shaped (n,) or (n, k), or an x0 not shaped like b.
    TypeError
        matvec not callable or returning something other than a tensor of b's dtype and
        device, b not a floating-point tensor.

    Notes
    -----
    b: (n,) or (n, k); with k columns, each is an independent right-hand side (matvec receives and
    returns (n, k), i.e. acts column-wise) with its own step sizes and stopping test
    |r_j| <= max(tol * |b_j|, atol). maxiter defaults to 10 n. x0 is a warm start (not
    differentiated). on_nonconvergence: "raise" (ConvergenceError), "warn" or "ignore"; the message
    gives the iterations and residual. An operator found not positive definite (p^T A p <= 0)
    raises ValueError. `stats`, a dict, receives iterations, residual, relative_residual and
    converged (lists for several columns), and after a backward pass backward_iterations and
    backward_converged.

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
    opts = _CGOptions(tol, atol, maxiter, _check_policy(who, on_nonconvergence))
    return _cg_solve(_checked_matvec(matvec, b), b, opts, x0, _check_stats(who, stats))


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
