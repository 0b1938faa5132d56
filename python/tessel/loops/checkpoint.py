"""Revolve checkpointing for PyTorch: differentiate a long loop `state = step(state, k)` keeping at
most `snapshots` states, recomputing the others with the optimal (binomial) number of steps.

Storing the autograd graph of n steps costs n states' worth of memory; `checkpoint_loop` keeps
none of it. The forward pass runs the loop under `torch.no_grad`, storing only the snapshots that
Griewank's Revolve schedule asks for (tessel._core.revolve_schedule). The backward replays the
schedule: it recomputes forward steps without a graph from the nearest snapshot, and for each step
k (from n-1 down to 0) evaluates that single step again with a graph and backpropagates through it
with `torch.autograd.grad`.

Step evaluations. The last step is evaluated with a graph during the forward pass (Revolve's
"first reverse"), so the step function runs exactly
`n_steps + revolve_optimal_recomputations(n_steps, snapshots)` times, forward and backward
together; that graph, of one step, is the only one kept between forward and backward.
"""
import operator

import torch

from .._docstrings import fill
from .._exit import keep_until_exit
from .. import _core
from ._captured import Captured, grad_once
from ._rng import RngStates
from ._state import outputs_like
from .snapshot_levels import check_storage

__all__ = ["checkpoint_loop", "revolve_schedule", "revolve_optimal_recomputations", "MAX_STEPS"]

#: The largest loop the checkpointed drivers differentiate. The schedule is one list of about
#: 3.5 actions per step, some 1 KB per step in Python objects: 8 GB at this length. Past it the
#: list cannot be built on most machines (a MemoryError after a long wait), so the drivers refuse
#: at once. Without grad mode no schedule is built and the loop has no length limit.
MAX_STEPS = 2 ** 23

# The parameters of Revolve's schedule and of its count of recomputations.
_SCHEDULE_PARAMETERS = """n_steps : int
    The loop's length, >= 0.
snapshots : int
    States that may be stored at once, >= 1."""
# The loop body and its state, as every checkpointed loop takes them.
STEP_PARAMETERS = """step
    a function (state, k) -> new state of the same structure, shapes and dtypes. The
    backward re-runs it: it must compute the same again, random draws aside (see
    preserve_rng_state).
state
    a tensor or a tuple of tensors (the result has the same structure)."""


@fill(schedule_parameters=_SCHEDULE_PARAMETERS)
def revolve_schedule(n_steps, snapshots):
    """Revolve's optimal schedule for reversing `n_steps` steps with `snapshots` stored states.

    Parameters
    ----------
    {schedule_parameters}

    Returns
    -------
    list of tuple
        (action, from, to, slot) in order; the actions are those of tessel/checkpoint.hpp
        (advance, snapshot, restore, first reverse, reverse).

    Raises
    ------
    ValueError
        n_steps < 0, snapshots < 1, or a schedule too long to hold (MAX_STEPS).

    Examples
    --------
    >>> from tessel.checkpoint import revolve_schedule
    >>> len(revolve_schedule(10, 3)) > 10
    True
    """
    return _core.revolve_schedule(n_steps, snapshots)


@fill(schedule_parameters=_SCHEDULE_PARAMETERS)
def revolve_optimal_recomputations(n_steps, snapshots):
    """The forward steps Revolve's schedule runs, its first sweep included: t n - C(s+t, t-1).

    t is the smallest repetition number with C(s+t, t) >= n (Griewank and Walther).

    Parameters
    ----------
    {schedule_parameters}

    Returns
    -------
    int
        The number of step evaluations, without those the backward tapes.

    Raises
    ------
    ValueError
        n_steps < 0 or snapshots < 1.

    Examples
    --------
    >>> from tessel.checkpoint import revolve_optimal_recomputations
    >>> revolve_optimal_recomputations(10, 10), revolve_optimal_recomputations(100, 5)
    (9, 316)
    """
    return _core.revolve_optimal_recomputations(n_steps, snapshots)


def _as_int(v):
    """v as a Python int when it is an integer (int, NumPy integer, integer tensor of one
    element), else None: a bool is not one."""
    if isinstance(v, bool) or (isinstance(v, torch.Tensor) and
                               (v.numel() != 1 or v.is_floating_point() or v.dtype == torch.bool)):
        return None
    try:
        return operator.index(v)
    except TypeError:
        return None


