"""
A Gaussian kernel sum sharded over processes
============================================

A Gaussian kernel sum sharded over processes by tessel.distributed, checked against one process.


Each rank holds a contiguous slice of the rows of x and of y (and b); the sharded Genred returns
the rank's rows of a_i = sum_j exp(-G ``|x_i - y_j|^2``) b_j, summed over every rank's j. Each rank
then backpropagates its own loss, sum(a_rank^2); what every rank receives is the gradient of the
sum of all the ranks' losses, for its own rows of x, y and b. At this small size every rank also
computes the whole problem in one process (tessel.torch.Genred) and checks its rows against it.

Run under torchrun (NCCL and one GPU per rank when CUDA is there, else gloo on CPUs):
    torchrun --nproc_per_node=4 examples/python/distributed_torchrun.py [--points 20000]
or by itself, spawning its own gloo processes on this machine:
    PYTHONPATH=build/python python3 examples/python/distributed_torchrun.py --nproc 2

With ``--png FILE`` it also writes the figure: each row's error of the sharded sum against one
process's, by rank, and the largest errors against the tolerance. The documentation build starts
no processes: the figure below is the one this script wrote with ``--nproc 2 --png``.

.. image:: /images/distributed_torchrun.png
   :alt: the sharded sum against one process's, and the errors of the result and gradients
"""
import argparse
import os
import tempfile
import time

import matplotlib.pyplot as plt
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tessel.distributed as td
import tessel.torch

FORMULA = "Exp(-G*SqDist(X,Y))*B"
ALIASES = ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)", "G = Pm(1)"]
RTOL = 1e-4  # float32; one process and the ring add the terms in different orders
NAMES = ("result", "grad x", "grad y", "grad b")
# The gallery runs no processes: its thumbnail is the figure written by --png.
# sphinx_gallery_thumbnail_path = "images/distributed_torchrun.png"


def cloud(n, device):
    """The whole problem, built from one seed: the same on every rank (a real program would
    read only its own rows)."""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(n, 3, generator=gen), torch.randn(n, 3, generator=gen) + 0.5
    b = torch.rand(n, 1, generator=gen)
    return [t.to(device) for t in (x, y, b, torch.tensor([2.0]))]


def rows_of(t, rank, world):
    """This rank's rows: a contiguous slice, as even as the count allows."""
    return torch.tensor_split(t, world)[rank]


def rel_err(got, want):
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def sharded(rank, world, n, device):
    """The sharded sum and this rank's gradients: (its inputs, its result, the seconds)."""
    x, y, b, g = cloud(n, device)
    mine = [rows_of(t, rank, world).clone().requires_grad_() for t in (x, y, b)]
    gauss = td.Genred(FORMULA, ALIASES)  # the same arguments as tessel.torch.Genred
    t0 = time.perf_counter()
    a = gauss(*mine, g)                  # collective: every rank calls it, with its own rows
    a.square().sum().backward()          # collective too: each rank's own loss
    return mine, a.detach(), time.perf_counter() - t0


