"""pykeops.torch on tessel: Genred, generic_*, KernelSolve, LazyTensor / Vi / Vj / Pm on tensors."""
import torch

from .... import torch as _ttorch
from .._docs import document
from .._genred import GenredBase, KernelSolveBase, make_generic_ops
from .._frontend import FRONTEND_ALL, lazy_tensor_classes
from .._lazytensor import GenericLazyTensor  # noqa: F401  (as in pykeops.*.lazytensor)
from . import cluster  # noqa: F401

__all__ = FRONTEND_ALL


class Genred(GenredBase):
    _frontend = _ttorch
    _copy_into = staticmethod(lambda out, result: out.copy_(result))


generic_sum, generic_logsumexp, generic_argmin, generic_argkmin = make_generic_ops(Genred)


class KernelSolve(KernelSolveBase):
    _genred_class = Genred


LazyTensor, ComplexLazyTensor, (Var, Vi, Vj, Pm) = lazy_tensor_classes(
    __name__, Genred, KernelSolve, torch.Tensor, torch.tensor, _ttorch._as_complex, "tensor")
# Docstrings in this front end's words, with examples on its arrays.
document(globals(), "torch")
