"""Every op keopscore 2.3 defines parses and evaluates on tessel with the right value and gradient.

The ops are found by walking the installed keopscore package (keopscore/formulas/<family>/), so a
new op is not skipped silently: each must have a case in keopscore_cases.py or be listed below
with its reason. Each case draws its argument dims and parameters (seeded by the op's name), runs
the formula through tessel.compat's pykeops.torch.Genred as a Sum reduction in float64 (the
interpreter and the compiled CPU kernels) and compares the result and its gradient with respect
to every argument with a torch float64 reference, within a bound from the rounding errors of the
sum of the per-pair terms.
"""
import importlib
import inspect
import os
import pkgutil
import types
import zlib

import numpy as np
import pytest
import torch

from keopscore_cases import CASES, REF_WHY

os.environ.setdefault("PYKEOPS_VERBOSE", "0")
keopscore_formulas = pytest.importorskip("keopscore.formulas")

from tessel import _core  # noqa: E402
from tessel.compat.pykeops.torch import Genred  # noqa: E402  (pykeops.torch.Genred once installed)

# keopscore families that hold no formula ops.
NOT_OPS = {"reductions": "reductions and their code-generation helpers, not formula ops: "
                         "test_reduction_table.py compares each reduction"}

# keopscore ops tessel does not have yet (none today): strict xfail, so the test fails as soon as
# one works and the list must shrink.
NOT_IN_TESSEL_YET = set()

# keopscore names tessel does not provide, each with its reason; the parser must reject them with
# a message naming the function (test_unprovided_ops_are_rejected_clearly).
NOT_PROVIDED = {
    "Grad_WithSavedForward": "keopscore's internal form of Grad that reuses a forward value it "
                             "computed; tessel's Grad shares that value through its hash-consed IR",
    "Diff_WithSavedForward": "keopscore's internal form of Diff (same reason as "
                             "Grad_WithSavedForward)",
    "AdjointOperator": "keopscore's internal linear-operator form behind Diff",
    "SumLinOperator": "keopscore's internal linear-operator form behind Diff over tuples",
}

N, M = 30, 40
BACKENDS = ("interpreter", "CPU")


def discover():
    """{op name: keopscore family} for every public callable a family package defines."""
    found = {}
    for info in pkgutil.iter_modules(keopscore_formulas.__path__):
        if not info.ispkg:
            continue
        pkg = importlib.import_module(f"keopscore.formulas.{info.name}")
        for name, obj in vars(pkg).items():
            if (name.startswith("_") or isinstance(obj, types.ModuleType) or not callable(obj)
                    or not getattr(obj, "__module__", "").startswith(pkg.__name__)):
                continue
            found[name] = info.name
    return found


OPS = discover()


def keops_class(name):
    """The class behind a keopscore op name (a function `X` is backed by `X_Impl` when it has one)."""
    obj = getattr(importlib.import_module(f"keopscore.formulas.{OPS[name]}"), name)
    if isinstance(obj, type):
        return obj
    return getattr(importlib.import_module(obj.__module__), f"{name}_Impl", None)


def keops_torch_op(name):
    cls = keops_class(name)
    op = getattr(cls, "torch_op", None)
    return op() if op is not None else None


def test_every_keopscore_op_has_a_case_or_a_reason():
    assert len(OPS) > 90, f"found only {len(OPS)} keopscore ops: the discovery is broken"
    ops = {n for n, fam in OPS.items() if fam not in NOT_OPS}
    missing = ops - set(CASES) - set(NOT_PROVIDED)
    assert not missing, f"keopscore ops with neither a case nor a reason: {sorted(missing)}"
    stale = (set(CASES) | set(NOT_PROVIDED)) - ops
    assert not stale, f"cases or reasons for names keopscore does not define: {sorted(stale)}"
    assert not set(CASES) & set(NOT_PROVIDED)
    assert NOT_IN_TESSEL_YET <= set(CASES), "every op not in tessel yet still needs its case"
    assert set(NOT_OPS) <= set(OPS.values())


