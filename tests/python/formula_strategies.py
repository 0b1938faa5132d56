"""Hypothesis strategies that draw random formulas from the core's op table, and their inputs.

Which argument dims an op accepts and what dim it gives are asked of the core itself (its dim rule,
through the parser on placeholder variables), so a new op is drawn without any change here unless it
has integer parameters: then INT_PARAMS (or, where the parameters constrain the argument dims, as
TensorDot's tuples do, SHAPED_PARAMS) must say how to draw them, and the test that checks the table
fails until it does.
"""
import functools

import numpy as np
from hypothesis import strategies as st

from tessel import _core

# How to draw an op's integer parameters, given its argument dims: the one piece of op knowledge
# the core's table cannot give (what the integers mean).
INT_PARAMS = {
    "Pow": lambda d: st.tuples(st.integers(-3, 4)),
    "Round": lambda d: st.tuples(st.integers(0, 2)),
    "ClampInt": lambda d: st.integers(-2, 1).flatmap(
        lambda lo: st.tuples(st.just(lo), st.integers(lo, 2))),
    "Elem": lambda d: st.tuples(st.integers(0, d[0] - 1)),
    "Extract": lambda d: st.integers(0, d[0] - 1).flatmap(
        lambda s: st.tuples(st.just(s), st.integers(1, d[0] - s))),
    "OneHot": lambda d: st.tuples(st.integers(1, 4)),
    "ComplexSumT": lambda d: st.tuples(st.sampled_from([2, 4, 6])),
    "ElemT": lambda d: st.integers(1, 4).flatmap(
        lambda n: st.tuples(st.just(n), st.integers(0, n - 1))),
    "ExtractT": lambda d: st.integers(0, 2).flatmap(
        lambda s: st.tuples(st.just(s), st.integers(s + d[0], s + d[0] + 2))),
    "SumT": lambda d: st.tuples(st.integers(1, 4)),
    "DiffClampInt": lambda d: st.integers(-2, 1).flatmap(
        lambda lo: st.tuples(st.just(lo), st.integers(lo, 2))),
}


def _prime_factors(d):
    f, p = [], 2
    while d > 1:
        while d % p == 0:
            f.append(p)
            d //= p
        p += 1
    return f


@st.composite
def _tensordot_params(draw, dim):
    """(arg dims, (dimfa, dimfb, contfa, contfb[, permute])) of a TensorDot whose result has dim
    `dim`, or None where that needs more than three kept axes. Kept axes are an ordered
    factorization of `dim` (size-1 axes too), split between the two tensors; up to two contracted
    axes are interleaved anywhere in each tensor and paired in any order; the permutation, when
    there is one, is any permutation of the kept axes."""
    axes = _prime_factors(dim)
    if len(axes) > 3:
        return None
    if len(axes) > 1 and draw(st.booleans()):  # merge two neighbours: 6 = (6,) as well as (2,3)
        k = draw(st.integers(0, len(axes) - 2))
        axes[k:k + 2] = [axes[k] * axes[k + 1]]
    if len(axes) < 3 and draw(st.booleans()):
        axes.insert(draw(st.integers(0, len(axes))), 1)
    axes = list(draw(st.permutations(axes)))
    n_a = draw(st.integers(0, len(axes)))
    keep_a, keep_b = axes[:n_a], axes[n_a:]
    cont = draw(st.lists(st.sampled_from([1, 2, 3]), max_size=2))
    if not keep_a and not cont:
        keep_a = [1]
    if not keep_b and not cont:
        keep_b = [1]

    def lay_out(keep):
        """A tensor's dims with the contracted axes placed, and where contracted axis c sits."""
        slots = draw(st.permutations(["k"] * len(keep) + ["c"] * len(cont)))
        order = iter(draw(st.permutations(range(len(cont)))))
        kept = iter(keep)
        dims, where = [], {}
        for s in slots:
            if s == "k":
                dims.append(next(kept))
            else:
                c = next(order)
                where[c] = len(dims)
                dims.append(cont[c])
        return tuple(dims), where

    dims_a, at_a = lay_out(keep_a)
    dims_b, at_b = lay_out(keep_b)
    pairs = draw(st.permutations(range(len(cont))))
    ip = (dims_a, dims_b, tuple(at_a[c] for c in pairs), tuple(at_b[c] for c in pairs))
    if draw(st.booleans()):
        ip += (tuple(draw(st.permutations(range(len(keep_a) + len(keep_b))))),)
    prod = lambda d: int(np.prod(d, dtype=np.int64))  # noqa: E731
    return (prod(dims_a), prod(dims_b)), ip


# Ops whose parameters constrain their argument dims (TensorDot's tuples): drawn with the arg
# dims, from the result's dim. The core must accept every combination drawn.
SHAPED_PARAMS = {"TensorDot": _tensordot_params}

