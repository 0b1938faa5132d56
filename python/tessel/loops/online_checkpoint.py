"""Online checkpointing for PyTorch: differentiate `while cond(state, k): state = step(state, k)`,
a loop whose length is known only when it stops, keeping at most `snapshots` states.

The forward pass runs each step with a graph of that step only (to find the tensors step reads,
as checkpoint_loop's first sweep does), keeping the graph of the latest step: when cond stops the
loop, that graph is the last step's, ready for the first reverse. Which states to keep is asked of
the C++ placement (tessel._core.OnlineCheckpointer, see tessel/online_checkpoint.hpp): optimal
(as many step evaluations as offline Revolve knowing n in advance) up to C(s+2, 2) steps, at most
one evaluation more up to C(s+3, 3) steps (for s <= 24), and for any n no step evaluated more
often than offline Revolve evaluates one. Once n is known the backward replays
the reversal schedule with checkpoint_loop's machinery (tessel.loops.checkpoint._Revolve).

Step evaluations: n in the forward pass, then the reversal's; stats["step_calls"] ends at
`n_steps + recomputations` after the backward, both reported in stats.
"""
import sys
import time

import numpy as np
import torch

from .. import _core
from .._docstrings import fill
from .checkpoint import (MAX_STEPS, STEP_PARAMETERS, _as_int, _attach, _check_inputs,
                         _Revolve)
from .snapshot_levels import check_storage

__all__ = ["checkpoint_while", "online_recomputations"]

_NAME = "checkpoint_while"


def online_recomputations(n_steps, snapshots):
    """Untaped step evaluations of checkpoint_while's schedule for a loop that stops at n_steps
    (the forward sweep's n-1 included, as revolve_optimal_recomputations counts)."""
    return _core.online_recomputations(n_steps, snapshots)


_EXPECTED = "a bool (Python or NumPy) or a one-element torch.bool tensor"


