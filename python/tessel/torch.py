"""PyTorch front end: Genred on tensors, with autograd to any order.

The backward of a reduction is another reduction (the core differentiates symbolically), run by
the same autograd Function, so `torch.autograd.grad(..., create_graph=True)` nests as deep as
asked without storing an N x M matrix.
"""
import torch

from . import _core
from .lazytensor import LazyTensor, Vi, Vj, Pm  # noqa: F401
from ._genred import GenredBase, grad_of, ranges_arg
from .checkpoint import checkpoint_loop  # noqa: F401

__all__ = ["Genred", "LazyTensor", "Vi", "Vj", "Pm", "checkpoint_loop"]

_DTYPES = (torch.float32, torch.float64)


def _run(reduction, options, args):
    """Evaluates on the tensors' memory; the results are NumPy-allocated and shared, not copied."""
    outs = _core.evaluate(reduction, [a.detach() for a in args], **options)
    return [torch.from_numpy(o) for o in outs]


class _GenredFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, reduction, options, *args):
        outs = _run(reduction, options, args)
        ctx.reduction, ctx.options = reduction, options
        ctx.save_for_backward(*args)
        index_outs = [o for k, o in enumerate(outs) if reduction.output_is_index(k)]
        if index_outs:
            ctx.mark_non_differentiable(*index_outs)
        return outs[0] if len(outs) == 1 else tuple(outs)

    @staticmethod
    def backward(ctx, *grad_outputs):
        reduction, options = ctx.reduction, ctx.options
        args = ctx.saved_tensors
        g = grad_outputs[0]
        used = {i for i, _, _ in reduction.inputs()}
        grads = [None, None]
        for k, a in enumerate(args):
            if not ctx.needs_input_grad[2 + k]:
                grads.append(None)
            elif k not in used or g is None:
                grads.append(torch.zeros_like(a))
            else:
                dk = _GenredFunction.apply(grad_of(reduction, k), options, *args, g)
                # Batch dimensions the input was broadcast along are summed back.
                grads.append(dk.reshape(a.shape) if dk.numel() == a.numel()
                             else dk.sum_to_size(a.shape))
        return tuple(grads)


class Genred(GenredBase):
    """A compiled reduction on tensors; see tessel.numpy.Genred for the arguments.

    Gradients flow to every input that requires them (i-, j-variables and parameters), through
    Min/Max/KMin (via the selected indices) and LogSumExp/SumSoftMaxWeight, to any order.
    """


    def __call__(self, *args, backend=None, ni=None, nj=None, ranges=None):
        """`ni` / `nj` give the number of i / j rows when no i- / j-variable tells them;
        `ranges` makes the reduction block-sparse (KeOps's 6-array layout)."""
        spec = self._spec
        spec.check_count(args, "Genred")
        tensors = list(args[: spec.n_core])
        dtype = None
        for k, a in enumerate(tensors):
            if not isinstance(a, torch.Tensor):
                raise TypeError(f"Genred: argument {k} is a {type(a).__name__}; expected a "
                                "torch.Tensor")
            if a.device.type != "cpu":
                raise ValueError(f"Genred: argument {k} is on {a.device}; this build runs on the "
                                 "CPU only (the CUDA backend is not built yet)")
            if a.dtype not in _DTYPES:
                raise TypeError(f"Genred: argument {k} has dtype {a.dtype}; expected "
                                "torch.float32 or torch.float64")
            if dtype is None:
                dtype = a.dtype
            elif a.dtype != dtype:
                raise TypeError(f"Genred: argument {k} has dtype {a.dtype} but argument 0 has "
                                f"{dtype}; all arguments must share one dtype")
        opts = dict(spec.options)
        if backend is not None:
            opts["backend"] = backend
        if ni is not None:
            opts["ni"] = ni
        if nj is not None:
            opts["nj"] = nj
        opts["ranges"] = ranges_arg(ranges)
        return _GenredFunction.apply(spec.reduction, opts, *tensors)
