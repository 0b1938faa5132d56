"""Reversible coupling blocks (RevNet-style): inputs are rebuilt in backward instead of stored.

`ReversibleCoupling(F, G)` splits x in two halves along dim 1 and computes

    additive (default):  y1 = x1 + F(x2)                y2 = x2 + G(y1)
    affine:              y1 = x1 * sF(x2) + tF(x2)      y2 = x2 * sG(y1) + tG(y1)

which is invertible whatever F and G are, so the backward can rebuild x from y. In affine mode F
and G return either a pair (scale_logit, shift) or one tensor with twice the channels, split
along dim 1 into that pair. The scale is strictly positive and finite by construction:
`scale="exp"` gives exp(b * tanh(logit / b)) in [e^-b, e^b] and `scale="sigmoid"` gives
e^-b + (1 - e^-b) * sigmoid(logit + 2) in [e^-b, 1), with b = `log_scale_bound`.

What is kept, what is freed. A block whose input was produced by another coupling *takes* that
input (with `free_inputs=True`, the default): the producing block drops its copy of its output,
and the taker rebuilds the tensor from its own output during backward and hands the rebuilt
value back to the producer. A stack of n couplings thus keeps its first input (saved, so the
first block's gradients are exact), its last output, and per block only parameters and flags.
The taken tensor is also emptied (`x.data = torch.empty(0)`) so that the memory goes back even
when the caller still holds a reference to it, and its version counter is bumped: an autograd
node that saved it earlier reports the standard "modified by an inplace operation" error instead
of computing with a freed tensor. `untyped_storage().resize_(0)` is not used: torch 1.13 has no
such method, and reading a tensor whose storage was resized to zero crashes the process.

What is never freed: a tensor that no coupling produced (the model input, a leaf, the output of
any other layer), an output already taken by another coupling, or anything at all with
`free_inputs=False` (each block then saves its own input, like plain checkpointing). Do not use
a coupling's output after feeding it to another coupling with `free_inputs=True`: it is empty
by then (a second coupling fed the same tensor raises a ValueError that says so).

Backward. With the usual `loss.backward()` or `torch.autograd.grad(...)` (grad mode off inside
backward), a block takes its output (kept, or handed back by the next block), evaluates G(y1)
and F(x2) once each with a local graph, which gives both the rebuilt input and the
vector-Jacobian products, hands x back to the previous block and drops its own handed-back
output again, so memory stays flat during backward too and `retain_graph=True` works.
Double backward: when `create_graph=True`, grad mode is on inside backward
(`torch.is_grad_enabled()`), and the block falls back to ordinary stored autograd: it
recomputes the chain of couplings from the first saved input with a graph (once, cached
per block until used) and differentiates that, so higher-order gradients are exact and
memory is that of plain autograd.

F and G run again in backward, so they must compute the same again: no batch norm in training
mode (its running statistics would be updated twice). Random draws (dropout) are replayed: each
block keeps the random-number states F and G started from and restores them when it runs them
again (`preserve_rng_state=True`, as torch.utils.checkpoint; the caller's stream is left as the
forward pass left it). `reversible=False` runs the same computation with plain autograd, for
comparison.
"""
import math

import torch
from torch import nn

from ._captured import Captured, grad_once
from ._rng import RngStates

__all__ = ["ReversibleCoupling"]

_MODES = ("additive", "affine")
_SCALES = ("exp", "sigmoid")


def _add(a, b):
    """Sum of two gradients, where None (an unused input) means zero."""
    if a is None:
        return b
    return a if b is None else a + b


