"""
Gaussian kernel product and its gradient
========================================

The building block of kernel methods: ``a_i = sum_j exp(-|x_i - y_j|^2 / s^2) b_j`` for
N points x_i and M points y_j, and its gradient in x. tessel evaluates it without forming the
N x M kernel matrix, so the memory stays O(N + M) while the dense matrix grows as N M.

Run: ``PYTHONPATH=build/python python3 examples/python/gaussian_kernel.py [N]``; the gallery
runs N = 20,000, the full size is ``100000``.
"""
import sys
import time

import matplotlib.pyplot as plt
import torch

from tessel.torch import Genred

# %%
# The formula, in KeOps's syntax: X follows i, Y and B follow j (the sum runs over j), S is a
# parameter. The gradient in x is another reduction, computed by autograd.


def main(n=20_000):
    torch.manual_seed(0)
    x = torch.rand(n, 3, requires_grad=True)
    y = torch.rand(n, 3)
    b = torch.rand(n, 1)
    s = torch.tensor([0.1])
    kernel = Genred("Exp(-SqDist(X,Y) / (S*S)) * B",
                    ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)", "S = Pm(1)"])
    t0 = time.perf_counter()
    a = kernel(x, y, b, s)
    t1 = time.perf_counter()
    (gx,) = torch.autograd.grad(a.sum(), x)
    t2 = time.perf_counter()
    dense_gb = n * n * 4 / 1e9
    print(f"N = M = {n}: product {t1 - t0:.3f} s, gradient {t2 - t1:.3f} s "
          f"(a dense kernel matrix would need {dense_gb:.1f} GB)")
    # Check a few rows against the dense formula.
    rows = torch.tensor([0, n // 2, n - 1])
    dense = (torch.exp(-((x[rows, None, :] - y[None]) ** 2).sum(-1) / 0.01) @ b).detach()
    err = (a[rows].detach() - dense).abs().max() / dense.abs().max()
    print(f"relative error on 3 rows against dense torch: {err:.1e}")
    assert err < 1e-4 and gx.shape == x.shape
    return kernel, s


def scaling(kernel, s, sizes=(1000, 3000, 10_000, 30_000)):
    """Time of one product against N, beside the memory a dense kernel matrix would take."""
    times = []
    for n in sizes:
        x, y, b = torch.rand(n, 3), torch.rand(n, 3), torch.rand(n, 1)
        kernel(x, y, b, s)  # the kernel is compiled already; this warms the threads
        start = time.perf_counter()
        kernel(x, y, b, s)
        times.append(time.perf_counter() - start)
    return sizes, times


n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
kernel, s = main(n)

# %%
# Time against N: the work grows as N M, while the memory stays that of the points. The dense
# matrix (right axis) passes a laptop's memory near N = 10^5.
sizes, times = scaling(kernel, s, sizes=(1000, 3000, 10_000, n))
fig, ax = plt.subplots(figsize=(6, 4))
ax.loglog(sizes, times, "o-", label="tessel: product time (s)")
ax.set_xlabel("N = M")
ax.set_ylabel("seconds")
ax2 = ax.twinx()
ax2.loglog(sizes, [k * k * 4 / 1e9 for k in sizes], "s--", color="tab:red",
           label="dense N x M float32 matrix (GB)")
ax2.set_ylabel("GB a dense matrix would need")
fig.legend(loc="upper left", bbox_to_anchor=(0.12, 0.88))
ax.set_title("Gaussian kernel product, D = 3, float32")
fig.tight_layout()
plt.show()
