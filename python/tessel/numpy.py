"""NumPy front end: Genred on NumPy arrays (float32 or float64, any strides, no copies)."""
import numpy as np

from . import _core
from .lazytensor import LazyTensor, Vi, Vj, Pm  # noqa: F401
from ._genred import GenredBase, ranges_arg

__all__ = ["Genred", "LazyTensor", "Vi", "Vj", "Pm"]


class Genred(GenredBase):
    """A compiled reduction `a_i = Red_j F(x_i, y_j)` (axis=1) or over i (axis=0).

    `formula` is KeOps text (with `aliases` such as "X = Vi(3)") or a tessel.Formula;
    `reduction_op` is one of Sum, Min, Max, ArgMin, ArgMax, Min_ArgMin, Max_ArgMax, KMin,
    ArgKMin, KMin_ArgKMin (K in `opt_arg`), LogSumExp and SumSoftMaxWeight (weights in
    `formula2`). Calling it with one array per alias returns the (N, dim) result, or a tuple
    (values, int64 indices) for the two-output reductions.
    """


    def __call__(self, *args, backend=None, ni=None, nj=None, ranges=None):
        spec = self._spec
        spec.check_count(args, "Genred")
        arrays = []
        for k, a in enumerate(args[: spec.n_core]):
            if not isinstance(a, np.ndarray):
                raise TypeError(f"Genred: argument {k} is a {type(a).__name__}; expected a "
                                "numpy.ndarray")
            arrays.append(a)
        opts = dict(spec.options)
        if backend is not None:
            opts["backend"] = backend
        opts["ranges"] = ranges_arg(ranges)
        out = _core.evaluate(spec.reduction, arrays, ni=-1 if ni is None else ni,
                             nj=-1 if nj is None else nj, **opts)
        return out[0] if len(out) == 1 else tuple(out)
