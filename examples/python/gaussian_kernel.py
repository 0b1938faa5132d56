"""Gaussian kernel product a_i = sum_j exp(-|x_i - y_j|^2 / s^2) b_j and its gradient in x.

Run: PYTHONPATH=build/python python3 examples/python/gaussian_kernel.py [N]
"""
import sys
import time

import torch

from tessel.torch import Genred


def main(n=100_000):
    torch.manual_seed(0)
    x = torch.rand(n, 3, requires_grad=True)
    y = torch.rand(n, 3)
    b = torch.rand(n, 1)
    s = torch.tensor([0.1])
    kernel = Genred("Exp(-SqDist(X,Y) / (S*S)) * B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)", "S = Pm(1)"])
    t0 = time.perf_counter()
    a = kernel(x, y, b, s)
    t1 = time.perf_counter()
    (gx,) = torch.autograd.grad(a.sum(), x)
    t2 = time.perf_counter()
    dense_gb = n * n * 4 / 1e9
    print(f"N = M = {n}: product {t1 - t0:.2f} s, gradient {t2 - t1:.2f} s "
          f"(a dense kernel matrix would need {dense_gb:.0f} GB)")
    # Check a few rows against the dense formula.
    rows = torch.tensor([0, n // 2, n - 1])
    dense = (torch.exp(-((x[rows, None, :] - y[None]) ** 2).sum(-1) / 0.01) @ b).detach()
    err = (a[rows].detach() - dense).abs().max() / dense.abs().max()
    print(f"relative error on 3 rows against dense torch: {err:.1e}")
    assert err < 1e-4 and gx.shape == x.shape


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
