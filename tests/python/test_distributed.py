"""tessel.distributed.Genred: a ring over 2 and 3 gloo processes against one process's Genred.

Each worker builds the same data from one seed, takes its (uneven, sometimes empty) shards of x
and y, and checks its rows of the result and its gradients (x, y, b and the parameter) against
tessel.torch.Genred on the whole data. Workers live at module level (spawn imports them) and
report through a queue; the kernel cache (TESSEL_CACHE_DIR) is inherited, so they share it.
"""
import os
import socket
import traceback
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tessel.distributed as td
from tessel.torch import Genred

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with gloo is not available")

GAUSS = ("Exp(-G*SqDist(X,Y))*B", ["X=Vi(3)", "Y=Vj(3)", "B=Vj(2)", "G=Pm(1)"], "Sum")
LSE = ("-G*SqDist(X,Y)", ["X=Vi(3)", "Y=Vj(3)", "G=Pm(1)"], "LogSumExp")
# Per world size: (case, rows of x per rank, rows of y per rank); an empty shard in each.
SHARDS = {
    2: [(GAUSS, [7, 4], [3, 9]), (LSE, [0, 6], [5, 8])],
    3: [(GAUSS, [4, 6, 3], [0, 5, 6]), (LSE, [5, 0, 6], [4, 7, 0])],
}
RTOL = 1e-12
WAIT_S = 60


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _data(case, nx, ny):
    """The whole problem, the same on every rank (one seed): x, y, b, the parameter and the
    weights of the loss sum(out * w)."""
    gen = torch.Generator().manual_seed(1234)
    f64 = dict(dtype=torch.float64, generator=gen)
    x, y = torch.randn(nx, 3, **f64), torch.randn(ny, 3, **f64)
    b, g = torch.randn(ny, 2, **f64), torch.tensor([0.7], dtype=torch.float64)
    js = [y, b] if case is GAUSS else [y]
    w = torch.randn(nx, 2 if case is GAUSS else 1, **f64)
    return x, js, g, w


def _close(what, got, want):
    scale = want.abs().max().item() if want.numel() else 0.0
    torch.testing.assert_close(got, want, rtol=RTOL, atol=RTOL * max(scale, 1e-300),
                               msg=lambda m: f"{what}: {m}")


def _check_ring(rank, world):
    for case, xs, ys in SHARDS[world]:
        formula, aliases, op = case
        x, js, g, w = _data(case, sum(xs), sum(ys))
        full = [t.clone().requires_grad_() for t in (x, *js, g)]
        out = Genred(formula, aliases, reduction_op=op)(*full)
        want = torch.autograd.grad((out * w).sum(), full)
        xa, ya = sum(xs[:rank]), sum(ys[:rank])
        xr, yr = slice(xa, xa + xs[rank]), slice(ya, ya + ys[rank])
        mine = [x[xr], *(j[yr] for j in js), g]
        mine = [t.clone().requires_grad_() for t in mine]
        got = td.Genred(formula, aliases, reduction_op=op)(*mine)
        grads = torch.autograd.grad((got * w[xr]).sum(), mine)
        _close(f"{op} value", got, out.detach()[xr])
        _close(f"{op} grad x", grads[0], want[0][xr])
        for k in range(len(js)):
            _close(f"{op} grad j-variable {k}", grads[1 + k], want[1 + k][yr])
        _close(f"{op} grad parameter", grads[-1], want[-1])
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
    # Double backward is refused on every rank before any message is sent.
    args = [a.requires_grad_() for a in args]
    out = red(*args)
    with pytest.raises(NotImplementedError, match="double backward"):
        torch.autograd.grad(out.sum(), args, create_graph=True)
    return messages


WORKERS = {"ring": _check_ring, "mismatch": _check_mismatch}


def _worker(rank, world, port, name, queue):
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world,
                                timeout=timedelta(seconds=WAIT_S))
        queue.put((rank, True, WORKERS[name](rank, world)))
    except BaseException:  # noqa: B902 -- any failure goes back to the test, with its trace
        queue.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def _run(name, world):
    """Runs worker `name` on `world` spawned processes; returns their results by rank, or fails
    with the first trace a worker sent (or a timeout)."""
    ctx = mp.get_context("spawn")
    queue, port = ctx.Queue(), _free_port()
    procs = [ctx.Process(target=_worker, args=(r, world, port, name, queue))
             for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    try:
        for _ in range(world):
            rank, ok, value = queue.get(timeout=WAIT_S + 30)
            assert ok, f"rank {rank} of {world} failed:\n{value}"
            results[rank] = value
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join()
    return results


@pytest.mark.parametrize("world", [2, 3])
def test_ring_matches_one_process(world):
    assert _run("ring", world) == {r: "checked" for r in range(world)}


def test_a_rank_that_disagrees_is_named_on_every_rank():
    results = _run("mismatch", 2)
    assert "dtype torch.float32 vs torch.float64" in results[0][0]
    assert "expected 4 arguments" in results[1][1]


@pytest.mark.parametrize("op", ["Min", "ArgKMin", "SumSoftMaxWeight"])
def test_unsharded_reductions_say_so(op):
    with pytest.raises(NotImplementedError, match=f"reduction_op='{op}' is not sharded yet; "
                                                  "Sum and LogSumExp are"):
        td.Genred("SqDist(X,Y)", ["X=Vi(3)", "Y=Vj(3)"], reduction_op=op, opt_arg=2)


def test_axis_0_says_so():
    with pytest.raises(NotImplementedError, match="axis=0"):
        td.Genred("SqDist(X,Y)", ["X=Vi(3)", "Y=Vj(3)"], axis=0)


def test_without_a_process_group_the_call_says_what_to_do():
    assert not dist.is_initialized()
    red = td.Genred(*GAUSS[:2])
    args = torch.randn(4, 3), torch.randn(5, 3), torch.randn(5, 2), torch.tensor([0.5])
    with pytest.raises(RuntimeError, match="init_process_group"):
        red(*args)
