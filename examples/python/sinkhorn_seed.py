"""
A Sinkhorn loop differentiated through its iterations
=====================================================

The first user story's Sinkhorn loop, differentiated through its iterations, made to scale.

Points on two unit circles, X (cos t, sin t) and Y (cos t + 1, sin t), uniform weights P and Q,
the Gaussian kernel K_ij = exp(-``|x_i - y_j|^2`` / s^2) with s = 0.5, `iters` Sinkhorn iterations
A = P / (K B), B = Q / (K^T A), the cost sum_ij A_i B_j K_ij ``|x_i - y_j|^2`` and its gradient dX.
Y is the fixed target, as in the story. Four variants, each a function returning (cost, dX)::

  dense       the story's code: N x N matrices and plain autograd (memory O(N^2)).
  tessel      tessel reductions, plain autograd through the loop: no N x N matrix, but every
              iteration's vectors are kept for the backward (memory O(iters * N)).
  checkpoint  tessel reductions in tessel.torch.checkpoint_loop: at most `snapshots` states are
              kept, the others are recomputed (memory O(snapshots * N), more time).
  logdomain   the same iterations on the potentials f = s^2 log(A / P), g = s^2 log(B / Q), each a
              LogSumExp "softmin" (stable for any s, as no exp(-C/s^2) is formed alone), in
              checkpoint_loop too.

The figure shows each variant's time and its gradient dX along the circle, over the first's.

Run::

    PYTHONPATH=build/python python3 examples/python/sinkhorn_seed.py [--n 2000] [--iters 100]
        [--variant all] [--dtype float64] [--snapshots 10]
"""
import argparse
import math
import time

import matplotlib.pyplot as plt
import numpy as np
import torch

from tessel.torch import Genred, checkpoint_loop

S = 0.5  # kernel width of the story
VARIANTS = ("dense", "tessel", "checkpoint", "logdomain")
# Relative agreement asked of each variant against the first one run. The plain-domain variants
# do the same arithmetic in a different order; the log domain takes exp/log of every scaling.
TOLERANCE = {"float64": {"plain": 1e-10, "logdomain": 1e-8},
             "float32": {"plain": 1e-3, "logdomain": 1e-3}}


def circles(n, dtype=torch.float64):
    """The story's data: X requires grad; Y, P, Q do not (the target is fixed)."""
    t = np.linspace(0, 2 * np.pi, n)
    x = torch.from_numpy(np.stack([np.cos(t), np.sin(t)], 1)).to(dtype).requires_grad_(True)
    y = torch.from_numpy(np.stack([np.cos(t) + 1, np.sin(t)], 1)).to(dtype)
    p = torch.full((n,), 1.0 / n, dtype=dtype)
    q = torch.full((n,), 1.0 / n, dtype=dtype)
    return x, y, p, q


# ---- (1) dense: the story's code, with today's torch instead of Variable ----------------------
def _squared_distances(x, y):
    """Returns the matrix of |x_i-y_j|^2."""
    x_col = x.unsqueeze(1)
    y_lin = y.unsqueeze(0)
    return torch.sum((x_col - y_lin) ** 2, 2)


def _k(x, y, s):
    """Returns the matrix of k(x_i,y_j)."""
    sq = _squared_distances(x, y) / (s**2)
    return torch.exp(-sq)


def sinkhorn_dense(X, Y, P, Q, iters, snapshots=None):
    K = _k(X, Y, S)
    A = torch.ones_like(P)
    B = torch.ones_like(Q)
    for _ in range(iters):
        A = P / (K @ B)
        B = Q / (K.t() @ A)
    Gamma = (A.unsqueeze(1) @ B.unsqueeze(0)) * K
    Cost = torch.sum(Gamma * _squared_distances(X, Y))
    (dX,) = torch.autograd.grad(Cost, X)
    return Cost.detach(), dX


