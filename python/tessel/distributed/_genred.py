"""Kernel reductions sharded over torch.distributed: each rank holds some rows of x and of y.

`Genred` takes tessel.torch.Genred's arguments and is called on every rank of a process group
with that rank's rows: i-variables (Vi) hold its rows of x, j-variables (Vj) its rows of y
(shards may be uneven, or empty), parameters (Pm) are the same on every rank. It returns the
rank's rows of the reduction over all j of all ranks (axis=1), with autograd.

The y blocks travel around a ring of the ranks (isend / irecv to the neighbours): at each of
world_size steps a rank reduces its x against the block it holds, with a plain tessel.torch
Genred, merges that partial result into its running one (Sum: add, LogSumExp: logaddexp), and
passes the block on. The send of the next block starts before the current one is reduced, so
communication overlaps computation. Nothing of an N x M matrix, and no rank's whole y, is held.

Sharded in this slice: Sum and LogSumExp over axis=1. Everything else raises NotImplementedError.
"""
import torch
import torch.distributed as dist

from .. import torch as _tt
from .._genred import reduction_name
from ._ring import TAG_BLOCK as _TAG_BLOCK, TAG_GRAD as _TAG_GRAD, Ring, exchange

__all__ = ["Genred"]

_WHO = "tessel.distributed.Genred"
_SHARDED = ("Sum", "LogSumExp")
_VI, _VJ, _PM = 0, 1, 2
_CATEGORY = {_VI: "Vi", _VJ: "Vj", _PM: "Pm"}


class Genred:
    """A reduction over the rows of y spread across the ranks of `group` (default: the world).

    Same arguments as tessel.torch.Genred, plus `group`. Call it on every rank, collectively,
    with that rank's rows (2-D i- and j-variables, 1-D parameters, one dtype and device); it
    returns that rank's rows of the result. `backend` may be given per call; ni / nj / ranges not.

    Gradients: each rank backpropagates its own loss L_r through its own result (every rank must
    do so, since backward is collective too: pass zeros if a rank's loss does not use it). What a
    rank then gets is the gradient of the total L = sum over ranks of L_r:
      - its x rows: dL/dx_r (= dL_r/dx_r, as only its own result reads its x rows);
      - its y rows: dL/dy_r, summed over every rank's use of them (the block's gradient travels
        with the block around the ring and arrives back at its owner);
      - parameters: dL/dtheta, the same full sum on every rank (all_reduce of the ranks'
        contributions). Not divided by world_size, unlike DistributedDataParallel's average;
        and only the path through this Genred is summed: any other use of a parameter in L_r
        stays local to rank r.
    Double backward is not sharded (a NotImplementedError).
    """

    def __init__(self, formula, aliases, reduction_op="Sum", axis=1, dtype=None, opt_arg=None,
                 formula2=None, group=None, **options):
        name = reduction_name(reduction_op, _WHO)
        if name not in _SHARDED:
            raise NotImplementedError(f"{_WHO}: reduction_op={name!r} is not sharded yet; "
                                      f"{' and '.join(_SHARDED)} are")
        if axis != 1:
            raise NotImplementedError(f"{_WHO}: axis={axis!r} (a reduction over i) is not "
                                      "sharded yet; axis=1 (over j) is")
        if formula2 is not None:
            raise NotImplementedError(f"{_WHO}: formula2 (weighted {name}) is not sharded yet")
        self._local = _tt.Genred(formula, aliases, name, axis, dtype, opt_arg, **options)
        self.reduction_op, self.group = name, group
        spec = self._local._spec
        self._cats = [spec.slots[i][0] for i in range(spec.n_inputs)]
        # What every rank must agree on, besides its arguments: formula, aliases, options.
        self._text = repr(sorted(spec.args.items(), key=lambda kv: kv[0]))

    def __call__(self, *args, backend=None):
        ring = Ring.of(self.group, _WHO)
        _, sizes = exchange(self, ring, args, _WHO)
        return _RingFunction.apply(self, ring, sizes, backend, *args)

    def _descriptor(self, args):
        """What this rank's call must share with the others', and its (ni, nj): raises on a local
        error (wrong count, types, shapes)."""
        if len(args) != len(self._cats):
            self._local._spec.check_count(args, _WHO)
        rows = {}
        grad = torch.is_grad_enabled()
        parts = [self._text]
        for k, (a, c) in enumerate(zip(args, self._cats)):
            if not isinstance(a, torch.Tensor):
                raise TypeError(f"{_WHO}: argument {k} is a {type(a).__name__}; expected a "
                                "torch.Tensor")
            want = 1 if c == _PM else 2
            if a.dim() != want:
                raise NotImplementedError(
                    f"{_WHO}: argument {k} ({_CATEGORY[c]}) has shape {tuple(a.shape)}; only "
                    f"{'1-D parameters' if c == _PM else '2-D (rows, dim) variables'} are "
                    "sharded yet (no batch dimensions)")
            if c != _PM:
                n = rows.setdefault(c, (a.shape[0], k))
                if n[0] != a.shape[0]:
                    raise ValueError(f"{_WHO}: argument {k} has {a.shape[0]} rows but argument "
                                     f"{n[1]} has {n[0]}; all {_CATEGORY[c]} variables must "
                                     "agree")
            parts.append((k, _CATEGORY[c], tuple(a.shape[1:]) if c != _PM else tuple(a.shape),
                          str(a.dtype), a.device.type, grad and a.requires_grad))
        for c in (_VI, _VJ):
            if c not in rows:
                raise NotImplementedError(f"{_WHO}: a formula without a {_CATEGORY[c]} variable "
                                          "is not sharded yet")
        return parts, rows[_VI][0], rows[_VJ][0]


