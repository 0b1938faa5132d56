"""Finds the tensors requiring grad that a user function reads besides its arguments (closure
variables, module parameters, tensors computed from them), so that the tools which run it without
a graph and recompute it in backward can give those tensors gradients.

How. `Captured.run` evaluates the function once with grad enabled and looks at two things:

* the torch calls it makes (a TorchFunctionMode): a non-leaf tensor requiring grad that enters a
  call without having come out of an earlier call of this evaluation was computed outside, before
  the function ran (`W = P * 2` before the loop). It is kept as a tensor of its own, so the outer
  backward routes its gradient through W's own graph to P, and `autograd.grad(loss, W)` works.
* the autograd graph of its results: walking `grad_fn.next_functions` from them, every leaf
  requiring grad (`AccumulateGrad.variable`: an nn.Parameter, a captured leaf) is found, whatever
  the path that brought it in; the walk stops at the non-leaf tensors of the first kind.

The graph is the ground truth, the calls only name the outside non-leaf tensors: a non-leaf tensor
the mode did not see (PyTorch 1.13 does not route `x[0]` through modes, for one) is walked through
to the leaves behind it, which then receive their gradient by differentiating through its graph
(the tools keep that graph with retain_graph=True). Telling an outside tensor from one made inside
the evaluation uses autograd's sequence numbers where PyTorch has them (2.x); PyTorch 1.13 has
none, so there a captured non-leaf view (`X[0]`, `X.t()`) is either an outside view or one the
function took by an indexing the mode missed. In both cases the walk stops at its base X (views
share the base they were taken from) when X is a non-leaf made outside, so that X and what it was
made from get the function's share through X's own graph; walking on to X's leaves would hand
them that share directly, and X (points a user moved to the GPU, a network's output) would
silently miss it. The view itself, and a custom autograd Function's output or an indexing copy
(`W[[1, 0]]`, a Genred of W), whose inputs cannot be named, count as made inside and are walked
through to the leaves: the leaves get their gradients, but the hooks of such a tensor, and of a
non-leaf W it was made from, do not see the function's share, and `autograd.grad` with respect
to them does not include it (on PyTorch 1.13 only).

`Captured.check` walks a recomputation's graph (in backward) and raises if it reaches a tensor
requiring grad that is not among those found: such a tensor would silently get no gradient.
"""
import torch
from torch.overrides import TorchFunctionMode

__all__ = ["Captured", "grad_once"]


