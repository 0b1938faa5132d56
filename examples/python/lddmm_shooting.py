"""LDDMM geodesic shooting: 10 explicit steps of Hamiltonian dynamics, differentiated in p0.

Each step needs grad(H, [q, p], create_graph=True), a second-order derivative of a kernel
reduction; the final loss is then differentiated with respect to the initial momentum.
Run: PYTHONPATH=build/python python3 examples/python/lddmm_shooting.py [N]
"""
import sys
import time

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


def main(n=2000):
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


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
