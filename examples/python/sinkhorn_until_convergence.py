"""
Sinkhorn until convergence with checkpoint_while
================================================

The first user story's Sinkhorn loop run until convergence, differentiated with checkpoint_while.


The story iterates Sinkhorn a fixed 1000 times between two point clouds and runs out of memory.
Here the same problem (points on two unit circles, X (cos t, sin t) and Y (cos t + 1, sin t),
uniform weights, the Gaussian kernel of width s = 0.5, i.e. the entropic regularisation
eps = s^2) runs in the log domain with tessel's LogSumExp reductions (no N x N matrix), and only
as long as needed: while the row marginal's L1 error is above `tol`. The number of steps is known
only when the loop stops, so `tessel.torch.checkpoint_while` differentiates it with at most
`snapshots` stored states; the cost sum_ij pi_ij ``|x_i - y_j|^2`` is differentiated with respect to
the points X (Y is the fixed target, as in the story).

Variants, each a function returning (cost, dX, info)::

  while     checkpoint_while, the loop stopping at the tolerance (memory O(snapshots * N)).
  loop      checkpoint_loop with the number of steps given (the one `while` found): Revolve's
            offline optimum, the reference for the online schedule's recomputations.
  unrolled  plain autograd through the same number of steps (memory O(steps * N)).

Run::

    PYTHONPATH=build/python python3 examples/python/sinkhorn_until_convergence.py [--n 10000]
        [--tol 1e-2] [--snapshots 8] [--dtype float32] [--check] [--levels]

--check also runs `loop` and `unrolled` with the steps `while` took and compares the gradients.
--levels keeps two snapshots in (device) memory, two in host RAM and the others on disk
(tessel.torch.SnapshotLevels), as for states too large for memory, and prints each level's use.
The figure shows the marginal error at each step of `while` and the gradient dX on the circle.
"""
import argparse
import math
import resource
import time

import matplotlib.pyplot as plt
import numpy as np
import torch

from tessel.torch import Genred, SnapshotLevels, checkpoint_loop, checkpoint_while

S = 0.5  # the story's kernel width: eps = S^2
_XY = ["X = Vi(2)", "Y = Vj(2)"]
# log sum_j exp(H_j - C_ij / eps) over j, and over i, C_ij = |x_i - y_j|^2, G = 1 / eps
_SOFTMIN_J = Genred("H - G*SqDist(X,Y)", _XY + ["H = Vj(1)", "G = Pm(1)"], "LogSumExp", axis=1)
_SOFTMIN_I = Genred("H - G*SqDist(X,Y)", _XY + ["H = Vi(1)", "G = Pm(1)"], "LogSumExp", axis=0)
# sum_j pi_ij C_ij with pi_ij = exp(U_i + V_j - G C_ij)
_TRANSPORT_COST = Genred("Exp(U + V - G*SqDist(X,Y)) * SqDist(X,Y)",
                         _XY + ["U = Vi(1)", "V = Vj(1)", "G = Pm(1)"], axis=1)
# Agreement asked of `loop` and `unrolled` with `while` under --check: the same operations in
# the same order, so only the reductions' summation order may differ between runs.
TOLERANCE = {"float64": 1e-10, "float32": 1e-4}


