"""tessel.distributed.KernelSolve on 2 and 3 gloo processes against tessel.torch.KernelSolve.

Each worker builds the whole problem from one seed, takes its (uneven, sometimes empty) shard of
the points and of b, solves collectively and checks its rows of the solution and its gradients
(in the points, b, the kernel's parameter and alpha) against one process's solve of the whole
system. Workers live at module level (spawn imports them); gloo_ranks.py runs them.
"""
import math
import warnings

import pytest
import torch
import torch.distributed as dist

import tessel.distributed as td
import tessel.lazytensor
import tessel.torch
from gloo_ranks import run_ranks

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with gloo is not available")

# (formula, aliases, unknown, axis): the unknown a j-variable of 2 columns (the sum over j), and
# an i-variable of 3 columns (the sum over i).
GAUSS = ("Exp(-G*SqDist(X,Y))*B", ["X=Vi(3)", "Y=Vj(3)", "B=Vj(2)", "G=Pm(1)"], "B", 1)
GAUSS_T = ("Exp(-G*SqDist(X,Y))*A", ["X=Vi(3)", "Y=Vj(3)", "A=Vi(3)", "G=Pm(1)"], "A", 0)
# Rows per rank: uneven, and one rank without any on 3 processes (and on 2, in the bad cases).
SHARDS = {2: [4, 9], 3: [5, 0, 8]}
GAMMA, ALPHA, TOL = 0.5, 0.1, 1e-10
WAIT_S = 60


