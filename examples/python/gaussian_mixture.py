"""
Fitting a Gaussian mixture
==========================

Expectation-maximisation for a mixture of K Gaussians with full covariances, as the users'
seeds do with KeOps: each E-step needs, for every point, the log-sum-exp over the components of
their weighted log-densities, and the M-step sums over the points. ``tessel.shapes.
GaussianMixture`` runs both as reductions (memory O(N + K D^2)), so a million points fit in the
memory of the points. The figure shows the points, the fitted components' two-standard-deviation
ellipses and the log-likelihood along the EM steps.

Run: ``PYTHONPATH=build/python python3 examples/python/gaussian_mixture.py [N]``; the gallery
uses 20,000 points, the full size is ``1000000``.
"""
import math
import sys
import time

import matplotlib.pyplot as plt
import torch

from tessel.shapes import GaussianMixture

torch.manual_seed(0)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000

# %%
# Data: three elongated, tilted clusters of different sizes.
true_means = torch.tensor([[-2.0, 0.0], [1.5, 1.5], [1.0, -2.0]], dtype=torch.float64)
true_weights = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
angles = (0.3, -1.0, 1.3)
scales = ((1.0, 0.25), (0.6, 0.2), (0.8, 0.3))
covs = []
for a, (s1, s2) in zip(angles, scales):
    r = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]],
                     dtype=torch.float64)
    covs.append(r @ torch.diag(torch.tensor([s1 ** 2, s2 ** 2], dtype=torch.float64)) @ r.T)
covs = torch.stack(covs)
labels = torch.multinomial(true_weights, n, replacement=True)
noise = torch.randn(n, 2, dtype=torch.float64)
points = true_means[labels] + torch.einsum("nij,nj->ni", torch.linalg.cholesky(covs)[labels],
                                           noise)

# %%
# The fit: k-means++ seeds, then EM until the mean log-likelihood stops rising.
start = time.perf_counter()
gmm = GaussianMixture(3, seed=0).fit(points)
elapsed = time.perf_counter() - start
print(f"{n} points: {gmm.n_iter_} EM steps in {elapsed:.2f} s, mean log-likelihood "
      f"{gmm.history_[-1]:.4f}")
order = torch.argsort(gmm.means_[:, 0])  # match the components to the true ones by x
expected = torch.argsort(true_means[:, 0])
err_means = (gmm.means_[order] - true_means[expected]).abs().max().item()
err_weights = (gmm.weights_[order] - true_weights[expected]).abs().max().item()
print(f"largest error: means {err_means:.3f}, weights {err_weights:.3f}")
assert err_means < 0.1 and err_weights < 0.03

# %%
# The fitted ellipses (two standard deviations) over the points, and the EM curve.
fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [1.4, 1]})
shown = torch.randperm(n)[:4000]
ax.plot(*points[shown].T, ".", color="0.6", ms=1.5)
circle = torch.stack([torch.cos(torch.linspace(0, 2 * math.pi, 100)),
                      torch.sin(torch.linspace(0, 2 * math.pi, 100))], 1).double()
for k in range(3):
    ell = gmm.means_[k] + 2 * circle @ torch.linalg.cholesky(gmm.covariances_[k]).T
    ax.plot(*ell.T, lw=2, label=f"weight {gmm.weights_[k]:.2f}")
ax.set_aspect("equal")
ax.legend(fontsize=8)
ax.set_title(f"GaussianMixture(3) on {n} points")
ax2.plot(range(len(gmm.history_)), gmm.history_, "o-", ms=3)
ax2.set_xlabel("EM step")
ax2.set_ylabel("mean log-likelihood")
fig.tight_layout()
plt.show()