def _truth(value, k):
    """cond's answer as a bool. Only booleans count: a string, a number (NaN is truthy) or a
    tensor of several elements has no yes-or-no meaning, and a None is most often a missing
    return; taking them as "go on" would run the loop on a cond that never answered."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, torch.Tensor) and value.dtype == torch.bool and value.numel() == 1:
        return bool(value.item())
    note = ""
    if value is None:
        got, note = "None", " (a missing return?)"
    elif isinstance(value, torch.Tensor):
        got = f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    else:
        got = f"a {type(value).__name__} ({value!r:.40})"
    raise TypeError(f"{_NAME}: cond returned {got} at step {k}{note}; expected {_EXPECTED}")


class _Progress:
    """Steps so far, to stderr: at every power of two and at least every 10 seconds, so that a
    loop whose cond never becomes false shows that it runs and how far."""

    def __init__(self, enabled):
        self.enabled = enabled
        self.last = time.monotonic()

    def tick(self, k):
        if not self.enabled or k == 0:
            return
        now = time.monotonic()
        if k & (k - 1) == 0 or now - self.last >= 10.0:
            self.last = now
            print(f"{_NAME}: {k} steps so far", file=sys.stderr, flush=True)

    def done(self, k, why):
        if self.enabled:
            print(f"{_NAME}: stopped after {k} steps ({why})", file=sys.stderr, flush=True)


class _Online(_Revolve):
    """_Revolve whose schedule comes from the online placement, once the loop has stopped."""

    def __init__(self, cond, step, max_steps, snapshots, is_tuple, states, params, stats,
                 storage, preserve_rng_state, progress, determinism_check):
        super().__init__(step, None, snapshots, is_tuple, states, params, stats, name=_NAME,
                         storage=storage, preserve_rng_state=preserve_rng_state,
                         determinism_check=determinism_check)
        self.cond, self.max_steps, self.snapshots = cond, max_steps, snapshots
        self.progress = _Progress(progress)
        stats.update(n_steps=0, recomputations=0, max_steps_reached=False)

    def goes_on(self, cur, k, taped=False):
        """Whether step k runs from state cur (x_k): below max_steps and cond true. A taped loop
        (one to differentiate) past MAX_STEPS is an error: its schedule could not be built."""
        self.progress.tick(k)
        if self.max_steps is not None and k >= self.max_steps:
            self.stats["max_steps_reached"] = True
            self.progress.done(k, "max_steps")
            return False
        with torch.no_grad():
            on = _truth(self.cond(cur if self.is_tuple else cur[0], k), k)
        if not on:
            self.progress.done(k, "cond false")
        elif taped and k >= MAX_STEPS:
            raise ValueError(
                f"{_NAME}: cond still true after {k} steps, the most a differentiated loop may "
                f"take (tessel.loops.MAX_STEPS = 2**23): the reversal schedule of a longer "
                "loop does not fit in memory; give max_steps, or run it under torch.no_grad()")
        return on

    def run_plain(self, states):
        """The loop without a graph or a snapshot: nothing to differentiate."""
        cur, k = states, 0
        with torch.no_grad():
            while self.goes_on(cur, k):
                cur = self.call(cur, k)
                k += 1
        self.stats["n_steps"] = k
        return cur

    def forward(self, states):
        """Runs the loop, storing what the placement asks for; returns the final state (the
        initial one, undetached, when cond is false at once). The latest step's graph is kept."""
        self.cur = tuple(s.detach() for s in states)
        if not self.goes_on(self.cur, 0, taped=True):
            return None
        placement = _core.OnlineCheckpointer(self.snapshots)
        self.rng_start = self.rng.get()
        self._store(0)
        self.discovering = True
        try:
            k = 0
            rng_k = self.rng_start  # what step k draws from, kept with x_k if it is stored
            while True:
                self.taped = self._tape(k)
                nxt = tuple(o.detach() for o in self.taped[1])
                rng_after = self.rng.get()
                if not self.goes_on(nxt, k + 1, taped=True):
                    break
                rng_next = self.rng.get()
                if not self.rng.same(rng_after, rng_next):
                    # Replayed steps follow each other without cond between them: their draws
                    # would shift, and the gradient would be silently wrong.
                    raise RuntimeError(
                        f"{_NAME}: cond drew random numbers (after step {k}); the backward "
                        "replays the steps' random draws from the snapshots, which needs cond to "
                        "draw none: draw them in step, or pass preserve_rng_state=False if step "
                        "draws none")
                # x_k is not the last step's input: keep it if the placement says so.
                if k >= 1:
                    slot = placement.observe(k)
                    if slot >= 0:
                        self.cur = tuple(x.detach() for x in self.taped[0])
                        self._store(slot, rng_k)
                self.cur = nxt
                self.taped = None  # freed before the next step runs, not after
                rng_k = rng_next
                k += 1
        except BaseException:
            self.release()  # a failed step or cond: its snapshots (files on disk too) go now
            raise
        finally:
            self.discovering = False
        n = k + 1
        self.cur = None
        self.n_steps = n
        self.schedule = placement.reversal(n)
        self.pos = 1  # the first reverse, of step n-1, is the graph kept above
        self.plan_levels()  # the reversal known at last: the most read slots to the fastest
        self.stats.update(n_steps=n, recomputations=placement.recomputations(n))
        return nxt


