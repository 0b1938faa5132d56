"""Python-side benchmarks: call overhead over the C++ call, and the kernel Hamiltonian with gradients.

Prints one JSON line per measurement. The Hamiltonian case runs tessel, pykeops 2.3 (CPU, if
importable) and dense PyTorch (only where its N x N matrices fit in memory) in the same run.
Run: PYTHONPATH=build/python .venv/bin/python bench/python_bench.py [--n 50000] [--no-pykeops]
"""
import argparse
import json
import statistics
import time

import torch

from tessel import _core
from tessel.torch import Genred

FORMULA = "Exp(-G*SqDist(Qi,Qj)) * (Pi|Pj)"
ALIASES = ["Qi = Vi(3)", "Qj = Vj(3)", "Pi = Vi(3)", "Pj = Vj(3)", "G = Pm(1)"]


def median_time(fn, reps):
    fn()  # first call: compilation, caches
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def emit(**kv):
    print(json.dumps(kv), flush=True)


def call_overhead():
    """A cached call at N = M = 1: the C++ evaluate alone, then through tessel.torch.Genred."""
    g = Genred("Exp(-SqDist(X,Y))", ["X = Vi(3)", "Y = Vj(3)"])
    x, y = torch.rand(1, 3), torch.rand(1, 3)
    r = g._spec.reduction
    xs, ys = x.numpy(), y.numpy()
    core = median_time(lambda: _core.evaluate(r, [xs, ys]), 2000)
    full = median_time(lambda: g(x, y), 2000)
    xg = x.clone().requires_grad_(True)
    with_grad = median_time(lambda: g(xg, y), 2000)
    emit(case="python-call-overhead", core_call_s=core, genred_call_s=full,
         genred_requires_grad_s=with_grad, python_overhead_s=full - core)


def hamiltonian_tessel(q, p, g):
    k = Genred(FORMULA, ALIASES)
    h = 0.5 * k(q, q, p, p, g).sum()
    return [h, *torch.autograd.grad(h, [q, p])]


def hamiltonian_pykeops(q, p, g):
    from pykeops.torch import Genred as KGenred

    k = KGenred(FORMULA, ALIASES, reduction_op="Sum", axis=1)
    h = 0.5 * k(q, q, p, p, g, backend="CPU").sum()
    return [h, *torch.autograd.grad(h, [q, p])]


def hamiltonian_dense(q, p, g):
    k = torch.exp(-g * ((q[:, None, :] - q[None, :, :]) ** 2).sum(-1))
    h = 0.5 * (p * (k @ p)).sum()
    return [h, *torch.autograd.grad(h, [q, p])]


def hamiltonian(n, pykeops, reps):
    torch.manual_seed(0)
    q = torch.rand(n, 3, requires_grad=True)
    p = (torch.randn(n, 3) / n**0.5).requires_grad_(True)
    g = torch.tensor([100.0])
    runs = {"tessel-cpu": hamiltonian_tessel}
    if pykeops:
        runs["pykeops-cpu"] = hamiltonian_pykeops
    if n * n * 4 * 8 < 8e9:  # dense autograd keeps several N x N float32 matrices
        runs["torch-dense"] = hamiltonian_dense
    medians = {}
    for name, fn in runs.items():
        t = median_time(lambda: fn(q, p, g), reps if name != "pykeops-cpu" or n <= 20000 else 1)
        medians[name] = t
        emit(case="hamiltonian-grad", n=n, d=3, dtype="float32", backend=name, median_s=t)
    for name in medians:
        if name != "tessel-cpu":
            emit(case="hamiltonian-grad", n=n, **{f"speedup_vs_{name}": medians[name] / medians["tessel-cpu"]})


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, nargs="*", default=[10000, 50000])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-pykeops", action="store_true")
    args = ap.parse_args()
    pykeops = not args.no_pykeops
    if pykeops:
        try:
            import pykeops  # noqa: F401
        except ImportError:
            pykeops = False
    call_overhead()
    for n in args.n:
        hamiltonian(n, pykeops, args.reps)


if __name__ == "__main__":
    main()
