"""Kernel solves (alpha I + K) a = b by conjugate gradient on point clouds sharded over ranks.

`KernelSolve` takes tessel.torch.KernelSolve's arguments plus `group`, and is called on every
rank of a process group with that rank's rows: the same points as its i rows and its j rows (a
square system, rank by rank), and its rows of b. It returns the rank's rows of the solution of
the whole (global) system. The products K v are tessel.distributed.Genred Sum reductions around
the ring; conjugate gradient runs in Python with global dot products, with the stopping rule of
tessel's own solver (src/algos/kernel_solve.cpp), so that both give the same answer.

Gradients are implicit (K symmetric): the backward solves (alpha I + K) u = grad, then
dL/db = u, dL/dalpha = -<u, a> and, for K's arrays and parameters, the gradient of
-<u, K a> with a held fixed, through the distributed Genred's own (collective) backward.
"""
import math
from types import SimpleNamespace

import torch
import torch.distributed as dist

from .. import torch as _tt
from .._docstrings import ONE_RANK_GROUP, SHARDED_PARAMETERS, fill
from .._exit import keep_until_exit
from .._solve import KernelSolveBase
from ._genred import Genred
from ._ring import Ring, check_group, digest_of

__all__ = ["KernelSolve"]

_WHO = "tessel.distributed.KernelSolve"
# What a rank sends in place of its call's digest when its own arguments failed its checks.
_FAILED = -1


@fill(one_rank_group=ONE_RANK_GROUP,
      sharded_parameters=SHARDED_PARAMETERS.format(twin="KernelSolve"))
