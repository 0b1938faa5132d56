"""K-nearest-neighbour classifier: ArgKMin of squared distances, then a majority vote.

Two noisy interleaved spirals; tessel finds the 10 nearest training points of every test point
without forming the test x train distance matrix.
Run: PYTHONPATH=build/python python3 examples/python/knn_classifier.py [N_TRAIN]
"""
import sys
import time

import numpy as np

from tessel.numpy import Genred


def spirals(n, rng):
    t = np.sqrt(rng.random(n)) * 3 * np.pi
    label = rng.integers(0, 2, n)
    r = t + 0.6 * rng.standard_normal(n)
    sign = np.where(label == 1, 1.0, -1.0)
    pts = np.stack([sign * r * np.cos(t), sign * r * np.sin(t)], 1)
    return pts.astype(np.float32), label


def main(n_train=100_000, n_test=20_000, k=10):
    rng = np.random.default_rng(0)
    x_train, y_train = spirals(n_train, rng)
    x_test, y_test = spirals(n_test, rng)
    knn = Genred("SqDist(X,Y)", ["X = Vi(2)", "Y = Vj(2)"], reduction_op="ArgKMin", opt_arg=k)
    start = time.perf_counter()
    idx = knn(x_test, x_train)  # (n_test, k) int64
    votes = y_train[idx].mean(1)
    pred = (votes > 0.5).astype(int)
    elapsed = time.perf_counter() - start
    acc = (pred == y_test).mean()
    print(f"{n_test} test x {n_train} training points, K = {k}: accuracy {acc:.3f} in {elapsed:.2f} s")
    # brute-force check on a few test points
    for q in (0, n_test // 2):
        d = ((x_train - x_test[q]) ** 2).sum(1)
        ref = np.argsort(d, kind="stable")[:k]
        assert set(ref) == set(idx[q]), (ref, idx[q])
    assert acc > 0.8


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100_000)
