"""Kernel reductions sharded over torch.distributed: each rank holds some rows of x and of y.

`Genred` takes tessel.torch.Genred's arguments and is called on every rank of a process group
with that rank's rows: i-variables (Vi) hold its rows of x, j-variables (Vj) its rows of y
(shards may be uneven, or empty), parameters (Pm) are the same on every rank. It returns the
rank's rows of the reduction over all ranks' rows of the reduced index (j for axis=1, i for
axis=0), with autograd.

The blocks of the reduced index travel around a ring of the ranks (isend / irecv to the
neighbours): at each of world_size steps a rank reduces its own rows against the block it holds,
with plain tessel.torch reductions, merges that partial result into its running one by the
reduction's rule (_rules.py), and passes the block on. The send of the next block starts before
the current one is reduced, so communication overlaps computation. Nothing of an N x M matrix,
and no other rank's whole shard, is held.

Every reduction is sharded (Sum, LogSumExp with or without a weight, SumSoftMaxWeight, Min / Max
/ ArgMin / ArgMax and their pairs, KMin / ArgKMin / KMin_ArgKMin); batch dimensions and double
backward are not (NotImplementedError).
"""
import itertools

import torch
import torch.distributed as dist

from .. import torch as _tt
from .._docstrings import ONE_RANK_GROUP, SHARDED_PARAMETERS, fill
from .._genred import reduction_name
from ._ring import TAG_BLOCK as _TAG_BLOCK, TAG_GRAD as _TAG_GRAD, Ring, check_group, exchange
from ._rules import rule_for

__all__ = ["Genred"]

_WHO = "tessel.distributed.Genred"
_VI, _VJ, _PM = 0, 1, 2
_CATEGORY = {_VI: "Vi", _VJ: "Vj", _PM: "Pm"}


@fill(one_rank_group=ONE_RANK_GROUP,
      sharded_parameters=SHARDED_PARAMETERS.format(twin="Genred"))
