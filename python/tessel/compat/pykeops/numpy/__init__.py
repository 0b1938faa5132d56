"""pykeops.numpy on tessel: Genred, generic_*, KernelSolve, LazyTensor / Vi / Vj / Pm on arrays."""
import numpy as np

from .... import numpy as _tnumpy
from .._docs import document
from .._genred import GenredBase, KernelSolveBase, make_generic_ops
from .._frontend import FRONTEND_ALL, lazy_tensor_classes
from .._lazytensor import GenericLazyTensor  # noqa: F401  (as in pykeops.*.lazytensor)
from . import cluster  # noqa: F401

__all__ = FRONTEND_ALL


def _copy_into(out, result):
    out[...] = result
    return out


class Genred(GenredBase):
    _frontend, _copy_into = _tnumpy, staticmethod(_copy_into)


generic_sum, generic_logsumexp, generic_argmin, generic_argkmin = make_generic_ops(Genred)


class KernelSolve(KernelSolveBase):
    _genred_class = Genred


LazyTensor, ComplexLazyTensor, (Var, Vi, Vj, Pm) = lazy_tensor_classes(
    __name__, Genred, KernelSolve, np.ndarray, np.array, _tnumpy._as_complex, "array")
# Docstrings in this front end's words, with examples on its arrays.
document(globals(), "numpy")
