"""
Gaussian process regression with its uncertainty
================================================

Kernel interpolation of noisy samples of a 1-D signal, read as a Gaussian process: with the
Gaussian kernel ``k(x, y) = exp(-|x - y|^2 / l^2)`` and noise variance ``alpha``, the posterior
mean on new points g is ``m(g) = K_gx (K_xx + alpha I)^-1 y`` and its variance
``v(g) = k(g, g) - K_gx (K_xx + alpha I)^-1 K_xg``. tessel's ``KernelSolve`` runs the conjugate
gradient on ``K_xx`` without storing it (memory O(N)), and the products with ``K_gx`` are
``Genred`` sums; at the gallery's size a dense float64 solve checks both.

Run: ``PYTHONPATH=build/python python3 examples/python/kernel_interpolation.py [N]``; the
gallery uses N = 2,000 samples; ``20000`` is the full size (the dense check is then skipped).
"""
import sys
import time

import matplotlib.pyplot as plt
import torch

from tessel.torch import Genred, KernelSolve

torch.manual_seed(0)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
length, alpha = 0.05, 0.05


def signal(t):
    return torch.sin(12 * t) + 0.5 * torch.sin(31 * t)


# %%
# Samples: a dense cloud on [0, 0.4] and [0.6, 1], none in between, so that the uncertainty
# band has something to show.
x = torch.cat([0.4 * torch.rand(n // 2, 1), 0.6 + 0.4 * torch.rand(n - n // 2, 1)])
x = x.double()
y = signal(x) + alpha ** 0.5 * torch.randn(n, 1, dtype=torch.float64)
g = torch.linspace(-0.05, 1.05, 120, dtype=torch.float64)[:, None]
l2 = torch.tensor([1 / length ** 2], dtype=torch.float64)

# %%
# The weights ``w = (K_xx + alpha I)^-1 y`` by conjugate gradient, then the mean on the grid.
# The same solve with the columns of ``K_xg`` as right-hand sides (one column per grid point)
# gives the variance.
solve = KernelSolve("Exp(-L*SqDist(X,Y)) * B", ["X = Vi(1)", "Y = Vj(1)", "B = Vj(1)",
                                                  "L = Pm(1)"], "B")
start = time.perf_counter()
stats = {}
w = solve(x, x, y, l2, alpha=alpha, stats=stats)
product = Genred("Exp(-L*SqDist(G,X)) * W", ["G = Vi(1)", "X = Vj(1)", "W = Vj(1)", "L = Pm(1)"])
mean = product(g, x, w, l2)

k_xg = torch.exp(-((x - g.T) ** 2) / length ** 2)         # (n, 120): the right-hand sides
solve_many = KernelSolve("Exp(-L*SqDist(X,Y)) * B", ["X = Vi(1)", "Y = Vj(1)",
                                                       f"B = Vj({g.shape[0]})", "L = Pm(1)"], "B")
v = solve_many(x, x, k_xg, l2, alpha=alpha)               # (n, 120)
var = 1 - (k_xg * v).sum(0)                                # k(g, g) = 1
elapsed = time.perf_counter() - start
print(f"N = {n}: mean and variance on {g.shape[0]} points in {elapsed:.2f} s "
      f"({stats['iterations']} CG iterations for the mean)")

# %%
# The dense float64 reference, affordable at this size.
if n <= 5000:
    k_xx = torch.exp(-((x - x.T) ** 2) / length ** 2)
    a = k_xx + alpha * torch.eye(n, dtype=torch.float64)
    mean_ref = k_xg.T @ torch.linalg.solve(a, y)
    var_ref = 1 - (k_xg * torch.linalg.solve(a, k_xg)).sum(0)
    err_mean = (mean - mean_ref).abs().max().item()
    err_var = (var - var_ref).abs().max().item()
    print(f"against a dense solve: mean {err_mean:.1e}, variance {err_var:.1e} (absolute)")
    assert err_mean < 1e-3 and err_var < 1e-3

# %%
# The posterior mean and a two-standard-deviation band: narrow where samples are dense, wide
# in the gap and beyond the ends.
sd = var.clamp_min(0).sqrt()
fig, ax = plt.subplots(figsize=(7, 4))
shown = torch.randperm(n)[:400]
ax.plot(x[shown, 0], y[shown, 0], ".", color="0.6", ms=3, label=f"samples ({n}, 400 shown)")
ax.plot(g[:, 0], signal(g)[:, 0], "k--", lw=1, label="signal")
ax.plot(g[:, 0], mean[:, 0], color="tab:blue", label="posterior mean")
ax.fill_between(g[:, 0], (mean[:, 0] - 2 * sd), (mean[:, 0] + 2 * sd), color="tab:blue",
                alpha=0.2, label="mean ± 2 sd")
ax.set_xlabel("t")
ax.legend(loc="lower left", fontsize=8)
ax.set_title("Gaussian process regression with tessel.KernelSolve")
fig.tight_layout()
plt.show()