def _whole(n, dim, seed=7):
    """The points, b, G and alpha of the whole problem, the same on every rank."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, dtype=torch.float64, generator=gen)
    b = torch.randn(n, dim, dtype=torch.float64, generator=gen)
    return x, b, torch.tensor([GAMMA], dtype=torch.float64), torch.tensor(ALPHA,
                                                                          dtype=torch.float64)


def _rtol(x, alpha, numel):
    """How far two solves, each stopped at a relative residual <= TOL, may be apart.

    |a - a*| <= |A^-1| |r| <= cond(A) TOL |b| / |A| <= cond(A) TOL |a*|, so two solutions differ
    by at most 2 cond(A) TOL |a*| in norm, hence entry by entry by at most 2 cond(A) TOL
    sqrt(numel) max|a*|. A gradient is bilinear in the two solutions a and u plus exact terms:
    twice that again; a factor 10 keeps the bound clear of rounding."""
    k = torch.exp(-GAMMA * torch.cdist(x, x) ** 2)
    cond = torch.linalg.cond(k + alpha * torch.eye(x.shape[0], dtype=x.dtype)).item()
    return 10 * 2 * 2 * cond * TOL * math.sqrt(numel)


def _deviation(what, got, want, rtol):
    """max |got - want| / max |want|, checked against rtol."""
    scale = max(want.abs().max().item(), 1e-300) if want.numel() else 1.0
    dev = (got - want).abs().max().item() / scale if want.numel() else 0.0
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    assert dev <= rtol, f"{what}: relative deviation {dev:.3g} > {rtol:.3g}"
    return dev


def _check_solve(rank, world, case):
    """One solve and its gradients in x, b, G and alpha; returns the largest deviations."""
    formula, aliases, var, axis = case
    rows = SHARDS[world]
    dim = int(aliases[2].split("(")[1].rstrip(")"))
    x, b, g, alpha = _whole(sum(rows), dim)
    weights = torch.randn(b.shape, dtype=b.dtype, generator=torch.Generator().manual_seed(3))
    ref_stats, stats = {}, {}
    full = [t.clone().requires_grad_() for t in (x, b, g, alpha)]
    ref = tessel.torch.KernelSolve(formula, aliases, var, axis=axis)
    a_ref = ref(full[0], full[0], full[1], full[2], alpha=full[3], tol=TOL, stats=ref_stats,
                backend="interpreter")
    want = torch.autograd.grad((a_ref * weights).sum(), full)
    mine = slice(sum(rows[:rank]), sum(rows[: rank + 1]))
    part = [t[mine].clone().requires_grad_() for t in (x, b)]
    part += [t.clone().requires_grad_() for t in (g, alpha)]
    solver = td.KernelSolve(formula, aliases, var, axis=axis)
    a = solver(part[0], part[0], part[1], part[2], alpha=part[3], tol=TOL, stats=stats,
               backend="interpreter")
    got = torch.autograd.grad((a * weights[mine]).sum(), part)
    rtol = _rtol(x, ALPHA, b.numel())
    devs = {"a": _deviation(f"{formula}: a", a.detach(), a_ref.detach()[mine], rtol)}
    for name, gr, w in zip(("x", "b", "G", "alpha"), got, want):
        # Points and b: this rank's rows of the whole gradient; G and alpha: all of it.
        devs[name] = _deviation(f"{formula}: grad {name}", gr, w[mine] if w.dim() == 2 else w,
                                rtol)
    # The same iterations, give or take the last one (the sums run in another order).
    for st, rst in ((stats, ref_stats), (stats["backward"], ref_stats["backward"])):
        assert st["converged"] and st["residual"] <= TOL, st
        assert abs(st["iterations"] - rst["iterations"]) <= 1, (st, rst)
    return devs


def _check_lazy_and_defaults(rank, world):
    """LazyTensor.solve through tessel.distributed's LazyTensor (a 1-D b, default tol) against
    tessel.LazyTensor in one process, and what non-convergence does on every rank."""
    rows = SHARDS[world]
    x, b, _, _ = _whole(sum(rows), 1, seed=11)
    b = b[:, 0]
    mine = slice(sum(rows[:rank]), sum(rows[: rank + 1]))

    def solve(lt, x, b):
        k = (-GAMMA * lt.Vi(x).sqdist(lt.Vj(x))).exp()
        return k.solve(b, alpha=ALPHA, backend="interpreter")

    want = solve(tessel.lazytensor, x, b)
    got = solve(td, x[mine], b[mine])
    # The default tol, 1e-6, in the bound instead of TOL.
    dev = _deviation("LazyTensor.solve", got, want[mine], _rtol(x, ALPHA, b.numel()) / TOL * 1e-6)
    formula, aliases, var, _ = GAUSS
    solver = td.KernelSolve(formula, aliases, var)
    x, b, g, _ = _whole(sum(rows), 2)
    args = (x[mine], x[mine], b[mine], g)
    with pytest.raises(ValueError, match="no convergence after 2 iterations"):
        solver(*args, maxiter=2, on_nonconvergence="raise", backend="interpreter")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stats = {}
        solver(*args, maxiter=2, stats=stats, backend="interpreter")
    assert stats["iterations"] == 2 and not stats["converged"], stats
    assert any("did not converge after 2 iterations" in str(w.message) for w in caught)
    # A zero right-hand side: zero, without a single product.
    zero = solver(x[mine], x[mine], torch.zeros_like(b[mine]), g, backend="interpreter")
    assert zero.shape == b[mine].shape and not zero.any()
    return dev


def _check_bad(rank, world):
    """Calls that go wrong on rank 1 only: every rank raises and names it (none hangs)."""
    formula, aliases, var, _ = GAUSS
    solver = td.KernelSolve(formula, aliases, var)
    x, b, g, _ = _whole(9, 2)
    rows = [4, 5]
    mine = slice(sum(rows[:rank]), sum(rows[: rank + 1]))
    xs, bs = x[mine], b[mine]
    messages = []
    # Rank 1's i rows are not its j rows.
    with pytest.raises(ValueError, match="rank 1 holds 4 rows of the i-variables but 5") as e:
        solver(xs[:4], xs, bs, g)
    messages.append(str(e.value))
    # Rank 1 asks for another tolerance: its CG would stop at another iteration.
    with pytest.raises(ValueError, match="rank 1 disagrees with rank 0 on tol") as e:
        solver(xs, xs, bs, g, tol=1e-3 if rank == 1 else 1e-6)
    messages.append(str(e.value))
    # Rank 1's b has the wrong number of columns: its own error there, its name elsewhere.
    with pytest.raises((ValueError, RuntimeError)) as e:
        solver(xs, xs, bs[:, :1] if rank == 1 else bs, g)
    messages.append(f"{type(e.value).__name__}: {e.value}")
    # Double backward is refused on every rank.
    xg = xs.clone().requires_grad_()
    a = solver(xg, xg, bs, g, backend="interpreter")
    with pytest.raises(NotImplementedError, match="double backward"):
        torch.autograd.grad(a.sum(), xg, create_graph=True)
    return messages


def _solve_worker(rank, world):
    out = {"j": _check_solve(rank, world, GAUSS), "i": _check_solve(rank, world, GAUSS_T),
           "lazy": _check_lazy_and_defaults(rank, world)}
    if world == 2:  # the bad calls ride with the 2-process group: one spawn fewer
        out["bad"] = _check_bad(rank, world)
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_solve_and_gradients_match_one_process(world, interpreted):
    results = run_ranks(_solve_worker, world, WAIT_S)
    assert sorted(results) == list(range(world))
    if world == 2:
        bad = [results[r]["bad"] for r in range(world)]
        assert all("rank 1 holds 4 rows" in m[0] for m in bad)
        assert bad[0][2].startswith("RuntimeError: ") and "rank 1" in bad[0][2], bad[0][2]
        assert bad[1][2].startswith("ValueError: ") and "shape (5, 1)" in bad[1][2], bad[1][2]
    # The measured agreement, shown with -s (pytest -rA): far inside the bound.
    print(f"world {world}:", {k: v for k, v in results[0].items() if k != "bad"})


def test_without_a_process_group_the_call_says_what_to_do():
    assert not dist.is_initialized()
    solver = td.KernelSolve(*GAUSS[:3])
    x, b, g, _ = _whole(4, 2)
    with pytest.raises(RuntimeError, match="init_process_group"):
        solver(x, x, b, g)


def test_bad_constructions_and_options_say_so():
    with pytest.raises(ValueError, match="tessel.distributed.KernelSolve: the unknown 'X'"):
        td.KernelSolve(*GAUSS[:2], "X")
    with pytest.raises(NotImplementedError, match="must read an i-variable"):
        td.KernelSolve("B*G", ["B=Vj(1)", "G=Pm(1)"], "B")
    with pytest.raises(NotImplementedError, match="ranges"):
        td.KernelSolve(*GAUSS[:3])(*_whole(4, 2)[:3], ranges=(None,) * 6)
    solver = td.KernelSolve(*GAUSS[:3])
    solver.group = object()  # stands for a group: no process group is initialized here
    with pytest.raises(TypeError, match="cannot be pickled"):
        solver.__getstate__()
