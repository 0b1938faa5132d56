"""
LDDMM shooting: three ways to differentiate it
==============================================

LDDMM geodesic shooting with an explicit Hamiltonian field: three ways to differentiate it.

n points q0 on the unit sphere (or circle, --dim 2) and a momentum p0 follow the geodesic
equations of the Gaussian kernel Hamiltonian H(q, p) = 1/2 sum_ij k(q_i, q_j) <p_i, p_j>,
k(x, y) = exp(-g ``|x - y|^2``), g = 1 / sigma^2, from t = 0 to 1 in `iters` steps:

    dq_i/dt =  dH/dp_i = sum_j k(q_i, q_j) p_j
    dp_i/dt = -dH/dq_i = 2 g sum_j k(q_i, q_j) <p_i, p_j> (q_i - q_j)

each a tessel reduction (no N x N matrix, and no autograd inside a step, unlike
lddmm_shooting.py, which differentiates H at every step). The loss is ``|q(1) - target|^2`` / n for
an ellipsoid target; the gradient is d loss / d p0. Three variants, each (loss, d loss / d p0):

  plain       Heun's method (explicit trapezoid, RK2), plain autograd through every step: the
              states and the reductions' inputs of each step are kept (memory O(iters * n)).
  checkpoint  the same steps in tessel.torch.checkpoint_loop: at most `snapshots` states kept,
              the others recomputed (memory O(snapshots * n)); equal to plain up to rounding.
  reversible  tessel.torch.odeint_reversible on the same field: the reversible Heun method, a
              different second-order integrator whose backward rebuilds the trajectory (memory
              O(n)); it differs from plain by discretisation error, so main compares both with
              a fine-step reference and reports the reconstruction error of the backward.

The figure shows the shooting (a few points' paths from the sphere toward the ellipsoid) and the
loss's error against the fine reference at half and twice the steps: second order, for both
integrators.

Run::

    PYTHONPATH=build/python python3 examples/python/lddmm_reversible.py [--n 1000]
        [--iters 10] [--dim 3] [--snapshots 4] [--dtype float64]
"""
import argparse
import math
import time

import matplotlib.pyplot as plt
import torch

from tessel.torch import Genred, checkpoint_loop, odeint_reversible

SIGMA = 0.25  # kernel width: each point moves with a few percent of the others
VARIANTS = ("plain", "checkpoint", "reversible")
# Relative agreement asked: plain and checkpoint run the same arithmetic; the field against
# autograd of H (different formulas for one derivative); reversible and plain against a
# reference with REF_FACTOR times more steps, a discretisation error measured at 3.5e-4 (loss)
# and 6.6e-4 (gradient) for 10 steps at the default size, second order in the step: hence a
# tolerance of 0.2 / iters^2 (2e-3 for 10 steps).
TOLERANCE = {"float64": 1e-10, "float32": 1e-4}
FIELD_TOLERANCE = {"float64": 1e-12, "float32": 1e-5}
REF_FACTOR = 16


def _reductions(dim):
    qq, g = [f"Qi = Vi({dim})", f"Qj = Vj({dim})"], ["G = Pm(1)"]
    pp = [f"Pi = Vi({dim})", f"Pj = Vj({dim})"]
    kp = Genred("Exp(-G*SqDist(Qi,Qj)) * Pj", qq + pp[1:] + g)  # (Qi, Qj, Pj, G)
    kqp = Genred("Exp(-G*SqDist(Qi,Qj)) * (Pi|Pj) * (Qi-Qj)", qq + pp + g)  # (Qi, Qj, Pi, Pj, G)
    h = Genred("Exp(-G*SqDist(Qi,Qj)) * (Pi|Pj)", qq + pp + g)
    return kp, kqp, h


_REDUCTIONS = {}


def reductions(dim):
    """The compiled reductions for points in R^dim (built once per dimension)."""
    if dim not in _REDUCTIONS:
        _REDUCTIONS[dim] = _reductions(dim)
    return _REDUCTIONS[dim]