class Problem:
    """The story's point clouds and weights, and the Sinkhorn step on the potentials (f, g)."""

    def __init__(self, n, dtype):
        t = np.linspace(0, 2 * np.pi, n)
        self.X = torch.from_numpy(np.stack([np.cos(t), np.sin(t)], 1)).to(dtype)
        self.X.requires_grad_(True)
        self.Y = torch.from_numpy(np.stack([np.cos(t) + 1, np.sin(t)], 1)).to(dtype)
        self.eps = S**2
        self.G = torch.tensor([1.0 / self.eps], dtype=dtype)
        self.log_p = torch.full((n, 1), -math.log(n), dtype=dtype)
        self.log_q = torch.full((n, 1), -math.log(n), dtype=dtype)

    def start(self):
        """f = g = 0: the scalings A = B = 1 of the story's loop."""
        return torch.zeros_like(self.log_p), torch.zeros_like(self.log_q)

    def step(self, state, k):
        """One Sinkhorn iteration: f makes the row marginals exact, then g the column ones."""
        _, g = state
        f = -self.eps * _SOFTMIN_J(self.X, self.Y, self.log_q + g / self.eps, self.G)
        return f, -self.eps * _SOFTMIN_I(self.X, self.Y, self.log_p + f / self.eps, self.G)

    def marginal_error(self, state):
        """sum_i |sum_j pi_ij - p_i|: the columns are exact after a step, the rows are not."""
        f, g = state
        rows = self.log_p + f / self.eps + _SOFTMIN_J(self.X, self.Y,
                                                      self.log_q + g / self.eps, self.G)
        return (rows.exp() - self.log_p.exp()).abs().sum()

    def cost(self, state):
        f, g = state
        return _TRANSPORT_COST(self.X, self.Y, self.log_p + f / self.eps,
                               self.log_q + g / self.eps, self.G).sum()


def sinkhorn_while(prob, tol, snapshots, max_steps=10000, storage=None, trace=None):
    stats = {}
    start = prob.start()
    if storage == "levels":  # two states' bytes on the device, two in host RAM, the rest on disk
        two = 2 * sum(t.numel() * t.element_size() for t in start)
        storage = SnapshotLevels(device_bytes=two, host_bytes=two, disk_bytes=None)

    def going_on(st, k):
        err = prob.marginal_error(st)
        if trace is not None:  # the error before step k, for the figure
            trace[k] = float(err)
        return err > tol

    state = checkpoint_while(going_on, prob.step, start, snapshots, max_steps=max_steps,
                             stats=stats, storage=storage)
    cost = prob.cost(state)
    (dX,) = torch.autograd.grad(cost, prob.X)
    if stats["max_steps_reached"]:
        print(f"warning: the marginal error is still above {tol} after {max_steps} steps")
    return cost.detach(), dX, dict(n_steps=stats["n_steps"], step_calls=stats["step_calls"],
                                   recomputations=stats["recomputations"],
                                   storage=stats.get("storage"))


def sinkhorn_loop(prob, n_steps, snapshots):
    stats = {}
    state = checkpoint_loop(prob.step, prob.start(), n_steps, snapshots, stats=stats)
    cost = prob.cost(state)
    (dX,) = torch.autograd.grad(cost, prob.X)
    return cost.detach(), dX, dict(n_steps=n_steps, step_calls=stats["step_calls"],
                                   recomputations=stats["step_calls"] - n_steps)


def sinkhorn_unrolled(prob, n_steps):
    state = prob.start()
    for k in range(n_steps):
        state = prob.step(state, k)
    cost = prob.cost(state)
    (dX,) = torch.autograd.grad(cost, prob.X)
    return cost.detach(), dX, dict(n_steps=n_steps, step_calls=n_steps, recomputations=0)


def run(variant, n, iters, dtype="float32", snapshots=8, tol=1e-2):
    """One variant at size n: (cost, dX, info). `while` stops at `tol` (iters: a cap); `loop` and
    `unrolled` take `iters` steps. Used by bench/loops_bench.py."""
    prob = Problem(n, getattr(torch, dtype))
    if variant == "while":
        return sinkhorn_while(prob, tol, snapshots, max_steps=iters)
    if variant == "loop":
        return sinkhorn_loop(prob, iters, snapshots)
    if variant == "unrolled":
        return sinkhorn_unrolled(prob, iters)
    raise ValueError(f"run: variant must be while, loop or unrolled, got {variant!r}")


def _peak_rise(fn):
    """fn's result and the rise of the process's peak resident set during it (Linux resets the
    high-water mark through /proc/self/clear_refs; elsewhere the mark of the whole process)."""
    def status(key):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        base, mark = status("VmRSS:"), lambda: status("VmHWM:")
    except OSError:
        base, mark = 0, lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    out = fn()
    return out, mark() - base


