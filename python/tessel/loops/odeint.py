"""odeint_reversible: an ODE solver whose gradient costs constant memory in the number of steps.

The integrator is the reversible Heun method (Kidger, Foster, Li & Lyons 2021, "Efficient and
accurate gradients for neural SDEs", here without noise). Its state is (y, z, F) with z (the
paper's y-hat) a second copy of the solution and F = f(t, z). One step of size h from s to s':

    z' = 2 y - z + F h          F' = f(s', z')          y' = y + (F + F') h / 2

which inverts exactly, in algebra, as

    z = 2 y' - z' - F' h        F = f(s, z)             y = y' - (F + F') h / 2

so the backward pass rebuilds the trajectory from the final state, step by step, instead of
storing it. It is second order in h and costs one evaluation of f per step.

Gradient. The forward runs under `torch.no_grad` and keeps only the final state (and the output
rows it returns). The backward walks the steps in reverse: it reconstructs the previous state
with the inverse step, and backpropagates the adjoint of (y, z, F) through the step, whose only
non-linear part is F' = f(s', z'). The vector-Jacobian product of f at (s', z') is taken on the
graph of the evaluation the inverse made one iteration earlier (the inverse of step n+1
evaluates f(s_{n+1}, z_{n+1}) anyway), so the backward costs one evaluation of f with a graph
plus one vector-Jacobian product per step, and keeps at most two one-evaluation graphs alive.
The result is the exact gradient of the discrete forward map (not the continuous adjoint's
approximation of it), up to the floating-point error of the reconstruction, which is reported.

Adaptive steps (rtol/atol; tessel.loops._odeint_adaptive). The forward's step-size controller
picks the steps and records them; the backward above runs on the recorded steps, unchanged.
method="dopri5" (Dormand–Prince, not reversible) differentiates the recorded steps with
checkpoint_loop instead.

Stability. Like leapfrog, the method is symmetric and not A-stable: a strongly dissipative or
stiff field (h |lambda| not small for Re lambda < 0) excites a growing parasitic mode in z - y,
which degrades both the solution and the reconstruction. Use small steps for such fields.
"""
import math

import torch

from .._exit import keep_until_exit
from ._captured import Captured, grad_once
from .checkpoint import MAX_STEPS, _as_int
from ._odeint_adaptive import Controller, Field, ParasiteWatch, dopri5, march
from ._odeint_adaptive import grid as _grid

__all__ = ["odeint_reversible"]

_NAME = "odeint_reversible"


def _even(counts, t):
    """The fractions of equal steps: interval k cut into counts[k] steps."""
    return [torch.arange(m, dtype=t.dtype, device=t.device) / m for m in counts]


def _zeros(xs):
    return [torch.zeros_like(x) for x in xs]