class Genred:
    """A kernel reduction over rows spread across the ranks of a process group.

    The reduction ``out_i = Reduction_j F(x_i, y_j, p)`` of tessel.torch.Genred, with the rows of
    x (the outer index i) and of y (the reduced index j) sharded over the processes of a
    torch.distributed group, so that clouds too large for one GPU's memory, or one machine's
    time, are reduced by several. Each rank calls the object, collectively, with its own rows:
    i-variables (``Vi``) hold its rows of x, j-variables (``Vj``) its rows of y (shards may be
    uneven, or empty), parameters (``Pm``) the same values on every rank. It returns the rank's
    rows of the result over every rank's rows of the reduced index: its i rows for ``axis=1``,
    its j rows for ``axis=0``. The blocks of the reduced index travel around a ring of the
    ranks while each rank reduces the block at hand, so no rank holds another's whole shard, and
    no N x M matrix is stored. Indices (ArgMin, ArgKMin, ...) are global: a row's position in the
    concatenation of the ranks' shards in rank order.

    Gradients: each rank backpropagates its own loss L_r through its own result (every rank must,
    backward being collective too: pass zeros where L_r does not use it), and receives the
    gradient of the total ``L = sum_r L_r``: for its own rows (x for ``axis=1``) dL/dx_r; for its
    rows of the reduced index (y) dL/dy_r, summed over every rank's use of them; for parameters
    the full dL/dp on every rank (summed, not averaged over the ranks as DistributedDataParallel
    averages, and only through this reduction: another use of a parameter in L_r stays local).

    Parameters
    ----------
    formula : str
        The KeOps formula, such as ``"Exp(-SqDist(X, Y)) * B"``, as for tessel.torch.Genred.
    aliases : list of str
        One declaration per argument, in call order: ``"X = Vi(3)"``, ``"Y = Vj(3)"``,
        ``"P = Pm(1)"``.
    reduction_op : str, default "Sum"
        Any reduction over i or j: Sum, LogSumExp (with or without a weight), SumSoftMaxWeight,
        Min, Max, ArgMin, ArgMax, Min_ArgMin, Max_ArgMax, KMin, ArgKMin, KMin_ArgKMin.
    axis : {0, 1}, default 1
        1 reduces over j (each rank gets its i rows), 0 over i (its j rows).
    dtype : str, optional
        As for tessel.torch.Genred (the arguments' dtype decides).
    opt_arg : int, optional
        K of the KMin, ArgKMin and KMin_ArgKMin reductions.
    formula2 : str, optional
        The weight formula of LogSumExp and SumSoftMaxWeight.
    {sharded_parameters}

    Raises
    ------
    ValueError
        If ``axis`` is not 0 or 1, or the formula, aliases or options are invalid (as for
        tessel.torch.Genred); when called, if this rank's variables of one index have different
        row counts, or a K-reduction has fewer than K rows over all ranks.
    TypeError
        When called with an argument that is not a torch tensor.
    NotImplementedError
        If ``reduction_op`` is not a reduction over i or j; when called with batch dimensions
        (an i- or j-variable that is not 2-D, a parameter that is not 1-D), a formula without a
        Vi or a Vj variable, or a double backward.
    RuntimeError
        When another rank of the group refused its call, skipped it, or died in it.

    See Also
    --------
    tessel.torch.Genred : The same reduction in one process.
    LazyTensor : The same reductions written as array expressions.

    Examples
    --------
    A one-rank gloo group, so that the example runs alone (under ``torchrun``, each process
    runs the same lines with its own rows and ``dist.init_process_group("gloo")``):

    {one_rank_group}
    >>> import tessel.torch
    >>> from tessel.distributed import Genred
    >>> x, y, b = torch.randn(100, 3), torch.randn(80, 3), torch.randn(80, 1)  # rank's rows
    >>> formula, aliases = "Exp(-SqDist(X, Y)) * B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)"]
    >>> a = Genred(formula, aliases, axis=1)(x, y, b)  # this rank's rows of sum_j K_ij b_j
    >>> a.shape
    torch.Size([100, 1])
    >>> one = tessel.torch.Genred(formula, aliases, axis=1)(x, y, b)  # one process
    >>> bool(torch.allclose(a, one))
    True
    >>> dist.destroy_process_group()
    """

    def __init__(self, formula, aliases, reduction_op="Sum", axis=1, dtype=None, opt_arg=None,
                 formula2=None, group=None, **options):
        name = reduction_name(reduction_op, _WHO)
        if axis not in (0, 1):
            raise ValueError(f"{_WHO}: axis must be 0 (reduce over i) or 1 (reduce over j), got "
                             f"{axis!r}")
        # The reduction as one process would build it: it checks the formula, the aliases, K and
        # the weight, and is what the ranks' calls are compared by.
        whole = _tt.Genred(formula, aliases, name, axis, dtype, opt_arg, formula2, **options)
        self._rule = rule_for(name, formula2 is not None, opt_arg,
                              whole._spec.reduction.formula.dim)
        if self._rule is None:
            raise NotImplementedError(f"{_WHO}: reduction_op={name!r} is not sharded (it is "
                                      "indexed, not a reduction over i or j)")
        self.reduction_op, self.axis, self._k = name, axis, opt_arg
        self.group = check_group(_WHO, group)
        self._make = (formula, aliases, axis, dtype, formula2, options)
        self._locals = {}
        spec = whole._spec
        self._spec = spec
        self._cats = [spec.slots[i][0] for i in range(spec.n_inputs)]
        self._home, self._away = (_VI, _VJ) if axis == 1 else (_VJ, _VI)
        # What every rank must agree on, besides its arguments: formula, aliases, options.
        self._text = repr(sorted(spec.args.items(), key=lambda kv: kv[0]))

    def __call__(self, *args, backend=None):
        """Reduce, collectively with every rank of the group, this rank's rows `args` (one
        tensor per alias); returns this rank's rows of the result (a tuple for Min_ArgMin, ...).
        `backend` (as tessel.torch.Genred's call takes it; None: its default) may differ per
        call."""
        ring = Ring.of(self.group, _WHO)
        ni, nj = exchange(self, ring, args, _WHO)
        sizes = nj if self.axis == 1 else ni
        if self._k is not None and sum(sizes) < self._k:
            raise ValueError(f"{_WHO}: {self.reduction_op} with K = {self._k} needs at least K "
                             f"rows of {'ji'[self.axis == 0]} over all ranks, got {sum(sizes)} "
                             f"({' + '.join(map(str, sizes))})")
        return _RingFunction.apply(self, ring, sizes, backend, *args)

    def _local(self, op, weighted, k):
        """The plain reduction that one rank runs on one block (built once per op and K)."""
        key = (op, weighted, k)
        if key not in self._locals:
            formula, aliases, axis, dtype, formula2, options = self._make
            self._locals[key] = _tt.Genred(formula, aliases, op, axis, dtype, k,
                                           formula2 if weighted else None, **options)
        return self._locals[key]

    def _block(self, args, block, rows, backend):
        """The outputs of the rule's plain reductions of one block of `rows` rows."""
        k = None if self._k is None else min(self._k, rows)
        outs = []
        for op, weighted in self._rule.ops:
            o = self._local(op, weighted, k)(*_with_block(args, self, block), backend=backend)
            outs.extend(o if isinstance(o, tuple) else (o,))
        return outs

    def _descriptor(self, args):
        """What this rank's call must share with the others', and its (ni, nj): raises on a local
        error (wrong count, types, shapes)."""
        if len(args) != len(self._cats):
            self._spec.check_count(args, _WHO)
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
    """The ring forward and, in backward, the same ring again, each travelling block carrying
    its gradient: after a full cycle the gradient has every rank's contribution and is home.

    A ring rather than a reduce-scatter of the travelling rows' gradient: with one, every rank
    would hold a gradient buffer as large as the whole index (every block's share at once), and
    gloo has no reduce_scatter; in the ring a rank holds one block and its gradient at a time,
    and each gradient message overlaps the next block's work."""

    @staticmethod
    def forward(ctx, red, ring, sizes, backend, *args):
        rule, own = red._rule, _pack(_away(args, red))
        starts = [0, *itertools.accumulate(sizes)]
        block, state = own, None
        for step in range(ring.size):
            nxt, wait = None, None
            if step + 1 < ring.size:  # the next block is on its way while this one is reduced
                nxt, wait = ring.shift(block, (sizes[ring.owner(step + 1)], own.shape[1]), own,
                                       _TAG_BLOCK)
            owner = ring.owner(step)
            if sizes[owner]:  # an empty block adds nothing (and some reductions refuse one)
                part = rule.block(red._block(args, block, sizes[owner], backend), starts[owner],
                                  owner)
                state = part if state is None else rule.merge(state, part)
            if wait is not None:
                wait()
                block = nxt
        if state is None:  # no rows to reduce on any rank: what one process gives for none
            state = rule.block(red._block(args, own, 0, backend), 0, ring.rank)
        out = rule.final(state)
        outs = out if isinstance(out, tuple) else (out,)
        ctx.mark_non_differentiable(*[o for o in outs if not o.is_floating_point()])
        ctx.red, ctx.ring, ctx.sizes, ctx.backend = red, ring, sizes, backend
        ctx.n_state = len(state)
        ctx.save_for_backward(*state, *args)
        return out

    @staticmethod
    def backward(ctx, *gs):
        if torch.is_grad_enabled():
            raise NotImplementedError(f"{_WHO}: double backward (create_graph=True) is not "
                                      "sharded yet")
        red, ring, sizes = ctx.red, ctx.ring, ctx.sizes
        saved = ctx.saved_tensors
        state, args = saved[: ctx.n_state], list(saved[ctx.n_state:])
        g = gs[0] if red._rule.outputs != "i" else None  # an index has no gradient
        cats, needs = red._cats, ctx.needs_input_grad[4:]
        grads = [torch.zeros_like(a) if n and c != red._away else None
                 for a, c, n in zip(args, cats, needs)]
        jneeds = any(n for n, c in zip(needs, cats) if c == red._away)
        own = _pack(_away(args, red))
        block, acc = own, torch.zeros_like(own) if jneeds else None
        wait_acc = None
        for step in range(ring.size):
            nxt, wait = None, None
            if step + 1 < ring.size:
                nxt, wait = ring.shift(block, (sizes[ring.owner(step + 1)], own.shape[1]), own,
                                       _TAG_BLOCK)
            share = _block_grads(ctx, args, block, state, g, grads, jneeds, ring.owner(step))
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
            ys = iter(_unpack(acc, _away(args, red)))
            grads = [next(ys) if c == red._away else gr for gr, c in zip(grads, cats)]
            grads = [gr if n else None for gr, n in zip(grads, needs)]
        return (None, None, None, None, *grads)


