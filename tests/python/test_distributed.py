"""tessel.distributed.Genred: a ring over 2 and 3 gloo processes against one process's Genred.

Each worker builds the same data from one seed, takes its (uneven, sometimes empty) shards of x
and y, and checks its rows of the result and its gradients (x, y, b and the parameter) against
tessel.torch.Genred on the whole data. Workers live at module level (spawn imports them) and
gloo_ranks.py runs them; the kernel cache (TESSEL_CACHE_DIR) is inherited, so they share it.
"""
import pytest
import torch
import torch.distributed as dist

import tessel.distributed as td
import tessel.lazytensor
from gloo_ranks import run_ranks
from tessel.torch import Genred

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with gloo is not available")

GAUSS = ("Exp(-G*SqDist(X,Y))*B", ["X=Vi(3)", "Y=Vj(3)", "B=Vj(2)", "G=Pm(1)"], "Sum")
LSE = ("-G*SqDist(X,Y)", ["X=Vi(3)", "Y=Vj(3)", "G=Pm(1)"], "LogSumExp")
SQ = ["X=Vi(3)", "Y=Vj(3)"]
# (formula, aliases, reduction, axis, K, formula2): every family of merge rule, both axes.
CASES = [
    GAUSS + (1, None, None),
    LSE + (1, None, None),
    ("Exp(-G*SqDist(X,Y))*A", ["X=Vi(3)", "Y=Vj(3)", "A=Vi(2)", "G=Pm(1)"], "Sum", 0, None,
     None),
    ("SqDist(X,Y)", SQ, "Min_ArgMin", 1, None, None),
    ("X-Y", SQ, "Max", 0, None, None),
    ("SqDist(X,Y)", SQ, "ArgMin", 1, None, None),
    ("SqDist(X,Y)", SQ, "KMin_ArgKMin", 1, 3, None),
    ("SqDist(X,Y)", SQ, "ArgKMin", 0, 2, None),
    # A vector formula: each component merges its own K best.
    ("(X-Y)*Elem(X,0)", SQ, "KMin_ArgKMin", 1, 3, None),
    ("-G*SqDist(X,Y)", ["X=Vi(3)", "Y=Vj(3)", "B=Vj(2)", "G=Pm(1)"], "SumSoftMaxWeight", 1,
     None, "B"),
    # Weights of both signs: a block's partial sum may be negative where the whole one is not.
    ("-G*SqDist(X,Y)", ["X=Vi(3)", "Y=Vj(3)", "B=Vj(1)", "G=Pm(1)"], "LogSumExp", 1, None,
     "B"),
    # NaN wins, and among NaNs the lowest global index.
    ("Sqrt(Y-X)", ["X=Vi(1)", "Y=Vj(1)"], "Min_ArgMin", 1, None, None),
]
# Per world size: (rows of x per rank, rows of y per rank); an empty shard on each side.
SHARDS = {2: ([7, 0], [3, 9]), 3: ([4, 6, 0], [0, 5, 6])}
RTOL = 1e-12
WAIT_S = 60


def _data(aliases, nx, ny, dtype=torch.float64):
    """The whole problem, the same on every rank (one seed). Row 5 of every variable repeats
    row 1 (x and y alike), so distances tie across ranks' shards and the lowest global index
    must win; a 1-column j-variable holds weights of both signs."""
    gen = torch.Generator().manual_seed(1234)
    out = []
    for a in aliases:
        cat, dim = a.split("=")[1][:2], int(a.split("(")[1].rstrip(")"))
        if cat == "Pm":
            out.append(torch.tensor([0.7] * dim, dtype=dtype))
            continue
        t = torch.randn(nx if cat == "Vi" else ny, dim, dtype=dtype, generator=gen)
        if t.shape[0] > 5:
            t[5] = t[1]
        out.append(t + 1.0 if dim == 1 and cat == "Vj" else t)
    return out


def _close(what, got, want, rtol=RTOL):
    if not want.is_floating_point():
        assert torch.equal(got, want), f"{what}: {got} vs {want}"
        return
    fin = want[torch.isfinite(want)]
    scale = fin.abs().max().item() if fin.numel() else 0.0
    torch.testing.assert_close(got, want, rtol=rtol, atol=rtol * max(scale, 1e-300),
                               equal_nan=True, msg=lambda m: f"{what}: {m}")


