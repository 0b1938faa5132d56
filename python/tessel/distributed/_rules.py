"""How each reduction's partial results over blocks of the reduced index merge, and what each
block's share of the gradient is: the rules behind tessel.distributed's ring.

A rule names the plain reductions a rank runs on one block (`ops`), turns their outputs into a
block's state (values, global indices, which block won), merges states in any order, and gives
the final outputs. In backward it gives each op's cotangent for the block (computed from the
block's recomputed outputs where `needs_outputs`, else from the merged state alone, so that a
Sum's or a Min's backward evaluates no forward), whose gradients add up to the gradient of the
merged result. The merges follow the core's reduction table:
Min / Max let NaN win and break ties by the lowest global index; KMin sorts NaN last.
"""
import torch

__all__ = ["rule_for"]

_EXTREME = {"Min": ("Min_ArgMin", "v"), "ArgMin": ("Min_ArgMin", "i"),
            "Min_ArgMin": ("Min_ArgMin", "vi"), "Max": ("Max_ArgMax", "v"),
            "ArgMax": ("Max_ArgMax", "i"), "Max_ArgMax": ("Max_ArgMax", "vi")}
_KSELECT = {"KMin": "v", "ArgKMin": "i", "KMin_ArgKMin": "vi"}


def rule_for(name, weighted, k, dim=1):
    """The merge rule of reduction `name` (tessel's spelling), with a weight formula or not, of a
    formula of dim `dim`."""
    if name == "Sum":
        return _Add()
    if name == "LogSumExp" and not weighted:
        return _LogAdd()
    if name in ("LogSumExp", "SumSoftMaxWeight"):
        return _SoftMax(log=name == "LogSumExp")
    if name in _EXTREME:
        return _Extreme(*_EXTREME[name], largest=name.startswith(("Max", "ArgMax")))
    if name in _KSELECT:
        return _KSelect(_KSELECT[name], k, dim)
    return None


def _globalize(idx, offset):
    """Block indices made global; -1 (no index: every value was the reduction's identity)
    stays -1."""
    return torch.where(idx >= 0, idx + offset, idx)


class _Add:
    """Sum: partial sums add; every block's output gets the result's gradient as is."""
    ops = (("Sum", False),)
    outputs = "v"
    needs_outputs = False  # the block's values do not enter its weights

    def block(self, outs, offset, owner):
        return (outs[0],)

    def merge(self, a, b):
        return (a[0] + b[0],)

    def final(self, state):
        return state[0]


    def weights(self, state, outs, g, owner, width):
        return [(0, g[0])]


class _LogAdd(_Add):
    """LogSumExp: logs of partial sums merge by logaddexp (-inf, an empty sum, stays -inf)."""
    ops = (("LogSumExp", False),)
    needs_outputs = True

    def merge(self, a, b):
        return (torch.logaddexp(a[0], b[0]),)

    def weights(self, state, outs, g, owner, width):
        # The block's share of the sum, exp(its log - the total's); 0 where the total is empty.
        w = torch.exp(outs[0] - state[0])
        w = torch.where(torch.isneginf(state[0]), torch.zeros_like(w), w)
        return [(0, g[0] * w)]


class _SoftMax:
    """SumSoftMaxWeight (S = sum exp(F) w / sum exp(F)) and weighted LogSumExp (L + log S): a
    block's state is (L, S) with L its log sum exp(F); the merged S is the L-weighted mean of
    the blocks' S. Kept apart, a signed weighted sum never goes through the log of a negative
    partial sum (which would be NaN where the whole sum has a value)."""
    ops = (("LogSumExp", False), ("SumSoftMaxWeight", True))
    outputs = "v"
    needs_outputs = True

    def __init__(self, log):
        self.log = log

    def block(self, outs, offset, owner):
        return (outs[0], outs[1])

    def merge(self, a, b):
        lse = torch.logaddexp(a[0], b[0])
        wa, wb = _shares(a[0], lse), _shares(b[0], lse)
        return (lse, wa * a[1] + wb * b[1])

    def final(self, state):
        return state[0] + torch.log(state[1]) if self.log else state[1]


    def weights(self, state, outs, g, owner, width):
        lse, s = state
        g = g[0]
        if self.log:  # result = L + log S: d/dL = sum over components, d/dS = g / S
            # Where S <= 0 the result is NaN, and so is its gradient, as in one process.
            g_s = torch.where(s > 0, g / s, torch.full_like(s, float("nan")))
            g_l = g.sum(-1, keepdim=True) + 0 * g_s.sum(-1, keepdim=True)
        else:
            g_l, g_s = torch.zeros_like(lse), g
        c = _shares(outs[0], lse)
        # dS/dL_b = c_b (S_b - S) and dL/dL_b = c_b; dS/dS_b = c_b.
        g_lb = c * (g_l + (g_s * (outs[1] - s)).sum(-1, keepdim=True))
        return [(0, g_lb), (1, c * g_s)]


