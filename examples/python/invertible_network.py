"""
An invertible network whose activations are not stored
======================================================

The last user story's invertible network: a deep stack of couplings, activations not stored.

A RevNet-style stack of `iters` additive coupling blocks on images x of shape (batch, 2C, n, n):
each block splits x into halves (x1, x2) along the channels and computes y1 = x1 + F(x2),
y2 = x2 + G(y1), with F and G small residual branches (3x3 conv, ReLU, 3x3 conv, C channels).
The loss is 1/2 mean((y - t)^2) for a fixed random target t; the gradient is d loss / d x (the
parameters' gradients are checked too by main). Two variants, each (loss, d loss / d x):

  plain       ReversibleCoupling(..., reversible=False): ordinary autograd, every block's
              activations (inputs, hidden layers, outputs) kept for the backward: memory grows
              linearly with the depth.
  reversible  ReversibleCoupling: each block frees its input and rebuilds it from its output in
              the backward (one more evaluation of F and G per block): memory flat in depth.

The same seeded weights in both. The rebuilt activations differ from the stored ones by rounding,
an error that grows with depth (the story's question); main reports it in float32 as well, and
the figure follows it over depths 1 to 4 times --iters, with the time of each variant.

Run::

    PYTHONPATH=build/python python3 examples/python/invertible_network.py [--n 16]
        [--iters 8] [--batch 4] [--channels 8] [--dtype float64]
"""
import argparse
import math
import time

import matplotlib.pyplot as plt
import torch
from torch import nn

from tessel.torch import ReversibleCoupling

VARIANTS = ("plain", "reversible")
# Relative agreement of reversible with plain: rebuilding the activations reorders nothing in
# float64 beyond rounding; float32 accumulates the rounding of every block's subtraction.
TOLERANCE = {"float64": 1e-10, "float32": 1e-3}


class Branch(nn.Module):
    """F or G: conv 3x3, ReLU, conv 3x3 on one half (C channels in and out)."""

    def __init__(self, channels):
        super().__init__()
        self.c1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.c2 = nn.Conv2d(channels, channels, 3, padding=1)
        with torch.no_grad():
            # Small residual updates keep a deep stack's activations of order one.
            self.c2.weight.mul_(0.2)

    def forward(self, x):
        return self.c2(torch.relu(self.c1(x)))


def make_net(depth, channels, dtype, reversible):
    """The stack, with the same seeded weights whatever the variant and dtype."""
    torch.manual_seed(0)
    blocks = [ReversibleCoupling(Branch(channels), Branch(channels), reversible=reversible)
              for _ in range(depth)]
    return nn.Sequential(*blocks).to(dtype)


def make_data(batch, channels, n, dtype):
    """Input x (requires grad) and target t, drawn in float64 so that every dtype sees one."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 2 * channels, n, n, generator=gen, dtype=torch.float64)
    t = torch.randn(batch, 2 * channels, n, n, generator=gen, dtype=torch.float64)
    return x.to(dtype).requires_grad_(True), t.to(dtype)


def evaluate(net, x, t, with_params=False):
    """(loss, d loss / d x[, d loss / d parameters])."""
    y = net(x)
    loss = 0.5 * ((y - t) ** 2).mean()
    params = list(net.parameters()) if with_params else []
    grads = torch.autograd.grad(loss, [x] + params)
    return (loss.detach(),) + tuple(grads) if with_params else (loss.detach(), grads[0])


def run(variant, n, iters, dtype="float32", batch=8, channels=32):
    """One variant with depth `iters` on images n x n: (loss, dx). Used by bench/loops_bench.py."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
    dt = getattr(torch, dtype)
    net = make_net(iters, channels, dt, reversible=variant == "reversible")
    x, t = make_data(batch, channels, n, dt)
    return evaluate(net, x, t)


def _rel(a, b):
    return float((a - b).norm() / b.norm())


def _compare(results, ref, v, tol):
    (l0, dx0, *dp0), (l1, dx1, *dp1) = results[ref], results[v]
    el, ex = _rel(l1, l0), _rel(dx1, dx0)
    ep = _rel(torch.cat([g.reshape(-1) for g in dp1]), torch.cat([g.reshape(-1) for g in dp0]))
    good = max(el, ex, ep) <= tol and all(map(math.isfinite, (el, ex, ep)))
    print(f"  {v} vs {ref}: relative difference loss {el:.1e}, dx {ex:.1e}, parameters {ep:.1e}"
          f" (tolerance {tol:.0e}) {'ok' if good else 'FAILED'}")
    return good


