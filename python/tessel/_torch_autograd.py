"""The autograd Function behind tessel.torch.Genred: reverse and forward mode, and vmap.

The derivatives of a reduction are reductions (the core differentiates symbolically), run by this
same Function, so `torch.autograd.grad(..., create_graph=True)`, `torch.func.grad`, `jvp`,
`jacrev`, `jacfwd` and `hessian` nest as deep as asked without storing an N x M matrix. On
PyTorch >= 2 the Function has the `setup_context` form that torch.func requires, a forward-mode
rule (`jvp`) and a `vmap` rule: the vmapped dimension becomes one more batch dimension of the
core's batched reductions, so a vmap is one core call, not a loop.
"""
import torch

from . import _core
from ._exit import keep_until_exit
from ._genred import fused_grads_of, grad_of, jvp_of

TORCH2 = int(torch.__version__.split(".")[0]) >= 2


_TORCH_DTYPES = {"float32": torch.float32, "float64": torch.float64, "int64": torch.int64,
                 "float16": torch.float16, "bfloat16": torch.bfloat16}


def _alloc(shape, dtype, device):
    return torch.empty(shape, dtype=_TORCH_DTYPES[dtype], device=torch.device("cuda", device))


def _stream(device):
    return torch.cuda.current_stream(device).cuda_stream


# How the core's Bound allocates CUDA results: on the inputs' GPU, on PyTorch's current stream,
# so that they never pass through host memory.
CUDA_IO = (_alloc, _stream)


def run(bound, call, args):
    """Evaluates `bound` (a _core.Bound) on the tensors' memory, one crossing into the core;
    `call` is (ni, nj, ranges, backend). Host results are NumPy-allocated and shared, not copied;
    CUDA results are tensors on the inputs' GPU."""
    outs = bound(args, *call)
    return [o if isinstance(o, torch.Tensor) else _tensor(o) for o in outs]


def _tensor(o):
    """A core result as a tensor; bfloat16 results come as their bits in int16 (NumPy has no
    bfloat16)."""
    t = torch.from_numpy(o)
    return t.view(torch.bfloat16) if t.dtype == torch.int16 else t


def _setup(ctx, bound, call, args, outs):
    ctx.bound, ctx.call = bound, call
    reduction = bound.reduction
    if any(ctx.needs_input_grad):  # else the ctx dies with this call
        keep_until_exit(ctx)
    ctx.save_for_backward(*args)
    index_outs = [o for k, o in enumerate(outs) if reduction.output_is_index(k)]
    if index_outs:
        ctx.mark_non_differentiable(*index_outs)


def _result(outs):
    return outs[0] if len(outs) == 1 else tuple(outs)


def _backward(ctx, grad_outputs):
    return (None, None, *vjp(ctx.bound, ctx.call, ctx.saved_tensors, grad_outputs[0],
                             ctx.needs_input_grad[2:]))


def vjp(bound, call, args, g, needs):
    """The gradients of sum(output 0 * g) for the arguments with needs[k] (None for the others),
    by the gradient reductions alone: the reduction itself is not evaluated (tessel.distributed's
    ring backward takes a block's gradient without its forward)."""
    reduction = bound.reduction
    used = {i for i, _, _ in reduction.inputs()}
    wanted = [k for k in range(len(args)) if needs[k] and k in used and g is not None]
    # Inputs on the same side (all i or all j variables) get one fused reduction (see
    # fused_grads_of): the kernel Hamiltonian's dH/dq and dH/dp share their exponential.
    by_side = {}
    for i, c, _ in reduction.inputs():
        if i in wanted:
            by_side.setdefault(c, []).append(i)
    raw = {}
    for ks in by_side.values():
        fused = fused_grads_of(reduction, ks) if len(ks) > 1 else None
        if fused is None:
            for k in ks:
                raw[k] = GenredFunction.apply(bound.derive(grad_of(reduction, k)), call, *args,
                                              g)
            continue
        both, dims = fused
        out = GenredFunction.apply(bound.derive(both), call, *args, g)
        for k, part in zip(ks, out.split(dims, dim=-1)):
            raw[k] = part
    grads = []
    for k, a in enumerate(args):
        if not needs[k]:
            grads.append(None)
        elif k not in raw:
            grads.append(torch.zeros_like(a))
        else:
            dk = raw[k]
            # Batch dimensions the input was broadcast along are summed back.
            grads.append(dk.reshape(a.shape) if dk.numel() == a.numel()
                         else dk.sum_to_size(a.shape))
    return tuple(grads)


