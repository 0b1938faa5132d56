"""The first user story's Sinkhorn on a GPU: time and peak device memory, variant by variant.

The story (examples/python/sinkhorn_seed.py): two unit circles of N points, `iters` Sinkhorn
iterations A = P / (K B), B = Q / (K^T A) with K_ij = exp(-|x_i - y_j|^2 / 0.25), the cost
sum_ij A_i B_j K_ij |x_i - y_j|^2 and its gradient in X. Variants:

  tessel      tessel reductions, plain autograd through the loop (memory O(iters N))
  checkpoint  the same in checkpoint_loop, 10 snapshots (memory O(10 N), steps recomputed)
  logdomain   potentials and LogSumExp softmins in checkpoint_loop (stable for any width)
  dense       the story's own code: N x N matrices under autograd; skipped, with the bytes it
              would need (about 15 N^2 itemsize), where that exceeds the device's free memory
  geomloss    GeomLoss's SamplesLoss("sinkhorn", p=2, blur=0.5, backend="online") on the same
              clouds: its own epsilon-scaling schedule and debiasing, not the story's loop, so its
              time is a reference point for "an OT loss and its gradient", not the same arithmetic
  tessel-ot   tessel.ot.SamplesLoss with GeomLoss's arguments: the same computation as geomloss

Each variant runs once untimed at a small N (compilation), then once timed at each --n, on
tensors already on the device. Peak memory is sampled from the driver (total minus free, every
millisecond, less the level before the run) so that allocations outside PyTorch's allocator
count too; PyTorch's own peak is reported beside it. The cost and |dX| of every variant are
printed so that runs can be checked against each other (the loop variants must agree to 1e-3 in
float32). Prints JSON lines.

Run (a GPU machine): PYTHONPATH=build/python python3 bench/gpu_seed_bench.py --n 10000 100000
     --iters 1000 [--variants tessel logdomain geomloss dense]
"""
import argparse
import importlib.util
import json
import pathlib
import threading
import time

import torch

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "python" / "sinkhorn_seed.py"
LOOP_VARIANTS = ("tessel", "checkpoint", "logdomain", "dense")
VARIANTS = LOOP_VARIANTS + ("geomloss", "tessel-ot")


def emit(**kv):
    print(json.dumps(kv), flush=True)


def load_example():
    spec = importlib.util.spec_from_file_location("sinkhorn_seed", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class PeakSampler:
    """Highest (total - free) device memory seen while the block runs, less the level before."""

    def __init__(self, device):
        self.device = device
        self.peak = 0
        self._stop = threading.Event()

    def _used(self):
        free, total = torch.cuda.mem_get_info(self.device)
        return total - free

    def _loop(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._used())
            time.sleep(0.001)

    def __enter__(self):
        torch.cuda.synchronize(self.device)
        self.base = self._used()
        self.peak = self.base
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        torch.cuda.synchronize(self.device)
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._used())
        self.rise = self.peak - self.base


def make_runner(mod, variant, device):
    def clouds(n):
        x, y, p, q = mod.circles(n, torch.float32)
        x = x.detach().to(device).requires_grad_(True)
        return x, y.to(device), p.to(device), q.to(device)

    if variant in LOOP_VARIANTS:
        fn = mod.FUNCTIONS[variant]

        def run(n, iters):
            x, y, p, q = clouds(n)
            return fn(x, y, p, q, iters, 10)
        return run

    if variant == "geomloss":
        from geomloss import SamplesLoss
    else:
        from tessel.ot import SamplesLoss
    loss = SamplesLoss("sinkhorn", p=2, blur=mod.S, backend="online")

    def run(n, iters):  # iters: not used, the loss follows its own schedule
        x, y, p, q = clouds(n)
        value = loss(p, x, q, y)
        (dx,) = torch.autograd.grad(value, x)
        return value.detach(), dx
    return run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--warmup-n", type=int, default=256)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if not torch.cuda.is_available():
        raise SystemExit("gpu_seed_bench: no CUDA device visible to PyTorch")
    mod = load_example()
    name = torch.cuda.get_device_name(device)
    free, total = torch.cuda.mem_get_info(device)
    for variant in args.variants:
        try:
            run = make_runner(mod, variant, device)
            run(args.warmup_n, 3)  # compilation and lazy initialisation, not timed
        except Exception as e:  # a missing baseline, a failed compile: recorded, not fatal
            emit(variant=variant, device=name, status="error", reason=str(e).splitlines()[0][:300])
            continue
        for n in args.n:
            row = dict(program="sinkhorn_seed", variant=variant, n=n, iters=args.iters,
                       dtype="float32", device=name)
            if variant == "dense" and 15.0 * n * n * 4 > free:
                emit(**row, status="oom-skipped", predicted_bytes=15.0 * n * n * 4,
                     device_free_bytes=free, device_total_bytes=total)
                continue
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
            try:
                with PeakSampler(device) as peak:
                    t0 = time.perf_counter()
                    cost, dx = run(n, args.iters)
                    torch.cuda.synchronize(device)
                    elapsed = time.perf_counter() - t0
            except (RuntimeError, MemoryError) as e:
                emit(**row, status="error", reason=str(e).splitlines()[0][:300])
                continue
            emit(**row, status="ok", seconds=elapsed, peak_device_bytes=peak.rise,
                 peak_torch_bytes=torch.cuda.max_memory_allocated(device),
                 cost=float(cost), dx_norm=float(dx.norm()),
                 finite=bool(torch.isfinite(dx).all()))


if __name__ == "__main__":
    main()