class ReversibleCoupling(nn.Module):
    """y = (x1 + F(x2), x2 + G(y1)) (or its affine variant) with activations rebuilt in backward.

    A RevNet block: the input halves (split along dim 1) give ``y1 = x1 + F(x2)``,
    ``y2 = x2 + G(y1)``; the backward rebuilds x from y instead of storing the activations, so a
    deep stack of couplings trains in the memory of one block.

    Parameters
    ----------
    F, G : torch.nn.Module
        Map a half (the shape of x with dim 1 halved) to a half (additive), or to a
        (scale_logit, shift) pair of halves, or one tensor of twice a half's channels (affine).
    mode : {"additive", "affine"}
        The coupling.
    scale : str, default "exp"
        The affine scale's function of its logit (see the module's docstring).
    log_scale_bound : float, default 2.0
        Bound on the affine log-scale.
    free_inputs : bool, default True
        Take and free an input produced by another coupling (see the module's docstring).
    reversible : bool, default True
        False runs plain autograd (stores every activation) instead.
    preserve_rng_state : bool, default True
        Replays F's and G's random draws (dropout) in backward.

    Raises
    ------
    TypeError
        F or G is not an nn.Module, or returns something other than tensors.
    ValueError
        An unknown mode or scale, a non-positive log_scale_bound, or F / G results of the wrong
        shape.

    Notes
    -----
    Gradients reach F's and G's parameters and every other tensor requiring grad they read (a
    tensor captured by their forward, a weight computed before the block): each forward runs F
    and G once with a graph of the block and walks it to find them (tessel.loops._captured). Every
    recomputation in backward is checked the same way; a tensor requiring grad that the forward
    did not reach raises RuntimeError instead of losing its gradient.


    Examples
    --------
    >>> import torch
    >>> from torch import nn
    >>> from tessel.loops import ReversibleCoupling
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> blocks = [ReversibleCoupling(nn.Linear(4, 4), nn.Linear(4, 4)).double() for _ in range(3)]
    >>> x = torch.randn(5, 8, dtype=torch.float64, requires_grad=True)
    >>> y = x
    >>> for blk in blocks:
    ...     y = blk(y)
    >>> (gx,) = torch.autograd.grad(y.square().sum(), x)
    >>> for blk in blocks:
    ...     blk.reversible = False                  # the same blocks, plain autograd
    >>> z = x
    >>> for blk in blocks:
    ...     z = blk(z)
    >>> (gz,) = torch.autograd.grad(z.square().sum(), x)
    >>> bool(torch.allclose(y, z)), bool(torch.allclose(gx, gz))
    (True, True)
    """

    def __init__(self, F, G, mode="additive", *, scale="exp", log_scale_bound=2.0,
                 free_inputs=True, reversible=True, preserve_rng_state=True):
        super().__init__()
        for name, fn in (("F", F), ("G", G)):
            if not isinstance(fn, nn.Module):
                raise TypeError(f"ReversibleCoupling: {name} is a {type(fn).__name__}; expected a "
                                "torch.nn.Module (its parameters must be visible to autograd)")
        if mode not in _MODES:
            raise ValueError(f"ReversibleCoupling: mode={mode!r}; expected one of {_MODES}")
        if scale not in _SCALES:
            raise ValueError(f"ReversibleCoupling: scale={scale!r}; expected one of {_SCALES}")
        try:
            bound = float(log_scale_bound)
        except (TypeError, ValueError):
            bound = float("nan")
        if not (math.isfinite(bound) and 0.0 < bound <= 50.0):
            raise ValueError(f"ReversibleCoupling: log_scale_bound={log_scale_bound!r}; expected a "
                             "number in (0, 50] (the scale stays within [e^-b, e^b])")
        self.F, self.G = F, G
        self.mode, self.scale, self.log_scale_bound = mode, scale, bound
        self.free_inputs, self.reversible = bool(free_inputs), bool(reversible)
        self.preserve_rng_state = bool(preserve_rng_state)

    def extra_repr(self):
        aff = f", scale={self.scale!r}, log_scale_bound={self.log_scale_bound}" \
            if self.mode == "affine" else ""
        return (f"mode={self.mode!r}{aff}, free_inputs={self.free_inputs}, "
                f"reversible={self.reversible}")

    # -- the computation, with ordinary torch ops (used by every path) --

    def _check_half(self, name, t, like, arg):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"ReversibleCoupling: {name} returned a {type(t).__name__}{arg}; "
                            "expected a torch.Tensor")
        if t.shape != like.shape or t.dtype != like.dtype or t.device != like.device:
            raise ValueError(
                f"ReversibleCoupling: {name} returned shape {tuple(t.shape)}, {t.dtype} on "
                f"{t.device}{arg} for a half of shape {tuple(like.shape)}; expected shape "
                f"{tuple(like.shape)}, {like.dtype} on {like.device} (F and G must keep the "
                "shape of a half)")

    def _branch(self, name, inp, like):
        """F or G applied to `inp`, checked against `like` (the half it updates): a tensor
        (additive) or the pair (scale, shift) (affine)."""
        out = (self.F if name == "F" else self.G)(inp)
        if self.mode == "additive":
            self._check_half(name, out, like, "")
            return out
        if isinstance(out, (tuple, list)):
            if len(out) != 2:
                raise ValueError(f"ReversibleCoupling: {name} returned {len(out)} tensors; in "
                                 "affine mode expected a pair (scale_logit, shift)")
            logit, shift = out
        elif isinstance(out, torch.Tensor):
            want = (like.shape[0], 2 * like.shape[1]) + tuple(like.shape[2:])
            if tuple(out.shape) != want:
                raise ValueError(
                    f"ReversibleCoupling: {name} returned shape {tuple(out.shape)} for a half of "
                    f"shape {tuple(like.shape)}; in affine mode expected shape {want} (split "
                    "along dim 1 into scale_logit and shift) or a pair of tensors")
            logit, shift = out.chunk(2, dim=1)
        else:
            raise TypeError(f"ReversibleCoupling: {name} returned a {type(out).__name__}; in "
                            "affine mode expected a tensor or a pair (scale_logit, shift)")
        self._check_half(name, logit, like, " as scale_logit")
        self._check_half(name, shift, like, " as shift")
        return self._scale_of(logit), shift

    def _scale_of(self, logit):
        b = self.log_scale_bound
        if self.scale == "exp":
            # A smooth clamp of the log-scale: never 0 or inf, whatever F returns.
            return torch.exp(b * torch.tanh(logit / b))
        lo = math.exp(-b)
        return lo + (1.0 - lo) * torch.sigmoid(logit + 2.0)

    def _combine(self, x, h):
        if self.mode == "additive":
            return x + h
        scale, shift = h
        return x * scale + shift

    def _uncombine(self, y, h):
        if self.mode == "additive":
            return y - h
        scale, shift = h
        return (y - shift) / scale

    def _forward_plain(self, x, rng=None, marks=None):
        """The block; with `rng`, the random-number states before F and before G go to marks."""
        x1, x2 = x.chunk(2, dim=1)
        if rng is not None:
            marks.append(rng.get())
        y1 = self._combine(x1, self._branch("F", x2, x1))
        if rng is not None:
            marks.append(rng.get())
        y2 = self._combine(x2, self._branch("G", y1, x2))
        return torch.cat([y1, y2], dim=1)

    def _check_input(self, x, arg, where):
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"ReversibleCoupling.{where}: {arg} is a {type(x).__name__}; "
                            "expected a torch.Tensor")
        if isinstance(x.grad_fn, _CouplingFunction._backward_cls) and x.dim() == 1 \
                and x.numel() == 0 and getattr(x.grad_fn, "taken", False):
            raise ValueError(
                f"ReversibleCoupling.{where}: {arg} is an output of a ReversibleCoupling that "
                "another ReversibleCoupling already took and freed (free_inputs=True); give "
                "free_inputs=False to the couplings that share an output")
        if x.dim() < 2 or x.shape[1] == 0 or x.shape[1] % 2:
            raise ValueError(
                f"ReversibleCoupling.{where}: {arg} has shape {tuple(x.shape)}; expected at "
                "least 2 dimensions and an even, nonzero size along dim 1 (it is split into "
                "two halves)")
        if not x.is_floating_point():
            raise TypeError(f"ReversibleCoupling.{where}: {arg} has dtype {x.dtype}; expected "
                            "a floating-point tensor")

    # -- public API --

    def forward(self, x):
        self._check_input(x, "x", "forward")
        if not self.reversible or not torch.is_grad_enabled():
            return self._forward_plain(x)
        # F and G run once with a graph of this block only, walked to find every tensor requiring
        # grad they read: the registered parameters and anything else (a tensor captured by F's
        # forward, a weight computed outside); then the graph is dropped.
        captured = Captured("ReversibleCoupling", self.parameters())
        xd = x.detach()
        rng, marks = RngStates(self.preserve_rng_state, (x,)), []
        y = captured.run(lambda t: self._forward_plain(t, rng, marks), xd, inputs=(xd,))
        # In place: a detached copy would be a view, which the taking of outputs (x.data = ...)
        # may not touch; the concatenation that makes y is never a view itself.
        y.detach_()
        params = tuple(captured.tensors)
        if not (x.requires_grad or params):
            return y
        return _CouplingFunction.apply(self, (captured, rng, marks), x, [y], *params)

    def inverse(self, y):
        """The x with forward(x) == y, with ordinary (differentiable) torch ops."""
        self._check_input(y, "y", "inverse")
        y1, y2 = y.chunk(2, dim=1)
        x2 = self._uncombine(y2, self._branch("G", y1, y2))
        x1 = self._uncombine(y1, self._branch("F", x2, y1))
        return torch.cat([x1, x2], dim=1)