class KernelSolve(KernelSolveBase):
    """Solve a kernel system ``(alpha I + K) a = b`` whose rows are spread across ranks.

    tessel.torch.KernelSolve on point clouds sharded over a torch.distributed group: conjugate
    gradient whose products K v are tessel.distributed.Genred Sum reductions around the ring of
    the ranks, and whose dot products are global, with the stopping rule of tessel's own solver,
    so both give the same solution. It serves kernel interpolation, regression or Gaussian
    process means on clouds that one process cannot hold. Call it on every rank, collectively,
    with that rank's rows: for ``Exp(-G * SqDist(X, Y)) * B`` with X = Vi, Y = Vj and B = Vj the
    unknown, a rank passes its points x_r as both X and Y (the system is square rank by rank:
    checked) and its rows b_r of b; shards may be uneven, or empty. It returns the rank's rows of
    the global solution a.

    Calling ``ks(*args, alpha=0.0, tol=None, atol=0.0, maxiter=None, on_nonconvergence="warn",
    backend=None, ranges=None, stats=None)`` takes tessel.torch.KernelSolve's call options (not
    ``ranges``); every rank must pass the same ones, dtypes and requires_grad (a rank that
    differs is named on every rank). It stops when the global residual
    ``|b - (alpha I + K) a| <= max(tol |b|, atol)``, and ``stats`` gets the same fields on every
    rank. Gradients are first order, with Genred's semantics: each rank backpropagates its own
    loss through its own rows of a (every rank must), and receives for its rows of b and of the
    points the gradient of the sum of the ranks' losses (a tensor passed as both X and Y gets
    both parts), and for parameters and alpha the full gradient on every rank.

    Parameters
    ----------
    formula : str
        The KeOps formula of K's product, linear in the unknown, with an i- and a j-variable.
    aliases : list of str
        One declaration per argument, such as ``["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)"]``.
    varinvalias : str or int
        The unknown: an alias name (``"B"``), its variable index, or ``"Var(k,d,c)"``, indexed
        by the reduced index and of the output's dim.
    axis : {0, 1}, default 1
        The reduction's axis, as for tessel.torch.KernelSolve.
    dtype : str, optional
        As for tessel.torch.KernelSolve (the arguments' dtype decides).
    {sharded_parameters}

    Raises
    ------
    TypeError
        If ``varinvalias`` is neither a name nor an index, or the arguments are not tensors of
        one float dtype; when pickled with a ``group``.
    ValueError
        If the unknown is not an alias indexed by the reduced index; when called, if alpha is
        not one number, a rank's i and j rows differ in number, its variables disagree in rows,
        ranks disagree on the call, b holds a NaN or an infinity, conjugate gradient breaks down
        (K not positive definite) or does not converge with ``on_nonconvergence="raise"``.
    NotImplementedError
        If the formula lacks an i- or a j-variable; when called with ``ranges``, or for a
        double backward.
    RuntimeError
        When another rank of the group refused its arguments (every rank stops).

    See Also
    --------
    tessel.torch.KernelSolve : The same solver in one process.
    Genred : The sharded reductions it runs.

    Examples
    --------
    Kernel interpolation in a one-rank gloo group, equal to the one-process solution:

    {one_rank_group}
    >>> import tessel.torch
    >>> from tessel.distributed import KernelSolve
    >>> x = torch.randn(100, 3, dtype=torch.float64)  # this rank's points
    >>> b = torch.randn(100, 1, dtype=torch.float64)  # and its rows of b
    >>> formula, aliases = "Exp(-SqDist(X, Y)) * B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)"]
    >>> a = KernelSolve(formula, aliases, "B")(x, x, b, alpha=0.1)  # x as both X and Y
    >>> a.shape
    torch.Size([100, 1])
    >>> one = tessel.torch.KernelSolve(formula, aliases, "B")(x, x, b, alpha=0.1)
    >>> bool(torch.allclose(a, one, atol=1e-4))  # both stop at the tolerance (tol=1e-6)
    True
    >>> K = torch.exp(-torch.cdist(x, x) ** 2)  # the dense system, for a check
    >>> bool(torch.allclose(0.1 * a + K @ a, b, atol=1e-4))
    True
    >>> dist.destroy_process_group()
    """

    _who = _WHO

    def __init__(self, formula, aliases, varinvalias, axis=1, dtype=None, group=None,
                 **options):
        check_group(_WHO, group)
        super().__init__(formula, aliases, varinvalias, axis=axis, **options)
        cats = {c for _, c, _ in self._spec.reduction.inputs()}
        if not {0, 1} <= cats:
            raise NotImplementedError(f"{_WHO}: the formula must read an i-variable (Vi) and a "
                                      "j-variable (Vj): the rows that each rank holds")
        self.axis, self.group, self.dtype = axis, group, dtype
        self._init_args["dtype"] = dtype
        # K's product: b's slot holds the vector that K multiplies.
        self._product = Genred(formula, aliases, "Sum", axis=axis, dtype=dtype, group=group,
                               **options)

    def __getstate__(self):
        if self.group is not None:
            raise TypeError(f"{_WHO}: a solver built on a process group cannot be pickled (the "
                            "group lives in one process); pickle one built with group=None")
        return super().__getstate__()

    def __call__(self, *args, alpha=0.0, tol=None, atol=0.0, maxiter=None,
                 on_nonconvergence="warn", backend=None, ranges=None, stats=None):
        """Solve, collectively with every rank, for this rank's rows of a (see the class)."""
        if ranges is not None:
            raise NotImplementedError(f"{_WHO}: ranges (block-sparse reductions) are not "
                                      "sharded; pass ranges=None")
        ring = Ring.of(self.group, _WHO)
        call = SimpleNamespace(ring=ring, backend=backend, stats=stats, error=None)
        try:  # a local error is raised once every rank knows of it (none waits forever)
            dtype = _tt._check_tensors(args, _WHO)
            alpha_t = alpha if isinstance(alpha, torch.Tensor) else torch.tensor(
                float(alpha), dtype=dtype)
            if alpha_t.numel() != 1:
                raise ValueError(f"{_WHO}: alpha must be a number or a one-element tensor, got "
                                 f"shape {tuple(alpha_t.shape)}")
            opts, call.mode = self._settings(
                args, "float64" if dtype == torch.float64 else "float32",
                float(alpha_t.detach()), tol, atol, maxiter, on_nonconvergence, backend, None)
            call.opts = opts
            parts, ni, nj = self._descriptor(args, alpha_t, opts)
        except (TypeError, ValueError, NotImplementedError) as e:
            call.error, parts, ni, nj = e, None, 0, 0
        ni, nj = _agree(call, parts, ni, nj, args)
        b = args[self.var]
        call.size = sum(nj if self.axis == 1 else ni) * self.dim
        args = list(args)
        if b.dim() == 1:  # Genred's variables are 2-D: b as one column, a as b was
            args[self.var] = b.reshape(-1, 1)
        a = _SolveFunction.apply(self, call, alpha_t.to(dtype), *args)
        return a.reshape(-1) if b.dim() == 1 else a

    def _descriptor(self, args, alpha_t, opts):
        """What this rank's call must share with every other's (a dict, by name), and its i and
        j row counts; raises on a local error."""
        grad = torch.is_grad_enabled()
        parts = {"solver": repr((sorted(self._spec.args.items()), self.var)),
                 "alpha": float(alpha_t.detach()),
                 "alpha's requires_grad": grad and alpha_t.requires_grad}
        for k in ("tol", "atol", "maxiter", "raise_on_nonconvergence"):
            parts[k] = opts.get(k)
        rows = {}
        cats = {i: c for i, c, _ in self._spec.reduction.inputs()}
        for k, a in enumerate(args):
            cat = cats.get(k, 2)  # parameters, and aliases the formula does not read: no rows
            parts[f"argument {k}"] = (tuple(a.shape) if cat == 2 else tuple(a.shape[1:]),
                                      str(a.dtype), a.device.type, grad and a.requires_grad)
            if cat == 2:
                continue
            if a.dim() == 0:
                raise ValueError(f"{_WHO}: argument {k} is a 0-d tensor; an "
                                 f"{'ij'[cat]}-variable holds the rank's rows (n, dim)")
            n, first = rows.setdefault(cat, (a.shape[0], k))
            if a.shape[0] != n:
                raise ValueError(f"{_WHO}: argument {k} has {a.shape[0]} rows but argument "
                                 f"{first} has {n}; all {'ij'[cat]}-variables must have as many "
                                 "rows")
        return parts, rows[0][0], rows[1][0]

    def _apply(self, args, call, v, alpha):
        """(alpha I + K) v in float64, v holding this rank's rows of the unknown."""
        b = args[self.var]
        sub = list(args)
        sub[self.var] = v.to(b.dtype).reshape(b.shape)
        kv = self._product(*sub, backend=call.backend).to(torch.float64).reshape(v.shape)
        return kv + alpha * v if alpha else kv

    def _cg(self, args, b, call, alpha, key=None):
        """Solves (alpha I + K) x = b (this rank's rows of b, any shape) by conjugate gradient,
        as the core's conjugate_gradient does, step for step; returns x in b's dtype and reports
        (warns, raises, fills stats) as tessel.torch.KernelSolve."""
        ring, opts = call.ring, call.opts
        b64 = b.detach().to(torch.float64)
        maxiter = opts.get("maxiter") or max(100, min(2 * call.size, 1000))
        bnorm = math.sqrt(_dots(ring, (b64, b64))[0])
        if not math.isfinite(bnorm):
            raise ValueError(f"{_WHO}: b holds a NaN or an infinity (on some rank)")
        x = torch.zeros_like(b64)
        iterations, residual, done = 0, 0.0, True
        if bnorm > 0:
            thresh = max(opts["tol"] * bnorm, opts["atol"])
            r, p = b64.clone(), b64.clone()
            rr = _dots(ring, (r, r))[0]
            done = math.sqrt(rr) <= thresh
            # The recurrence's residual drifts from the true one |b - A x|: "converged" must mean
            # the true residual met the tolerance, so CG restarts from the true residual for as
            # long as that keeps going down (as the core does).
            true_r = math.inf
            while True:
                while not done and iterations < maxiter:
                    ap = self._apply(args, call, p, alpha)
                    iterations += 1
                    pap = _dots(ring, (p, ap))[0]
                    if not pap > 0:
                        raise ValueError(
                            f"{_WHO}: conjugate gradient broke down at iteration {iterations}: "
                            f"p^T (alpha I + K) p = {pap:.3g}; the system must be symmetric "
                            "positive definite (a positive definite kernel on the same points, "
                            "or a larger alpha)")
                    step = rr / pap
                    x.add_(p, alpha=step)
                    r.add_(ap, alpha=-step)
                    rr_new = _dots(ring, (r, r))[0]
                    done = math.sqrt(rr_new) <= thresh
                    p.mul_(rr_new / rr).add_(r)
                    rr = rr_new
                res = b64 - self._apply(args, call, x, alpha)
                last_r, true_r = true_r, math.sqrt(_dots(ring, (res, res))[0])
                if not done or true_r <= thresh:
                    break
                done = False
                if not true_r < last_r or iterations >= maxiter:
                    break
                r, p, rr = res.clone(), res.clone(), true_r * true_r
            residual = true_r / bnorm
        if not done and opts["raise_on_nonconvergence"]:
            atol = f" (atol {opts['atol']:.3g})" if opts["atol"] > 0 else ""
            raise ValueError(f"{_WHO}: no convergence after {iterations} iterations"
                             f"{' (backward solve)' if key else ''}: relative residual "
                             f"{residual:.3g} > tol {opts['tol']:.3g}{atol}; raise maxiter or "
                             "alpha, or loosen tol")
        self._report((iterations, residual, done), call.mode, call.stats, key)
        return x.to(b.dtype)