def _outputs(o):
    return list(o) if isinstance(o, tuple) else [o]


def _loss(outs, weights):
    """sum(out * w) over the float outputs (an index has no gradient)."""
    return sum((o * w).sum() for o, w in zip(outs, weights) if o.is_floating_point())


def _check_case(rank, world, case, xs, ys, dtype=torch.float64, rtol=RTOL):
    formula, aliases, op, axis, k, f2 = case
    whole = _data(aliases, sum(xs), sum(ys), dtype)
    cats = [a.split("=")[1][:2] for a in aliases]
    diff = "Sqrt" not in formula  # gradients of a NaN min are NaN on both sides: values only
    full = [t.clone().requires_grad_(diff) for t in whole]
    ref = Genred(formula, aliases, reduction_op=op, axis=axis, opt_arg=k, formula2=f2)
    outs = _outputs(ref(*full, backend="interpreter"))
    gen = torch.Generator().manual_seed(99)
    weights = [torch.randn(o.shape, dtype=dtype, generator=gen) for o in outs]
    floats = any(o.is_floating_point() for o in outs) and diff
    want = torch.autograd.grad(_loss(outs, weights), full) if floats else None
    rows = {"Vi": (sum(xs[:rank]), xs[rank]), "Vj": (sum(ys[:rank]), ys[rank])}
    out_rows = rows["Vi" if axis == 1 else "Vj"]
    sl = {c: slice(a, a + n) for c, (a, n) in rows.items()}
    mine = [t[sl[c]] if c in sl else t for t, c in zip(whole, cats)]
    mine = [t.clone().requires_grad_(diff) for t in mine]
    red = td.Genred(formula, aliases, reduction_op=op, axis=axis, opt_arg=k, formula2=f2)
    got = _outputs(red(*mine, backend="interpreter"))
    what = f"{op} axis={axis} {formula}"
    osl = slice(out_rows[0], out_rows[0] + out_rows[1])
    for n, (g, o) in enumerate(zip(got, outs)):
        _close(f"{what} output {n}", g, o.detach()[osl], rtol)
    if want is not None:
        grads = torch.autograd.grad(_loss(got, [w[osl] for w in weights]), mine)
        for n, (g, w, c) in enumerate(zip(grads, want, cats)):
            _close(f"{what} grad of argument {n}", g, w[sl[c]] if c in sl else w, rtol)


def _check_ring(rank, world):
    xs, ys = SHARDS[world]
    for case in CASES:
        _check_case(rank, world, case, xs, ys)
    # float32 against one process in float32: summation orders differ, hence rounding-level
    # tolerance (a few ulps of the largest term per row of 9 terms).
    _check_case(rank, world, CASES[0], xs, ys, torch.float32, 1e-5)
    # Every j row on one rank, none on the others; and no j row at all.
    _check_case(rank, world, CASES[3], xs, [12] + [0] * (world - 1))
    _check_case(rank, world, CASES[1], xs, [0] * world)
    return "checked"


def _check_mismatch(rank, world):
    """Two calls that go wrong on rank 1 only: every rank must raise (none may hang); then a
    double backward, refused."""
    formula, aliases, op = GAUSS
    red = td.Genred(formula, aliases, reduction_op=op)
    dtype = torch.float32 if rank == 1 else torch.float64
    args = [torch.randn(4, 3, dtype=dtype), torch.randn(5, 3, dtype=dtype),
            torch.randn(5, 2, dtype=dtype), torch.tensor([0.5], dtype=dtype)]
    messages = []
    with pytest.raises(ValueError, match="rank 1 disagrees with rank 0") as e:
        red(*args)
    messages.append(str(e.value))
    args = [a.double() for a in args]
    with pytest.raises((ValueError, RuntimeError)) as e:
        red(*(args[:3] if rank == 1 else args))
    messages.append(str(e.value))
    if rank == 0:
        assert "rank 1" in messages[1], messages
    # K larger than every rank's rows together: the same error on every rank, none waits.
    knn = td.Genred("SqDist(X,Y)", ["X=Vi(3)", "Y=Vj(3)"], reduction_op="ArgKMin", opt_arg=11)
    with pytest.raises(ValueError, match=r"K = 11 needs at least K rows of j over all ranks, "
                                         r"got 10 \(5 \+ 5\)"):
        knn(args[0], args[1])
    # Double backward is refused on every rank before any message is sent.
    args = [a.requires_grad_() for a in args]
    out = red(*args)
    with pytest.raises(NotImplementedError, match="double backward"):
        torch.autograd.grad(out.sum(), args, create_graph=True)
    return messages