_MISSING = ("ReversibleCoupling: backward reached a block whose output was taken by the next "
            "ReversibleCoupling (free_inputs=True) before that block's backward ran, so the "
            "output cannot be rebuilt; differentiate through the whole stack, or build the "
            "blocks with free_inputs=False")


class _CouplingFunction(torch.autograd.Function):
    """Inputs: the coupling module, what F and G read (tessel.loops._captured), x, its output y
    (computed by the caller, which found the tensors F and G read on the way), then those tensors:
    the parameters and anything else requiring grad. State on ctx: has_x (x saved: first block of a chain), producer (ctx of the
    coupling whose output x is, when taken), y (own output, or the rebuilt one handed back),
    taken (own output taken by the next block), x_graph (create_graph path cache)."""

    @staticmethod
    def forward(ctx, coupling, recorded, x, y, *params):
        y, = y  # in a list: a tensor input returned as the output would become a view of it
        # What F and G read, and the random-number states they started from (before F, before G).
        ctx.coupling, (ctx.captured, ctx.rng, ctx.marks) = coupling, recorded
        in_f = {id(p) for p in coupling.F.parameters()}
        in_g = {id(p) for p in coupling.G.parameters()}
        # A tensor neither branch registers may be read by either: both differentiate it.
        ctx.f_idx = [k for k, p in enumerate(params) if id(p) in in_f or id(p) not in in_g]
        ctx.g_idx = [k for k, p in enumerate(params) if id(p) in in_g or id(p) not in in_f]
        producer = x.grad_fn if coupling.free_inputs else None
        if not (isinstance(producer, _CouplingFunction._backward_cls) and not producer.taken
                and producer.out_ptr == x.data_ptr() and producer.out_version == x._version):
            producer = None
        ctx.producer, ctx.has_x, ctx.taken, ctx.x_graph = producer, producer is None, False, None
        if producer is None:
            ctx.save_for_backward(x, *params)
            ctx.y = None  # the saved x makes this block's gradients exact
        else:
            ctx.save_for_backward(*params)
            ctx.y = y.detach()
            producer.taken, producer.y = True, None
            # The caller may still hold x: empty it so its memory goes now, and bump its version
            # so that a node that saved it before reports the change rather than misreading it.
            x.data = torch.empty(0, dtype=x.dtype, device=x.device)
            x.zero_()
        ctx.y_version = ctx.out_version = y._version
        ctx.out_ptr = y.data_ptr()
        return y

    @staticmethod
    def backward(ctx, gy):
        if torch.is_grad_enabled():
            grads = _stored_backward(ctx, gy)
        else:
            grads = _reversible_backward(ctx, gy)
        gx = grads[0] if ctx.needs_input_grad[2] else None
        return (None, None, gx, None) + tuple(grads[1:])