def _block_grads(ctx, args, block, state, g, grads, jneeds, owner):
    """Adds one block's share of the gradients to this rank's own-row and parameter gradients
    (`grads`); returns its share of the block's gradient (packed like the block), or None. The
    gradient reductions run on their own (tessel.torch.Genred._vjp): no block's forward is
    evaluated but where the rule weighs the block by its values (LogSumExp, SumSoftMaxWeight)."""
    red, needs = ctx.red, list(ctx.needs_input_grad[4:])
    cats, rows, rule = red._cats, ctx.sizes[owner], red._rule
    home = next(a for a, c in zip(args, cats) if c == red._home)
    if g is None or rows == 0 or home.shape[0] == 0:
        return None  # no pair (i, j) in this block, or nothing to differentiate
    inputs = _with_block([a.detach() for a in args], red, block)
    width = None if red._k is None else min(red._k, rows)
    outs = red._block(inputs, None, rows, ctx.backend) if rule.needs_outputs else None
    total = [None] * len(args)
    for op, w in rule.weights(state, outs, [g], owner, width):
        local = red._local(*rule.ops[op], width)
        got = local._vjp(inputs, w, needs, backend=ctx.backend)
        total = [b if a is None else a if b is None else a + b for a, b in zip(total, got)]
    for k, c in enumerate(cats):
        if c != red._away and total[k] is not None:
            grads[k] += total[k]
    if not jneeds:
        return None
    return _pack([total[k] if total[k] is not None else torch.zeros_like(inputs[k])
                  for k, c in enumerate(cats) if c == red._away])


def _away(args, red):
    """The call's variables of the reduced index: those that travel."""
    return [a for a, c in zip(args, red._cats) if c == red._away]


def _pack(ys):
    """The travelling variables side by side in one contiguous (n, sum of dims) tensor: one
    message per block."""
    return torch.cat([y.detach() for y in ys], dim=1).contiguous()


def _unpack(block, like):
    """The travelling variables back from a packed block, shaped as `like`'s (their dims)."""
    dims = [y.shape[1] for y in like]
    return [p.contiguous() for p in torch.split(block, dims, dim=1)]


def _with_block(args, red, block):
    """The call's arguments with the travelling variables taken from `block` (or as they are,
    when `block` is None: they already hold it)."""
    if block is None:
        return args
    ys = iter(_unpack(block, _away(args, red)))
    return [next(ys) if c == red._away else a for a, c in zip(args, red._cats)]
