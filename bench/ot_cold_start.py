"""First-call latency of Sinkhorn second derivatives: a Hessian-vector product of tessel.ot's
SamplesLoss in the unrolled and the implicit gradient modes, each in a fresh process with an empty
kernel cache (cold), then again in the same process (warm).

The problem: N points of a normal cloud x of standard deviation --scale (0.25: a diameter about
2.5, the unit size GeomLoss users normalise to) against M points y shifted by --scale, D = 3,
uniform weights, p = 2, blur 0.05, the debiased Sinkhorn divergence, float32 or float64; the HVP
is torch.autograd.functional.hvp in x along a random direction. For each (mode, dtype) one JSON
line: cold and warm seconds, how many kernels the compiler built into the cache during the cold
call and their total compile seconds (each kernel's library written minus its source written,
both timestamps kept by the disk cache; compiles that overlap are each counted in full), the
largest source, and the HVP's norm (the runs of one row must agree).

Run: PYTHONPATH=build/python python bench/ot_cold_start.py [--modes unrolled implicit]
     [--dtypes float32 float64] [--n 1000] [--m 1200] [--scale 0.25] [--repeats 3]
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def problem(n, m, dtype, scale, seed=0):
    import torch
    g = torch.Generator().manual_seed(seed)
    dt = getattr(torch, dtype)
    x = (scale * torch.randn(n, 3, generator=g, dtype=torch.float64)).to(dt)
    y = (scale * (torch.randn(m, 3, generator=g, dtype=torch.float64) + 1)).to(dt)
    v = torch.randn(n, 3, generator=g, dtype=torch.float64).to(dt)
    return x, y, v


def compiled_kernels(cache):
    """(count, total compile seconds, largest source bytes) of the libraries in a kernel cache."""
    count, seconds, largest = 0, 0.0, 0
    for so in glob.glob(os.path.join(cache, "kernels", "*", "*.so")):
        src = so[:-3] + ".cpp"
        if os.path.exists(src):
            seconds += max(0.0, os.stat(so).st_mtime - os.stat(src).st_mtime)
            largest = max(largest, os.stat(src).st_size)
        count += 1
    return count, seconds, largest


def child(args):
    """One cold call then one warm call in this process (its TESSEL_CACHE_DIR is empty)."""
    import torch
    from tessel.ot import SamplesLoss
    torch.set_num_threads(args.threads)
    x, y, v = problem(args.n, args.m, args.dtypes[0], args.scale)
    loss = SamplesLoss("sinkhorn", p=2, blur=0.05, gradient=args.modes[0])
    times, hvps = [], []
    for _ in range(2):
        t0 = time.perf_counter()
        try:
            _, h = torch.autograd.functional.hvp(lambda t: loss(t, y), x, v)
        except (RuntimeError, ValueError) as e:  # float32 may be too coarse for the implicit mode
            print(json.dumps(dict(error=str(e).splitlines()[0][:300])))
            return
        times.append(time.perf_counter() - t0)
        hvps.append(float(h.double().norm()))
        if not times[1:]:  # the cold call's compiles, before the warm call adds any
            count, seconds, largest = compiled_kernels(os.environ["TESSEL_CACHE_DIR"])
    print(json.dumps(dict(cold_s=times[0], warm_s=times[1], kernels=count, compile_s=seconds,
                          largest_source=largest, hvp_norm=hvps[0], hvp_norm_warm=hvps[1])))


def run_cold(mode, dtype, args):
    with tempfile.TemporaryDirectory(prefix="tessel-cold-") as cache:
        env = dict(os.environ, TESSEL_CACHE_DIR=cache)
        cmd = [sys.executable, __file__, "--child", "--modes", mode, "--dtypes", dtype,
               "--n", str(args.n), "--m", str(args.m), "--scale", str(args.scale),
               "--threads", str(args.threads)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"the cold run of {mode}/{dtype} failed:\n{out.stderr[-3000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--modes", nargs="+", default=["unrolled", "implicit"])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float64"])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--m", type=int, default=1200)
    ap.add_argument("--scale", type=float, default=0.25)
    ap.add_argument("--repeats", type=int, default=1, help="cold runs per row (median)")
    ap.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args)
    for mode in args.modes:
        for dtype in args.dtypes:
            runs = [run_cold(mode, dtype, args) for _ in range(args.repeats)]
            row = dict(mode=mode, dtype=dtype, n=args.n, m=args.m, scale=args.scale,
                       repeats=args.repeats)
            if "error" in runs[0]:
                print(json.dumps(dict(row, error=runs[0]["error"])), flush=True)
                continue
            row.update(cold_s=statistics.median(r["cold_s"] for r in runs),
                       warm_s=statistics.median(r["warm_s"] for r in runs),
                       cold_runs=[round(r["cold_s"], 2) for r in runs])
            for key in ("kernels", "compile_s", "largest_source", "hvp_norm", "hvp_norm_warm"):
                row[key] = runs[0][key]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