def _check_length(name, n):
    """n steps to differentiate: more than MAX_STEPS is an error, said before any step runs."""
    if n > MAX_STEPS:
        raise ValueError(f"{name}: {n} steps to differentiate, more than the largest supported "
                         f"(tessel.loops.MAX_STEPS = 2**23 = {MAX_STEPS}): the schedule of "
                         "so long a loop does not fit in memory; split the loop into nested "
                         "checkpointed loops, or run it under torch.no_grad()")
    return n


def _same_bits(a, b):
    """Whether two results of the same computation agree exactly; NaN (which a deterministic step
    may produce) equals NaN."""
    if torch.equal(a, b):
        return True
    if not (a.is_floating_point() or a.is_complex()) or a.shape != b.shape:
        return False
    return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())


_REPLAY_ADVICE = (
    "the gradient would be wrong. step must compute the same from the same state and k: no "
    "unseeded random source (NumPy, Python's random; torch's generators are replayed with "
    "preserve_rng_state=True), no global that changes between calls, no nondeterministic GPU "
    "kernel (torch.use_deterministic_algorithms(True) avoids those); determinism_check='none' "
    "turns this check off")


def _check_determinism(who, v):
    """determinism_check, named and valued as torch.utils.checkpoint's: True to compare."""
    if v not in ("default", "none"):
        raise ValueError(f"{who}: determinism_check must be 'default' or 'none', got {v!r}")
    return v == "default"


def _differentiable(x):
    return x.is_floating_point() or x.is_complex()


class SnapshotStore:
    """Where a loop's snapshots live, by slot: states kept as they are (on their own device).
    put/get/drop/clear is all a driver uses, so a store spreading its slots over several levels
    (device, host memory, disk) can take this one's place."""

    def __init__(self):
        self._slots = {}

    def put(self, slot, states):
        self._slots[slot] = states

    def get(self, slot):
        return self._slots[slot]

    def drop(self, slot):
        self._slots.pop(slot, None)

    def clear(self):
        self._slots.clear()

    def __len__(self):
        return len(self._slots)