def main(argv=None):
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    ap.add_argument("--n", type=int, default=16, help="image side")
    ap.add_argument("--iters", type=int, default=8, help="depth (coupling blocks)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--channels", type=int, default=8, help="channels of a half")
    ap.add_argument("--dtype", default="float64", choices=("float32", "float64"))
    args = ap.parse_args(argv)
    print(f"Invertible network, depth {args.iters}, x of shape ({args.batch}, "
          f"{2 * args.channels}, {args.n}, {args.n}), additive couplings, {args.dtype}")
    ok = True
    dtypes = [args.dtype] + (["float32"] if args.dtype == "float64" else [])
    for dtype in dtypes:
        dt = getattr(torch, dtype)
        results = {}
        for v in VARIANTS:
            net = make_net(args.iters, args.channels, dt, reversible=v == "reversible")
            x, t = make_data(args.batch, args.channels, args.n, dt)
            t0 = time.perf_counter()
            results[v] = evaluate(net, x, t, with_params=True)
            elapsed = time.perf_counter() - t0
            loss, dx = results[v][:2]
            print(f"  {dtype} {v:<10} loss {loss.item():.15g}  |dx| {dx.norm().item():.15g}  "
                  f"{elapsed:6.2f} s")
        good = _compare(results, "plain", "reversible", TOLERANCE[dtype])
        # The float32 figures are shown for the story's question (how large the rebuilt
        # activations' error gets); only the requested dtype decides the exit status.
        ok &= good or dtype != args.dtype
    return 0 if ok else 1, (args,)


def sweep(args, dtype, depths):
    """At each depth: the relative difference of reversible's parameter gradients from plain's,
    and each variant's seconds for the loss and its gradients."""
    diffs, seconds = [], {v: [] for v in VARIANTS}
    for depth in depths:
        results = {}
        for v in VARIANTS:
            net = make_net(depth, args.channels, dtype, reversible=v == "reversible")
            x, t = make_data(args.batch, args.channels, args.n, dtype)
            t0 = time.perf_counter()
            results[v] = evaluate(net, x, t, with_params=True)
            seconds[v].append(time.perf_counter() - t0)
        flat = {v: torch.cat([g.reshape(-1) for g in r[2:]]) for v, r in results.items()}
        diffs.append(_rel(flat["reversible"], flat["plain"]))
    return diffs, seconds


def plot(args):
    """Left: reversible against plain (parameter gradients) over the depth, by dtype, with the
    tolerance main checks. Right: the time of each variant over the depth (float64)."""
    depths = [d for d in (1, 2, 4, 8, 16, 32, 64) if d <= 4 * args.iters]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    seconds = {}
    for k, dtype in enumerate(("float32", "float64")):
        diffs, seconds[dtype] = sweep(args, getattr(torch, dtype), depths)
        # An exact agreement (0) cannot be drawn on a log axis: it leaves a gap in the curve.
        ax.semilogy(depths, [d if d > 0 else float("nan") for d in diffs], "o-", color=f"C{k}",
                    label=f"{dtype}")
        ax.axhline(TOLERANCE[dtype], color=f"C{k}", ls=":", lw=0.8, label=f"{dtype} tolerance")
    for v, mark in zip(VARIANTS, ("o-", "s--")):
        ax2.plot(depths, seconds["float64"][v], mark, label=v)
    for a in (ax, ax2):
        a.set_xscale("log", base=2)
        a.set_xticks(depths, [str(d) for d in depths])
        a.minorticks_off()
        a.set_xlabel("depth (coupling blocks)")
        a.legend(fontsize=8)
    ax.set_ylabel("relative difference of d loss / d parameters")
    ax.set_title("rebuilt activations: reversible vs plain")
    ax2.set_ylabel("seconds (loss and gradients, float64)")
    ax2.set_title(f"x of shape ({args.batch}, {2 * args.channels}, {args.n}, {args.n})")
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    from _common import run_example  # main, plot, show; exit non-zero after a failed check

    run_example(main, plot)
