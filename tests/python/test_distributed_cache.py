"""tessel.distributed over 3 gloo processes: ranks sharing one kernel cache compile each kernel
once, and a rank that fails or stays away makes the others raise instead of hanging.

The compiler is a wrapper script (TESSEL_CXX) that logs the library each run writes before it
runs the real compiler, so the log counts the compiles of every process. Workers live at module
level (spawn imports them); gloo_ranks.py runs them and gathers their results.
"""
import os
import shlex
import stat
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

import tessel._core
import tessel.distributed as td
from gloo_ranks import run_ranks
from tessel.torch import Genred

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with gloo is not available")

ALIASES = ["X=Vi(2)", "Y=Vj(2)", "B=Vj(1)", "G=Pm(1)"]
# Formulas of this file only, so their kernels are new to any cache; the first is reached
# through tessel.distributed first, the second through tessel.torch first.
FORMULAS = ("Cos(X|Y)*B*G", "Sin(X|Y)*B*G")
ROWS = ([4, 6, 5], [5, 3, 7])  # rows of x, rows of y, per rank
WORLD = 3
# The short groups' timeout in the error test: how long a rank waits for one that stays away.
SHORT_S = 3
WAIT_S = 60


def _whole():
    gen = torch.Generator().manual_seed(5)
    nx, ny = sum(ROWS[0]), sum(ROWS[1])
    return [torch.randn(nx, 2, generator=gen, dtype=torch.float64),
            torch.randn(ny, 2, generator=gen, dtype=torch.float64),
            torch.randn(ny, 1, generator=gen, dtype=torch.float64),
            torch.tensor([0.7], dtype=torch.float64)]


def _mine(rank, whole):
    """This rank's rows of x, y and b (and the parameter)."""
    xs, ys = ROWS
    x0, y0 = sum(xs[:rank]), sum(ys[:rank])
    x, y, b, g = whole
    return [x[x0:x0 + xs[rank]], y[y0:y0 + ys[rank]], b[y0:y0 + ys[rank]], g]


def _sharded(formula, args):
    args = [a.clone().requires_grad_() for a in args]
    out = td.Genred(formula, ALIASES)(*args, backend="compiled")
    return out, torch.autograd.grad(out.sum(), args)


def _plain(formula, args):
    args = [a.clone().requires_grad_() for a in args]
    out = Genred(formula, ALIASES)(*args, backend="compiled")
    return out, torch.autograd.grad(out.sum(), args)


def _compile(rank, world):
    """Every rank asks for the same new kernels at the same moment (after a barrier), through
    tessel.distributed and tessel.torch; the sharded result is checked against the plain one."""
    whole = _whole()
    mine = _mine(rank, whole)
    x0, nx = sum(ROWS[0][:rank]), ROWS[0][rank]
    for n, formula in enumerate(FORMULAS):
        dist.barrier()
        if n == 0:
            got, grads = _sharded(formula, mine)
            want, _ = _plain(formula, whole)
        else:
            want, _ = _plain(formula, whole)
            got, grads = _sharded(formula, mine)
        torch.testing.assert_close(got, want[x0:x0 + nx])
        assert all(torch.isfinite(g).all() for g in grads)
    return "computed"


def _raised(rank, call):
    """What `call` raised on this rank, and after how long; it must not return."""
    start = time.monotonic()
    try:
        call()
    except Exception as e:  # noqa: B902 -- whatever the call raises is what the test checks
        return f"{type(e).__name__}: {e}", time.monotonic() - start
    raise AssertionError(f"rank {rank}: the call returned")


def _errors(rank, world):
    """Three ways for one rank to let the others down; every rank must raise, none hang:
    rank 2's own arguments are wrong; rank 1 never makes a call that ranks 0 and 2 make; rank 1
    fails after the ranks' check, half-way into the ring."""
    # Groups with a short timeout: what a rank waits for another that does not come.
    short = [dist.new_group(timeout=timedelta(seconds=SHORT_S)) for _ in range(2)]
    args = _mine(rank, _whole())
    bad = list(args)
    if rank == 2:  # b one row short of y: this rank's own error, before any message
        bad[2] = bad[2][:-1]
    out = {"local": _raised(rank, lambda: td.Genred(FORMULAS[0], ALIASES)(*bad))}
    if rank == 1:  # alive, but away from the call: the others must give up waiting
        dist.barrier()
    else:
        red = td.Genred(FORMULAS[0], ALIASES, group=short[0])
        out["absent"] = _raised(rank, lambda: red(*args, backend="interpreter"))
        dist.barrier()  # releases rank 1 once the others have given up
    # Rank 1 passes the check (a backend is not compared) but fails at its first block.
    red = td.Genred(FORMULAS[0], ALIASES, group=short[1])
    backend = "no-such-backend" if rank == 1 else "interpreter"
    out["ring"] = _raised(rank, lambda: red(*args, backend=backend))
    return out


def _logging_compiler(tmp_path, real):
    """A compiler that appends the path of each library it is asked to write to a log. It
    starts a compile a little late, so that the other ranks surely ask for the kernel while it
    is being built (a small kernel would otherwise compile in less than the ranks' skew)."""
    log, cc = tmp_path / "compiles.log", tmp_path / "logging-cc"
    cc.write_text("#!/bin/sh\nprev=\nfor a in \"$@\"; do\n"
                  f"  [ \"$prev\" = -o ] && echo \"$a\" >> {shlex.quote(str(log))} && sleep 0.2\n"
                  "  prev=$a\ndone\n"
                  f"exec {shlex.quote(real)} \"$@\"\n")
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    return str(cc), log


def test_ranks_sharing_a_cache_compile_each_kernel_once(tmp_path, monkeypatch):
    usable, real, _, problem = tessel._core.compiler()
    if not usable:
        pytest.skip(f"no C++ compiler: {problem}")
    cc, log = _logging_compiler(tmp_path, real)
    cache = tmp_path / "cache"
    monkeypatch.setenv("TESSEL_CXX", cc)
    monkeypatch.setenv("TESSEL_CACHE_DIR", str(cache))
    assert run_ranks(_compile, WORLD, WAIT_S) == {r: "computed" for r in range(WORLD)}
    # A library is written as <key>.tmp-<pid>-<n>.so, then renamed to <key>.so.
    keys = [os.path.basename(p).split(".")[0] for p in log.read_text().split()]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    assert not twice, f"kernels compiled more than once: {twice} (log: {keys})"
    published = sorted(p.stem for p in (cache / "kernels").glob("*/*.so"))
    assert published == sorted(keys)
    # At least a forward kernel and a gradient kernel per formula: both paths were compiled.
    assert len(keys) >= 2 * len(FORMULAS)


def test_a_failed_or_absent_rank_makes_the_others_raise():
    results = run_ranks(_errors, WORLD, WAIT_S)
    for rank in (0, 1):
        message, _ = results[rank]["local"]
        assert message.startswith("RuntimeError: ") and "rank 2 of the group refused its " \
            "arguments" in message, message
    assert results[2]["local"][0] == ("ValueError: tessel.distributed.Genred: argument 2 has 6 "
                                      "rows but argument 1 has 7; all Vj variables must agree")
    assert "backend" in results[1]["ring"][0]
    for what, rank in [("absent", 0), ("absent", 2), ("ring", 0), ("ring", 2)]:
        message, elapsed = results[rank][what]
        # About the short timeout; loose for a loaded machine, far below the default's minutes.
        assert elapsed < SHORT_S + 20, (what, rank, elapsed, message)
        assert message.startswith("RuntimeError: tessel.distributed.Genred: "), message
        assert "process group's timeout" in message, message