def _dots(ring, *pairs):
    """Global dot products <u, v> over the ranks' rows, one gather for all the pairs, added in
    rank order (Ring.sum_in_order: the same bits, so the same branches of CG, on every rank)."""
    return ring.sum_in_order(torch.stack([torch.sum(u * v) for u, v in pairs])).tolist()


def _agree(call, parts, ni, nj, args):
    """Every rank's i and j row counts, once every rank has checked its own call (one
    all_gather of three integers). Raises on every rank when one rank refused its arguments,
    differs from rank 0, or holds unlike i and j rows."""
    ring = call.ring
    digest = _FAILED if call.error is not None else digest_of(sorted(parts.items()))
    device = "cpu"
    if ring.backend != "gloo" and args and isinstance(args[0], torch.Tensor):
        device = args[0].device
    mine = torch.tensor([digest, ni, nj], dtype=torch.int64, device=device)
    every = [torch.empty_like(mine) for _ in range(ring.size)]
    dist.all_gather(every, mine, group=ring.group)
    every = torch.stack(every).cpu().tolist()
    if call.error is not None:
        raise call.error
    failed = [r for r, row in enumerate(every) if row[0] == _FAILED]
    if failed:
        raise RuntimeError(f"{_WHO}: rank {failed[0]} of the group refused its arguments (its "
                           "own error says why); every rank stops")
    if any(row[0] != every[0][0] for row in every):
        # Only on this error path: every rank's call in full, to say what differs.
        calls = [None] * ring.size
        dist.all_gather_object(calls, parts, group=ring.group)
        bad = next(r for r, row in enumerate(every) if row[0] != every[0][0])
        key = next((k for k in calls[0] if calls[bad].get(k) != calls[0][k]), "its arguments")
        raise ValueError(f"{_WHO}: rank {bad} disagrees with rank 0 on {key}: "
                         f"{calls[bad].get(key)!r} vs {calls[0].get(key)!r}; every rank must "
                         "make the same solve")
    for r, (_, i, j) in enumerate(every):
        if i != j:
            raise ValueError(f"{_WHO}: rank {r} holds {i} rows of the i-variables but {j} rows "
                             "of the j-variables; the system is square only when each rank's i "
                             "rows are the same points as its j rows (pass them as both)")
    return [row[1] for row in every], [row[2] for row in every]