class Problem:
    """Sphere (or circle) q0, ellipsoid target, p0 pointing there, kernel parameter g."""

    def __init__(self, n, dim=3, dtype=torch.float64):
        if dim not in (2, 3):
            raise ValueError(f"dim must be 2 or 3; got {dim}")
        f64 = torch.float64
        k = torch.arange(n, dtype=f64) + 0.5
        if dim == 2:
            a = 2 * math.pi * k / n
            q0 = torch.stack([a.cos(), a.sin()], 1)
            stretch = torch.tensor([1.5, 0.7], dtype=f64)
        else:
            # The Fibonacci sphere: near-uniform points for any n.
            z = 1 - 2 * k / n
            a = math.pi * (3 - math.sqrt(5)) * k
            r = torch.sqrt(1 - z**2)
            q0 = torch.stack([r * a.cos(), r * a.sin(), z], 1)
            stretch = torch.tensor([1.5, 0.8, 1.0], dtype=f64)
        self.dim, self.n = dim, n
        self.g = torch.tensor([1.0 / SIGMA**2], dtype=dtype)
        self.q0 = q0.to(dtype)
        self.target = (q0 * stretch).to(dtype)
        # Momentum whose initial velocity is about half of the displacement to the target: the
        # kernel sums ~ (number of neighbours) momenta, so divide by the kernel's row sums.
        kp = reductions(dim)[0]
        ones = torch.ones_like(self.q0)
        rows = kp(self.q0, self.q0, ones, self.g)
        self.p0_value = 0.5 * (self.target - self.q0) / rows

    def p0(self):
        return self.p0_value.clone().requires_grad_(True)

    def field(self, q, p):
        """(dq/dt, dp/dt) at (q, p): two reductions, no autograd."""
        kp, kqp, _ = reductions(self.dim)
        return kp(q, q, p, self.g), (2 * self.g) * kqp(q, q, p, p, self.g)

    def hamiltonian(self, q, p):
        return 0.5 * reductions(self.dim)[2](q, q, p, p, self.g).sum()

    def loss(self, q):
        return ((q - self.target) ** 2).sum() / self.n

    def heun_step(self, iters):
        h = 1.0 / iters

        def step(state, k):
            q, p = state
            dq1, dp1 = self.field(q, p)
            dq2, dp2 = self.field(q + h * dq1, p + h * dp1)
            return q + (h / 2) * (dq1 + dq2), p + (h / 2) * (dp1 + dp2)
        return step


def shoot_plain(prob, p0, iters, snapshots=None, stats=None):
    step = prob.heun_step(iters)
    state = (prob.q0, p0)
    for k in range(iters):
        state = step(state, k)
    return state[0]


def shoot_checkpoint(prob, p0, iters, snapshots=4, stats=None):
    # q0, the target and g do not require grad: nothing to list in params.
    q, _ = checkpoint_loop(prob.heun_step(iters), (prob.q0, p0), iters, snapshots=snapshots,
                           params=[], stats=stats)
    return q


def shoot_reversible(prob, p0, iters, snapshots=None, stats=None):
    t = torch.tensor([0.0, 1.0], dtype=p0.dtype)
    q, _ = odeint_reversible(lambda s, y: prob.field(*y), (prob.q0, p0), t,
                             steps_per_interval=iters, stats=stats)
    return q[-1]


SHOOT = {"plain": shoot_plain, "checkpoint": shoot_checkpoint, "reversible": shoot_reversible}


def evaluate(prob, variant, iters, snapshots=4, stats=None):
    """(loss, d loss / d p0) of one variant."""
    p0 = prob.p0()
    loss = prob.loss(SHOOT[variant](prob, p0, iters, snapshots, stats))
    (grad,) = torch.autograd.grad(loss, p0)
    return loss.detach(), grad