# Ops not drawn, each with its reason. Narrow on purpose: everything else in the table is drawn.
NOT_DRAWN = {
    # pykeops 2.3 has no op of these names, so there is nothing to compare with.
    "Greater": "pykeops 2.3 has no Greater",
    "GreaterEq": "pykeops 2.3 has no GreaterEq",
    "ElemMin": "pykeops 2.3 has no ElemMin",
    "ElemMax": "pykeops 2.3 has no ElemMax",
    "DifferenceMatrix": "keopscore 2.3 has no DifferenceMatrix",
    "SoftDTW_SqDist_Grad": "tessel's derivative op, no pykeops name",
    "SoftDTW_SqDist_GradDir": "tessel's derivative op, no pykeops name",
    # compared in test_sequence_ops.py: pykeops 2.3 builds BSpline in float32 only, and its
    # SoftDTW_SqDist values exceed the hard DTW on this CPU
    "BSpline": "pykeops 2.3 builds no float64 BSpline kernel",
    "SoftDTW_SqDist": "pykeops 2.3's values disagree with soft-DTW's definition",
    # a composite of the table: it builds a TensorDot, which is drawn; test_keops_ops_linear.py
    # compares it with torch.kron
    "Kron": "builds a TensorDot (drawn)",
}



def _keops_spellings():
    """{op name: pykeops's name for it} where the two differ, read from the core's parser: a
    keopscore op name that the core's table does not list but parses as the table's op of a name
    keopscore lacks ({} without keopscore, which only the comparison with pykeops needs)."""
    try:
        from keopscore.formulas import maths
    except ImportError:
        return {}
    ours = {o[0]: o[1:3] for o in _core.op_table()}
    spellings = {}
    for theirs in set(maths.__all__) - set(ours):
        for name, (arity, n_ip) in ours.items():
            if name in maths.__all__ or n_ip:
                continue
            args = ",".join(f"Vi({k},2)" for k in range(arity))
            try:
                same = _core.parse(f"{theirs}({args})") == _core.parse(f"{name}({args})")
            except ValueError:
                continue
            if same:
                spellings[name] = theirs
    return spellings


# Where pykeops spells an op differently (same semantics): Less is LessThan, LessEq LessOrEqual.
KEOPS_SPELLING = _keops_spellings()

DIMS = (1, 2, 3, 4, 6, 9)  # 4, 6, 9: matrices for MatVecMult, SymSqNorm, TensorProd results
MAX_VARS = 5


def table():
    return [o for o in _core.op_table() if o[0] not in NOT_DRAWN]


def param_text(ip):
    """Integer parameters as both parsers read them; a tuple as Python writes it: (2,), ()."""
    def one(v):
        if isinstance(v, tuple):
            return "(" + ",".join(map(str, v)) + ("," if len(v) == 1 else "") + ")"
        return str(v)
    return "".join("," + one(v) for v in ip)


@functools.lru_cache(maxsize=None)
def out_dim(name, arg_dims, ip):
    """The dim the core gives op `name` on arguments of these dims, or None if it refuses them."""
    args = ",".join(f"Vi({k},{d})" for k, d in enumerate(arg_dims))
    text = f"{name}({args}{param_text(ip)})"
    try:
        return _core.parse(text).dim
    except ValueError:
        return None


@functools.lru_cache(maxsize=None)
def signatures(name, arity, n_ip):
    """(arg dims, out dim) the core accepts from the DIMS grid, for ops without parameters."""
    import itertools
    sigs = []
    for dims in itertools.product(DIMS, repeat=arity):
        d = out_dim(name, dims, ())
        if d is not None:
            sigs.append((dims, d))
    return sigs


# Ops whose derivative at a point is a documented convention of tessel's where pykeops's is NaN
# (docs/differences_from_keops.md): the drawn formula remembers their arguments' texts, so the
# test can find the pairs (x_i, y_j) that reach the point.
CONVENTION_POINTS = {"Atan2", "Powf", "SinXDivX", "ComplexAngle"}


class Node:
    """A drawn formula: its text for tessel and for pykeops, its dim, the ops it uses and the
    argument texts of each CONVENTION_POINTS op in it (op name, (tessel texts...))."""

    def __init__(self, tessel, keops, dim, ops=frozenset(), points=()):
        self.tessel, self.keops, self.dim, self.ops = tessel, keops, dim, ops
        self.points = points


class Vars:
    """The variables a formula uses, made on demand: (category 0 i / 1 j / 2 parameter, dim)."""

    def __init__(self):
        self.slots = []

    def leaf(self, cat, dim):
        if (cat, dim) not in self.slots:
            self.slots.append((cat, dim))
        k = self.slots.index((cat, dim))
        return Node(f"Var({k},{dim},{cat})", f"Var({k},{dim},{cat})", dim)