def test_keopscore_torch_op_is_the_reference_unless_a_reason_is_given():
    for name, case in CASES.items():
        theirs = keops_torch_op(name)
        if case.ref is None:
            assert theirs is not None, f"{name}: no reference (keopscore has no torch_op)"
        elif theirs is not None:
            assert name in REF_WHY, f"{name}: keopscore's torch_op is replaced without a reason"
    assert set(REF_WHY) <= set(CASES)


def _params_text(params):
    return "".join(f",{p}" for p in params)


def _sizes(cats):
    """(rows, columns) of the reduction: pykeops counts 1 on a side no variable indexes."""
    return (N if "i" in cats else 1), (M if "j" in cats else 1)


def _draw_inputs(name, case, gen, dims, cats):
    ranges = case.ranges or getattr(keops_class(name), "test_ranges", None)
    out, (n, m) = [], _sizes(cats)
    for k, (d, c) in enumerate(zip(dims, cats)):
        shape = {"i": (n, d), "j": (m, d), "p": (d,)}[c]
        if ranges is None:
            a = torch.randn(shape, generator=gen, dtype=torch.float64)
        elif case.ints:
            a = torch.randint(int(ranges[k][0]), int(ranges[k][1]) + 1, shape,
                              generator=gen).to(torch.float64)
        else:
            lo, hi = ranges[k]
            a = torch.rand(shape, generator=gen, dtype=torch.float64) * (hi - lo) + lo
        out.append(a)
    return case.prep(out) if case.prep else out


def _per_pair(a, cat, n, m):
    """An argument broadcast to (n, m, dim): a leaf, so that per-pair derivatives can be taken."""
    b = {"i": lambda: a[:, None, :], "j": lambda: a[None, :, :], "p": lambda: a}[cat]()
    return b.expand(n, m, a.shape[-1]).clone().requires_grad_()


def _reduce(t, cat):
    """Sums per-pair values (N, M, dim) the way the reduction does for an argument of `cat`."""
    return {"i": lambda: t.sum(1), "j": lambda: t.sum(0), "p": lambda: t.sum((0, 1))}[cat]()


def _reference(ref, base, cats, params, e, wrt, dtype, jitter=None):
    """The reference's per-pair terms (n, m, dim) in `dtype`, each with the argument category its
    sum runs like: the value's ('i': summed over j) and, for each argument in wrt, its gradient's
    (terms whose reference has no derivative are 0). jitter: a generator that moves each input by
    up to one unit in the last place of `dtype`."""
    n, m = _sizes(cats)
    if jitter is not None:
        eps = torch.finfo(dtype).eps
        base = [a * (1 + eps * (2 * torch.rand(a.shape, generator=jitter, dtype=a.dtype) - 1))
                for a in base]
    pairs = [_per_pair(a.to(dtype), c, n, m) for a, c in zip(base, cats)]
    F = ref(*pairs, *params)
    F = F.expand(n, m, F.shape[-1])
    out = [(F, "i")]
    per = [None] * len(wrt)
    if wrt and F.requires_grad:  # else comparisons, indices, steps: KeOps's derivative is 0
        per = torch.autograd.grad((F * e.to(dtype)[:, None, :]).sum(), [pairs[k] for k in wrt],
                                  allow_unused=True)
    for k, p in zip(wrt, per):
        out.append((torch.zeros_like(pairs[k]) if p is None else p, cats[k]))
    return [(t.detach().double(), c) for t, c in out]


EPS64, EPS32 = np.finfo(np.float64).eps, np.finfo(np.float32).eps


