"""
K-nearest-neighbour classification
==================================

Two noisy interleaved spirals; tessel finds the K = 10 nearest training points of every test
point with an ``ArgKMin`` reduction of squared distances, without forming the test x train
distance matrix, then a majority vote gives the class. The figure shows the decision regions:
the classifier evaluated on every pixel of a grid, one more ArgKMin reduction.

Run: ``PYTHONPATH=build/python python3 examples/python/knn_classifier.py [N_TRAIN]``; the
gallery uses 10,000 training points, the full size is ``100000``.
"""
import sys
import time

import matplotlib.pyplot as plt
import numpy as np

from tessel.numpy import Genred


def spirals(n, rng):
    t = np.sqrt(rng.random(n)) * 3 * np.pi
    label = rng.integers(0, 2, n)
    r = t + 0.6 * rng.standard_normal(n)
    sign = np.where(label == 1, 1.0, -1.0)
    pts = np.stack([sign * r * np.cos(t), sign * r * np.sin(t)], 1)
    return pts.astype(np.float32), label


# %%
# The reduction: for each row i (a test point), the indices of the K smallest SqDist(X_i, Y_j)
# over the training points j.
K = 10
knn = Genred("SqDist(X,Y)", ["X = Vi(2)", "Y = Vj(2)"], reduction_op="ArgKMin", opt_arg=K)


def classify(points, x_train, y_train):
    idx = knn(points, x_train)  # (n, K) int64
    return (y_train[idx].mean(1) > 0.5).astype(int)


def main(n_train=10_000, n_test=2_000):
    rng = np.random.default_rng(0)
    x_train, y_train = spirals(n_train, rng)
    x_test, y_test = spirals(n_test, rng)
    start = time.perf_counter()
    idx = knn(x_test, x_train)
    pred = (y_train[idx].mean(1) > 0.5).astype(int)
    elapsed = time.perf_counter() - start
    acc = (pred == y_test).mean()
    print(f"{n_test} test x {n_train} training points, K = {K}: accuracy {acc:.3f} "
          f"in {elapsed:.3f} s")
    # Brute-force check on a few test points.
    for q in (0, n_test // 2):
        d = ((x_train - x_test[q]) ** 2).sum(1)
        ref = np.argsort(d, kind="stable")[:K]
        assert set(ref) == set(idx[q]), (ref, idx[q])
    assert acc > 0.8
    return x_train, y_train


n_train = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
x_train, y_train = main(n_train, max(n_train // 5, 1000))

# %%
# Decision regions: the classifier on a 300 x 300 grid (90,000 queries against the training
# set), the training points on top.
lim = np.abs(x_train).max() * 1.05
g = np.linspace(-lim, lim, 300, dtype=np.float32)
gx, gy = np.meshgrid(g, g)
grid = np.stack([gx.ravel(), gy.ravel()], 1)
regions = classify(grid, x_train, y_train).reshape(gx.shape)
fig, ax = plt.subplots(figsize=(6, 6))
ax.contourf(gx, gy, regions, levels=[-0.5, 0.5, 1.5], colors=["#c6dbef", "#fdd0a2"])
shown = np.random.default_rng(1).choice(len(x_train), min(len(x_train), 3000), replace=False)
ax.scatter(*x_train[shown].T, c=np.where(y_train[shown] == 1, "tab:orange", "tab:blue"), s=2)
ax.set_title(f"{K}-NN decision regions, {len(x_train)} training points")
ax.set_aspect("equal")
plt.show()
