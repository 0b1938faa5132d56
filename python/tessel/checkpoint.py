"""The path the README gave for the checkpointed loop's names; they live in tessel.loops.checkpoint.

Kept so that code written against `tessel.checkpoint` (checkpoint_loop, MAX_STEPS, the Revolve
schedule functions) keeps importing. These are the same objects; the loop reads its limit from
tessel.loops.checkpoint, so patch that module, not this one.
"""
from .loops.checkpoint import (MAX_STEPS, checkpoint_loop, revolve_optimal_recomputations,
                               revolve_schedule)

__all__ = ["checkpoint_loop", "revolve_schedule", "revolve_optimal_recomputations", "MAX_STEPS"]