class _Solver:
    """One solve's vector field, grid and counters, shared by the forward and the backward."""

    def __init__(self, f, is_tuple, y0s, fracs, ctl, params, stats):
        self.is_tuple, self.stats, self.ctl = is_tuple, stats, ctl
        self.call = Field(f, is_tuple, y0s, stats)
        # What f reads besides (t, y): params= first, then what the forward finds.
        self.captured = Captured(_NAME, params)
        self.params = self.captured.tensors  # grows while the forward finds more
        self.discovering = False
        self.fracs = None
        self.grid = None
        self.final = None
        for key in ("backward", "reconstruction_error", "reconstruction_error_rel",
                    "max_stored", "step_times"):
            stats.pop(key, None)  # a reused dict must not show a previous solve's figures
        stats.update(steps=0, rejected=0, nfe_forward=0, nfe_backward=0, vjp_backward=0)
        if fracs is not None:
            self._set_steps(fracs)

    def _set_steps(self, fracs):
        self.fracs = fracs
        self.out_index = [0]
        for fr in fracs:
            self.out_index.append(self.out_index[-1] + len(fr))
        self.n_steps = self.out_index[-1]
        self.stats["steps"] = self.n_steps

    def solve(self, t, y0s):
        """The plain iteration: without a graph under no_grad (the forward), with the stored
        graph under enable_grad (the double-backward fallback). Returns the output rows."""
        self.call.key = "nfe_forward" if not torch.is_grad_enabled() else "nfe_backward"
        if self.fracs is None:
            return self._adaptive(t, y0s)
        grid = _grid(t, self.fracs)
        y, z = list(y0s), list(y0s)
        F = self._eval(grid[0], z)
        outs = [torch.empty((len(self.fracs) + 1, *y.shape), dtype=y.dtype, device=y.device)
                for y in y0s]
        for o, yi in zip(outs, y):
            o[0] = yi
        n = 0
        for k, fr in enumerate(self.fracs):
            for _ in range(len(fr)):
                y, z, F = self._step(grid[n], grid[n + 1], y, z, F)
                n += 1
            for o, yi in zip(outs, y):
                o[k + 1] = yi
        return grid, outs, (y, z, F)

    def _step(self, s, s1, y, z, F):
        """One reversible Heun step from s to s1 (the module's docstring)."""
        h = s1 - s
        z1 = [2 * yi - zi + Fi * h for yi, zi, Fi in zip(y, z, F)]
        F1 = self._eval(s1, z1)
        return [yi + (Fi + F1i) * (h / 2) for yi, Fi, F1i in zip(y, F, F1)], z1, F1

    def _adaptive(self, t, y0s):
        """The first solve with rtol/atol: the controller picks the steps (fixed from then on).
        The error estimate (F' - F) h / 2 is Heun's step minus the Euler step, first order."""
        y = list(y0s)
        self.call.watch = []  # f at t[0] too (march reads and resets it)
        F = self._eval(t[0], y)
        span = float(t[-1]) - float(t[0])
        h = self.ctl.first_step(self._eval, t[0].detach(), abs(span), y, F, 2) if span else 0.0

        def attempt(s, s1, state):
            new = self._step(s, s1, *state)
            err = [(F1i - Fi) * ((s1 - s) / 2) for Fi, F1i in zip(state[2], new[2])]
            return new, err, state[0], new[0]

        fracs, rows = march(t, (y, list(y0s), F), attempt, self.ctl, h, 2, self.stats,
                            self.call, ParasiteWatch(float(t[-1])))
        self._set_steps(fracs)
        self.stats["step_times"] = _grid(t.detach(), fracs)
        outs = [torch.stack([y0] + [r[0][j] for r in rows]) for j, y0 in enumerate(y0s)]
        return _grid(t, fracs), outs, (rows[-1] if rows else (y, list(y0s), F))

    def _eval(self, s, z):
        if not self.discovering:
            return self.call(s, z)
        # The forward: f runs with a graph of this one evaluation, walked to find the tensors
        # it reads (even those read at a few times only), then dropped.
        return [o.detach() for o in self.captured.run(self.call, s, z)]

    def forward(self, t, y0s):
        self.discovering = True
        try:
            with torch.no_grad():
                self.grid, outs, self.final = self.solve(t, y0s)
        finally:
            self.discovering = False
        return outs

    def _live(self, n, z, want_s):
        """f at step time n and state z, with a graph whose leaves are detached copies."""
        zl = [x.detach().requires_grad_() for x in z]
        sl = self.grid[n].detach().requires_grad_(want_s)
        with torch.enable_grad():
            F = self.call(sl, zl)
        self.captured.check(F, zl + [sl])
        return zl, sl, F

    def _vjp(self, live, cot, want_s, param_grads):
        """Backpropagates `cot` (of F) through a live evaluation: returns (dz, ds) and adds the
        parameters' share into param_grads."""
        zl, sl, F = live
        preq = [j for j, p in enumerate(self.params) if p.requires_grad]
        targets = zl + ([sl] if want_s else []) + [self.params[j] for j in preq]
        pairs = [(o, c) for o, c in zip(F, cot) if o.requires_grad]
        self.stats["vjp_backward"] += 1
        if pairs:
            res = grad_once([o for o, _ in pairs], targets, [c for _, c in pairs])
        else:  # f ignores its state and every listed parameter
            res = [None] * len(targets)
        dz = [torch.zeros_like(x) if r is None else r for x, r in zip(zl, res)]
        ds = None
        if want_s:
            ds = res[len(zl)]
        for j, r in zip(preq, res[len(zl) + int(want_s):]):
            if r is not None:
                param_grads[j] = r if param_grads[j] is None else param_grads[j] + r
        return dz, ds

    def backward(self, grads, want_t, y0s):
        """The reversible adjoint sweep; returns (grads of y0, of the params, of the grid)."""
        y, z, F = self.final
        grid, N = self.grid, self.n_steps
        self.call.key = "nfe_backward"
        row_of = {n: k for k, n in enumerate(self.out_index)}
        param_grads = [None] * len(self.params)
        grid_grad = torch.zeros_like(grid) if want_t else None
        a_y = [g[-1].clone() for g in grads]
        a_z, a_F = _zeros(y), _zeros(y)
        live = self._live(N, z, want_t)
        for n in range(N - 1, -1, -1):
            h = grid[n + 1] - grid[n]
            with torch.no_grad():
                z0 = [2 * yi - zi - Fi * h for yi, zi, Fi in zip(y, z, F)]
            live0 = self._live(n, z0, want_t)
            with torch.no_grad():
                F0 = [x.detach() for x in live0[2]]
                y0 = [yi - (F0i + Fi) * (h / 2) for yi, F0i, Fi in zip(y, F0, F)]
                # F' = f(s', z') receives the adjoint of F' itself and y's share of it.
                g_F = [aF + ay * (h / 2) for aF, ay in zip(a_F, a_y)]
            dz, ds = self._vjp(live, g_F, want_t, param_grads)
            with torch.no_grad():
                a_zt = [az + d for az, d in zip(a_z, dz)]
                if want_t:
                    # h = s' - s enters z' through F h and y' through (F + F') h / 2.
                    a_h = sum((a * f0).sum() + (b * (f0 + f1)).sum() / 2
                              for a, b, f0, f1 in zip(a_zt, a_y, F0, F))
                    grid_grad[n + 1] += a_h + (0 if ds is None else ds)
                    grid_grad[n] -= a_h
                a_F = [a * h + b * (h / 2) for a, b in zip(a_zt, a_y)]
                a_y = [b + 2 * a for a, b in zip(a_zt, a_y)]
                a_z = [-a for a in a_zt]
                if n in row_of:
                    k = row_of[n]
                    a_y = [a + g[k] for a, g in zip(a_y, grads)]
            y, z, F, live = y0, z0, F0, live0
        # Step 0 starts from z_0 = y_0 and F_0 = f(s_0, y_0).
        dz, ds = self._vjp(live, a_F, want_t, param_grads)
        if want_t and ds is not None:
            grid_grad[0] += ds
        with torch.no_grad():
            y0_grads = [ay + az + d for ay, az, d in zip(a_y, a_z, dz)]
            err = max(max(float((yi - x).abs().max()), float((zi - x).abs().max()))
                      if x.numel() else 0.0 for yi, zi, x in zip(y, z, y0s))
            scale = max(float(x.abs().max()) if x.numel() else 0.0 for x in y0s)
        self.stats.update(reconstruction_error=err,
                          reconstruction_error_rel=err / scale if scale > 0 else err,
                          backward="reversible")
        return y0_grads, param_grads, grid_grad


