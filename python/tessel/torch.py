"""PyTorch front end: Genred on tensors, with autograd to any order.

The derivatives of a reduction are reductions (the core differentiates symbolically), run by the
same autograd Function (_torch_autograd), so `torch.autograd.grad(..., create_graph=True)` nests
as deep as asked without storing an N x M matrix; on PyTorch 2.x so do the torch.func transforms
(grad, vjp, jvp, jacrev, jacfwd, hessian, vmap), and torch.compile traces a call as the custom
operator tessel::genred (_torch_op).
"""
import torch
import torch.autograd.forward_ad as _forward_ad

from . import _docstrings
from . import _core
from .lazytensor import ArrayAdapter, LazyTensor, Vi, Vj, Pm, register_adapter  # noqa: F401
from ._genred import GenredBase

from ._exit import keep_until_exit
from ._torch_autograd import CUDA_IO, GenredFunction, ZeroGrads, run, transforms_active, vjp
from . import _torch_op
from ._solve import KernelSolveBase
# The memory tools (tessel.loops), offered beside Genred where the README shows them.
from .loops import (ConvergenceError, ReversibleCoupling, SnapshotLevels,  # noqa: F401
                    cg_solve, checkpoint_loop, checkpoint_while, fixed_point, odeint_reversible)

__all__ = ["Genred", "KernelSolve", "LazyTensor", "Vi", "Vj", "Pm", "checkpoint_loop",
           "checkpoint_while",
           "cg_solve", "fixed_point", "ConvergenceError", "odeint_reversible",
           "ReversibleCoupling", "SnapshotLevels"]

# Half precision: reductions run on float32 copies and their results are rounded back.
_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
_OP = _torch_op.AVAILABLE  # torch >= 2.4
_is_compiling = torch.compiler.is_compiling if _OP else None


class Genred(GenredBase):
    """A compiled reduction on tensors; see tessel.numpy.Genred for the arguments.

    Gradients flow to every input that requires them (i-, j-variables and parameters), through
    Min/Max/KMin (via the selected indices) and LogSumExp/SumSoftMaxWeight, to any order.
    """

    _kind = "torch"
    _cuda_io = CUDA_IO

    def _bind(self):
        super()._bind()
        # The key by which torch.compile's traced graphs name the reduction (see _torch_op).
        self._op = _torch_op.register(self._spec, self._bound) if _OP else None

    def __call__(self, *args, backend=None, ni=None, nj=None, ranges=None):
        """`ni` / `nj` give the number of i / j rows when no i- / j-variable tells them;
        `ranges` makes the reduction block-sparse (KeOps's 6-array layout). Under torch.compile
        the call is traced as the operator tessel::genred (a graph break with `ranges`)."""
        spec = self._spec
        tensors, call = spec.prepare(args, "Genred", backend, ni, nj, ranges)
        if _OP and self._op is not None and _is_compiling() and ranges is None and backend is None:
            _check_tensors(tensors, "Genred")
            out = _torch_op.genred(self._op.key, list(tensors), call[0], call[1])
            out = out[0] if len(out) == 1 else tuple(out)
        elif _plain(tensors):
            # Nothing to differentiate: the core's call alone, no autograd node.
            out = run(self._bound, call, tensors)
            out = out[0] if len(out) == 1 else tuple(out)
        else:  # the core checks the tensors, with the same messages as _check_tensors
            out = GenredFunction.apply(self._bound, call, *tensors)
        unread = args[spec.n_core:]
        if not tensors and unread:  # a formula that reads no array: the call's dtype and device
            _check_tensors(unread, "Genred")
            like = unread[0]
            out = tuple(_like(o, like) for o in out) if isinstance(out, tuple) else _like(out, like)
        if unread and torch.is_grad_enabled() and any(getattr(a, "requires_grad", False) for a in unread):
            out = ZeroGrads.apply(out, *unread) if not isinstance(out, tuple) else (
                ZeroGrads.apply(out[0], *unread), *out[1:])
        return out

    def _vjp(self, args, g, needs, backend=None):
        """The gradients of sum(output 0 * g) for the arguments with needs[k] (None for the
        others), without evaluating the reduction: tessel.distributed's ring backward."""
        tensors, call = self._spec.prepare(args, "Genred", backend)
        grads = vjp(self._bound, call, tensors, g, needs[: len(tensors)])
        return (*grads, *[torch.zeros_like(a) if n else None
                          for a, n in zip(args[len(tensors):], needs[len(tensors):])])