def _check(what, got, terms, terms32):
    """got within the rounding bound of the sum of the float64 reference's per-pair terms: each
    side rounds each term (32 ulps allowed for the op chains here) and sums up to M of them
    ((M - 1) eps of the sum of |terms|). Where a term's own computation cancels (Normalize's
    derivative) a few runs of the same terms in float32 on inputs moved by an ulp, scaled from
    float32's epsilon to float64's, measure how far roundings move it."""
    t, cat = terms
    val, mag = _reduce(t, cat), _reduce(t.abs(), cat)
    moved = torch.stack([_reduce((t32 - t).abs(), cat) for t32, _ in terms32]).amax(0)
    assert got.shape == val.shape, f"{what}: shape {tuple(got.shape)}, want {tuple(val.shape)}"
    bound = 2 * (32 + M) * EPS64 * mag + 8 * (EPS64 / EPS32) * moved + 1e-290
    err = (got.detach() - val).abs()
    bad = ~(err <= bound)
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.numel()} entries off, worst "
                           f"{float(err[bad].max()):.3g} (got {got[bad][:4].tolist()}, want "
                           f"{val[bad][:4].tolist()})")


def run_case(name, backend):
    case = CASES[name]
    seed = zlib.crc32(name.encode())
    rng, gen = np.random.default_rng(seed), torch.Generator().manual_seed(seed)
    dims, params = case.draw(rng)
    cats = case.cats or [str(c) for c in rng.choice(["i", "j"], len(dims))]
    base = _draw_inputs(name, case, gen, dims, cats)
    vs = [f"v{k}" for k in range(len(dims))]
    text = (case.text(vs, params, dims, cats) if case.text
            else f"{name}({','.join(vs)}{_params_text(params)})")
    aliases = [f"{v} = {dict(i='Vi', j='Vj', p='Pm')[c]}({d})" for v, c, d in zip(vs, cats, dims)]
    wrt = list(range(len(dims)) if case.grad is None else case.grad)
    args = [a.clone().requires_grad_(k in wrt) for k, a in enumerate(base)]
    where = f"{name}: {text} with {aliases} ({backend})"

    got = Genred(text, aliases, reduction_op="Sum", axis=1)(*args, backend=backend)
    e = torch.randn(got.shape, generator=gen, dtype=torch.float64)
    ref = case.ref or keops_torch_op(name)
    want = _reference(ref, base, cats, params, e, wrt, torch.float64)
    runs32 = [_reference(ref, base, cats, params, e, wrt, torch.float32, gen) for _ in range(4)]
    _check(f"{where}: value", got, want[0], [r[0] for r in runs32])
    if wrt:
        grads = torch.autograd.grad(got, [args[k] for k in wrt], e)
        for q, (k, g) in enumerate(zip(wrt, grads), 1):
            _check(f"{where}: gradient in v{k}", g, want[q], [r[q] for r in runs32])


def _op_params():
    for name in sorted(CASES):
        for backend in BACKENDS:
            marks = ([pytest.mark.xfail(strict=True, reason="op not in tessel yet")]
                     if name in NOT_IN_TESSEL_YET else [])
            yield pytest.param(name, backend, marks=marks, id=f"{name}-{backend}")


@pytest.mark.parametrize("name, backend", list(_op_params()))
def test_keopscore_op(name, backend):
    run_case(name, backend)


@pytest.mark.parametrize("name", sorted(NOT_PROVIDED))
def test_unprovided_ops_are_rejected_clearly(name):
    arity = len(inspect.signature(getattr(
        importlib.import_module(f"keopscore.formulas.{OPS[name]}"), name)).parameters)
    text = f"{name}({','.join(['x'] * max(arity, 1))})"
    with pytest.raises(ValueError, match=f"unknown function '{name}'"):
        _core.parse(text, ["x = Vi(2)"])


def test_formula_strategies_spell_every_drawn_op_as_pykeops_reads_it():
    # The differential tests write the drawn formulas for pykeops with these names: each op of the
    # core's table that they draw must be one keopscore has, under its name or a spelling.
    import formula_strategies as fs
    theirs = {n for n, fam in OPS.items() if fam not in NOT_OPS}
    for name, *_ in _core.op_table():
        if name in fs.NOT_DRAWN:
            continue
        assert fs.KEOPS_SPELLING.get(name, name) in theirs, f"pykeops has no op {name}"
    assert fs.KEOPS_SPELLING, "keopscore spells Less and LessEq differently: none was found"
