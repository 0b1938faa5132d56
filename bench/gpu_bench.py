"""GPU benchmark: tessel, pykeops and dense PyTorch side by side on the same device, one run.

Cases (float32, D = 3, N = M): gauss-sum (sum_j exp(-g|x_i - y_j|^2) b_j), gauss-grad (its
x-gradient), lse (log sum_j exp(-g|x_i - y_j|^2)) and argkmin (K = 10). Each library is timed on
tensors already on the device, synchronising around every call; the median of --reps calls after
one untimed call is reported, with the first call's time (compilation included) for tessel.
Dense PyTorch runs only where its N x M matrices fit (--dense-max-bytes). Prints JSON lines.

Run (a GPU machine): PYTHONPATH=build/python python3 bench/gpu_bench.py --n 10000 100000 1000000
`--device cpu` runs the same code on the CPU (a smoke test of this script).
"""
import argparse
import json
import statistics
import time

import torch

K = 10
FORMULAS = {
    "gauss-sum": ("Exp(-G*SqDist(X,Y)) * B", "Sum", None),
    "gauss-grad": ("Exp(-G*SqDist(X,Y)) * B", "Sum", "grad"),
    "lse": ("-G*SqDist(X,Y)", "LogSumExp", None),
    "argkmin": ("SqDist(X,Y)", "ArgKMin", None),
}
ALIASES = ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)", "G = Pm(1)"]


def emit(**kv):
    print(json.dumps(kv), flush=True)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device, reps):
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    first = time.perf_counter() - t0
    times = []
    for _ in range(reps):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), first


def data(n, device):
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(n, 3, generator=gen).to(device)
    y = torch.rand(n, 3, generator=gen).to(device)
    b = torch.rand(n, 1, generator=gen).to(device)
    g = torch.tensor([10.0]).to(device)
    return x, y, b, g


def make_call(lib, case, x, y, b, g):
    formula, op, grad = FORMULAS[case]
    if lib == "tessel":
        from tessel.torch import Genred  # here: a pykeops-only run loads no tessel

        red = Genred(formula, ALIASES, reduction_op=op, axis=1, opt_arg=K if op == "ArgKMin" else None)
    else:
        from pykeops.torch import Genred as KGenred

        red = KGenred(formula, ALIASES, reduction_op=op, axis=1, opt_arg=K if op == "ArgKMin" else None)
    if grad:
        xg = x.clone().requires_grad_(True)
        e = torch.ones(x.shape[0], 1, device=x.device)
        return lambda: torch.autograd.grad(red(xg, y, b, g), xg, e)[0]
    return lambda: red(x, y, b, g)


def agreement(ours, theirs):
    """How far tessel's result is from another library's: the relative 2-norm difference of
    values, or the fraction of equal indices for ArgKMin (ties aside, all of them)."""
    if not ours.dtype.is_floating_point:
        return {"equal_index_fraction": float((ours.long() == theirs.long()).double().mean())}
    a, b = ours.double().reshape(-1), theirs.double().reshape(-1)
    return {"rel_diff": float((a - b).norm() / b.norm()), "finite": bool(torch.isfinite(a).all())}


def make_dense(case, x, y, b, g):
    def kernel(xx):
        return torch.exp(-g * torch.cdist(xx, y) ** 2)

    if case == "gauss-sum":
        return lambda: kernel(x) @ b
    if case == "gauss-grad":
        xg = x.clone().requires_grad_(True)
        return lambda: torch.autograd.grad((kernel(xg) @ b).sum(), xg)[0]
    if case == "lse":
        return lambda: torch.logsumexp(-g * torch.cdist(x, y) ** 2, dim=1, keepdim=True)
    return lambda: torch.topk(torch.cdist(x, y), K, dim=1, largest=False).indices


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--cases", nargs="+", default=list(FORMULAS), choices=list(FORMULAS))
    ap.add_argument("--libs", nargs="+", default=["tessel", "pykeops", "dense"],
                    choices=["tessel", "pykeops", "dense"])
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dense-max-bytes", type=float, default=20e9)
    ap.add_argument("--host-budget", action="store_true",
                    help="also time host tensors on the GPU, whole and streamed under a budget")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_bench: no CUDA device visible to PyTorch (use --device cpu for a "
                         "smoke test)")
    libs = list(args.libs)
    if "pykeops" in libs:
        try:
            import pykeops  # noqa: F401
        except ImportError:
            emit(note="pykeops is not importable; skipped")
            libs.remove("pykeops")
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    for n in args.n:
        x, y, b, g = data(n, device)
        for case in args.cases:
            results, outputs = {}, {}
            for lib in libs:
                row = dict(case=case, n=n, m=n, d=3, dtype="float32", lib=lib, device=name)
                if lib == "dense":
                    need = 3 * 4.0 * n * n  # distances, kernel and one temporary
                    if need > args.dense_max_bytes:
                        emit(**row, status="skipped", reason=f"needs ~{need / 1e9:.0f} GB")
                        continue
                    fn = make_dense(case, x, y, b, g)
                else:
                    fn = make_call(lib, case, x, y, b, g)
                try:
                    median, first = timed(fn, device, args.reps)
                except RuntimeError as e:  # out of memory, compile failure: recorded, not fatal
                    emit(**row, status="error", reason=str(e).splitlines()[0][:200])
                    continue
                results[lib] = median
                outputs[lib] = fn()
                emit(**row, status="ok", median_s=median, first_call_s=first,
                     pairs_per_s=n * n / median)
            if "tessel" in results:
                for lib, t in results.items():
                    if lib != "tessel":
                        emit(case=case, n=n, ratio=f"{lib}/tessel", value=t / results["tessel"],
                             **agreement(outputs["tessel"], outputs[lib]))
            outputs.clear()
    if args.host_budget:
        host_budget(args, device, name)


def host_budget(args, device, name):
    """Host tensors reduced on the GPU, whole and under a gpu_memory_budget a quarter of their
    device footprint (streamed block by block, copies overlapping kernels): the cost of
    streaming data larger than the budget."""
    from tessel.torch import Genred

    formula, op, _ = FORMULAS["gauss-sum"]
    for n in args.n:
        x, y, b, g = data(n, torch.device("cpu"))
        footprint = 4 * (3 * n + 4 * n + n)  # X, Y with b, one output column, float32
        for budget in (0, footprint // 4):
            red = Genred(formula, ALIASES, reduction_op=op, axis=1, backend="cuda",
                         gpu_memory_budget=budget)
            row = dict(case="gauss-sum-host", n=n, m=n, d=3, dtype="float32", lib="tessel",
                       device=name, gpu_memory_budget=budget, footprint_bytes=footprint)
            try:
                median, first = timed(lambda: red(x, y, b, g), device, args.reps)
            except (RuntimeError, ValueError) as e:
                emit(**row, status="error", reason=str(e).splitlines()[0][:200])
                continue
            emit(**row, status="ok", median_s=median, first_call_s=first,
                 pairs_per_s=n * n / median)


if __name__ == "__main__":
    main()