# ---- tessel reductions (G = 1 / s^2) ------------------------------------------------------------
_XY = ["X = Vi(2)", "Y = Vj(2)"]
_K = "Exp(-G*SqDist(X,Y))"
_KB = Genred(f"{_K} * B", _XY + ["B = Vj(1)", "G = Pm(1)"], axis=1)  # (K B)_i
_KTA = Genred(f"{_K} * A", _XY + ["A = Vi(1)", "G = Pm(1)"], axis=0)  # (K^T A)_j
_KCB = Genred(f"{_K} * SqDist(X,Y) * B", _XY + ["B = Vj(1)", "G = Pm(1)"], axis=1)
# log sum_j exp(H_j - G C_ij) and log sum_i exp(H_i - G C_ij), C_ij = |x_i - y_j|^2
_LSE_J = Genred("H - G*SqDist(X,Y)", _XY + ["H = Vj(1)", "G = Pm(1)"], "LogSumExp", axis=1)
_LSE_I = Genred("H - G*SqDist(X,Y)", _XY + ["H = Vi(1)", "G = Pm(1)"], "LogSumExp", axis=0)
# The plan pi_ij = exp(U_i + V_j - G C_ij) is <= 1 wherever the others are finite: no overflow.
_PLAN_C = Genred("Exp(U + V - G*SqDist(X,Y)) * SqDist(X,Y)",
                 _XY + ["U = Vi(1)", "V = Vj(1)", "G = Pm(1)"], axis=1)


def _columns(X, P, Q):
    g = torch.tensor([1.0 / S**2], dtype=X.dtype, device=X.device)
    return P.reshape(-1, 1), Q.reshape(-1, 1), g


def _plain_step(X, Y, P, Q, G):
    def step(state, k):
        _, B = state
        A = P / _KB(X, Y, B, G)
        return A, Q / _KTA(X, Y, A, G)
    return step


def _plain_cost(X, Y, A, B, G):
    return (A * _KCB(X, Y, B, G)).sum()


# ---- (2) tessel: the same loop, plain autograd --------------------------------------------------
def sinkhorn_tessel(X, Y, P, Q, iters, snapshots=None):
    P, Q, G = _columns(X, P, Q)
    step = _plain_step(X, Y, P, Q, G)
    state = (torch.ones_like(P), torch.ones_like(Q))
    for k in range(iters):
        state = step(state, k)
    cost = _plain_cost(X, Y, *state, G)
    (dX,) = torch.autograd.grad(cost, X)
    return cost.detach(), dX


# ---- (3) checkpoint: Revolve over the loop ------------------------------------------------------
def sinkhorn_checkpoint(X, Y, P, Q, iters, snapshots=10, stats=None):
    P, Q, G = _columns(X, P, Q)
    state = (torch.ones_like(P), torch.ones_like(Q))
    # X reaches the steps through their closure: it must be listed to receive its gradient.
    A, B = checkpoint_loop(_plain_step(X, Y, P, Q, G), state, iters, snapshots=snapshots,
                           params=[X], stats=stats)
    cost = _plain_cost(X, Y, A, B, G)
    (dX,) = torch.autograd.grad(cost, X)
    return cost.detach(), dX


# ---- (4) logdomain: potentials and softmins, in checkpoint_loop ---------------------------------
def sinkhorn_logdomain(X, Y, P, Q, iters, snapshots=10, stats=None):
    P, Q, G = _columns(X, P, Q)
    eps = S**2
    log_p, log_q = P.log(), Q.log()

    # f_i = -eps log sum_j Q_j exp((g_j - C_ij) / eps) is log(A_i / P_i) * eps after A = P / (K B)
    def step(state, k):
        _, g = state
        f = -eps * _LSE_J(X, Y, log_q + g / eps, G)
        return f, -eps * _LSE_I(X, Y, log_p + f / eps, G)

    # A = B = 1 to start, as in the plain loop
    state = (-eps * log_p, -eps * log_q)
    f, g = checkpoint_loop(step, state, iters, snapshots=snapshots, params=[X], stats=stats)
    cost = _PLAN_C(X, Y, log_p + f / eps, log_q + g / eps, G).sum()
    (dX,) = torch.autograd.grad(cost, X)
    return cost.detach(), dX


FUNCTIONS = {"dense": sinkhorn_dense, "tessel": sinkhorn_tessel,
             "checkpoint": sinkhorn_checkpoint, "logdomain": sinkhorn_logdomain}