class _RingFunction(torch.autograd.Function):
    """The ring forward and, in backward, the same ring again, each y block carrying its
    gradient: after a full cycle the gradient has every rank's contribution and is home.

    A ring rather than a reduce-scatter of y's gradient: with one, every rank would hold a
    gradient buffer as large as all of y (every block's share at once), and gloo has no
    reduce_scatter; in the ring a rank holds one block and its gradient at a time, and each
    gradient message overlaps the next block's work."""

    @staticmethod
    def forward(ctx, red, ring, sizes, backend, *args):
        cats = red._cats
        own = _pack([a for a, c in zip(args, cats) if c == _VJ])
        block, out = own, None
        for step in range(ring.size):
            nxt, wait = None, None
            if step + 1 < ring.size:  # the next block is on its way while this one is reduced
                nxt, wait = ring.shift(block, (sizes[ring.owner(step + 1)], own.shape[1]), own,
                                       _TAG_BLOCK)
            part = red._local(*_with_block(args, cats, block), backend=backend)
            out = part if out is None else _merge(red.reduction_op, out, part)
            if wait is not None:
                wait()
                block = nxt
        ctx.red, ctx.ring, ctx.sizes, ctx.backend = red, ring, sizes, backend
        ctx.save_for_backward(out, *args)
        return out

    @staticmethod
    def backward(ctx, g):
        if torch.is_grad_enabled():
            raise NotImplementedError(f"{_WHO}: double backward (create_graph=True) is not "
                                      "sharded yet")
        red, ring, sizes = ctx.red, ctx.ring, ctx.sizes
        out, *args = ctx.saved_tensors
        cats, needs = red._cats, ctx.needs_input_grad[4:]
        grads = [torch.zeros_like(a) if n and c != _VJ else None
                 for a, c, n in zip(args, cats, needs)]
        jneeds = any(n for n, c in zip(needs, cats) if c == _VJ)
        own = _pack([a for a, c in zip(args, cats) if c == _VJ])
        block, acc = own, torch.zeros_like(own) if jneeds else None
        wait_acc = None
        for step in range(ring.size):
            nxt, wait = None, None
            if step + 1 < ring.size:
                nxt, wait = ring.shift(block, (sizes[ring.owner(step + 1)], own.shape[1]), own,
                                       _TAG_BLOCK)
            share = _block_grads(ctx, args, block, out, g, grads, jneeds)
            if wait_acc is not None:  # the block's gradient so far, from the previous rank
                wait_acc()
            if share is not None:
                acc += share
            if jneeds and ring.size > 1:
                # The block's gradient, now with this rank's share, follows the block; the last
                # shift (after step size - 1) takes it home to its owner. Its receipt is waited
                # for only when the next share is added, so the next block's work overlaps it.
                shape = (sizes[ring.owner(step + 1)], own.shape[1])
                acc, wait_acc = ring.shift(acc, shape, own, _TAG_GRAD)
            if wait is not None:
                wait()
                block = nxt
        if wait_acc is not None:
            wait_acc()
        for k, c in enumerate(cats):
            if c == _PM and grads[k] is not None:
                dist.all_reduce(grads[k], group=ring.group)
        if jneeds:
            ys = _unpack(acc, [a for a, c in zip(args, cats) if c == _VJ])
            ys = iter(ys)
            grads = [next(ys) if c == _VJ else gr for gr, c in zip(grads, cats)]
            grads = [gr if n else None for gr, n in zip(grads, needs)]
        return (None, None, None, None, *grads)