def run(variant, n, iters, dtype="float32", dim=3, snapshots=4):
    """One variant with n points and `iters` steps: (loss, dp0). Used by bench/loops_bench.py."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
    return evaluate(Problem(n, dim, getattr(torch, dtype)), variant, iters, snapshots)


def _rel(a, b):
    return float((a - b).norm() / b.norm())


def _check(label, a, b, tol):
    el, eg = _rel(a[0], b[0]), _rel(a[1], b[1])
    good = el <= tol and eg <= tol and math.isfinite(el) and math.isfinite(eg)
    print(f"  {label}: relative difference loss {el:.1e}, dp0 {eg:.1e} (tolerance {tol:.0e}) "
          f"{'ok' if good else 'FAILED'}")
    return good


def check_field(prob):
    """The explicit field against (dH/dp, -dH/dq) by autograd, at p0 and q0 moved a little."""
    q = (prob.q0 + 0.05 * torch.sin(7 * prob.q0)).requires_grad_(True)
    p = prob.p0()
    dhq, dhp = torch.autograd.grad(prob.hamiltonian(q, p), [q, p])
    with torch.no_grad():
        dq, dp = prob.field(q, p)
    return max(_rel(dq, dhp), _rel(dp, -dhq))


def main(argv=None):
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="points")
    ap.add_argument("--iters", type=int, default=10, help="time steps")
    ap.add_argument("--dim", type=int, default=3, choices=(2, 3))
    ap.add_argument("--snapshots", type=int, default=4)
    ap.add_argument("--dtype", default="float64", choices=("float32", "float64"))
    args = ap.parse_args(argv)
    prob = Problem(args.n, args.dim, getattr(torch, args.dtype))
    print(f"LDDMM shooting, {args.n} points in R^{args.dim}, sigma = {SIGMA}, {args.iters} steps "
          f"from t = 0 to 1, {args.dtype}")
    ok = True
    err = check_field(prob)
    good = err <= FIELD_TOLERANCE[args.dtype]
    ok &= good
    print(f"  field vs autograd of H: relative difference {err:.1e} (tolerance "
          f"{FIELD_TOLERANCE[args.dtype]:.0e}) {'ok' if good else 'FAILED'}")
    results = {}
    for v in VARIANTS:
        stats = {}
        t0 = time.perf_counter()
        results[v] = evaluate(prob, v, args.iters, args.snapshots, stats)
        elapsed = time.perf_counter() - t0
        loss, grad = results[v]
        extra = ""
        if v == "checkpoint":
            extra = (f"  ({stats['step_calls']} step calls, <= {stats['max_stored']} of "
                     f"{stats['snapshots']} snapshots stored)")
        elif v == "reversible":
            extra = (f"  ({stats['nfe_forward']} + {stats['nfe_backward']} field evaluations, "
                     f"reconstruction error {stats['reconstruction_error']:.1e}, relative "
                     f"{stats['reconstruction_error_rel']:.1e})")
        print(f"  {v:<10} loss {loss.item():.15g}  |dp0| {grad.norm().item():.15g}  "
              f"{elapsed:6.2f} s{extra}")
    ok &= _check("checkpoint vs plain", results["checkpoint"], results["plain"],
                 TOLERANCE[args.dtype])
    fine = REF_FACTOR * args.iters
    t0 = time.perf_counter()
    ref = evaluate(prob, "plain", fine)
    print(f"  reference: Heun with {fine} steps, loss {ref[0].item():.15g}  "
          f"|dp0| {ref[1].norm().item():.15g}  {time.perf_counter() - t0:6.2f} s")
    disc = max(0.2 / args.iters**2, TOLERANCE[args.dtype])
    ok &= _check("reversible vs reference", results["reversible"], ref, disc)
    ok &= _check("plain vs reference", results["plain"], ref, disc)
    return 0 if ok else 1, (prob, args.iters, results, ref)


def trajectory(prob, iters):
    """q at each of the plain Heun steps from p0 (no gradient): (iters + 1, n, dim)."""
    step, state = prob.heun_step(iters), (prob.q0, prob.p0_value)
    qs = [prob.q0]
    with torch.no_grad():
        for k in range(iters):
            state = step(state, k)
            qs.append(state[0])
    return torch.stack(qs)


def plot(prob, iters, results, ref, shown=60):
    """Left: the paths of `shown` points near the plane z = 0, in (x, y). Right: the loss's
    relative error against the reference, for plain and reversible at iters / 2, iters and
    2 iters steps (the two extra runs take well under the reference's time)."""
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.6))
    qs = trajectory(prob, iters)
    near = (prob.q0[:, -1].abs() < 0.2) if prob.dim == 3 else torch.ones(prob.n, dtype=bool)
    rows = near.nonzero()[:, 0][:: max(1, int(near.sum()) // shown)]
    for i in rows:
        ax.plot(qs[:, i, 0], qs[:, i, 1], "-", color="tab:blue", lw=0.8)
    start, goal = ("sphere", "ellipsoid") if prob.dim == 3 else ("circle", "ellipse")
    ax.plot(*prob.q0[rows, :2].T, "o", ms=3, color="0.5", label=f"q(0): {start}")
    ax.plot(*qs[-1, rows, :2].T, "o", ms=3, color="tab:blue", label="q(1): shot")
    ax.plot(*prob.target[rows, :2].T, "x", ms=4, color="tab:red", label=f"target: {goal}")
    ax.set_aspect("equal")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(f"geodesic shooting, {iters} Heun steps"
                 + (" (points near z = 0)" if prob.dim == 3 else ""))
    ax.legend(fontsize=8, loc="center")
    steps = [max(1, iters // 2), iters, 2 * iters]
    for v, mark in (("plain", "o-"), ("reversible", "s--")):
        errs = [_rel((results[v] if s == iters else evaluate(prob, v, s))[0], ref[0])
                for s in steps]
        ax2.loglog(steps, errs, mark, label=f"{v}")
    ax2.loglog(steps, [0.5 * errs[1] * (iters / s) ** 2 for s in steps], "k:", lw=0.8,
               label="slope -2 (second order)")
    ax2.set_xticks(steps, [str(s) for s in steps])
    ax2.minorticks_off()
    ax2.set_xlabel("time steps from t = 0 to 1")
    ax2.set_ylabel("relative error of the loss")
    ax2.set_title(f"against Heun with {REF_FACTOR * iters} steps")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    return fig


if __name__ == "__main__":
    from _common import run_example  # main, plot, show; exit non-zero after a failed check

    run_example(main, plot)