def _plain(tensors):
    """Whether a call needs no autograd Function: no tensor requires grad (or grad mode is off),
    no forward-mode level is open (dual tensors need not require grad) and no torch.func
    transform is active."""
    if _fw_level() >= 0 or transforms_active():
        return False
    if not torch.is_grad_enabled():
        return True
    return not any(getattr(t, "requires_grad", False) for t in tensors)


def _fw_level():
    return _forward_ad._current_level


def _like(out, like):
    """`out` on `like`'s device, in its dtype unless `out` holds indices."""
    return out.to(device=like.device, dtype=out.dtype if out.dtype == torch.int64 else like.dtype)


def _check_tensors(args, who):
    """The call's tensors: CPU or one CUDA device, float32 or float64, one dtype. Returns that
    dtype."""
    dtype = device = None
    for k, a in enumerate(args):
        if not isinstance(a, torch.Tensor):
            raise TypeError(f"{who}: argument {k} is a {type(a).__name__}; expected a "
                            "torch.Tensor")
        if a.device.type not in ("cpu", "cuda"):
            raise ValueError(f"{who}: argument {k} is on {a.device}; expected CPU or CUDA tensors")
        if a.device.type == "cuda" and device is not None and a.device != device:
            raise ValueError(f"{who}: argument {k} is on {a.device} but an earlier argument is on "
                             f"{device}; all CUDA tensors must be on one device")
        if a.device.type == "cuda":
            device = a.device
        if a.dtype not in _DTYPES:
            raise TypeError(f"{who}: argument {k} has dtype {a.dtype}; expected "
                            "torch.float32, torch.float64, torch.float16 or torch.bfloat16")
        if dtype is None:
            dtype = a.dtype
        elif a.dtype != dtype:
            raise TypeError(f"{who}: argument {k} has dtype {a.dtype} but argument 0 has "
                            f"{dtype}; all arguments must share one dtype")
    return dtype


def _solve_args(args, var):
    """The solve's arguments, detached, with b (argument `var`) contiguous: CG's vectors live
    where b does, on the host or on b's GPU (no round trip). The core's solve runs on each
    device's default stream and returns when done: the caller's current streams are drained first
    so that it reads what they wrote."""
    out = [a.detach().contiguous() if k == var else a.detach() for k, a in enumerate(args)]
    for dev in {a.device for a in out if a.is_cuda}:
        torch.cuda.current_stream(dev).synchronize()
    return out