def main(argv=None):
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    ap.add_argument("--n", type=int, default=2000, help="points per cloud")
    ap.add_argument("--tol", type=float, default=1e-2, help="L1 marginal error to stop at")
    ap.add_argument("--snapshots", type=int, default=8)
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--levels", action="store_true",
                    help="snapshots in device memory, host RAM and disk (2, 2 and the rest)")
    ap.add_argument("--check", action="store_true",
                    help="compare with checkpoint_loop and unrolled autograd at the same steps")
    args = ap.parse_args(argv)
    prob = Problem(args.n, getattr(torch, args.dtype))
    print(f"Sinkhorn until the marginal error < {args.tol:g}: N = M = {args.n}, eps = {S**2}, "
          f"{args.dtype}, {args.snapshots} snapshots")
    storage = "levels" if args.levels else None
    trace = {}
    runs = {"while": lambda: sinkhorn_while(prob, args.tol, args.snapshots, storage=storage,
                                            trace=trace)}
    results = {}
    for name in ("while", "loop", "unrolled") if args.check else ("while",):
        if name == "loop":
            runs[name] = lambda: sinkhorn_loop(prob, n_steps, args.snapshots)
        elif name == "unrolled":
            runs[name] = lambda: sinkhorn_unrolled(prob, n_steps)
        t0 = time.perf_counter()
        (cost, dX, info), peak = _peak_rise(runs[name])
        elapsed = time.perf_counter() - t0
        n_steps = info["n_steps"]
        results[name] = (cost, dX)
        print(f"  {name:<8} {n_steps} steps, {info['recomputations']} recomputations, "
              f"{elapsed:6.2f} s, peak resident memory +{peak / 2**20:.1f} MiB, "
              f"cost {cost.item():.10g}, |dX| {dX.norm().item():.10g}")
        for level, use in (info.get("storage") or {}).items():
            if isinstance(use, dict):
                print(f"    {level:<6} holds up to {use['capacity']} snapshots: {use['puts']} "
                      f"written, {use['gets']} read, at most {use['max_held']} at once")
    ok = all(math.isfinite(v.item()) for v in (results["while"][0], results["while"][1].norm()))
    tol = TOLERANCE[args.dtype]
    ref = results["while"][1]
    errors = {name: float((results[name][1] - ref).norm() / ref.norm())
              for name in results if name != "while"}
    for name, err in errors.items():
        print(f"  {name} vs while: relative difference of dX {err:.1e} (tolerance {tol:.0e}) "
              f"{'ok' if err <= tol else 'FAILED'}")
    status = 0 if ok and all(err <= tol for err in errors.values()) else 1
    return status, (prob, results["while"][1], trace, args.tol)


def plot(prob, dX, trace, tol, shown=60):
    """Left: the row marginal's L1 error before each step of `while`, down to tol. Right: the
    circles and -dX (the direction that lowers the transport cost) at `shown` points of X."""
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.4))
    ax.semilogy(list(trace), list(trace.values()), "o-", ms=3, label="L1 marginal error")
    ax.axhline(tol, color="k", lw=0.6, ls=":", label=f"tol = {tol:g}: the loop stops below")
    ax.set(xlabel="Sinkhorn step k", ylabel="sum_i |sum_j pi_ij - p_i|",
           title=f"checkpoint_while ran {len(trace) - 1} steps (unknown beforehand)")
    ax.legend(fontsize=8)
    X, Y = prob.X.detach(), prob.Y
    rows = torch.linspace(0, len(X) - 1, shown).long()
    ax2.plot(*X.T, "-", color="tab:blue", lw=1, label="X (moves)")
    ax2.plot(*Y.T, "-", color="tab:red", lw=1, label="Y (fixed target)")
    ax2.quiver(*X[rows].T, *(-dX[rows]).T, angles="xy", color="k", width=0.004,
               label="-dX: descent direction of the cost")
    ax2.set_aspect("equal")
    ax2.set_ylim(-1.1, 1.6)  # room for the legend above the circles
    ax2.set(xlabel="first coordinate", ylabel="second coordinate",
            title=f"gradient of the transport cost, N = {len(X):,}")
    ax2.legend(fontsize=8, loc="upper center", ncol=2)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    from _common import run_example  # main, plot, show; exit non-zero after a failed check

    run_example(main, plot)
