"""Sinkhorn divergences side by side: tessel.ot against GeomLoss (online on pykeops, multiscale,
tensorized dense torch) and flash-sinkhorn where installed, value and gradient, in one run.

Every implementation runs the same problem: the debiased Sinkhorn divergence between two uniform
clouds of N points in [0, 1]^D (y shifted by 0.2), p = 2, blur = 0.05, scaling = 0.5 (GeomLoss's
defaults, the same eps schedule in every solver), float32, then its gradient in x. A row is the
median of --repeats timed runs after one warm-up run (kernel compilation is not timed), and the
relative difference of its value from the first implementation's. Implementations that cannot
run a case (a missing package, dense memory above --dense-gib, multiscale above D = 3, pykeops
above --max-pykeops) give a row with "skipped" and the reason.

Prints one JSON line per (impl, N, D) and, with --table, a Markdown table of the lines of the
given files. Run:
  PYTHONPATH=build/python .venv/bin/python bench/ot_bench.py --n 1000 3000 10000 --d 3 64
  [--impls tessel tessel-multiscale geomloss-online geomloss-multiscale geomloss-tensorized
   flash-sinkhorn]
  [--device cuda] [--repeats 3] [--max-pykeops 10000] > ot.jsonl
  python bench/ot_bench.py --table ot.jsonl
"""
import argparse
import json
import os
import platform
import statistics
import sys
import time

IMPLS = ("tessel", "tessel-multiscale", "geomloss-online", "geomloss-multiscale",
         "geomloss-tensorized", "flash-sinkhorn")


def cpu_name():
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas_name():
    """The BLAS PyTorch's dense products run on: MKL in PyPI's wheels, else the system's
    libblas.so.3, named by the file it resolves to (the reference one is some 25x slower)."""
    import torch
    if torch.backends.mkl.is_available():
        return "mkl"
    import glob
    for path in glob.glob("/usr/lib/*-linux-gnu/libblas.so.3"):
        return os.path.realpath(path).split("/")[-2]  # blas (reference), openblas-pthread, ...
    return "unknown"


def clouds(n, d, device, seed=0):
    import torch
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, d, generator=g)
    y = torch.rand(n, d, generator=g) + 0.2
    return x.to(device), y.to(device)


def make_loss(impl, args, d):
    """A callable (x, y) -> scalar loss, or a string saying why the impl cannot run."""
    kw = dict(loss="sinkhorn", p=2, blur=0.05, scaling=0.5, debias=True)
    if impl.startswith("tessel"):
        from tessel.ot import SamplesLoss
        return SamplesLoss(backend="multiscale" if impl.endswith("multiscale") else "auto", **kw)
    if impl.startswith("geomloss"):
        try:
            import geomloss
        except ImportError as e:
            return f"geomloss not installed ({e})"
        backend = impl.split("-", 1)[1]
        if backend == "multiscale" and d > 3:
            return "GeomLoss's multiscale solver is limited to D <= 3"
        if backend in ("online", "multiscale"):
            try:
                import pykeops  # noqa: F401
            except ImportError as e:
                return f"pykeops not installed ({e})"
        return geomloss.SamplesLoss(backend=backend, **kw)
    if impl == "flash-sinkhorn":
        try:
            import flash_sinkhorn
        except ImportError as e:
            return f"flash-sinkhorn not installed ({e})"
        loss = getattr(flash_sinkhorn, "SamplesLoss", None)
        if loss is None:
            return "flash_sinkhorn has no SamplesLoss"
        if not args.device.startswith("cuda"):
            return "flash-sinkhorn runs on CUDA GPUs only (Triton kernels)"
        return loss(half_cost=True, **kw)  # half_cost: |x - y|^2 / 2, as GeomLoss's p = 2
    raise ValueError(f"unknown impl {impl}")


def run_once(loss, x, y):
    import torch
    xg = x.clone().requires_grad_()
    if x.is_cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    value = loss(xg, y)
    (grad,) = torch.autograd.grad(value, xg)
    if x.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - t0, float(value), float(grad.norm())


def measure(impl, n, d, args):
    row = dict(impl=impl, n=n, d=d, device=args.device, dtype="float32", repeats=args.repeats)
    if impl in ("geomloss-online", "geomloss-multiscale") and n > args.max_pykeops:
        return dict(row, skipped=f"N > --max-pykeops {args.max_pykeops}")
    if impl == "geomloss-tensorized" and 4.0 * n * n * max(d, 4) / 2**30 > args.dense_gib:
        return dict(row, skipped=f"dense N x N x D over --dense-gib {args.dense_gib}")
    loss = make_loss(impl, args, d)
    if isinstance(loss, str):
        return dict(row, skipped=loss)
    x, y = clouds(n, d, args.device)
    try:
        run_once(loss, x, y)  # warm-up: compilation, caches
        runs = [run_once(loss, x, y) for _ in range(args.repeats)]
    except Exception as e:  # a failing baseline is a row, not the end of the run
        return dict(row, skipped=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
    times = [r[0] for r in runs]
    row = dict(row, seconds=statistics.median(times), seconds_all=times, value=runs[0][1],
               grad_norm=runs[0][2])
    if impl == "tessel-multiscale":  # what the truncation kept and dropped (one untimed solve)
        from tessel.ot import solve_sample
        r = solve_sample(None, x, None, y, blur=0.05, scaling=0.5, debias=True, tol=0,
                         update="symmetric", backend="multiscale")
        row.update(kept_blocks=r.kept_blocks, dropped_mass=r.dropped_mass)
    return row


def table(paths):
    rows = [json.loads(line) for p in paths for line in open(p) if line.startswith("{")]
    out = ["| N | D | impl | value + gradient (s) | vs tessel | value rel. diff. |",
           "|--:|--:|---|--:|--:|--:|"]
    by_case = {}
    for r in rows:
        by_case.setdefault((r["n"], r["d"]), []).append(r)
    for (n, d), rs in sorted(by_case.items()):
        ref = next((r for r in rs if r["impl"] == "tessel" and "seconds" in r), None)
        for r in rs:
            if "seconds" not in r:
                out.append(f"| {n:,} | {d} | {r['impl']} | skipped: {r['skipped']} | | |")
                continue
            ratio = f"{r['seconds'] / ref['seconds']:.1f}x" if ref else ""
            diff = (f"{abs(r['value'] - ref['value']) / max(abs(ref['value']), 1e-30):.1e}"
                    if ref else "")
            out.append(f"| {n:,} | {d} | {r['impl']} | {r['seconds']:.3g} | {ratio} | {diff} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[1000, 3000, 10000])
    ap.add_argument("--d", type=int, nargs="+", default=[3])
    ap.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-pykeops", type=int, default=10000)
    ap.add_argument("--dense-gib", type=float, default=4.0)
    ap.add_argument("--table", nargs="+", metavar="JSONL")
    args = ap.parse_args()
    if args.table:
        print(table(args.table))
        return
    import torch
    head = dict(cpu=cpu_name(), torch=torch.__version__, threads=torch.get_num_threads())
    if args.device.startswith("cuda"):
        head["gpu"] = torch.cuda.get_device_name(0)
    print("# " + json.dumps(head), flush=True)
    for d in args.d:
        for n in args.n:
            for impl in args.impls:
                print(json.dumps(measure(impl, n, d, args)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
