"""tessel's reductions as the PyTorch custom operator tessel::genred, which torch.compile traces.

Dynamo cannot trace into the core (a C++ call). While torch.compile traces, tessel.torch.Genred
calls this operator instead of its autograd Function: the fake implementation gives the outputs'
shapes from the inputs' (the core's batch, row and dim rules) and the registered backward runs
the gradient reductions through the same operator, so forward and backward are one graph. The
operator names its reduction by a string key (operators take tensors, numbers and strings): the
Genred's arguments, from which the reduction is rebuilt where no Genred holds it; a gradient's
key is its reduction's key and the derivation. Block-sparse ranges
and a per-call backend are not passed to the operator: such a call runs the autograd Function,
which Dynamo cannot trace, so the graph breaks around it (same results). torch.func transforms
and double backward through a compiled graph are not supported by the operator (torch.compile's
own limits); outside torch.compile the autograd Function supports both.
"""
import atexit
import json
import sys
import weakref

import torch

from ._genred import GenredSpec, grad_of
from ._lru import LruCache
from . import _core
from ._torch_autograd import CUDA_IO, run

AVAILABLE = hasattr(torch, "library") and hasattr(torch.library, "custom_op")

_entries = weakref.WeakValueDictionary()
_rebuilt = LruCache(256)  # entries rebuilt from their key, which no Genred holds


@atexit.register
def _drop_reductions():
    # Compiled graphs and autograd graphs alive at exit are never freed (see _torch_autograd);
    # the core objects their entries hold are dropped here so that none outlives the module.
    _rebuilt.clear()
    for e in list(_entries.values()):
        e.bound, e.grads = None, {}
    # Dynamo's compiled frames keep what their guards read (a Genred, its reduction) until reset.
    dynamo = sys.modules.get("torch._dynamo")
    if dynamo is not None:
        dynamo.reset()


class OpEntry:
    """A bound reduction (its settings with it) and what the fake implementation reads off it."""

    __slots__ = ("key", "bound", "grads", "_shape_facts", "__weakref__")

    def __init__(self, key, bound):
        self.key, self.bound = key, bound
        self.grads = {}  # variable -> OpEntry of the gradient reduction, kept alive with this
        self._shape_facts = None

    def grad(self, k):
        """The entry of the gradient for variable k, keyed by this key and the derivation, so
        that a graph loaded from torch's compile caches (whose backward was traced by another
        process) finds it from its key alone."""
        e = self.grads.get(k)
        if e is None:
            e = self.grads[k] = OpEntry(f"{self.key}|g{k}",
                                        self.bound.derive(grad_of(self.bound.reduction, k)))
        return e

    def shape_facts(self):
        """(category by input, the outer rows' category, output dims, index outputs, summed)."""
        if self._shape_facts is None:
            r = self.bound.reduction
            self._shape_facts = ({i: c for i, c, _ in r.inputs()}, 0 if r.axis == 1 else 1,
                                 [r.output_dim(k) for k in range(r.num_outputs)],
                                 [r.output_is_index(k) for k in range(r.num_outputs)], r.full_sum)
        return self._shape_facts


def register(spec, bound):
    """The entry of a GenredSpec, or None when its arguments do not serialise (then the call runs
    eagerly under torch.compile). The key is the spec's arguments as JSON: it names the reduction
    and its options on its own, so an entry that was freed, or never made in this process (a
    graph from torch's on-disk compile cache), is rebuilt from its key."""
    try:
        key = json.dumps(spec.args, sort_keys=True)
    except (TypeError, ValueError):
        return None
    e = _entries.get(key)
    if e is None:
        e = _entries[key] = OpEntry(key, bound)
    return e


def _lookup(key):
    base, *derivation = key.split("|")
    e = _entries.get(base)
    if e is None:
        try:
            spec = GenredSpec(**json.loads(base))
        except (TypeError, ValueError) as err:
            raise RuntimeError(f"tessel::genred: {base!r} does not name a reduction: "
                               f"{err}") from None
        e = _entries[base] = OpEntry(base, _core.Bound(spec.reduction, spec.settings, "Genred",
                                                       "torch", *CUDA_IO))
        _rebuilt.get_or_make(base, lambda: e)
    for step in derivation:
        e = e.grad(int(step[1:]))
    return e


if AVAILABLE:

    @torch.library.custom_op("tessel::genred", mutates_args=())
    def genred(key: str, args: list[torch.Tensor], ni: int, nj: int) -> list[torch.Tensor]:
        e = _lookup(key)
        return run(e.bound, (ni, nj, None, None), args)

    @genred.register_fake
    def _genred_fake(key, args, ni, nj):
        cats, outer, dims, is_index, summed = _lookup(key).shape_facts()
        batch = torch.broadcast_shapes(*(args[i].shape[:-1 if c == 2 else -2]
                                         for i, c in cats.items()))
        rows = ()
        if not summed:
            n = next((args[i].shape[-2] for i, c in cats.items() if c == outer), None)
            if n is None:
                n = ni if outer == 0 else nj
                if n < 0:
                    raise ValueError(f"tessel::genred: the number of {'ij'[outer]} rows is "
                                     "unknown (no such variable, no ni / nj)")
            rows = (n,)
        return [args[0].new_empty((*batch, *rows, d), dtype=torch.int64 if idx else None)
                for d, idx in zip(dims, is_index)]

    def _setup_context(ctx, inputs, output):
        key, args, ni, nj = inputs
        ctx.entry, ctx.ni, ctx.nj = _lookup(key), ni, nj
        ctx.save_for_backward(*args)

    def _backward(ctx, grads):
        e, args = ctx.entry, ctx.saved_tensors
        g = grads[0]
        cats = e.shape_facts()[0]
        out = []
        for k, a in enumerate(args):
            if k not in cats or g is None:
                out.append(torch.zeros_like(a))
                continue
            dk = genred(e.grad(k).key, [*args, g], ctx.ni, ctx.nj)[0]
            out.append(dk.reshape(a.shape) if dk.numel() == a.numel() else dk.sum_to_size(a.shape))
        return None, out, None, None

    genred.register_autograd(_backward, setup_context=_setup_context)
