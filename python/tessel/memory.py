"""The path the README gave for the peak-memory harness; it lives in tessel.loops.memory.

Kept so that code written against `tessel.memory.run_isolated` keeps importing.
"""
from .loops.memory import MeasureError, run_isolated

__all__ = ["run_isolated", "MeasureError"]