def _flat(obj, out):
    """The tensors in obj (nested tuples, lists, dicts), appended to out."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (tuple, list)):
        for o in obj:
            _flat(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _flat(o, out)
    return out


class _Reads(TorchFunctionMode):
    """Records the non-leaf tensors requiring grad that enter a torch call without coming out of
    an earlier call of the same evaluation, and the leaves requiring grad that calls create."""

    def __init__(self):
        super().__init__()
        # ids of every result, requiring grad or not (a custom autograd Function's forward makes
        # its outputs before they require grad); alive or not, they are not outside tensors.
        self.made = set()
        self.outside = {}  # id -> tensor

    def _note_args(self, args):
        for a in args:
            if isinstance(a, torch.Tensor):
                if a.requires_grad and a.grad_fn is not None and id(a) not in self.made:
                    self.outside.setdefault(id(a), a)
            elif isinstance(a, (tuple, list)):
                self._note_args(a)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self._note_args(args)
        if kwargs:
            self._note_args(kwargs.values())
        out = func(*args, **kwargs)
        # A call may hand back one of its arguments (a no-op `x.to(x.dtype)`, `x.contiguous()`):
        # that tensor was not made here, and taking it for one would drop its gradient.
        given = {id(t) for t in _flat(list(args) + list(kwargs.values()), [])}
        for t in _flat(out, []) if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and id(t) not in given:
                self.made.add(id(t))
        return out


def _next_sequence_nr():
    """The sequence number the next autograd node of this thread gets, or None (PyTorch 1.13)."""
    with torch.enable_grad():
        node = torch.zeros((), requires_grad=True).view(()).grad_fn
    seq = getattr(node, "_sequence_nr", None)
    return None if seq is None else seq() + 1


def _made_before(t, mark):
    """Whether the non-leaf tensor t existed before the evaluation that started at `mark`."""
    if mark is not None:
        seq = getattr(t.grad_fn, "_sequence_nr", None)
        if seq is not None:
            return seq() < mark
    # No sequence numbers: the results the mode misses are indexing's (views, or copies by
    # advanced indexing) and those of custom autograd Functions that return (views of) their
    # inputs; walking through such a tensor is correct whether it is old or new.
    node = t.grad_fn
    return not (t._is_view() or type(node).__name__.startswith("IndexBackward")
                or hasattr(node, "_forward_cls"))


def _stop_at(t, mark, made):
    """The outside tensor a walk reaching t (a non-leaf the function read and did not visibly
    make) must stop at: t when it was made before the evaluation, else the base of the view t
    when that base was, else None (walk through t)."""
    if _made_before(t, mark):
        return t
    base = t._base if t._is_view() else None
    if base is None or not base.requires_grad or base.grad_fn is None or id(base) in made:
        return None
    return base if _made_before(base, mark) else None


def _describe(t):
    kind = "an nn.Parameter" if isinstance(t, torch.nn.Parameter) else "a tensor"
    return f"{kind} of shape {tuple(t.shape)}, {t.dtype}"


class Captured:
    """The tensors requiring grad a function reads besides its arguments, gathered over any number
    of its evaluations. `tensors` lists the explicit ones first (in their order), then the found
    ones in the order found. The tools pass them to their autograd Function as inputs and ask
    autograd.grad for their gradients in every recomputation."""

    def __init__(self, who, explicit=()):
        self.who = who
        self.tensors = []
        self._ids = set()
        self._stops = {}  # (id(grad_fn), output_nr) -> (tensor, grad_fn): walks stop there
        for t in explicit:
            if t.requires_grad:
                self._add(t)

    def _add(self, t):
        if id(t) in self._ids:
            return
        self._ids.add(id(t))
        self.tensors.append(t)
        if t.grad_fn is not None:
            self._stops[(id(t.grad_fn), t.output_nr)] = (t, t.grad_fn)

    def run(self, fn, *args, inputs=()):
        """fn(*args) with grad enabled, adding what its result depends on besides `inputs` (the
        caller's fresh leaves standing for the state). Returns the result, graph included."""
        mark = _next_sequence_nr()
        reads = _Reads()
        with torch.enable_grad(), reads:
            out = fn(*args)
        pending = {}
        for t in reads.outside.values():
            t = _stop_at(t, mark, reads.made)
            if t is not None and id(t) not in self._ids:
                pending[(id(t.grad_fn), t.output_nr)] = (t, t.grad_fn)
        self._walk(_flat(out, []), inputs, pending, reads.made)
        return out

    def check(self, out, inputs=()):
        """Raises if the graph of `out` (a recomputation) reaches a tensor requiring grad that is
        neither one of `inputs` nor among the found tensors."""
        self._walk(_flat(out, []), inputs, None, None)

    def _walk(self, outs, inputs, pending, made):
        skip = {id(t) for t in inputs}
        # A non-leaf input (a state computed by the caller) ends the walk like a found tensor.
        hold = [t.grad_fn for t in inputs if t.grad_fn is not None]
        ends = {(id(t.grad_fn), t.output_nr) for t in inputs if t.grad_fn is not None}
        stack, seen = [], set()
        for o in outs:
            if not o.requires_grad:
                continue
            if o.grad_fn is None:
                self._leaf(o, skip, made)
            else:
                stack.append((o.grad_fn, o.output_nr))
        while stack:
            node, nr = stack.pop()
            key = (id(node), nr)
            if key in self._stops or key in ends:
                continue
            if pending is not None and key in pending:
                self._add(pending.pop(key)[0])
                continue
            if id(node) in seen:
                continue
            seen.add(id(node))
            hold.append(node)  # keeps the ids in `seen` from being reused during the walk
            variable = getattr(node, "variable", None)
            if variable is not None:  # AccumulateGrad: a leaf requiring grad
                self._leaf(variable, skip, made)
                continue
            for nxt, n in node.next_functions:
                if nxt is not None:
                    stack.append((nxt, n))

    def _leaf(self, t, skip, made):
        if id(t) in skip or id(t) in self._ids:
            return
        if made is None:
            raise RuntimeError(
                f"{self.who}: a recomputation of the function read {_describe(t)} requiring "
                "grad that the forward pass never reached, so it would get no gradient; the "
                "function must read the same tensors on every evaluation (no randomness, no "
                "state that changes between forward and backward, no leaf created inside it "
                "with requires_grad=True)")
        if id(t) not in made:  # a leaf created by the function itself has no outside gradient
            self._add(t)



def grad_once(outputs, inputs, grad_outputs, create_graph=False):
    """torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True) for a Function's
    backward that returns the result for its inputs, which autograd then propagates further:

    * a non-leaf input W (a captured weight made before the call, a state computed by the caller)
      is where this gradient stops. autograd.grad would also carry W's share on into W's own
      history and add it to an input W was made from (P, when the function reads P too), and the
      caller's backward would add it a second time through W. A pre-hook on W's node zeroes
      what enters it through W during this call (captures are taken before node pre-hooks, so W
      still gets its own gradient).
    * a tensor standing in `inputs` twice (a state the function also captures) gets the gradient
      at its first occurrence and None at the others: autograd sums a Function's inputs.
    * the graph is retained: it may run through the graph of a tensor made outside, which the
      caller's backward may still have to traverse.
    * the inputs' own hooks do not run: this share reaches each input again through the caller's
      backward, where its hooks run once on the whole gradient, as in unrolled autograd.
      PyTorch 2.x runs a tensor's hooks (register_hook, retain_grad) on what autograd.grad
      captures for it (1.13 captured before them), so a hook returning 2 * g doubled this share
      twice and retain_grad counted it twice.
    """
    first, unique, cuts = {}, [], {}
    for t in inputs:
        if id(t) in first:
            continue
        first[id(t)] = len(unique)
        unique.append(t)
        if t.grad_fn is not None:
            cuts.setdefault(id(t.grad_fn), (t.grad_fn, set()))[1].add(t.output_nr)
    handles = [node.register_prehook(_zeroing(nrs)) for node, nrs in cuts.values()]
    quiet = _QuietHooks(unique)
    try:
        res = torch.autograd.grad(outputs, unique, grad_outputs, allow_unused=True,
                                  retain_graph=True, create_graph=create_graph)
    finally:
        quiet.restore()
        for h in handles:
            h.remove()
    out, given = [], set()
    for t in inputs:
        out.append(None if id(t) in given else res[first[id(t)]])
        given.add(id(t))
    return out


class _QuietHooks:
    """Holds back the Python hooks of `tensors` until restore(), and puts back the .grad of those
    that retain it. PyTorch keeps a reference to the very dict `register_hook` fills, so emptying
    it in place and refilling it (in its order) is what silences and restores them."""

    def __init__(self, tensors):
        self.hooks, self.grads = [], []
        for t in tensors:
            d = getattr(t, "_backward_hooks", None)
            if d:
                self.hooks.append((d, list(d.items())))
                d.clear()
            if t.grad_fn is not None and t.retains_grad:
                self.grads.append((t, t.grad))

    def restore(self):
        for d, items in self.hooks:
            added = list(d.items())  # registered meanwhile: they come after the older ones
            d.clear()
            d.update(items)
            d.update(added)
        for t, g in self.grads:
            t.grad = g


def _zeroing(nrs):
    def hook(grad_outputs):
        return tuple(torch.zeros_like(g) if k in nrs and g is not None else g
                     for k, g in enumerate(grad_outputs))
    return hook