def _reversible_backward(ctx, gy):
    """Gradients with grad mode off: rebuild x from y, hand it to the producer."""
    c = ctx.coupling
    saved = ctx.saved_tensors
    params = saved[1:] if ctx.has_x else saved
    if ctx.has_x:
        with torch.enable_grad(), ctx.rng.fork():
            xl = saved[0].detach().requires_grad_()
            ctx.rng.set(ctx.marks[0])
            y = c._forward_plain(xl)
            ctx.captured.check(y, (xl,))
            return tuple(grad_once(y, (xl,) + tuple(params), gy))
    y = ctx.y
    if y is None:
        raise RuntimeError(_MISSING)
    if y._version != ctx.y_version:
        raise RuntimeError("ReversibleCoupling: the block's output was modified in place after "
                           "forward; its backward rebuilds the input from that output")
    y1, y2 = y.chunk(2, dim=1)
    g1, g2 = gy.chunk(2, dim=1)
    gp = [None] * len(params)
    with torch.enable_grad(), ctx.rng.fork():
        # y2 = x2 (*) G(y1), then y1 = x1 (*) F(x2) with the total gradient reaching y1.
        ctx.rng.set(ctx.marks[1])
        x2, gx2, gy1 = _undo_half(ctx, "G", y1.detach().requires_grad_(), y2, g2, params, gp)
        ctx.rng.set(ctx.marks[0])
        x1, gx1, gx2_f = _undo_half(ctx, "F", x2, y1, _add(g1, gy1), params, gp)
    gx = torch.cat([gx1, _add(gx2, gx2_f)], dim=1)
    producer = ctx.producer
    if not producer.has_x:
        x = torch.cat([x1.detach(), x2.detach()], dim=1)
        producer.y, producer.y_version = x, x._version
    if ctx.taken:
        ctx.y = None  # handed back by the next block, which hands it again on a later pass
    return (gx,) + tuple(gp)


