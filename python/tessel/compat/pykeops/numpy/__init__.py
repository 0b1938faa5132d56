"""pykeops.numpy on tessel: Genred, generic_*, KernelSolve, LazyTensor / Vi / Vj / Pm on arrays."""
import numpy as np

from .... import numpy as _tnumpy
from .._genred import GenredBase, KernelSolveBase, make_generic_ops
from .._complex import ComplexDispatch, complex_class
from .._lazytensor import GenericLazyTensor, variable_constructors  # noqa: F401
from . import cluster  # noqa: F401

__all__ = sorted(["Genred", "generic_sum", "generic_logsumexp", "generic_argmin",
                  "generic_argkmin", "KernelSolve", "LazyTensor", "ComplexLazyTensor", "Vi", "Vj",
                  "Pm"])


class Genred(GenredBase):
    __doc__ = GenredBase.__doc__
    _frontend = _tnumpy

    def _stack(self, arrays):
        return np.stack(arrays, axis=-1)

    def _copy_into(self, out, result):
        out[...] = result
        return out


generic_sum, generic_logsumexp, generic_argmin, generic_argkmin = make_generic_ops(Genred)


class KernelSolve(KernelSolveBase):
    __doc__ = KernelSolveBase.__doc__
    _genred_class = Genred


class LazyTensor(ComplexDispatch, GenericLazyTensor):
    """pykeops.numpy.LazyTensor: a symbolic (B..., N, M, D) array reduced by tessel."""

    _array_type = np.ndarray
    _genred_class = Genred
    _kernelsolve_class = KernelSolve

    @classmethod
    def _array(cls, values, dtype):
        return np.array(values, dtype=dtype)


ComplexLazyTensor = complex_class(LazyTensor, _tnumpy._as_complex, "array")
Var, Vi, Vj, Pm = variable_constructors(LazyTensor, "array")
