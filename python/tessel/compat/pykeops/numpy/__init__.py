"""pykeops.numpy on tessel: Genred, generic_*, KernelSolve, LazyTensor / Vi / Vj / Pm on arrays."""
import numpy as np

from .... import numpy as _tnumpy
from .._genred import GenredBase, KernelSolveBase, conjugate_gradient, make_generic_ops
from .._lazytensor import GenericLazyTensor
from . import cluster  # noqa: F401

__all__ = sorted(["Genred", "generic_sum", "generic_logsumexp", "generic_argmin",
                  "generic_argkmin", "KernelSolve", "LazyTensor", "Vi", "Vj", "Pm"])


class Genred(GenredBase):
    __doc__ = GenredBase.__doc__
    _frontend = _tnumpy

    def _stack(self, arrays):
        return np.stack(arrays, axis=-1)

    def _copy_into(self, out, result):
        out[...] = result
        return out


generic_sum, generic_logsumexp, generic_argmin, generic_argkmin = make_generic_ops(Genred)


def _dot(u, v):
    return float(np.sum(u * v))


class KernelSolve(KernelSolveBase):
    __doc__ = KernelSolveBase.__doc__
    _genred_class = Genred

    def __call__(self, *args, backend="auto", device_id=-1, alpha=1e-10, eps=1e-6, ranges=None):
        self._check_call(args, backend)
        return conjugate_gradient(self._linop(list(args), alpha, backend, ranges),
                                  args[self.varinvpos], eps, _dot)


class LazyTensor(GenericLazyTensor):
    """pykeops.numpy.LazyTensor: a symbolic (B..., N, M, D) array reduced by tessel."""

    _library = "numpy"
    _genred_class = Genred
    _kernelsolve_class = KernelSolve

    @classmethod
    def _array(cls, values, dtype):
        return np.array(values, dtype=dtype)


def ComplexLazyTensor(x=None, axis=None):
    raise NotImplementedError("ComplexLazyTensor: complex LazyTensors are not supported by tessel")


def Var(x_or_ind, dim=None, cat=None):
    """A variable from data (dim=None: `cat` is the axis) or the symbolic Var(ind, dim, cat)."""
    if dim is None:
        return LazyTensor(x_or_ind, axis=cat)
    return LazyTensor((x_or_ind, dim, cat))


def Vi(x_or_ind, dim=None):
    """i-variable: Vi(x) for an (N, D) array, or the symbolic Vi(index, dim)."""
    return Var(x_or_ind, dim, 0)


def Vj(x_or_ind, dim=None):
    """j-variable: Vj(y) for an (M, D) array, or the symbolic Vj(index, dim)."""
    return Var(x_or_ind, dim, 1)


def Pm(x_or_ind, dim=None):
    """Parameter: Pm(p) for a number or a (D,) array, or the symbolic Pm(index, dim)."""
    return Var(x_or_ind, dim, 2)