def _jvp(ctx, tangents):
    """The tangent of output 0: a sum over the inputs that carry a tangent of one reduction each
    (the input's tangent read as one more variable). Index outputs have none."""
    bound, call = ctx.bound, ctx.call
    reduction = bound.reduction
    args = ctx.saved_tensors
    used = {i for i, _, _ in reduction.inputs()}
    out = None
    for k, t in enumerate(tangents[2:]):
        if t is None or k not in used:
            continue
        d = GenredFunction.apply(bound.derive(jvp_of(reduction, k)), call, *args, t)
        out = d if out is None else out + d
    if out is None:
        out = torch.zeros(ctx.out_shape, dtype=args[0].dtype, device=args[0].device)
    if reduction.num_outputs == 1:
        return out
    return (out, *(None for _ in range(reduction.num_outputs - 1)))


def _vmap(info, in_dims, bound, call, args):
    """The vmapped dimension becomes a leading batch dimension of every input (size 1, i.e.
    broadcast, for an input that is not vmapped), after which each input gets singleton batch
    dimensions so that all have as many as the one with most: the core broadcasts batch
    dimensions as NumPy does, aligned on the right. Block-sparse ranges index one batch entry, so
    a vmap with ranges loops over the vmapped entries instead."""
    dims = in_dims[2:]
    reduction = bound.reduction
    n_out = reduction.num_outputs
    if call[2] is not None:  # ranges
        rows = [GenredFunction.apply(bound, call,
                                     *(a if d is None else a.select(d, v)
                                       for a, d in zip(args, dims)))
                for v in range(info.batch_size)]
        if n_out == 1:
            return torch.stack(rows), 0
        return tuple(torch.stack(r) for r in zip(*rows)), (0,) * n_out
    cats = {i: c for i, c, _ in reduction.inputs()}
    trailing = [(1 if cats.get(k, 0) == 2 else 2) for k in range(len(args))]
    logical = [a.dim() - (d is not None) for a, d in zip(args, dims)]
    nb = max((n - t for n, t, k in zip(logical, trailing, range(len(args))) if k in cats),
             default=0)
    moved = []
    for k, (a, d) in enumerate(zip(args, dims)):
        a = a.unsqueeze(0) if d is None else a.movedim(d, 0)
        pad = nb - (logical[k] - trailing[k]) if k in cats else 0  # unread: passed along
        if pad > 0:
            a = a.reshape(a.shape[:1] + (1,) * pad + a.shape[1:])
        moved.append(a)
    out = GenredFunction.apply(bound, call, *moved)
    return out, (0 if n_out == 1 else (0,) * n_out)


if TORCH2:

    class GenredFunction(torch.autograd.Function):
        @staticmethod
        def forward(bound, call, *args):
            return _result(run(bound, call, args))

        @staticmethod
        def setup_context(ctx, inputs, output):
            bound, call, *args = inputs
            outs = output if isinstance(output, tuple) else (output,)
            _setup(ctx, bound, call, args, outs)
            ctx.out_shape = outs[0].shape
            ctx.save_for_forward(*args)

        @staticmethod
        def backward(ctx, *grad_outputs):
            return _backward(ctx, grad_outputs)

        @staticmethod
        def jvp(ctx, *tangents):
            return _jvp(ctx, tangents)

        @staticmethod
        def vmap(info, in_dims, bound, call, *args):
            return _vmap(info, in_dims, bound, call, args)

else:

    class GenredFunction(torch.autograd.Function):
        @staticmethod
        def forward(ctx, bound, call, *args):
            outs = run(bound, call, args)
            _setup(ctx, bound, call, args, outs)
            return _result(outs)

        @staticmethod
        def backward(ctx, *grad_outputs):
            return _backward(ctx, grad_outputs)


class _ZeroGradsBase(torch.autograd.Function):
    """Ties the arguments a simplified formula does not read (0 * x) to the result: their
    gradient is zeros of their shape, as in pykeops, not None."""

    @staticmethod
    def backward(ctx, g):
        return (g, *(torch.zeros(s, dtype=t, device=d) for s, t, d in ctx.like))


if TORCH2:

    class ZeroGrads(_ZeroGradsBase):
        generate_vmap_rule = True

        @staticmethod
        def forward(out, *unread):
            return out.view_as(out)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.like = [(a.shape, a.dtype, a.device) for a in inputs[1:]]

        @staticmethod
        def jvp(ctx, t_out, *t_unread):
            return t_out

else:

    class ZeroGrads(_ZeroGradsBase):
        @staticmethod
        def forward(ctx, out, *unread):
            ctx.like = [(a.shape, a.dtype, a.device) for a in unread]
            return out.view_as(out)


def transforms_active():
    """Whether a torch.func transform (grad, vmap, jvp, ...) is running."""
    return _transforms_active is not None and _transforms_active()


_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", None)
