#!/usr/bin/env python3
# Runs one `tessel bench` case with pykeops on the CPU and prints the same JSON line tessel prints.
"""One benchmark case with pykeops (pykeops.numpy, backend="CPU"), for `tessel bench`.

The formulas, variable order, sizes, dtype and data distribution match bench/bench_cases.cpp:
points uniform in [0, 1]^3, s = 0.25. The first call (which may compile) is reported as
first_call_s and excluded from the median of the following `--reps` calls.

Only numpy is needed besides pykeops (no torch). Everything pykeops prints goes to stderr, so
stdout holds exactly one JSON line.
"""

import argparse
import json
import os
import sys
import time

SCALE = 0.25
K = 10
WIDE_DIM, WIDE_G = 64, 0.1  # gauss-sum-64d (bench_cases.hpp: kWideDim, kWideG)

# (formula, aliases, reduction, opt_arg): the same variable order as the tessel side.
CASES = {
    "gauss-sum": (
        "Exp(-G*SqDist(X,Y)) * B",
        ["X = Vi(0,3)", "Y = Vj(1,3)", "B = Vj(2,1)", "G = Pm(3,1)"],
        "Sum",
        None,
    ),
    "gauss-grad": (
        "Grad(Exp(-G*SqDist(X,Y)) * B, X, E)",
        ["X = Vi(0,3)", "Y = Vj(1,3)", "B = Vj(2,1)", "G = Pm(3,1)", "E = Vi(4,1)"],
        "Sum",
        None,
    ),
    "lse": (
        "-G*SqDist(X,Y)",
        ["X = Vi(0,3)", "Y = Vj(1,3)", "G = Pm(2,1)"],
        "LogSumExp",
        None,
    ),
    "argkmin": (
        "SqDist(X,Y)",
        ["X = Vi(0,3)", "Y = Vj(1,3)"],
        "ArgKMin",
        K,
    ),
    "gauss-sum-64d": (
        "Exp(-G*SqDist(X,Y)) * B",
        [f"X = Vi(0,{WIDE_DIM})", f"Y = Vj(1,{WIDE_DIM})", "B = Vj(2,1)", "G = Pm(3,1)"],
        "Sum",
        None,
    ),
    "sin-sum": (
        "Sin(G*(X|Y)) * B",
        ["X = Vi(0,3)", "Y = Vj(1,3)", "B = Vj(2,1)", "G = Pm(3,1)"],
        "Sum",
        None,
    ),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", required=True, choices=sorted(CASES))
    p.add_argument("--n", type=int, required=True, help="number of i points")
    p.add_argument("--m", type=int, default=None, help="number of j points (default: n)")
    p.add_argument("--reps", type=int, default=5, help="timed calls after the first")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    p.add_argument("--threads", type=int, default=0, help="OpenMP threads (default: all cores)")
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


def make_inputs(np, case, n, m, dtype, seed):
    rng = np.random.default_rng(seed)
    d = WIDE_DIM if case == "gauss-sum-64d" else 3
    x = rng.random((n, d)).astype(dtype)
    y = rng.random((m, d)).astype(dtype)
    g = np.array([WIDE_G if d != 3 else 1.0 / SCALE**2], dtype=dtype)
    if case in ("gauss-sum", "gauss-grad", "sin-sum", "gauss-sum-64d"):
        b = rng.random((m, 1)).astype(dtype)
        args = [x, y, b, g]
        if case == "gauss-grad":
            args.append((2 * rng.random((n, 1)) - 1).astype(dtype))
        return args
    if case == "lse":
        return [x, y, g]
    return [x, y]


def main():
    a = parse_args()
    m = a.m if a.m is not None else a.n
    if a.threads > 0:
        # pykeops parallelises its CPU loops with OpenMP; set before it is imported.
        os.environ["OMP_NUM_THREADS"] = str(a.threads)
    threads = a.threads if a.threads > 0 else (os.cpu_count() or 1)

    # pykeops prints warnings and compiler output on stdout: send all of it to stderr.
    real_stdout = os.dup(1)
    sys.stdout.flush()
    os.dup2(2, 1)
    import numpy as np
    import pykeops
    from pykeops.numpy import Genred

    pykeops.set_verbose(False)
    formula, aliases, reduction, opt_arg = CASES[a.case]
    fn = Genred(formula, aliases, reduction_op=reduction, axis=1, opt_arg=opt_arg)
    args = make_inputs(np, a.case, a.n, m, a.dtype, a.seed)

    t0 = time.perf_counter()
    fn(*args, backend="CPU")
    first = time.perf_counter() - t0
    times = []
    for _ in range(max(1, a.reps)):
        t0 = time.perf_counter()
        fn(*args, backend="CPU")
        times.append(time.perf_counter() - t0)
    times.sort()
    h = len(times) // 2
    median = times[h] if len(times) % 2 else 0.5 * (times[h - 1] + times[h])

    line = {
        "case": a.case,
        "n": a.n,
        "m": m,
        "d": WIDE_DIM if a.case == "gauss-sum-64d" else 3,
        "dtype": a.dtype,
        "backend": "pykeops-cpu",
        "median_s": median,
        "pairs_per_s": a.n * m / median,
        "first_call_s": first,
        "threads": threads,
        "reps": len(times),
        "pykeops_version": pykeops.__version__,
    }
    sys.stdout.flush()
    with os.fdopen(real_stdout, "w") as out:
        out.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
