"""pykeops.torch on tessel: Genred, generic_*, KernelSolve, LazyTensor / Vi / Vj / Pm on tensors."""
import torch

from .... import torch as _ttorch
from .._genred import GenredBase, KernelSolveBase, make_generic_ops
from .._complex import ComplexDispatch, complex_class
from .._lazytensor import GenericLazyTensor, variable_constructors  # noqa: F401
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


class LazyTensor(ComplexDispatch, GenericLazyTensor):
    """pykeops.torch.LazyTensor: a symbolic (B..., N, M, D) tensor reduced by tessel."""

    _array_type = torch.Tensor
    _genred_class = Genred
    _kernelsolve_class = KernelSolve

    @classmethod
    def _array(cls, values, dtype):
        return torch.tensor(values, dtype=dtype)


ComplexLazyTensor = complex_class(LazyTensor, _ttorch._as_complex, "tensor")
Var, Vi, Vj, Pm = variable_constructors(LazyTensor, "tensor")
