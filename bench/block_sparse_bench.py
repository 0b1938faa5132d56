"""Block-sparse overhead: a LogSumExp with KeOps `ranges` keeping every block, against the same
reduction dense, for clusters of a given size (the cost of short intervals). One run, CPU.

N = M points in 3-D (N a multiple of the cluster size, about --n), clusters of consecutive rows,
every (row cluster, column cluster) block kept, so both compute the same thing. Prints one JSON
line per cluster size: the dense and the block-sparse median times and their ratio.

Run: PYTHONPATH=build/python python3 bench/block_sparse_bench.py [--n 20000] [--sizes 32 64 128]
"""
import argparse
import json

import torch

from python_bench import median_time  # bench/ is the script's directory
from tessel.torch import Genred


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--sizes", type=int, nargs="+", default=[32, 64, 128, 256])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    lse = Genred("H - SqDist(X,Y) * IntCst(10)", ["X = Vi(3)", "Y = Vj(3)", "H = Vj(1)"],
                 reduction_op="LogSumExp", axis=1)
    gen = torch.Generator().manual_seed(0)
    for bs in args.sizes:
        k = max(1, args.n // bs)
        n = k * bs
        x, y = torch.rand(n, 3, generator=gen), torch.rand(n, 3, generator=gen)
        h = torch.rand(n, 1, generator=gen)
        bounds = torch.tensor([[c * bs, (c + 1) * bs] for c in range(k)], dtype=torch.int64)
        slices = torch.arange(1, k + 1, dtype=torch.int64) * k
        red = bounds.repeat(k, 1)  # every column cluster for every row cluster
        ranges = (bounds, slices, red, bounds, slices, red)
        dense = median_time(lambda: lse(x, y, h), args.reps)
        sparse = median_time(lambda: lse(x, y, h, ranges=ranges), args.reps)
        print(json.dumps(dict(case="lse-all-blocks", n=n, cluster=bs, dense_s=dense,
                              block_sparse_s=sparse, ratio=sparse / dense)), flush=True)


if __name__ == "__main__":
    main()
