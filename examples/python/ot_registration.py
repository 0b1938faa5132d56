"""
Sinkhorn registration: the flow of a point cloud
================================================

A source cloud (a noisy ring) flows toward a target cloud (a crescent) by gradient descent on
the debiased Sinkhorn divergence, ``x <- x - lr N grad_x S(x, y)``, with
``tessel.ot.SamplesLoss`` (GeomLoss's signature: this is the loop of GeomLoss's tutorials with
the import changed). Every step costs a few LogSumExp reductions and memory O(N + M). The
figure shows the cloud at five moments of the flow.

Run: ``PYTHONPATH=build/python python3 examples/python/ot_registration.py [--n 5000]
[--steps 60] [--png flow.png]``; the gallery uses N = 1,500 and 40 steps, the full size is
``--n 5000 --steps 60``.
"""
import argparse
import math
import sys
import time

import matplotlib.pyplot as plt
import torch

from tessel.ot import SamplesLoss


def clouds(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = 2 * math.pi * torch.rand(n, generator=g)
    r = 0.3 + 0.03 * torch.randn(n, generator=g)
    x = torch.stack([0.35 + r * t.cos(), 0.5 + r * t.sin()], 1)
    u = math.pi * torch.rand(n, generator=g)
    w = 0.05 * torch.randn(n, generator=g)
    y = torch.stack([0.6 + (0.25 + w) * u.sin(), 0.5 + (0.35 + w) * u.cos()], 1)
    return x, y


def main(argv=None):
    ap = argparse.ArgumentParser(description="Sinkhorn gradient flow of a point cloud.")
    ap.add_argument("--n", type=int, default=1500)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--png", default=None, help="also write the figure to this PNG file")
    args = ap.parse_args(argv)
    x0, y = clouds(args.n)
    loss = SamplesLoss("sinkhorn", p=2, blur=0.01, scaling=0.8)
    x = x0.clone().requires_grad_()
    start = time.perf_counter()
    first = None
    shown = {0, 1, 2, 4}  # the flow is fast at this step size: most of it is in the first steps
    snapshots = []
    for step in range(args.steps):
        if step in shown:
            snapshots.append((step, x.detach().clone()))
        value = loss(x, y)
        (grad,) = torch.autograd.grad(value, x)
        first = float(value) if first is None else first
        with torch.no_grad():
            x -= args.lr * len(x) * grad  # the gradient of a mean is 1/N per point
    snapshots.append((args.steps, x.detach().clone()))
    final = float(loss(x, y))
    print(f"N = M = {args.n:,}: Sinkhorn divergence {first:.3e} -> {final:.3e} after "
          f"{args.steps} steps, {time.perf_counter() - start:.1f} s")
    if not final < 0.05 * first:
        sys.exit("ot_registration: the flow did not bring the source onto the target")
    return snapshots, y, args.png


snapshots, target, png = main()

# %%
# The source (blue) at five moments of the flow onto the target (red).
fig, axes = plt.subplots(1, len(snapshots), figsize=(3.2 * len(snapshots), 3.4))
for ax, (step, pts) in zip(axes, snapshots):
    ax.plot(*target.T, ".", color="tab:red", ms=1.5, alpha=0.5)
    ax.plot(*pts.T, ".", color="tab:blue", ms=1.5)
    ax.set_title(f"step {step}")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
fig.tight_layout()
if png:
    fig.savefig(png, dpi=80)
    print(f"figure: {png}")
plt.show()