class _Revolve:
    """One loop's schedule, snapshots and counters, shared by the forward and the backward."""

    def __init__(self, step, n_steps, snapshots, is_tuple, states, params, stats,
                 name="checkpoint_loop", storage=None, preserve_rng_state=True,
                 determinism_check="default"):
        self.step, self.n_steps, self.is_tuple, self.stats = step, n_steps, is_tuple, stats
        self.check_replay = _check_determinism(name, determinism_check)
        self.rng = RngStates(preserve_rng_state, tuple(states) + tuple(params))
        self.rng_slots = {}  # slot -> the random-number state of its snapshot
        self.rng_start = None  # the state the loop started from (the full recomputation's)
        self.name = name  # the public function, for error messages
        # What step reads besides the state: params= first, then what the first sweep finds.
        self.captured = Captured(name, params)
        self.discovering = False
        # What each state tensor must keep: a step that changes it is a user error, reported at
        # once rather than as a shape mismatch deep inside autograd.
        self.spec = [(s.shape, s.dtype, s.device) for s in states]
        # A loop of unknown length (checkpoint_while) gets its schedule after the forward pass.
        self.schedule = None if n_steps is None else _core.revolve_schedule(
            _check_length(name, n_steps), snapshots)
        self.pos = 0  # the first action the backward replays
        stats.update(step_calls=0, max_stored=0, snapshots=snapshots)
        self.snaps = (SnapshotStore() if storage is None
                      else storage.open(name, states, snapshots, stats))
        if self.schedule is not None:
            self.plan_levels()
        self.cur = None
        self.taped = None
        # The loop's result as the forward returned it, with the version counters it had then:
        # backward_full compares its recomputation with it (set by _attach).
        self.final = None

    def plan_levels(self):
        """Tells the store how often each slot is written or read in the schedule still to run
        (the fastest levels go to the most used slots, see tessel.loops.snapshot_levels). One level
        has nothing to place: the schedule is not walked."""
        if isinstance(self.snaps, SnapshotStore):
            return
        weights = {}
        for action, _, _, slot in self.schedule[self.pos:]:
            if action in ("snapshot", "restore"):
                weights[slot] = weights.get(slot, 0) + 1
        self.snaps.plan(weights)

    def call(self, state, k):
        out = self.step(state if self.is_tuple else state[0], k)
        self.stats["step_calls"] += 1

        def mismatch(j, o, shape, dtype, device):
            return (f"{self.name}: step {k} changed state {j} from shape {tuple(shape)}, "
                    f"{dtype} on {device} to shape {tuple(o.shape)}, {o.dtype} on {o.device}; "
                    "a step must keep the state's shapes, dtypes and devices")
        out = tuple(outputs_like(out, self.spec, self.is_tuple, f"{self.name}: step {k}",
                                 "the state", mismatch))
        return out

    def _advance(self, a, b):
        if self.discovering:
            # The first sweep runs every step once: each runs with a graph (of that step only,
            # dropped at once) so that the tensors it reads are found, even those read by a few
            # steps only.
            for k in range(a, b):
                self.cur = tuple(o.detach() for o in self.captured.run(self.call, self.cur, k))
            return
        with torch.no_grad():
            for k in range(a, b):
                self.cur = self.call(self.cur, k)

    def _store(self, slot, rng=None):
        """Stores self.cur in `slot` with the random-number state its next step starts from
        (`rng`, or the current one)."""
        self.snaps.put(slot, self.cur)
        self.rng_slots[slot] = self.rng.get() if rng is None else rng
        self.stats["max_stored"] = max(self.stats["max_stored"], len(self.snaps))

    def _tape(self, k):
        """Step k from the current state, with a graph whose leaves are detached copies of it."""
        inp = tuple(x.detach().requires_grad_() if _differentiable(x) else x.detach()
                    for x in self.cur)
        if self.discovering:
            return inp, self.captured.run(self.call, inp, k, inputs=inp)
        with torch.enable_grad():
            out = self.call(inp, k)
        self.captured.check(out, inp)
        return inp, out

    def forward(self, states):
        """The first sweep, finding the tensors step reads (self.captured) on the way."""
        self.cur = tuple(s.detach() for s in states)
        self.rng_start = self.rng.get()
        self.discovering = True
        try:
            for i, (action, a, b, slot) in enumerate(self.schedule):
                if action == "advance":
                    self._advance(a, b)
                elif action == "snapshot":
                    self._store(slot)
                elif action == "first_reverse":
                    self.pos = i + 1
                    self.taped = self._tape(a)
                    self.cur = None
                    return tuple(o.detach() for o in self.taped[1])
                else:  # the schedule's first sweep holds nothing else
                    raise RuntimeError(f"checkpoint_loop: unexpected {action} in the first sweep")
            raise RuntimeError("checkpoint_loop: the schedule has no first reverse")
        except BaseException:
            self.release()  # a failed step: its snapshots (files on disk too) go now
            raise
        finally:
            self.discovering = False

    def release(self):
        """Drops the snapshots and the taped step: nothing will differentiate this loop."""
        self.snaps.clear()
        self.rng_slots.clear()
        self.taped = self.cur = None

    def backward(self, grads, params):
        param_grads = [None] * len(params)
        inp, out = self.taped
        self.taped = None
        try:
            grads = self._reverse(inp, out, grads, params, param_grads)
            with self.rng.fork():
                for action, a, b, slot in self.schedule[self.pos:]:
                    if action == "advance":
                        self._advance(a, b)
                    elif action == "snapshot":
                        self._store(slot)
                    elif action == "restore":
                        self.cur = self.snaps.get(slot)
                        self.rng.set(self.rng_slots[slot])
                    elif action == "reverse":
                        after = inp  # x_{a+1}: the input of the step reversed last
                        inp, out = self._tape(a)
                        if self.check_replay:
                            self._check_replay(a, out, after)
                        del after  # not held through this step's reverse
                        self.cur = None  # the reverse consumes the state; a restore follows
                        grads = self._reverse(inp, out, grads, params, param_grads)
        finally:
            self.release()
        return grads, param_grads

    def _check_replay(self, k, out, after):
        """Step k recomputed must give the state step k+1 was reversed from (a snapshot of the
        forward pass or an earlier recomputation, alive anyway): the forward is replayed exactly,
        random-number states included, so any difference means a step that does not compute
        the same twice, whose gradient would be that of some other trajectory."""
        for j, (o, x) in enumerate(zip(out, after)):
            if not _same_bits(o.detach(), x.detach()):
                raise RuntimeError(
                    f"{self.name}: step {k}, run again in backward, gave a different state {j} "
                    f"than when it ran before; {_REPLAY_ADVICE}")

    def backward_full(self, grads, states, params, create_graph):
        """The plain path, for what the schedule cannot serve: create_graph=True (the taped
        single steps, cut from each other, do not make a differentiable gradient) and a second
        backward (the schedule's snapshots are consumed by the first). The loop is recomputed
        from the saved initial state with a full graph, so this backward has the memory of
        unrolled autograd."""
        self.release()
        self.stats["double_backward_fallback"] = True
        cur = tuple(states)
        with torch.enable_grad(), self.rng.fork():
            self.rng.set(self.rng_start)
            for k in range(self.n_steps):
                cur = self.call(cur, k)
        self.captured.check(cur, states)
        self._check_final(cur)
        pairs = [(o, g) for o, g in zip(cur, grads) if g is not None and o.requires_grad]
        targets = [x for x in states if x.requires_grad] + [p for p in params if p.requires_grad]
        res = iter(grad_once([o for o, _ in pairs], targets, [g for _, g in pairs],
                             create_graph=create_graph)
                   if pairs and targets else [None] * len(targets))
        state_grads = [next(res) if x.requires_grad else None for x in states]
        state_grads = [torch.zeros_like(x) if g is None and x.requires_grad else g
                       for g, x in zip(state_grads, states)]
        param_grads = [next(res) if p.requires_grad else None for p in params]
        return state_grads, param_grads

    def _check_final(self, cur):
        """The full recomputation must end where the forward ended, as each replayed step must in
        the scheduled backward: else the gradient (to any order) is another trajectory's. A result
        the caller has since changed in place (its version moved) has nothing left to compare."""
        if not self.check_replay or self.final is None:
            return
        final, versions = self.final
        if any(f._version != v for f, v in zip(final, versions)):
            return
        for j, (o, f) in enumerate(zip(cur, final)):
            if not _same_bits(o.detach(), f):
                raise RuntimeError(
                    f"{self.name}: the loop, run again in backward (create_graph=True or a "
                    f"second backward), ended in a different state {j} than when it ran before; "
                    f"{_REPLAY_ADVICE}")

    @staticmethod
    def _reverse(inp, out, grads, params, param_grads):
        """Backpropagates `grads` (of out) to inp, accumulating the parameters' gradients."""
        pairs = [(o, g) for o, g in zip(out, grads) if g is not None and o.requires_grad]
        targets = [x for x in inp if x.requires_grad] + [p for p in params if p.requires_grad]
        if pairs and targets:
            res = grad_once([o for o, _ in pairs], targets, [g for _, g in pairs])
        else:
            res = [None] * len(targets)
        it = iter(res)
        new = []
        for x in inp:
            if x.requires_grad:
                r = next(it)
                new.append(torch.zeros_like(x) if r is None else r)
            else:
                new.append(None)
        for j, p in enumerate(params):
            if p.requires_grad:
                r = next(it)
                if r is not None:
                    param_grads[j] = r if param_grads[j] is None else param_grads[j] + r
        return new