class _KernelSolveFunction(torch.autograd.Function):
    """x = (alpha I + K(theta))^-1 b, differentiated implicitly (K symmetric): the cotangent G
    gives u = (alpha I + K)^-1 G (one more solve, no stored iterations), grad_b = u,
    grad_theta = -d<u, K(theta) x>/dtheta and grad_alpha = -<u, x>. A first-order backward is one
    core call; under create_graph the same quantities are built from differentiable pieces (this
    Function and the Genred Function) so that higher orders nest."""

    @staticmethod
    def forward(ctx, solver, settings, alpha, *args):
        opts, mode, stats = settings
        # CG's vectors (b, x) live on b's device; K's other arguments stay where they are, so
        # that on CUDA tensors every product and every CG step runs on the GPU.
        b = args[solver.var]
        x = torch.empty(b.shape, dtype=b.dtype, device=b.device)
        rep = _core.kernel_solve(solver.reduction, solver.var, _solve_args(args, solver.var), x,
                                 **dict(opts, alpha=float(alpha)))
        solver._report(rep, mode, stats)
        ctx.solver, ctx.settings = solver, settings
        if any(ctx.needs_input_grad):
            keep_until_exit(ctx)
        ctx.save_for_backward(alpha, x, *args)
        return x

    @staticmethod
    def backward(ctx, g):
        solver, settings = ctx.solver, ctx.settings
        opts, mode, stats = settings
        alpha, x, *args = ctx.saved_tensors
        var, n = solver.var, len(args)
        needs = ctx.needs_input_grad[3:]
        grads = [None] * n
        used = {i for i, _, _ in solver.reduction.inputs()}
        want = [k for k in range(n) if needs[k] and k in used]
        grad_alpha = None
        if not torch.is_grad_enabled():
            outs = [torch.zeros_like(args[k], memory_format=torch.contiguous_format)
                    for k in want]
            dev = args[var].device
            xg = x.detach().to(dev).contiguous(), g.detach().to(dev).contiguous()
            rep = _core.kernel_solve_grad(solver.reduction, var, _solve_args(args, var), *xg,
                                          want, outs, **dict(opts, alpha=float(alpha)))
            solver._report(rep, mode, stats, key="backward")
            for k, o in zip(want, outs):
                grads[k] = o
            if ctx.needs_input_grad[2]:
                grad_alpha = torch.full_like(alpha, rep[3])
        else:
            sub = list(args)
            sub[var] = g
            inner = None
            if stats is not None:
                inner = stats["backward"] = {}
            u = _KernelSolveFunction.apply(solver, (opts, mode, inner), alpha, *sub)
            others = [k for k in want if k != var]
            if var in want:
                grads[var] = u
            if others:
                # -d<u, K(theta) x>/dtheta with x held fixed: autograd through the Genred on views
                # of theta (x's own dependence on theta is what this backward computes).
                proxies = list(args)
                for k in others:
                    proxies[k] = args[k].view_as(args[k])
                proxies[var] = x
                bound = _core.Bound(solver.reduction, opts["settings"], solver._who, "torch",
                                    *CUDA_IO)
                kx = GenredFunction.apply(bound, (-1, -1, opts["ranges"], None),
                                          *proxies[:solver._spec.n_core])
                gs = torch.autograd.grad(kx, [proxies[k] for k in others], grad_outputs=-u,
                                         create_graph=True, allow_unused=True)
                for k, gk in zip(others, gs):
                    grads[k] = torch.zeros_like(args[k]) if gk is None else gk
            if ctx.needs_input_grad[2]:
                grad_alpha = -(u * x).sum().reshape(alpha.shape)
        for k in range(n):
            if needs[k] and grads[k] is None:
                grads[k] = torch.zeros_like(args[k])
        return (None, None, grad_alpha, *grads)


class KernelSolve(KernelSolveBase):
    __doc__ = KernelSolveBase.__doc__ + """
    On tensors, differentiable to any order with respect to b, every other argument and alpha
    (a float, or a tensor with one element to learn it), by implicit differentiation.
    """

    def __call__(self, *args, alpha=0.0, tol=None, atol=0.0, maxiter=None,
                 on_nonconvergence="warn", backend=None, ranges=None, stats=None):
        who = self._who
        if transforms_active():
            # Its implicit backward runs the core's solver, which has no vmap or jvp rule.
            raise NotImplementedError(
                f"{who}: torch.func transforms (grad, vmap, jacrev, jvp, ...) are not supported "
                "by KernelSolve; use torch.autograd.grad or .backward() (any order, "
                "create_graph=True) and batch one solve per right-hand side")
        dtype = _check_tensors(args, who)
        alpha_t = alpha if isinstance(alpha, torch.Tensor) else torch.tensor(float(alpha),
                                                                              dtype=dtype)
        if alpha_t.numel() != 1:
            raise ValueError(f"{who}: alpha must be a number or a one-element tensor, got shape "
                             f"{tuple(alpha_t.shape)}")
        opts, mode = self._settings(args, "float64" if dtype == torch.float64 else "float32",
                                    float(alpha_t.detach()), tol, atol, maxiter,
                                    on_nonconvergence, backend, ranges)
        opts.pop("alpha")
        return _KernelSolveFunction.apply(self, (opts, mode, stats), alpha_t.to(dtype),
                                          *args[: self._spec.n_core])


def _as_real(x):
    """The float view (..., 2D) of a complex (..., D) tensor (a copy only when its last axis is
    strided); autograd maps the view's gradient back with PyTorch's complex convention."""
    return torch.view_as_real(x.resolve_conj()).flatten(-2)


def _as_complex(a):
    return torch.view_as_complex(a.contiguous().unflatten(-1, (-1, 2)))


register_adapter(ArrayAdapter(torch.Tensor, "PyTorch tensors", _DTYPES,
                              lambda values, dtype: torch.tensor(values, dtype=dtype), Genred,
                              KernelSolve, (torch.complex64, torch.complex128), _as_real,
                              _as_complex))


Genred.__doc__, KernelSolve.__doc__ = _docstrings.torch_docs()