class _ReversibleFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run, outs, n_y, t, *tensors):
        y0s = tensors[:n_y]
        # Kept as they are: the backward's local graphs must reach these very tensors.
        ctx.run, ctx.n_y, ctx.params = run, n_y, tensors[n_y:]
        keep_until_exit(ctx)  # it holds the user's function: freed at exit
        ctx.save_for_backward(t, *y0s)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        run, n_y = ctx.run, ctx.n_y
        t, *y0s = ctx.saved_tensors
        need = ctx.needs_input_grad[3:]
        if torch.is_grad_enabled():
            return (None, None, None, *_stored_backward(run, t, y0s, ctx.params, grads, need))
        y0_grads, param_grads, grid_grad = run.backward(grads, need[0], [y.detach()
                                                                         for y in y0s])
        t_grad = None
        if need[0]:
            with torch.enable_grad():
                tl = t.detach().requires_grad_()
                t_grad, = torch.autograd.grad(_grid(tl, run.fracs), tl, grid_grad)
        y0_grads = [g if w else None for g, w in zip(y0_grads, need[1:1 + n_y])]
        param_grads = [g if w else None for g, w in zip(param_grads, need[1 + n_y:])]
        return (None, None, None, t_grad, *y0_grads, *param_grads)


def _stored_backward(run, t, y0s, params, grads, need):
    """create_graph=True: differentiate the plain iteration with its graph stored (memory linear
    in the steps), so the gradient is itself differentiable."""
    run.stats["backward"] = "stored"
    inputs = [t, *y0s, *params]
    with torch.enable_grad():
        _, outs, _ = run.solve(t, y0s)
        run.captured.check(outs, [t, *y0s])
        wanted = [x for x, w in zip(inputs, need) if w]
        res = iter(grad_once(outs, wanted, grads, create_graph=True))
    out = []
    for x, w in zip(inputs, need):
        r = next(res) if w else None
        out.append(torch.zeros_like(x) if w and r is None else r)
    return out


