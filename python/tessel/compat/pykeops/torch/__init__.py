"""pykeops.torch on tessel: Genred, generic_*, KernelSolve, LazyTensor / Vi / Vj / Pm on tensors."""
import torch

from .... import torch as _ttorch
from .._genred import GenredBase, KernelSolveBase, make_generic_ops
from .._frontend import lazy_tensor_classes
from .._lazytensor import GenericLazyTensor  # noqa: F401  (as in pykeops.*.lazytensor)
from . import cluster  # noqa: F401

__all__ = sorted(["Genred", "generic_sum", "generic_logsumexp", "generic_argmin",
                  "generic_argkmin", "KernelSolve", "LazyTensor", "ComplexLazyTensor", "Vi", "Vj",
                  "Pm"])


class Genred(GenredBase):
    __doc__ = GenredBase.__doc__
    _frontend = _ttorch

    def _stack(self, arrays):
        return torch.stack(arrays, dim=-1)

    def _copy_into(self, out, result):
        out.copy_(result)
        return out


generic_sum, generic_logsumexp, generic_argmin, generic_argkmin = make_generic_ops(Genred)


class KernelSolve(KernelSolveBase):
    __doc__ = KernelSolveBase.__doc__ + """
    Differentiable: gradients flow to b and to every other argument (implicit differentiation,
    which assumes K symmetric, as pykeops does).
    """
    _genred_class = Genred


LazyTensor, ComplexLazyTensor, (Var, Vi, Vj, Pm) = lazy_tensor_classes(
    __name__, Genred, KernelSolve, torch.Tensor, torch.tensor, _ttorch._as_complex, "tensor")
