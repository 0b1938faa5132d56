"""Hypothesis strategies that draw random formulas from the core's op table, and their inputs.

Which argument dims an op accepts and what dim it gives are asked of the core itself (its dim rule,
through the parser on placeholder variables), so a new op is drawn without any change here unless it
has integer parameters: then INT_PARAMS must say how to draw them, and the test that checks the
table fails until it does.
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
}

# Ops not drawn, each with its reason. Narrow on purpose: everything else in the table is drawn.
NOT_DRAWN = {
    # pykeops 2.3 has no op of these names, so there is nothing to compare with.
    "Greater": "pykeops 2.3 has no Greater",
    "GreaterEq": "pykeops 2.3 has no GreaterEq",
    "ElemMin": "pykeops 2.3 has no ElemMin",
    "ElemMax": "pykeops 2.3 has no ElemMax",
    # Its permutation handling is being reworked in parallel; its parameters are tuples.
    "TensorDot": "permutation handling under rework; tuple parameters",
}

# Where pykeops spells an op differently (same semantics).
KEOPS_SPELLING = {"Less": "LessThan", "LessEq": "LessOrEqual"}

# Ops whose derivative at their singular point (0) is being changed to KeOps's conventions
# (Rsqrt(0) = 0, Sign(0) = 0) in parallel: their values are compared, their gradients are not.
SINGULAR_GRAD_IN_FLUX = {"Sqrt", "Rsqrt", "Norm2", "Normalize", "Abs", "Sign", "Pow", "Powf"}

DIMS = (1, 2, 3, 4, 6, 9)  # 4, 6, 9: matrices for MatVecMult, SymSqNorm, TensorProd results
MAX_VARS = 5


def table():
    return [o for o in _core.op_table() if o[0] not in NOT_DRAWN]


@functools.lru_cache(maxsize=None)
def out_dim(name, arg_dims, ip):
    """The dim the core gives op `name` on arguments of these dims, or None if it refuses them."""
    args = ",".join(f"Vi({k},{d})" for k, d in enumerate(arg_dims))
    text = f"{name}({args}{''.join(',' + str(v) for v in ip)})"
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


class Node:
    """A drawn formula: its text for tessel and for pykeops, its dim and the ops it uses."""

    def __init__(self, tessel, keops, dim, ops=frozenset()):
        self.tessel, self.keops, self.dim, self.ops = tessel, keops, dim, ops


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
        # pykeops reads neither decimals nor Rat: a fraction is spelt as a division for it.
        t, k = draw(st.sampled_from([("IntCst(2)", "IntCst(2)"), ("IntCst(-1)", "IntCst(-1)"),
                                     ("IntCst(0)", "IntCst(0)"),
                                     ("Rat(1,3)", "Divide(IntCst(1),IntCst(3))"),
                                     ("0.5", "Divide(IntCst(1),IntCst(2))")]))
        return Node(t, k, 1)
    cat = draw(st.sampled_from([0, 1, 1, 2] if dim <= 4 else [0, 1]))
    return vs.leaf(cat, dim)


@st.composite
def formula(draw, vs, dim, depth):
    """A formula of dim `dim` (dim-1 results broadcast where the op allows) at most `depth` deep."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return draw(leaf(vs, dim))
    name, arity, n_ip, _, _ = draw(st.sampled_from(table()))
    if n_ip:
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
    ips = "".join(f",{v}" for v in ip)
    kname = KEOPS_SPELLING.get(name, name)
    node = Node(f"{name}({','.join(a.tessel for a in args)}{ips})",
                f"{kname}({','.join(a.keops for a in args)}{ips})", d,
                frozenset().union(*(a.ops for a in args)) | {name})
    if d != dim:  # a scalar where a vector was asked: broadcast it
        z = f"Zero({dim})"
        node = Node(f"Add({z},{node.tessel})", f"Add({z},{node.keops})", dim, node.ops)
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