def _check_t(t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{_NAME}: t must be a 1-D torch.Tensor of output times, got a "
                        f"{type(t).__name__}")
    if t.dim() != 1:
        raise ValueError(f"{_NAME}: t must be a 1-D tensor of output times, got shape "
                         f"{tuple(t.shape)}")
    if t.numel() < 1:
        raise ValueError(f"{_NAME}: t must hold at least 1 time (the initial one)")
    if not t.is_floating_point():
        raise TypeError(f"{_NAME}: t must be a floating-point tensor, got {t.dtype}")
    d = (t[1:] - t[:-1]).detach()
    if not bool(torch.isfinite(t.detach()).all()):
        raise ValueError(f"{_NAME}: t holds a non-finite time")
    if d.numel() and not (bool((d > 0).all()) or bool((d < 0).all())):
        raise ValueError(f"{_NAME}: t must be strictly increasing or strictly decreasing")
    return d


def _step_counts(d, step_size, steps_per_interval):
    if step_size is not None and steps_per_interval is not None:
        raise ValueError(f"{_NAME}: give step_size or steps_per_interval, not both")
    if steps_per_interval is not None:
        if _as_int(steps_per_interval) is None or _as_int(steps_per_interval) < 1:
            raise ValueError(f"{_NAME}: steps_per_interval must be an integer >= 1, got "
                             f"{steps_per_interval!r}")
        return [_as_int(steps_per_interval)] * d.numel()  # checked by _check_counts
    if step_size is not None:
        h = float(step_size)
        if not math.isfinite(h) or h <= 0:
            raise ValueError(f"{_NAME}: step_size must be a finite number > 0, got "
                             f"{step_size!r}")
        # The slack keeps an interval that is a whole number of steps from gaining one more
        # through the rounding of the division.
        ratios = [abs(float(x)) / h - 1e-9 for x in d]
        if not all(r <= _MAX_STEPS for r in ratios):  # inf too, which math.ceil cannot take
            raise ValueError(f"{_NAME}: step_size={step_size!r} makes more than {_MAX_STEPS} "
                             "steps in an interval of t; the largest supported is 2**28")
        return [max(1, math.ceil(r)) for r in ratios]
    return [1] * d.numel()