@fill(step_parameters=STEP_PARAMETERS)
def checkpoint_while(cond, step, state, snapshots, max_steps=None, params=(), stats=None,
                     storage=None, preserve_rng_state=True, progress=False,
                     determinism_check="default"):
    """Runs `state = step(state, k)` while `cond(state, k)` is true (k = 0, 1, ...) and returns the
    final state, with a backward through every step taken that stores at most `snapshots`
    states: the loop's length need not be known in advance (online checkpointing).

    Parameters
    ----------
    cond
        a function (state, k) -> a bool (Python or NumPy) or a one-element torch.bool tensor
        (`x.norm() > tol`), evaluated under no_grad on each state before the step that would
        start from it (also on the initial state: cond false at once gives back `state` and no
        step runs). Anything else (None, a string, a number, NaN included, a tensor of another
        dtype or of several elements) raises TypeError. Like a Python `while`, a cond that never
        becomes false runs forever when max_steps is None (progress=True shows the steps so
        far), except that a loop to differentiate stops with a ValueError at
        tessel.loops.MAX_STEPS (2**23) steps, whose reversal schedule would not fit in memory.
    {step_parameters}
    snapshots
        how many states may be stored at once (>= 1; the initial state counts as one). The graph
        of the latest step (its input state included) is held besides them, as in
        checkpoint_loop.
    max_steps
        None, or an integer >= 0: the loop stops after that many steps even if cond is still
        true, without an error or a warning (a cap, as an iteration limit in a solver); cond is
        not evaluated on the state reached then, and stats["max_steps_reached"] tells that the
        cap stopped the loop.
    params, stats
        as in checkpoint_loop. stats also gets `n_steps` (the steps taken) and `recomputations`
        (the untaped step evaluations of the schedule, forward sweep included); after the
        backward, step_calls == n_steps + recomputations.
    storage
        None or a tessel.torch.SnapshotLevels (device, host RAM and disk budgets), as in
        checkpoint_loop. The schedule being unknown until the loop stops, the forward sweep puts
        each snapshot in the fastest level with room; then the held snapshots move to the levels
        the reversal's accesses ask for (stats["storage"]["moves"]).
    preserve_rng_state
        as in checkpoint_loop (default True: a recomputed step draws the random numbers it drew
        in the forward pass). cond must then draw none (a RuntimeError says so), since the
        replayed steps run one after another without it.
    progress
        False, or True to print "checkpoint_while: k steps so far" to stderr at every power of
        two and at least every 10 seconds, and the step count when it stops.
    determinism_check
        "default" or "none", as in checkpoint_loop.

    Returns
    -------
    tensor or tuple of tensors
        The state when ``cond`` turned false (or after ``max_steps`` steps), with the structure of
        ``state``.

    Raises
    ------
    TypeError
        ``cond`` answers something other than a bool or a one-element bool tensor.
    ValueError
        ``snapshots`` < 1, ``max_steps`` < 0, a loop to differentiate that passes MAX_STEPS steps,
        or a step that changes the state's structure, shapes or dtypes.
    RuntimeError
        A recomputed step that differs from the forward's (``determinism_check``), or a tensor
        requiring grad that a recomputation reads but the forward did not find.

    Notes
    -----
    Tensors that step reads besides the state (closures, nn.Module parameters) get gradients
    without being listed, as with checkpoint_loop; `autograd.grad`, `.backward()`, tuple states
    and the double-backward fallback (a full recomputation from the initial state under
    create_graph=True or for a second backward) behave the same way.

    Examples
    --------
    >>> import torch
    >>> from tessel.loops import checkpoint_while
    >>> a = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    >>> x0 = torch.tensor(1.0, dtype=torch.float64)
    >>> # Newton's iteration for sqrt(a), run until it converges: its length is found on the way.
    >>> x = checkpoint_while(lambda x, k: (x - a).abs() > 1e-12 and k < 50,
    ...                      lambda x, k: 0.5 * (x + a / x), x0, snapshots=3)
    >>> (g,) = torch.autograd.grad(x, a)
    >>> round(float(x), 6), round(float(g), 6)       # sqrt(2) and 1 / (2 sqrt(2))
    (1.414214, 0.353553)
    """
    if not callable(cond):
        raise TypeError(f"{_NAME}: cond must be callable, got {type(cond).__name__}")
    if not callable(step):
        raise TypeError(f"{_NAME}: step must be callable, got {type(step).__name__}")
    if max_steps is not None and (_as_int(max_steps) is None or _as_int(max_steps) < 0):
        raise ValueError(f"{_NAME}: max_steps must be None or an integer >= 0, got "
                         f"{max_steps!r}")
    max_steps = None if max_steps is None else _as_int(max_steps)
    if not isinstance(progress, (bool, np.bool_)):
        raise TypeError(f"{_NAME}: progress must be True or False, got {progress!r}")
    is_tuple, states, snapshots, params, stats = _check_inputs(_NAME, state, snapshots, params,
                                                               stats)
    check_storage(_NAME, storage)
    run = _Online(cond, step, max_steps, snapshots, is_tuple, states, params, stats, storage,
                  preserve_rng_state, bool(progress), determinism_check)
    if not torch.is_grad_enabled():
        cur = run.run_plain(states)
        return cur if is_tuple else cur[0]
    outs = run.forward(states)
    if outs is None:  # no step: the state itself, its gradient the identity
        return tuple(states) if is_tuple else states[0]
    return _attach(run, states, outs, is_tuple)