class _SolveFunction(torch.autograd.Function):
    """a = (alpha I + K(theta))^-1 b over every rank's rows, differentiated implicitly: the
    cotangent g gives u = (alpha I + K)^-1 g (one more collective solve), grad_b = u,
    grad_alpha = -<u, a> and grad_theta = -d<u, K(theta) a>/dtheta through the sharded Genred."""

    @staticmethod
    def forward(ctx, solver, call, alpha, *args):
        a = solver._cg(args, args[solver.var], call, float(alpha))
        ctx.solver, ctx.call = solver, call
        if any(ctx.needs_input_grad):
            keep_until_exit(ctx)  # it holds the solver's core objects: freed at exit
        ctx.save_for_backward(alpha, a, *args)
        return a

    @staticmethod
    def backward(ctx, g):
        if torch.is_grad_enabled():
            raise NotImplementedError(f"{_WHO}: double backward (create_graph=True) is not "
                                      "sharded yet; differentiate once, or solve in one process "
                                      "with tessel.torch.KernelSolve")
        solver, call = ctx.solver, ctx.call
        alpha, a, *args = ctx.saved_tensors
        var, needs = solver.var, ctx.needs_input_grad[3:]
        # Every rank has the same needs (requires_grad is part of the call's agreed digest), so
        # every rank makes the same collective calls below.
        u = solver._cg(args, g.contiguous(), call, float(alpha), key="backward")
        grads = [None] * len(args)
        used = {i for i, _, _ in solver.reduction.inputs()}
        others = [k for k in range(len(args)) if needs[k] and k in used and k != var]
        if others:
            with torch.enable_grad():
                proxies = [x.detach().requires_grad_(k in others) for k, x in enumerate(args)]
                proxies[var] = a.detach()
                ka = solver._product(*proxies, backend=call.backend)
                got = torch.autograd.grad(ka, [proxies[k] for k in others], grad_outputs=-u,
                                          allow_unused=True)
            for k, gk in zip(others, got):
                grads[k] = gk
        if needs[var]:
            grads[var] = u
        grad_alpha = None
        if ctx.needs_input_grad[2]:
            dot = _dots(call.ring, (u.to(torch.float64), a.to(torch.float64)))[0]
            grad_alpha = torch.full_like(alpha, -dot)
        grads = [torch.zeros_like(x) if n and gk is None else gk
                 for x, n, gk in zip(args, needs, grads)]
        return (None, None, grad_alpha, *grads)
