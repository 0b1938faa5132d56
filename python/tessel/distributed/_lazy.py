"""LazyTensor with sharded reductions: tessel's LazyTensor, reduced by tessel.distributed.

`from tessel.distributed import LazyTensor, Vi, Vj, Pm` and the same code that reduces a
symbolic matrix in one process reduces it over the ranks of a process group: each rank builds
its LazyTensors from its rows of x and y and gets its rows of the result, with gradients (see
tessel.distributed.Genred for what every rank receives). Reductions take one more option,
`group=` (default: the world). An expression that mixes plain and sharded LazyTensors is sharded.
"""
import torch

from .. import lazytensor as _lt
from .. import _lazy_vars as lv
from .._lazy_reduce import GENRED_OPTIONS
from ._genred import Genred

__all__ = ["LazyTensor", "Vi", "Vj", "Pm"]

_WHO = "tessel.distributed.LazyTensor"


def _kernel_solve(formula, aliases, var, axis=1, **options):
    from ._solve import KernelSolve  # the solver sits above the reductions it runs
    return KernelSolve(formula, aliases, var, axis=axis, **options)


class _Sharded(lv.ArrayAdapter):
    """PyTorch tensors, with tessel.distributed's Genred and KernelSolve."""

    def __init__(self, plain):
        super().__init__(plain.array_type, plain.name, plain.dtypes, plain.scalar, Genred,
                         _kernel_solve)


_SHARDED = {}


class LazyTensor(_lt.LazyTensor):
    """A LazyTensor whose reductions (sum, logsumexp, min, argKmin, @, solve, ...) are sharded
    over torch.distributed: built on each rank from its rows, reduced collectively by every
    rank. Only PyTorch tensors, real, without batch dimensions."""

    __slots__ = ()
    _OPTIONS = GENRED_OPTIONS + ("group",)

    @classmethod
    def _leaf(cls, v):
        if v.is_complex:
            raise NotImplementedError(f"{_WHO}: complex arrays are not sharded; use "
                                      "tessel.LazyTensor in one process")
        return super()._leaf(v)

    def _evaluator(self, adapter):
        if adapter.array_type is not torch.Tensor:
            raise TypeError(f"{_WHO}: reductions are sharded over torch.distributed, so the "
                            f"arrays must be torch tensors, got {adapter.name}")
        if adapter not in _SHARDED:
            _SHARDED[adapter] = _Sharded(adapter)
        return _SHARDED[adapter]


def Vi(x):
    """An i-variable from this rank's (N_r, D) rows."""
    return LazyTensor._leaf(lv.from_rows(x, lv.I, "Vi"))


def Vj(x):
    """A j-variable from this rank's (M_r, D) rows."""
    return LazyTensor._leaf(lv.from_rows(x, lv.J, "Vj"))


def Pm(x):
    """A parameter (the same on every rank): a (D,) tensor, or numbers."""
    if lv.adapter_of(x) is not None:
        return LazyTensor._leaf(lv.from_rows(x, lv.P, "Pm"))
    return LazyTensor._leaf(lv.from_numbers(x, "Pm"))