def _block_grads(ctx, args, block, out, g, grads, jneeds):
    """Adds one y block's share of the gradients to this rank's x and parameter gradients
    (`grads`); returns its share of the block's gradient (packed like the block), or None."""
    red, cats, needs = ctx.red, ctx.red._cats, ctx.needs_input_grad[4:]
    if block.shape[0] == 0 or out.shape[0] == 0:
        return None  # no pair (i, j) in this block: nothing to add
    with torch.enable_grad():
        ys = [y.detach().requires_grad_(jneeds)
              for y in _unpack(block, [a for a, c in zip(args, cats) if c == _VJ])]
        it = iter(ys)
        inputs = [next(it) if c == _VJ else a.detach().requires_grad_(bool(n))
                  for a, c, n in zip(args, cats, needs)]
        part = red._local(*inputs, backend=ctx.backend)
        if red.reduction_op == "LogSumExp":
            # The block's weight in the global logsumexp; 0 where both are -inf (no j at all).
            w = torch.exp(part.detach() - out)
            w = g * torch.where(torch.isneginf(out), torch.zeros_like(w), w)
        else:
            w = g
        want = [k for k, a in enumerate(inputs) if a.requires_grad]
        got = torch.autograd.grad(part, [inputs[k] for k in want], grad_outputs=w,
                                  allow_unused=True)
    yg = []
    for k, gk in zip(want, got):
        if cats[k] == _VJ:
            yg.append(torch.zeros_like(inputs[k]) if gk is None else gk)
        elif gk is not None:
            grads[k] += gk
    return _pack(yg) if jneeds else None


def _merge(op, out, part):
    """The running result merged with one block's: a sum, or the log of a sum of exponentials
    (logaddexp is -inf when both are, as for an empty block or shard)."""
    return out + part if op == "Sum" else torch.logaddexp(out, part)


def _pack(ys):
    """The j-variables side by side in one contiguous (n, sum of dims) tensor: one message."""
    return torch.cat([y.detach() for y in ys], dim=1).contiguous()


def _unpack(block, like):
    """The j-variables back from a packed block, shaped as `like`'s (their dims)."""
    dims = [y.shape[1] for y in like]
    return [p.contiguous() for p in torch.split(block, dims, dim=1)]


def _with_block(args, cats, block):
    """The call's arguments with the j-variables taken from `block`."""
    ys = iter(_unpack(block, [a for a, c in zip(args, cats) if c == _VJ]))
    return [next(ys) if c == _VJ else a for a, c in zip(args, cats)]