class _RevolveFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, run, outs, n_state, *tensors):
        ctx.run, ctx.n_state = run, n_state
        keep_until_exit(ctx)  # it holds the user's function: freed at exit
        # Kept as they are (not detached): the taped steps use them through the step's closure,
        # and autograd.grad must reach the very tensors in those graphs.
        ctx.params = tensors[n_state:]
        # Saved for the double-backward fallback only: autograd keeps them connected to their
        # graph, and they are the caller's tensors (no copy).
        ctx.save_for_backward(*tensors[:n_state])
        for o in outs:
            if not _differentiable(o):
                ctx.mark_non_differentiable(o)
        return outs

    @staticmethod
    def backward(ctx, *grads):
        # None (for an integer state, or when autograd did not materialise a zero) stops that
        # output's backpropagation in _reverse.
        if torch.is_grad_enabled() or ctx.run.taped is None:
            state_grads, param_grads = ctx.run.backward_full(list(grads), ctx.saved_tensors,
                                                             ctx.params, torch.is_grad_enabled())
        else:
            state_grads, param_grads = ctx.run.backward(list(grads), ctx.params)
        n_state = ctx.n_state
        state_grads = [g if ctx.needs_input_grad[3 + j] else None
                       for j, g in enumerate(state_grads)]
        param_grads = [g if ctx.needs_input_grad[3 + n_state + j] else None
                       for j, g in enumerate(param_grads)]
        return (None, None, None, *state_grads, *param_grads)