# Fixed steps hold every step time in one tensor of t's dtype: 2 GiB in float64 at this count.
_MAX_STEPS = 2 ** 28


def _check_counts(method, counts):
    """Step counts within what each method can hold: 2**28 step times for reversible Heun, and
    for dopri5 the checkpointed loop's limit per interval (tessel.loops.MAX_STEPS)."""
    worst = max(counts) if method == "dopri5" else sum(counts)
    limit, what = ((MAX_STEPS, "in an interval (dopri5 differentiates each interval as a "
                    "checkpointed loop of at most tessel.loops.MAX_STEPS = 2**23 steps)")
                   if method == "dopri5" else (_MAX_STEPS, "in all (2**28)"))
    if worst > limit:
        raise ValueError(f"{_NAME}: {worst} fixed steps, more than the {limit} supported {what}; "
                         "give a larger step_size or fewer steps_per_interval")
    return counts


_METHODS = ("reversible_heun", "dopri5")


def _plan(d, method, rtol, atol, options, step_size, steps_per_interval, snapshots):
    """Checks the method's arguments: returns (method, step counts or None, controller or None,
    snapshots)."""
    method = "reversible_heun" if method is None else method
    if method not in _METHODS:
        raise ValueError(f"{_NAME}: method must be one of {list(_METHODS)}, got {method!r}")
    fixed = step_size is not None or steps_per_interval is not None
    tol = rtol is not None or atol is not None or options is not None
    if fixed and tol:
        raise ValueError(f"{_NAME}: give rtol/atol/options (adaptive steps) or step_size/"
                         "steps_per_interval (fixed steps), not both")
    if snapshots is not None:
        if method != "dopri5":
            raise ValueError(f"{_NAME}: snapshots applies to method='dopri5' only (reversible "
                             "Heun stores no state)")
        if _as_int(snapshots) is None or _as_int(snapshots) < 1:
            raise ValueError(f"{_NAME}: snapshots must be an integer >= 1, got {snapshots!r}")
    snapshots = 16 if snapshots is None else _as_int(snapshots)
    if fixed or not (tol or method == "dopri5"):
        return method, _check_counts(method, _step_counts(d, step_size, steps_per_interval)), \
            None, snapshots
    # torchdiffeq's defaults.
    ctl = Controller(1e-7 if rtol is None else rtol, 1e-9 if atol is None else atol, options)
    return method, None, ctl, snapshots