def _undo_half(ctx, name, inp, y, g, params, gp):
    """Undoes y = x (*) B(inp) for the branch B named `name`: one evaluation of B gives x and the
    products of g with the Jacobians of y for x, inp and B's parameters (the latter added into
    gp). Returns (x, x's gradient, inp's gradient)."""
    c = ctx.coupling
    idx = ctx.f_idx if name == "F" else ctx.g_idx
    h = c._branch(name, inp, y)
    ctx.captured.check(h, (inp,))
    with torch.no_grad():
        x = c._uncombine(y, h)
    x.requires_grad_()
    out = grad_once(c._combine(x, h), [x, inp] + [params[k] for k in idx], g)
    for k, gk in zip(idx, out[2:]):
        gp[k] = _add(gp[k], gk)
    return x, out[0], out[1]


def _graph_input(ctx):
    """x of this block as a function (with a graph) of the chain's first saved input: the
    blocks in between are recomputed once with plain autograd and cached on their ctx."""
    path = [ctx]
    while path[-1].x_graph is None and not path[-1].has_x:
        path.append(path[-1].producer)
    x = path[-1].x_graph if path[-1].x_graph is not None else path[-1].saved_tensors[0]
    for below, above in zip(reversed(path[1:]), reversed(path[:-1])):
        _ = below.saved_tensors  # raises if its parameters were changed in place
        with below.rng.fork():
            below.rng.set(below.marks[0])
            x = below.coupling._forward_plain(x)
        above.x_graph = x
    return x


def _stored_backward(ctx, gy):
    """Gradients with grad mode on (create_graph=True): plain autograd, differentiable again."""
    x = _graph_input(ctx)
    ctx.x_graph = None
    saved = ctx.saved_tensors
    params = tuple(saved[1:] if ctx.has_x else saved)
    with_x = x.requires_grad
    with ctx.rng.fork():
        ctx.rng.set(ctx.marks[0])
        y = ctx.coupling._forward_plain(x)
    ctx.captured.check(y, (x,))
    grads = tuple(grad_once(y, ((x,) if with_x else ()) + params, gy, create_graph=True))
    return grads if with_x else (None,) + grads
