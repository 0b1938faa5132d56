"""
Entropic OT between two circles (the first user story)
======================================================

The first user story's problem with tessel.ot: entropic OT between two circles and its gradient.


The story: N points on the unit circle X and on the shifted circle Y, uniform weights, the
Gaussian kernel exp(-``|x_i - y_j|^2`` / s^2) with s = 0.5, Sinkhorn iterations and the gradient of
the transport cost in X, which ran out of memory at N = 10,000 in dense PyTorch. The same
problem (cost ``|x - y|^2`` / 2, eps = s^2 / 2, i.e. blur = s / sqrt(2)) is a few lines here, at
N = 10,000 by default and 100,000 with --n 100000, in O(N) memory: the 1e10-entry kernel
matrix of the larger size is never formed.

Run: PYTHONPATH=build/python python3 examples/python/ot_seed.py [--n 100000] [--check]
--check compares the value, the plan's marginals and the gradient with a dense float64 Sinkhorn
(use it with a small --n). The figure shows where the plan sends a few x_i (the mean of their
partners y_j, weighted by the plan) and the solver's marginal error along its iterations.
"""
import argparse
import math
import resource
import sys
import time

import matplotlib.pyplot as plt
import torch

from tessel.ot import solve_sample

S = 0.5  # the story's kernel width


def circles(n, dtype):
    t = torch.linspace(0, 2 * math.pi, n, dtype=torch.float64)
    x = torch.stack([t.cos(), t.sin()], 1).to(dtype).requires_grad_()
    y = torch.stack([t.cos() + 1, t.sin()], 1).to(dtype)
    return x, y


def dense_check(x, y, r):
    """Converged dense float64 log-domain Sinkhorn: value, marginals and gradient."""
    xd, yd = x.detach().double(), y.double()
    eps, n = S * S / 2, len(xd)
    C = ((xd[:, None] - yd[None]) ** 2).sum(-1) / 2
    lw = torch.full((n,), -math.log(n), dtype=torch.float64)
    f, g = torch.zeros(n, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)
    for _ in range(20000):
        f_old = f
        f = -eps * torch.logsumexp(lw[None] + (g[None] - C) / eps, 1)
        g = -eps * torch.logsumexp(lw[:, None] + (f[:, None] - C) / eps, 0)
        if (f - f_old).abs().max() < 1e-12:
            break
    plan = torch.exp(lw[:, None] + lw[None] + (f[:, None] + g[None] - C) / eps)
    value = float(f.mean() + g.mean())
    grad = plan.sum(1)[:, None] * xd - plan @ yd
    errs = {"value": abs(float(r.value) - value) / abs(value),
            "marginal": float((r.marginals[0].double() - 1 / n).abs().sum()),
            "gradient": float((x.grad.double() - grad).norm() / grad.norm())}
    return errs


def main():
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--tol", type=float, default=1e-4, help="marginal error to stop at")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    x, y = circles(args.n, getattr(torch, args.dtype))

    start = time.perf_counter()
    # The whole computation: solve, then differentiate the transport cost in x.
    r = solve_sample(None, x, None, y, blur=S / math.sqrt(2), tol=args.tol, max_iter=2000)
    r.value.backward()
    elapsed = time.perf_counter() - start

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    dense = args.n * args.n * x.element_size() / 2**30
    print(f"N = {args.n:,} ({args.dtype}): OT_eps = {float(r.value):.6f}, {r.n_iter} iterations, "
          f"marginal error {r.marginal_error:.2e}, |dX| = {float(x.grad.norm()):.4e}")
    print(f"solve + gradient: {elapsed:.2f} s; peak resident memory {peak:.0f} MiB (one dense "
          f"N x N matrix would take {dense:.1f} GiB)")
    matches = r.plan.argmax(1)[:, 0]
    print(f"x_0 is sent mostly to y_{int(matches[0])}; the plan moves mass "
          f"{float(r.marginals[0].sum()):.6f}")
    if args.check:
        errs = dense_check(x, y, r)
        print("against dense float64: " + ", ".join(f"{k} {v:.1e}" for k, v in errs.items()))
        limit = 1e-6 if args.dtype == "float64" else 1e-3
        bad = {k: v for k, v in errs.items() if not v <= max(limit, 10 * args.tol)}
        if bad:
            sys.exit(f"ot_seed: disagrees with the dense reference: {bad}")
    return x.detach(), y, r, args.tol


def plot(x, y, r, tol, shown=40):
    """Left: `shown` of the x_i joined to the plan's mean partner sum_j pi_ij y_j / sum_j pi_ij
    (one reduction over the lazy plan). Right: the marginal error and eps per iteration."""
    with torch.no_grad():
        target = (r.plan @ y) / r.plan.sum(1)
    rows = torch.linspace(0, len(x) - 1, shown).long()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.4), gridspec_kw={"width_ratios": [1.4, 1]})
    ax.plot(*x.T, "-", color="tab:blue", lw=1, label="X (source)")
    ax.plot(*y.T, "-", color="tab:red", lw=1, label="Y (target)")
    for i in rows:
        ax.plot([x[i, 0], target[i, 0]], [x[i, 1], target[i, 1]], "-", color="0.5", lw=0.6)
    ax.plot(*target[rows].T, ".", color="k", ms=4, label="plan's mean partner of x_i")
    ax.set_aspect("equal")
    ax.set_xlabel("first coordinate")
    ax.set_ylabel("second coordinate")
    ax.set_title(f"entropic OT plan, N = {len(x):,}, blur = {S / math.sqrt(2):.3f}")
    ax.set_ylim(-1.1, 1.5)  # room for the legend above the circles
    ax.legend(fontsize=8, loc="upper center", ncol=3)
    steps = range(1, len(r.history) + 1)
    ax2.semilogy(steps, [h[1] for h in r.history], "o-", label="marginal error")
    ax2.semilogy(steps, [h[0] for h in r.history], "s--", label="eps (annealed)")
    ax2.axhline(tol, color="k", lw=0.6, ls=":", label=f"tol = {tol:g}")
    ax2.set_xlabel("Sinkhorn iteration")
    ax2.set_title("convergence of the solver")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    plot(*main())
    plt.show()