# odeint_reversible's documentation (numpydoc; the site and help() read it), kept beside the
# function so that the function itself stays short.
_ODEINT_REVERSIBLE_DOC = """Integrates dy/dt = f(t, y) from y0 by reversible Heun or Dormand–Prince.

Returns y at the times t, shape (len(t), *y0.shape) (a tuple of such tensors if y0 is a
tuple), with a backward whose memory does not grow with the number of steps (see the module's
docstring).

Parameters
----------
f
    f(t, y) -> dy/dt, with t a 0-dim tensor and y (and the result) like y0. It must be
    deterministic: the backward evaluates it again.
y0
    a floating-point tensor, or a tuple of them (f then takes and returns tuples).
t
    a 1-D floating-point tensor of output times, strictly increasing or decreasing; t[0] is
    the initial time. The grid always passes through every t[k].
step_size, steps_per_interval
    (at most one) each interval [t[k], t[k+1]] is cut into ceil(|t[k+1] - t[k]| / step_size)
    or steps_per_interval equal steps. By default one step per interval: t itself is the
    grid.
method
    "reversible_heun" (the default) or "dopri5" (Dormand–Prince 5(4), torchdiffeq's default:
    fifth order, 6 evaluations of f per step; not reversible, so its backward recomputes
    states with checkpoint_loop over each interval's steps: each interval of t keeps at most
    `snapshots` states (default 16) and the graph of its last step from the forward to the
    backward, so many output times cost memory).
rtol, atol, options
    adaptive steps, as in torchdiffeq (the default for "dopri5", with rtol=1e-7 and
    atol=1e-9; "reversible_heun" is adaptive when either is given): the controller
    (tessel.loops._odeint_adaptive) accepts a step when the rms over the state of its error
    estimate / (atol + rtol max(|y|, |y'|)) is <= 1 and cuts the last step of each interval
    to land on t[k+1]. The error estimate is the embedded 4th-order solution for "dopri5"
    and the Euler step (first order, so tight tolerances cost many steps) for
    "reversible_heun". options: first_step, safety (0.9), ifactor (10), dfactor (0.2),
    max_num_steps (1e6, accepted and rejected together; over it raises RuntimeError). The
    steps accepted are recorded and the backward replays them: no controller and no rejected
    attempt runs again, and the gradient is that of the discrete computation the forward
    made (the step times as fixed fractions of their intervals, so gradients in t move them
    with the interval's ends). Reversible Heun is not A-stable: on a stiff or long
    dissipative field its parasitic mode makes the controller shrink the steps without end;
    when their fall, extrapolated, would pass max_num_steps, the solve stops within a few
    thousand steps with a RuntimeError saying the field looks stiff; use "dopri5" there. A step size below
    4 eps max(|t|, interval) ends the solve (some 25 rejected attempts after the trouble
    starts): with a ValueError giving t and the evaluation when f returned nan or inf from a
    finite state that smaller steps did not avoid, else with a RuntimeError (a solution that
    blows up, y' = y^2 near t = 1). A non-finite y0 is a ValueError.
snapshots
    for "dopri5", the states each interval's checkpoint_loop may keep (Revolve).
params
    optional tensors to differentiate besides those found (see below): the union of both
    receives gradients. Default: f.parameters() if f is an nn.Module (as in torchdiffeq; a
    parameter f does not use gets a zero gradient), else none.
stats
    an optional dict, filled with `steps` (accepted), `rejected`, `nfe_forward`,
    `nfe_backward` (evaluations of f; for "dopri5" the forward's count includes the replay
    of the accepted steps that builds the checkpoints), with rtol/atol `step_times` (every
    step's end, t[0] first), for "dopri5" `max_stored`, and for "reversible_heun"
    `vjp_backward` and, after a backward, `backward` ("reversible" or "stored"),
    `reconstruction_error` (max abs difference between the reconstructed y_0 and z_0 and the
    true y0) and `reconstruction_error_rel` (the same over max |y0|).

Returns
-------
tensor or tuple of tensors
    y at the times t, shape (len(t), *y0.shape); a tuple of such tensors if y0 is a tuple.

Raises
------
ValueError
    A non-finite y0, a t that is not strictly monotonic, both ``step_size`` and
    ``steps_per_interval``, or an unknown ``method``.
RuntimeError
    The adaptive controller passes ``max_num_steps`` or cannot keep the error bounded (a
    solution that blows up), or a tensor requiring grad that the forward did not find.

Notes
-----
Tensors that f reads besides (t, y) (closure variables, an nn.Module's parameters, also of
modules called inside a closure, a weight computed from a parameter before the solve) are
found by themselves: each evaluation of f in the forward runs with grad enabled, its graph is
walked to the leaves requiring grad and to the outside tensors it was computed from, then
dropped (tessel.loops._captured); a tensor read at a few times only is found too. The backward's
evaluations are checked the same way: a tensor requiring grad that was not found raises
RuntimeError instead of losing its gradient (f must read the same tensors every time).

Gradients flow to y0, params, the tensors f reads and t (through the step sizes and f's
time argument; the grid points inside an interval move linearly with its ends). For
reversible Heun a first-order backward costs
steps + 1 evaluations of f and as many vector-Jacobian products, and can run again (with
retain_graph). With create_graph=True (double backward) it falls back to differentiating the
plain iteration with its stored graph: exact and differentiable, but memory linear in steps.

Examples
--------
>>> import torch
>>> from tessel.loops import odeint_reversible
>>> k = torch.tensor(0.7, dtype=torch.float64, requires_grad=True)
>>> y0 = torch.tensor([1.0], dtype=torch.float64)
>>> t = torch.tensor([0.0, 1.0], dtype=torch.float64)
>>> y = odeint_reversible(lambda t, y: -k * y, y0, t, steps_per_interval=200)  # y' = -k y
>>> (g,) = torch.autograd.grad(y[-1].sum(), k)
>>> exact = torch.exp(-k.detach())                   # y(1) = e^-k, dy(1)/dk = -e^-k
>>> bool(abs(y[-1, 0] - exact) < 1e-4), bool(abs(g + exact) < 1e-4)
(True, True)
"""