def check(rank, world, n, device, mine, a):
    """Max relative errors of this rank's result and gradients against one process's, the
    worst over the ranks (an all_reduce)."""
    whole = [t.clone().requires_grad_(k < 3) for k, t in enumerate(cloud(n, device))]
    ref = tessel.torch.Genred(FORMULA, ALIASES)(*whole)
    ref.square().sum().backward()        # the sum of every rank's loss, in one process
    errs = [rel_err(a, rows_of(ref.detach(), rank, world))]
    errs += [rel_err(m.grad, rows_of(w.grad, rank, world)) for m, w in zip(mine, whole[:3])]
    worst = torch.tensor(errs, dtype=torch.float64, device=device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return worst.tolist(), ref.detach()


def main(rank, world, n, device):
    """Runs and checks the sharded sum; rank 0 returns what the figure shows (others None)."""
    mine, a, seconds = sharded(rank, world, n, device)
    counts = torch.tensor([mine[0].shape[0], mine[1].shape[0]], device=device)
    every = [torch.empty_like(counts) for _ in range(world)]
    dist.all_gather(every, counts)
    errs, ref = check(rank, world, n, device, mine, a)
    rows = [None] * world  # every rank's result rows, for the figure (a few kB each)
    dist.all_gather_object(rows, a.cpu())
    if rank == 0:
        shards = ", ".join(f"{int(c[0])}/{int(c[1])}" for c in every)
        print(f"N = M = {n} points over {world} ranks ({dist.get_backend()}, {device}); "
              f"rows of x/y per rank: {shards}")
        print(f"rank 0: its {a.shape[0]} rows of the Gaussian sum and the gradients of its x, "
              f"y and b rows in {seconds:.3f} s")
        print("max relative error against one process, over the ranks: " +
              ", ".join(f"{k} {e:.1e}" for k, e in zip(NAMES, errs)))
    if max(errs) > RTOL:
        raise AssertionError(f"rank {rank}: errors {errs} above {RTOL}")
    if rank == 0:
        return dict(rows=rows, ref=ref.cpu(), errs=errs, backend=dist.get_backend(),
                    device=str(device))
    return None


def plot(shown, png=None):
    """Left: each row's error of the sharded sum against one process's result, coloured by the
    rank that holds the row. Right: the largest relative errors over the ranks, and RTOL."""
    rows, ref = shown["rows"], shown["ref"][:, 0]
    scale = float(ref.abs().max())
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    start = 0
    for r, a in enumerate(rows):
        stop = start + a.shape[0]
        err = (a[:, 0] - ref[start:stop]).abs() / scale
        # Rows that agree exactly (0) cannot be drawn on a log axis; they are left out.
        ax.semilogy(range(start, stop), err.masked_fill(err == 0, float("nan")), ".", ms=2,
                    label=f"rank {r}: rows {start}-{stop - 1}")
        start = stop
    ax.axhline(RTOL, color="k", ls=":", label=f"tolerance {RTOL:g}")
    ax.set_xlabel("row i")
    ax.set_ylabel("|a_i sharded - a_i one process| / max |a|")
    ax.set_title(f"{len(ref):,} rows over {len(rows)} ranks ({shown['backend']}, "
                 f"{shown['device']})")
    ax.legend(fontsize=8, markerscale=4, loc="lower right")
    ax2.bar(NAMES, shown["errs"], color="tab:blue")
    ax2.axhline(RTOL, color="k", ls=":", label=f"tolerance {RTOL:g}")
    ax2.set_yscale("log")
    ax2.set_ylabel("largest relative error over the ranks")
    ax2.set_title("sharded result and gradients against one process")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    if png:
        fig.savefig(png, dpi=80)
        print(f"figure: {png}")
    return fig


def _spawned(rank, world, store, n):
    # Without torchrun's address and port, the ranks meet through a file (torch's FileStore).
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        shown = main(rank, world, n, "cpu")
        if shown is not None:  # rank 0 hands the figure's data to the spawning process
            torch.save(shown, f"{store}.figure")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    ap.add_argument("--points", type=int, default=4000, help="points in x and in y, all ranks")
    ap.add_argument("--nproc", type=int, default=2,
                    help="without torchrun: how many gloo processes to spawn here")
    ap.add_argument("--png", default=None, help="also write the figure to this PNG file")
    args = ap.parse_args()
    if "RANK" in os.environ:  # under torchrun: it set RANK, WORLD_SIZE, MASTER_ADDR / PORT
        gpu = torch.cuda.is_available()
        dev = f"cuda:{os.environ.get('LOCAL_RANK', '0')}" if gpu else "cpu"
        if gpu:
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if gpu else "gloo")
        try:
            figure = main(dist.get_rank(), dist.get_world_size(), args.points, dev)
        finally:
            dist.destroy_process_group()
    else:
        with tempfile.TemporaryDirectory() as tmp:
            store = os.path.join(tmp, "store")
            mp.spawn(_spawned, args=(args.nproc, store, args.points), nprocs=args.nproc)
            figure = torch.load(f"{store}.figure")
    if figure is not None:  # rank 0 (or the spawning process) draws
        plot(figure, args.png)
        plt.show()