def _check_inputs(name, state, snapshots, params, stats):
    """The arguments both loops share, checked: (is_tuple, states, snapshots, params, stats)."""
    if _as_int(snapshots) is None or not 1 <= _as_int(snapshots) <= MAX_STEPS:
        # More slots than the longest loop has states would never be used.
        raise ValueError(f"{name}: snapshots must be an integer >= 1 (and <= MAX_STEPS = "
                         f"{MAX_STEPS}), got {snapshots!r}")
    snapshots = _as_int(snapshots)
    is_tuple = isinstance(state, (tuple, list))
    states = tuple(state) if is_tuple else (state,)
    for j, s in enumerate(states):
        if not isinstance(s, torch.Tensor):
            raise TypeError(f"{name}: state {j} is a {type(s).__name__}; expected a torch.Tensor")
    params = tuple(params)
    for j, p in enumerate(params):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"{name}: params[{j}] is a {type(p).__name__}; expected a "
                            "torch.Tensor")
    if stats is not None and not isinstance(stats, dict):
        raise TypeError(f"{name}: stats must be a dict or None, got {type(stats).__name__}")
    return is_tuple, states, snapshots, params, ({} if stats is None else stats)


@fill(step_parameters=STEP_PARAMETERS)
def checkpoint_loop(step, state, n_steps, snapshots, params=(), stats=None, storage=None,
                    preserve_rng_state=True, determinism_check="default"):
    """Runs `state = step(state, k)` for k = 0 .. n_steps-1 and returns the final state, with a
    backward that stores at most `snapshots` states (Revolve's optimal binomial checkpointing).

    Parameters
    ----------
    {step_parameters}
    n_steps
        the number of steps, >= 0; at most MAX_STEPS (2**23) under grad mode, where the schedule
        is held in memory (about 1 KB per step); without grad mode, any.
    snapshots
        how many states may be stored at once (>= 1; the initial state counts as one). More
        snapshots, fewer recomputations: with s >= n_steps every step runs twice.
    params
        optional tensors to differentiate besides those found (see below): the union of both
        receives gradients. Listing is never needed; a listed tensor that step does not read
        gets a zero gradient.
    stats
        an optional dict, filled with `step_calls` (evaluations of `step` so far, forward and
        backward) and `max_stored` (the most snapshots held at once, <= snapshots).
    storage
        None (snapshots stay on the states' device) or a tessel.torch.SnapshotLevels: budgets
        for device memory, host RAM and disk, for states too large to keep `snapshots` of them
        on the device. The slots the schedule restores most often get the fastest level; stats
        gets `storage` (per level: capacity in states, puts, gets, most held at once).
    preserve_rng_state
        True (the default, as in torch.utils.checkpoint): each snapshot keeps the random-number
        state (CPU, and the CUDA devices of the state and params) its next step starts from, and
        the backward restores it, so that a step using dropout or noise draws the same numbers
        when it is recomputed; the caller's random stream is left as the forward pass left it.
        False skips that for steps that draw nothing.
    determinism_check
        "default" (as in torch.utils.checkpoint): each step recomputed in backward must give,
        bit for bit, the state the loop already holds after it (a snapshot or an earlier
        recomputation; no extra memory), else a RuntimeError names the step: a step that does
        not compute the same twice would get the gradient of another trajectory. The full
        recomputation of create_graph=True and of a second backward must end in the state the
        forward returned, checked the same way. "none" turns
        the comparison off, for steps whose GPU kernels add in a varying order (atomics) and
        differ in the last bits only.

    Returns
    -------
    tensor or tuple of tensors
        The state after ``n_steps`` steps, with the structure of ``state``.

    Raises
    ------
    ValueError
        ``n_steps`` < 0 or above MAX_STEPS under grad mode, ``snapshots`` < 1, a storage budget
        that cannot hold the snapshots, or a step that changes the state's structure, shapes or
        dtypes.
    RuntimeError
        A recomputed step that differs from the forward's (``determinism_check``), or a tensor
        requiring grad that a recomputation reads but the forward did not find.

    Notes
    -----
    Tensors that step reads besides the state (closure variables, an nn.Module's parameters, a
    weight computed from a parameter before the loop) are found by themselves: each step of the
    first sweep runs with grad enabled, its graph is walked to the leaves requiring grad and to
    the outside tensors it was computed from, then dropped (tessel.loops._captured). A tensor
    read by a few steps only is found too. Every recomputation in backward is checked the same
    way, and a tensor requiring grad that was not found raises RuntimeError instead of losing its
    gradient (a step must read the same tensors when it runs again).

    The first backward follows the schedule. Under create_graph=True (a gradient to be
    differentiated again), and for any later backward through the same loop, it falls back to
    recomputing the loop with a full graph from the initial state: correct to any order, with the
    memory of unrolled autograd for that backward (stats gets `double_backward_fallback`).

    Examples
    --------
    >>> import torch
    >>> from tessel.loops import checkpoint_loop
    >>> w = torch.tensor(0.9, dtype=torch.float64, requires_grad=True)   # captured by step
    >>> x0 = torch.ones(3, dtype=torch.float64)
    >>> x = checkpoint_loop(lambda x, k: torch.sin(w * x), x0, 100, snapshots=5)
    >>> (g,) = torch.autograd.grad(x.sum(), w)
    >>> y = x0
    >>> for k in range(100):
    ...     y = torch.sin(w * y)
    >>> (g_plain,) = torch.autograd.grad(y.sum(), w)
    >>> bool(torch.allclose(x, y)), bool(torch.allclose(g, g_plain))
    (True, True)
    """
    if not callable(step):
        raise TypeError(f"checkpoint_loop: step must be callable as step(state, k), got "
                        f"{type(step).__name__}")
    if _as_int(n_steps) is None or _as_int(n_steps) < 0:
        raise ValueError(f"checkpoint_loop: n_steps must be an integer >= 0, got {n_steps!r}")
    n_steps = _as_int(n_steps)
    is_tuple, states, snapshots, params, stats = _check_inputs("checkpoint_loop", state,
                                                               snapshots, params, stats)
    check_storage("checkpoint_loop", storage)
    if n_steps == 0:
        stats.update(step_calls=0, max_stored=0, snapshots=snapshots)
        return tuple(states) if is_tuple else states[0]
    grad = torch.is_grad_enabled()
    # Without grad mode there is no schedule to compute (n_steps None), only steps to run.
    run = _Revolve(step, n_steps if grad else None, snapshots, is_tuple, states, params, stats,
                   storage=storage, preserve_rng_state=preserve_rng_state,
                   determinism_check=determinism_check)
    if not grad:
        # Nothing to differentiate: the plain loop, with no snapshot at all.
        cur = states
        with torch.no_grad():
            for k in range(n_steps):
                cur = run.call(cur, k)
        return cur if is_tuple else cur[0]
    return _attach(run, states, run.forward(states), is_tuple)


def _attach(run, states, outs, is_tuple):
    """The loop's result `outs` (run's forward done), connected to autograd through run."""
    params = tuple(run.captured.tensors)
    if not any(t.requires_grad for t in states) and not params:
        run.release()
        return outs if is_tuple else outs[0]
    outs = _RevolveFunction.apply(run, outs, len(states), *states, *params)
    # Views of the returned tensors, not copies: no memory beyond what the caller holds.
    run.final = (tuple(o.detach() for o in outs), [o._version for o in outs])
    return tuple(outs) if is_tuple else outs[0]