def odeint_reversible(f, y0, t, *, method=None, rtol=None, atol=None, options=None,
                      step_size=None, steps_per_interval=None, snapshots=None, params=None,
                      stats=None):
    d = _check_t(t)
    is_tuple = isinstance(y0, (tuple, list))
    y0s = tuple(y0) if is_tuple else (y0,)
    if is_tuple and not y0s:
        raise ValueError(f"{_NAME}: y0 is an empty tuple")
    for j, y in enumerate(y0s):
        if not isinstance(y, torch.Tensor):
            raise TypeError(f"{_NAME}: y0{f'[{j}]' if is_tuple else ''} is a "
                            f"{type(y).__name__}; expected a torch.Tensor")
        if not y.is_floating_point():
            raise TypeError(f"{_NAME}: y0{f'[{j}]' if is_tuple else ''} must be floating-point, "
                            f"got {y.dtype}")
    if not callable(f):
        raise TypeError(f"{_NAME}: f must be callable as f(t, y), got a {type(f).__name__}")
    if params is None:
        params = f.parameters() if isinstance(f, torch.nn.Module) else ()
    params = tuple(params)
    for j, p in enumerate(params):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"{_NAME}: params[{j}] is a {type(p).__name__}; expected a tensor")
    method, counts, ctl, snapshots = _plan(d, method, rtol, atol, options, step_size,
                                           steps_per_interval, snapshots)
    if ctl is not None and not all(bool(torch.isfinite(y.detach()).all()) for y in y0s):
        # The error control measures relative to |y|: nothing to measure against.
        raise ValueError(f"{_NAME}: y0 holds non-finite values (nan or inf); adaptive steps "
                         "need a finite initial state")
    fracs = None if counts is None else _even(counts, t)
    stats = {} if stats is None else stats
    if method == "dopri5":
        for key in ("backward", "reconstruction_error", "reconstruction_error_rel",
                    "max_stored", "vjp_backward", "step_times"):
            stats.pop(key, None)
        stats.update(steps=0, rejected=0, nfe_forward=0, nfe_backward=0)
        outs, _ = dopri5(Field(f, is_tuple, y0s, stats), t, y0s, ctl, fracs, snapshots, params,
                         stats)
        return tuple(outs) if is_tuple else outs[0]
    run = _Solver(f, is_tuple, y0s, fracs, ctl, params, stats)
    if not torch.is_grad_enabled():
        with torch.no_grad():
            _, outs, _ = run.solve(t, y0s)
        return tuple(outs) if is_tuple else outs[0]
    # Detached: y0 read by f through a closure is then found as a tensor of its own.
    outs = run.forward(t, [y.detach() for y in y0s])
    params = tuple(run.captured.tensors)
    if not params and not any(x.requires_grad for x in (t, *y0s)):
        return tuple(outs) if is_tuple else outs[0]
    outs = _ReversibleFunction.apply(run, outs, len(y0s), t, *y0s, *params)
    return tuple(outs) if is_tuple else outs[0]


odeint_reversible.__doc__ = _ODEINT_REVERSIBLE_DOC
