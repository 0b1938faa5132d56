"""
LDDMM geodesic shooting and its deformed grid
=============================================

A circle of N points is matched onto an ellipse by a diffeomorphism: the geodesic of the
Gaussian kernel Hamiltonian ``H(q, p) = 1/2 sum_ij k(q_i, q_j) <p_i, p_j>`` shot from the
initial momenta p0, in 10 explicit steps. Each step needs ``grad(H, [q, p], create_graph=True)``,
a second-order derivative of a kernel reduction; L-BFGS then differentiates the matching loss
with respect to p0 through all the steps. The figure carries a grid along the same flow (its
velocity ``v(x) = sum_j k(x, q_j) p_j`` is one more reduction) to show the deformation of the
whole plane.

Run: ``PYTHONPATH=build/python python3 examples/python/lddmm_shooting.py [N]``; the gallery uses
N = 300, the full size is ``2000``.
"""
import sys
import time

import matplotlib.pyplot as plt
import torch

from tessel.torch import Genred

_KERNEL = Genred("Exp(-G*SqDist(Qi,Qj)) * (Pi|Pj)",
                 ["Qi = Vi(2)", "Qj = Vj(2)", "Pi = Vi(2)", "Pj = Vj(2)", "G = Pm(1)"])


def hamiltonian(q, p, g):
    return 0.5 * _KERNEL(q, q, p, p, g).sum()


def shoot(q0, p0, g, steps=10):
    q, p = q0, p0
    dt = 1.0 / steps
    for _ in range(steps):
        dq, dp = torch.autograd.grad(hamiltonian(q, p, g), [q, p], create_graph=True)
        q, p = q + dt * dp, p - dt * dq
    return q, p


def main(n=300):
    torch.manual_seed(0)
    t = torch.linspace(0, 2 * torch.pi, n + 1, dtype=torch.float64)[:-1]
    q0 = torch.stack([torch.cos(t), torch.sin(t)], 1).requires_grad_(True)
    target = torch.stack([1.5 * torch.cos(t), 0.7 * torch.sin(t)], 1)
    p0 = torch.zeros_like(q0, requires_grad=True)
    g = torch.tensor([1.0 / 0.2**2], dtype=torch.float64)
    opt = torch.optim.LBFGS([p0], max_iter=10, line_search_fn="strong_wolfe")
    start = time.perf_counter()
    losses = []

    def closure():
        opt.zero_grad()
        q1, _ = shoot(q0, p0, g)
        loss = ((q1 - target) ** 2).sum() / n
        loss.backward()
        losses.append(loss.item())
        return loss

    opt.step(closure)
    print(f"N = {n}: matching loss {losses[0]:.4f} -> {losses[-1]:.6f} in {len(losses)} "
          f"evaluations ({time.perf_counter() - start:.1f} s), each through 10 shooting steps")
    assert losses[-1] < 0.1 * losses[0]
    return q0.detach(), p0.detach(), target, g


_VELOCITY = Genred("Exp(-G*SqDist(X,Q)) * P", ["X = Vi(2)", "Q = Vj(2)", "P = Vj(2)", "G = Pm(1)"])


def carry(points, q0, p0, g, steps=10):
    """Moves any points along the flow of the shooting from (q0, p0), with the same steps."""
    q, p, x = q0.clone().requires_grad_(True), p0.clone().requires_grad_(True), points
    dt = 1.0 / steps
    for _ in range(steps):
        x = x + dt * _VELOCITY(x, q, p, g).detach()
        dq, dp = torch.autograd.grad(hamiltonian(q, p, g), [q, p])
        q = (q + dt * dp).detach().requires_grad_(True)
        p = (p - dt * dq).detach().requires_grad_(True)
    return x, q.detach()


q0, p0, target, g = main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)

# %%
# The deformed grid, the source circle, the target ellipse and the shot circle.
side = torch.linspace(-2, 2, 41, dtype=torch.float64)
fine = torch.linspace(-2, 2, 201, dtype=torch.float64)
lines = [torch.stack([torch.full_like(fine, c), fine], 1) for c in side]
lines += [torch.stack([fine, torch.full_like(fine, c)], 1) for c in side]
moved, q1 = carry(torch.cat(lines), q0, p0, g)
fig, ax = plt.subplots(figsize=(6, 6))
for line in moved.split(fine.shape[0]):
    ax.plot(*line.T, color="0.75", lw=0.6)
ax.plot(*q0.T, ".", ms=2, color="tab:blue", label="source")
ax.plot(*target.T, "-", lw=3, color="tab:red", alpha=0.4, label="target")
ax.plot(*q1.T, ".", ms=2, color="tab:green", label="shot source")
ax.set_xlim(-2, 2)
ax.set_ylim(-2, 2)
ax.set_aspect("equal")
ax.legend(loc="upper right")
ax.set_title("LDDMM: the plane deformed by the geodesic")
plt.show()
