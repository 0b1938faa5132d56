"""pykeops.torch on tessel: Genred, generic_*, KernelSolve, LazyTensor / Vi / Vj / Pm on tensors."""
import torch

from .... import torch as _ttorch
from .._genred import GenredBase, KernelSolveBase, conjugate_gradient, make_generic_ops
from .._lazytensor import ComplexLazyTensor, GenericLazyTensor, variable_constructors  # noqa: F401
from . import cluster  # noqa: F401

__all__ = sorted(["Genred", "generic_sum", "generic_logsumexp", "generic_argmin",
                  "generic_argkmin", "KernelSolve", "LazyTensor", "Vi", "Vj", "Pm"])


class Genred(GenredBase):
    __doc__ = GenredBase.__doc__
    _frontend = _ttorch

    def _stack(self, arrays):
        return torch.stack(arrays, dim=-1)

    def _copy_into(self, out, result):
        out.copy_(result)
        return out


generic_sum, generic_logsumexp, generic_argmin, generic_argkmin = make_generic_ops(Genred)


def _dot(u, v):
    return float((u * v).sum())


class _KernelSolveFunction(torch.autograd.Function):
    """a = (alpha Id + K(theta))^-1 b. Backward (implicit differentiation, K symmetric):
    grad_b = (alpha Id + K)^-1 G, grad_theta = -<(alpha Id + K)^-1 G, dK/dtheta a>, the partial
    derivative being taken by autograd through the Genred on views of theta (so that a's own
    dependence on theta is not followed); it nests for higher orders."""

    @staticmethod
    def forward(ctx, solver, alpha, eps, backend, ranges, *args):
        with torch.no_grad():
            plain = [a.detach() for a in args]
            a = conjugate_gradient(solver._linop(plain, alpha, backend, ranges),
                                   plain[solver.varinvpos], eps, _dot)
        ctx.solver, ctx.alpha, ctx.eps, ctx.backend, ctx.ranges = (solver, alpha, eps, backend,
                                                                   ranges)
        ctx.save_for_backward(*args, a)
        return a

    @staticmethod
    def backward(ctx, G):
        solver, alpha, eps, backend, ranges = (ctx.solver, ctx.alpha, ctx.eps, ctx.backend,
                                               ctx.ranges)
        *args, a = ctx.saved_tensors
        pos = solver.varinvpos
        create = torch.is_grad_enabled()
        needs = ctx.needs_input_grad[5:]
        KinvG = _KernelSolveFunction.apply(solver, alpha, eps, backend, ranges, *args[:pos], G,
                                           *args[pos + 1:])
        grads = [None] * len(args)
        if needs[pos]:
            grads[pos] = KinvG
        want = [k for k in range(len(args)) if needs[k] and k != pos]
        if want:
            with torch.enable_grad():
                proxies = list(args)
                for k in want:
                    proxies[k] = args[k].view_as(args[k])
                proxies[pos] = a if create else a.detach()
                Ka = solver.genred(*proxies, backend=backend, ranges=ranges)
                gs = torch.autograd.grad(Ka, [proxies[k] for k in want], grad_outputs=-KinvG,
                                         create_graph=create, allow_unused=True)
            for k, g in zip(want, gs):
                grads[k] = torch.zeros_like(args[k]) if g is None else g
        return (None, None, None, None, None, *grads)


class KernelSolve(KernelSolveBase):
    __doc__ = KernelSolveBase.__doc__ + """
    Differentiable: gradients flow to b and to every other argument (implicit differentiation,
    which assumes K symmetric, as pykeops does).
    """
    _genred_class = Genred

    def __call__(self, *args, backend="auto", device_id=-1, alpha=1e-10, eps=1e-6, ranges=None):
        self._check_call(args, backend)
        return _KernelSolveFunction.apply(self, alpha, eps, backend, ranges, *args)


class LazyTensor(GenericLazyTensor):
    """pykeops.torch.LazyTensor: a symbolic (B..., N, M, D) tensor reduced by tessel."""

    _library = "torch"
    _genred_class = Genred
    _kernelsolve_class = KernelSolve

    @classmethod
    def _array(cls, values, dtype):
        return torch.tensor(values, dtype=dtype)


Var, Vi, Vj, Pm = variable_constructors(LazyTensor, "tensor")