@st.composite
def leaf(draw, vs, dim):
    room = len(vs.slots) < MAX_VARS
    kinds = ["var"] if dim > 1 or not room else ["var", "const"]
    if not room:
        existing = [s for s in vs.slots if s[1] == dim]
        if not existing:  # no room for a new variable of this dim: broadcast a scalar one
            return draw(leaf(vs, 1)) if dim != 1 else Node("IntCst(1)", "IntCst(1)", 1)
        cat, _ = draw(st.sampled_from(existing))
        return vs.leaf(cat, dim)
    if draw(st.sampled_from(kinds)) == "const":
        # pykeops reads neither decimals nor Rat: a fraction is spelt as a division for it, and
        # it stores fractions as float32 (docs/differences_from_keops.md): dyadic ones only.
        t, k = draw(st.sampled_from([("IntCst(2)", "IntCst(2)"), ("IntCst(-1)", "IntCst(-1)"),
                                     ("IntCst(0)", "IntCst(0)"),
                                     ("Rat(-3,4)", "Divide(IntCst(-3),IntCst(4))"),
                                     ("0.5", "Divide(IntCst(1),IntCst(2))")]))
        return Node(t, k, 1)
    cat = draw(st.sampled_from([0, 1, 1, 2] if dim <= 4 else [0, 1]))
    return vs.leaf(cat, dim)


@st.composite
def formula(draw, vs, dim, depth):
    """A formula of dim `dim` (dim-1 results broadcast where the op allows) at most `depth` deep."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(leaf(vs, dim))
    name, arity, n_ip = draw(st.sampled_from(table()))[:3]
    if name in SHAPED_PARAMS:
        got = draw(SHAPED_PARAMS[name](dim))
        if got is None:
            return draw(leaf(vs, dim))
        arg_dims, ip = got
        d = out_dim(name, arg_dims, ip)
        assert d == dim, f"the core gives {name}{arg_dims}{param_text(ip)} dim {d}, not {dim}"
        sigs = [(arg_dims, d)]
    elif n_ip:
        arg_dims = tuple(draw(st.sampled_from(DIMS)) for _ in range(arity))
        ip = draw(INT_PARAMS[name](arg_dims))
        d = out_dim(name, arg_dims, tuple(ip))
        sigs = [(arg_dims, d)] if d is not None else []
    else:
        ip = ()
        sigs = signatures(name, arity, n_ip)
    fits = [s for s in sigs if s[1] == dim] or [s for s in sigs if s[1] == 1]
    if not fits:
        return draw(leaf(vs, dim))
    arg_dims, d = draw(st.sampled_from(fits))
    args = [draw(formula(vs, a, depth - 1)) for a in arg_dims]
    ips = param_text(ip)
    kname = KEOPS_SPELLING.get(name, name)
    points = sum((a.points for a in args), ())
    if name in CONVENTION_POINTS:
        points += ((name, tuple(a.tessel for a in args)),)
    node = Node(f"{name}({','.join(a.tessel for a in args)}{ips})",
                f"{kname}({','.join(a.keops for a in args)}{ips})", d,
                frozenset().union(*(a.ops for a in args)) | {name}, points)
    if d != dim:  # a scalar where a vector was asked: broadcast it
        z = f"Zero({dim})"
        node = Node(f"Add({z},{node.tessel})", f"Add({z},{node.keops})", dim, node.ops, points)
    return node


REGIMES = ("normal", "coincident", "ties", "tiny", "huge", "nonfinite")


def make_inputs(slots, regime, n, m, batch, seed):
    """float64 arrays for the variable slots: (batch..., n|m, dim) or (batch..., dim)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for cat, dim in slots:
        shape = tuple(batch) + ((n, dim) if cat == 0 else (m, dim) if cat == 1 else (dim,))
        if regime == "ties":
            a = rng.integers(-1, 2, size=shape).astype(np.float64)
        else:
            a = rng.standard_normal(shape)
        if regime == "tiny":
            a *= 1e-150
        elif regime == "huge":
            a *= 1e150
        elif regime == "nonfinite":
            mask = rng.random(shape)
            a[mask < 0.1] = np.nan
            a[(mask >= 0.1) & (mask < 0.2)] = np.inf
            a[(mask >= 0.2) & (mask < 0.3)] = -np.inf
        arrays.append(a)
    if regime == "coincident":  # every j-variable starts with rows equal to an i-variable's
        for k, (cat, dim) in enumerate(slots):
            src = next((q for q, s in enumerate(slots) if s == (0, dim)), None)
            if cat == 1 and src is not None:
                r = min(n, m)
                arrays[k][..., :r, :] = arrays[src][..., :r, :]
    return arrays