def _check_lazy(rank, world):
    """tessel.distributed's LazyTensor against tessel's in one process: the same expressions,
    a mixed one (a plain LazyTensor on the left), three reductions, both axes, gradients."""
    xs, ys = SHARDS[world]
    x, y, b = _data(["X=Vi(3)", "Y=Vj(3)", "B=Vj(2)"], sum(xs), sum(ys))
    xr = slice(sum(xs[:rank]), sum(xs[: rank + 1]))
    yr = slice(sum(ys[:rank]), sum(ys[: rank + 1]))

    def reduce(lt, x, y, b):
        # A plain LazyTensor on the left of a sharded one: the expression is sharded.
        d2 = tessel.lazytensor.Vi(x).sqdist(lt.Vj(y))
        k = (-lt.Pm(0.7) * d2).exp()
        return [k @ b, (-d2).logsumexp(dim=0), d2.argKmin(3, dim=1), d2.min(dim=0)]

    whole = [t.clone().requires_grad_() for t in (x, y, b)]
    want = reduce(tessel.lazytensor, *whole)
    mine = [t[r].clone().requires_grad_() for t, r in zip((x, y, b), (xr, yr, yr))]
    got = reduce(td, *mine)
    rows = [xr, yr, xr, yr]
    for n, (g, w, r) in enumerate(zip(got, want, rows)):
        _close(f"LazyTensor reduction {n}", g, w.detach()[r])
    ws = [torch.ones_like(w) for w in want]
    gw = torch.autograd.grad(_loss(want, ws), whole)
    gg = torch.autograd.grad(_loss(got, [w[r] for w, r in zip(ws, rows)]), mine)
    for n, (g, w, r) in enumerate(zip(gg, gw, (xr, yr, yr))):
        _close(f"LazyTensor gradient {n}", g, w[r])
    return "checked"


WORKERS = {"ring": _check_ring, "mismatch": _check_mismatch, "lazy": _check_lazy}


def _run(name, world):
    return run_ranks(WORKERS[name], world, WAIT_S)


@pytest.mark.parametrize("world", [2, 3])
def test_ring_matches_one_process(world, interpreted):
    assert _run("ring", world) == {r: "checked" for r in range(world)}


def test_lazytensor_reductions_are_sharded(interpreted):
    assert _run("lazy", 2) == {0: "checked", 1: "checked"}


def test_a_sharded_lazytensor_needs_torch_tensors():
    import numpy as np
    with pytest.raises(TypeError, match="must be torch tensors, got NumPy arrays"):
        td.Vi(np.ones((3, 2))).sqdist(td.Vj(np.ones((4, 2)))).sum(dim=1)


def test_a_rank_that_disagrees_is_named_on_every_rank():
    results = _run("mismatch", 2)
    assert "dtype torch.float32 vs torch.float64" in results[0][0]
    assert "expected 4 arguments" in results[1][1]


def test_a_bad_axis_says_so():
    with pytest.raises(ValueError, match="axis must be 0"):
        td.Genred("SqDist(X,Y)", ["X=Vi(3)", "Y=Vj(3)"], axis=2)


def test_a_group_that_is_not_a_process_group_says_so():
    # It used to fail later, in torch.distributed, with an AttributeError naming neither.
    msg = r"group must be None \(the default process group\) or a torch.distributed.ProcessGroup"
    for make in (lambda g: td.Genred(*GAUSS[:2], group=g),
                 lambda g: td.KernelSolve(*GAUSS[:2], "B", group=g)):
        with pytest.raises(TypeError,
                           match=r"tessel\.distributed\.\w+: " + msg + ".*got str 'abc'"):
            make("abc")
    x = torch.randn(4, 3)
    with pytest.raises(TypeError, match=msg + ".*got int 3"):
        td.SamplesLoss(group=3)(x, x)


def test_without_a_process_group_the_call_says_what_to_do():
    assert not dist.is_initialized()
    red = td.Genred(*GAUSS[:2])
    args = torch.randn(4, 3), torch.randn(5, 3), torch.randn(5, 2), torch.tensor([0.5])
    with pytest.raises(RuntimeError, match="init_process_group"):
        red(*args)
