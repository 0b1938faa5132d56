"""Long loops differentiated in PyTorch without storing every iteration: checkpointed loops,
implicit solvers, reversible blocks and integrators, and the peak-memory harness that measures
them.

These tools need PyTorch. `tessel.torch` re-exports them beside Genred and LazyTensor, which is
where the README shows them; this package is their home, below the OT solvers (`tessel.ot`) and
above nothing but the core:

- checkpoint: `checkpoint_loop` (Revolve schedules from the core), `MAX_STEPS`
- online_checkpoint: `checkpoint_while` (online checkpointing, loops of unknown length)
- snapshot_levels: `SnapshotLevels` (device / host / disk budgets for the snapshots)
- implicit: `cg_solve`, `fixed_point`, `ConvergenceError` (implicit differentiation)
- reversible: `ReversibleCoupling`; odeint: `odeint_reversible`
- memory: `run_isolated`, `MeasureError` (peak memory of code in a fresh process)

The private modules (_captured: the tensors a function reads besides its arguments; _rng: the
random-number states a replayed step restarts from; _odeint_adaptive: step-size control) are
shared by these tools only.
"""
from .checkpoint import MAX_STEPS, checkpoint_loop
from .online_checkpoint import checkpoint_while
from .implicit import ConvergenceError, cg_solve, fixed_point
from .memory import MeasureError, run_isolated
from .odeint import odeint_reversible
from .reversible import ReversibleCoupling
from .snapshot_levels import SnapshotLevels

__all__ = ["MAX_STEPS", "checkpoint_loop", "checkpoint_while", "SnapshotLevels", "cg_solve",
           "fixed_point", "ConvergenceError", "ReversibleCoupling", "odeint_reversible",
           "run_isolated", "MeasureError"]