def _shares(lse_b, lse):
    """exp(lse_b - lse): a block's share of the whole sum; 0 for an empty block or total."""
    w = torch.exp(lse_b - lse)
    return torch.where(torch.isneginf(lse_b), torch.zeros_like(w), w)


class _Selection:
    """A state (values, global indices, owning block, ...): the outputs are its first two."""
    outputs = None
    needs_outputs = False

    def final(self, state):
        if self.outputs == "v":
            return state[0]
        if self.outputs == "i":
            return state[1]
        return state[0], state[1]


class _Extreme(_Selection):
    """Min / Max and their arguments, per component: the winner of two states is the NaN (NaN
    wins), else the smaller (larger) value, else the lower global index. Only the block that
    holds a component's winner passes that component's gradient back."""

    def __init__(self, op, outputs, largest):
        self.ops, self.outputs, self.largest = ((op, False),), outputs, largest

    def block(self, outs, offset, owner):
        v, i = outs
        return (v, _globalize(i, offset), torch.full_like(i, owner))

    def merge(self, a, b):
        (va, ia, oa), (vb, ib, ob) = a, b
        na, nb = torch.isnan(va), torch.isnan(vb)
        beats = vb > va if self.largest else vb < va
        tie = (vb == va) | (na & nb)
        take = (nb & ~na) | (~nb & ~na & beats) | (tie & (ib < ia))
        return tuple(torch.where(take, q, p) for p, q in zip(a, b))

    def weights(self, state, outs, g, owner, width):
        if g[0] is None:
            return []
        return [(0, torch.where(state[2] == owner, g[0], torch.zeros_like(g[0])))]


class _KSelect(_Selection):
    """KMin and ArgKMin, per component of a formula of dim D: the K best of two states are the
    first K of their union sorted by (value with NaN last, global index). A block smaller than K
    runs with K = its size; each selected entry remembers its block and its column there (the
    core's column k * D + c), for the gradient."""

    def __init__(self, outputs, k, dim):
        self.ops, self.outputs, self.k, self.dim = (("KMin_ArgKMin", False),), outputs, k, dim

    def block(self, outs, offset, owner):
        v, i = outs
        slot = torch.arange(v.shape[1], device=v.device).expand(v.shape[0], -1)
        return (v, _globalize(i, offset), torch.full_like(i, owner), slot)

    def merge(self, a, b):
        # (N, K' * D) states as (N, K', D): each component sorted along dim 1 on its own.
        both = [torch.cat([p.unflatten(1, (-1, self.dim)), q.unflatten(1, (-1, self.dim))], dim=1)
                for p, q in zip(a, b)]
        # Two stable sorts: by index, then by value (torch sorts NaN after +inf).
        order = torch.sort(both[1], dim=1, stable=True).indices
        both = [t.gather(1, order) for t in both]
        order = torch.sort(both[0], dim=1, stable=True).indices[:, : self.k]
        return tuple(t.gather(1, order).flatten(1) for t in both)

    def weights(self, state, outs, g, owner, width):
        if g[0] is None:
            return []
        mine = state[2] == owner
        w = g[0].new_zeros(g[0].shape[0], width * self.dim)  # the block's K best per component
        w.scatter_add_(1, torch.where(mine, state[3], torch.zeros_like(state[3])),
                       torch.where(mine, g[0], torch.zeros_like(g[0])))
        return [(0, w)]