def run(variant, n, iters, dtype="float32", snapshots=10):
    """One variant on the story's data of size n: (cost, dX). Used by bench/loops_bench.py."""
    X, Y, P, Q = circles(n, getattr(torch, dtype))
    return FUNCTIONS[variant](X, Y, P, Q, iters, snapshots)


def _rel(a, b):
    return float((a - b).norm() / b.norm())


def main(argv=None):
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--variant", nargs="+", default=["all"], choices=VARIANTS + ("all",))
    ap.add_argument("--dtype", default="float64", choices=("float32", "float64"))
    ap.add_argument("--snapshots", type=int, default=10,
                    help="states checkpoint and logdomain may store at once")
    args = ap.parse_args(argv)
    variants = VARIANTS if "all" in args.variant else tuple(dict.fromkeys(args.variant))
    dtype = getattr(torch, args.dtype)
    X, Y, P, Q = circles(args.n, dtype)
    print(f"Sinkhorn, N = M = {args.n}, {args.iters} iterations, s = {S}, {args.dtype}")
    results, seconds = {}, {}
    for v in variants:
        stats = {}
        kw = dict(stats=stats) if v in ("checkpoint", "logdomain") else {}
        t0 = time.perf_counter()
        cost, dX = FUNCTIONS[v](X, Y, P, Q, args.iters, args.snapshots, **kw)
        elapsed = time.perf_counter() - t0
        results[v], seconds[v] = (cost, dX), elapsed
        extra = (f"  ({stats['step_calls']} step calls, <= {stats['max_stored']} of "
                 f"{stats['snapshots']} snapshots stored)" if stats else "")
        print(f"  {v:<10} cost {cost.item():.15g}  |dX| {dX.norm().item():.15g}  "
              f"{elapsed:7.2f} s{extra}")
    ok = True
    ref = variants[0]
    for v in variants[1:]:
        tol = TOLERANCE[args.dtype]["logdomain" if "logdomain" in (v, ref) else "plain"]
        ec = _rel(results[v][0], results[ref][0])
        ed = _rel(results[v][1], results[ref][1])
        good = ec <= tol and ed <= tol and math.isfinite(ec) and math.isfinite(ed)
        ok &= good
        print(f"  {v} vs {ref}: relative difference cost {ec:.1e}, dX {ed:.1e} "
              f"(tolerance {tol:.0e}) {'ok' if good else 'FAILED'}")
    return 0 if ok else 1, (args, results, seconds)


def plot(args, results, seconds):
    """Left: each variant's time for the loop and its gradient. Right: how far each variant's
    cost and dX are from the first one run's, against the tolerance main checks."""
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = list(results)
    ax.bar(names, [seconds[v] for v in names], color=[f"C{k}" for k in range(len(names))])
    ax.set_ylabel("seconds (forward + backward)")
    ax.set_title(f"{args.iters} Sinkhorn iterations, N = M = {args.n:,}, {args.dtype}")
    ref, others = names[0], names[1:]
    pos = np.arange(len(others))
    diffs = [[_rel(results[v][part], results[ref][part]) for v in others] for part in (0, 1)]
    for k, label in enumerate(("cost", "dX")):
        ax2.bar(pos + 0.4 * k - 0.2, diffs[k], 0.4, color=f"C{k + 4}", label=f"{label} vs {ref}")
    tols = [TOLERANCE[args.dtype]["logdomain" if "logdomain" in (v, ref) else "plain"]
            for v in others]
    ax2.hlines(tols, pos - 0.4, pos + 0.4, color="k", label="tolerance checked")
    ax2.set_yscale("log")
    # An exact agreement (0) has no bar; the axis starts below the smallest difference.
    low = min([d for d in diffs[0] + diffs[1] if d > 0] + [1e-16]) / 10
    ax2.set_ylim(low, 1e3 * max(tols, default=1.0))
    ax2.set_xticks(pos, others)
    ax2.set_ylabel("relative difference")
    ax2.set_title(f"agreement with {ref}")
    ax2.legend(fontsize=8, loc="upper left", ncol=3)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    from _common import run_example  # main, plot, show; exit non-zero after a failed check

    run_example(main, plot)
