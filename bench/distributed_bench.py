"""Sharded Gaussian sums (tessel.distributed.Genred): strong and weak scaling over processes.

The reduction is a_i = sum_j exp(-G |x_i - y_j|^2) b_j (float32, D = 3, a 1-column b), timed
forward and forward + backward (gradients of x, y and b; loss sum(a * w)). Every measurement runs
in freshly spawned processes (gloo on loopback, or NCCL with --backend nccl --device cuda), each
limited to --threads threads (TESSEL_NUM_THREADS and torch.set_num_threads), so that P processes
use P cores:
  - strong scaling: N = M fixed (--n), 1 and 2 processes; the baseline is one process with plain
    tessel.torch.Genred on 1 and 2 threads. Efficiency = t(1 thread) / (P * t(P processes)).
  - weak scaling: a fixed number of points per rank (--n-per-rank), 1, 2 and 4 processes. Every
    pair (i, j) is reduced, so a rank reduces n x (P n) pairs: the ideal time is P * t(1 process)
    and efficiency = P * t(1) / t(P). With more processes than cores (4 on a 2-core machine) the
    processes share cores: that row measures the ring's overhead, not speed ("cores_efficiency"
    divides by the cores there are instead).
A row's time is the median over --repeats of the slowest rank's call (the ranks start together
after a barrier; one warm-up call, at full size, is not timed). Per rank, the call's time is
split without touching the library: "wait_s" is the time blocked in the ring's wait for a block
(or its gradient) to arrive or leave, measured by wrapping Ring.shift's wait in this process;
"check_s" the all_gather that checks every rank's call; the rest ("compute_s") is the local
reductions, the merges and Python. Under NCCL a wait only orders GPU streams, so its host time
says little there.

Prints one JSON line per measurement (and a first line on the machine: CPU, cores, load average;
a last one with the load after), or with --table the Markdown tables of the lines of given files.
Several ranks on one GPU is not a configuration NCCL accepts (it refuses two ranks on one device),
so with NCCL rows needing more processes than GPUs come out as "skipped" with that reason.

Run: PYTHONPATH=build/python .venv/bin/python bench/distributed_bench.py [--quick] > dist.jsonl
     python3 bench/distributed_bench.py --table dist.jsonl
     bench/distributed_bench.py --backend nccl --device cuda --n 1000000 --n-per-rank 500000
"""
import argparse
import json
import os
import pathlib
import socket
import statistics
import sys
import time
from datetime import timedelta

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from ot_bench import cpu_name  # noqa: E402 -- the bench folder is not a package

FORMULA = "Exp(-G*SqDist(X,Y))*B"
ALIASES = ["X=Vi(3)", "Y=Vj(3)", "B=Vj(1)", "G=Pm(1)"]
GAMMA = 2.0  # kernel width 0.5 for standard normal points: most terms neither 1 nor 0
WAIT_S = 900
SIZES = {False: dict(n=60000, n_per_rank=30000, repeats=5),
         True: dict(n=4000, n_per_rank=2000, repeats=2)}


def _data(n, m, device, seed=0):
    """The whole problem, the same on every rank (one seed): x (n, 3), y (m, 3), b (m, 1), the
    loss weights w (n, 1) and G."""
    import torch
    gen = torch.Generator().manual_seed(seed)
    x, y = torch.randn(n, 3, generator=gen), torch.randn(m, 3, generator=gen)
    b, w = torch.rand(m, 1, generator=gen), torch.randn(n, 1, generator=gen)
    return [t.to(device) for t in (x, y, b, w, torch.tensor([GAMMA]))]


def _sync(device):
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


class _Clock:
    """Seconds spent in the ring's waits and in the call's check, by wrapping what the library
    calls (its module attributes), so the library itself is measured unchanged."""

    def __init__(self):
        self.wait = self.check = 0.0
        self.wraps = []
        from tessel.distributed import _genred, _ring
        shift, exchange = _ring.Ring.shift, getattr(_genred, "exchange", None)

        def timed_shift(ring, *a, **k):
            buf, wait = shift(ring, *a, **k)

            def timed_wait():
                t = time.perf_counter()
                wait()
                self.wait += time.perf_counter() - t
            return buf, timed_wait

        def timed_exchange(*a, **k):
            t = time.perf_counter()
            try:
                return exchange(*a, **k)
            finally:
                self.check += time.perf_counter() - t
        _ring.Ring.shift = timed_shift
        self.wraps.append("wait")
        if exchange is not None:
            _genred.exchange = timed_exchange
            self.wraps.append("check")

    def reset(self):
        self.wait = self.check = 0.0


def _timed_calls(call, args, w, backward, repeats, device, barrier, clock):
    """Per repeat: (seconds of the call, [+ backward]), wait and check seconds; and the checksum
    of the result (its sum, in float64)."""
    import torch
    rows, checksum = [], None
    for rep in range(repeats + 1):  # the first call warms up (kernels, connections, caches)
        ins = [a.detach().requires_grad_(backward and k < 3) for k, a in enumerate(args)]
        barrier()
        _sync(device)
        if clock is not None:
            clock.reset()
        t = time.perf_counter()
        out = call(*ins)
        if backward:
            torch.autograd.backward([(out * w).sum()])
        _sync(device)
        dt = time.perf_counter() - t
        checksum = float(out.detach().double().sum())
        if rep:
            rows.append((dt, clock.wait if clock else 0.0, clock.check if clock else 0.0))
    return rows, checksum


def _measure(rank, world, job):
    """One rank's timings of a job: every mode, every repeat."""
    import torch
    device = job["device"]
    if device.startswith("cuda"):
        device = f"cuda:{rank % torch.cuda.device_count()}"
        torch.cuda.set_device(device)
    x, y, b, w, g = _data(job["n"], job["m"], device)
    if job["impl"] == "tessel.torch":
        from tessel.torch import Genred
        call, barrier, clock = Genred(FORMULA, ALIASES), (lambda: None), None
        args = [x, y, b, g]
    else:
        import torch.distributed as dist
        import tessel.distributed as td
        part = lambda t: torch.tensor_split(t, world)[rank]  # noqa: E731
        call, barrier, clock = td.Genred(FORMULA, ALIASES), dist.barrier, _Clock()
        args, w = [part(x), part(y), part(b), g], part(w)
    out = {}
    for mode in ("forward", "forward_backward"):
        rows, checksum = _timed_calls(call, args, w, mode != "forward", job["repeats"], device,
                                      barrier, clock)
        out[mode] = dict(calls=rows, checksum=checksum)
    return out


def _worker(rank, world, port, job, queue):
    import torch
    os.environ["TESSEL_NUM_THREADS"] = str(job["threads"])
    torch.set_num_threads(job["threads"])
    if job["impl"] == "tessel.torch":
        queue.put((rank, _measure(rank, world, job)))
        return
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(job["backend"], rank=rank, world_size=world,
                            timeout=timedelta(seconds=WAIT_S))
    try:
        queue.put((rank, _measure(rank, world, job)))
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(job, world):
    """Runs `job` on `world` spawned processes; returns their results by rank. A rank's error
    stops the others and comes back with its trace (torch.multiprocessing.spawn's)."""
    import torch.multiprocessing as mp
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_worker, args=(world, _free_port(), job, queue), nprocs=world)
    results = dict(queue.get() for _ in range(world))
    return [results[r] for r in range(world)]


def summarize(job, world, results, mode):
    """One JSON row: the median over repeats of the slowest rank, and each rank's medians."""
    calls = [r[mode]["calls"] for r in results]
    per_rep = [max(c[k][0] for c in calls) for k in range(len(calls[0]))]
    ranks = []
    for rank, c in enumerate(calls):
        call, wait, check = (statistics.median(v[i] for v in c) for i in range(3))
        ranks.append(dict(rank=rank, call_s=call, wait_s=wait, check_s=check,
                          compute_s=call - wait - check))
    return dict(bench="distributed", scaling=job["scaling"], impl=job["impl"],
                processes=world, threads_per_process=job["threads"], n=job["n"], m=job["m"],
                n_per_rank=job["n"] // world, mode=mode, seconds=statistics.median(per_rep),
                repeats=job["repeats"], backend=job["backend"], device=job["device"],
                oversubscribed=world * job["threads"] > os.cpu_count(),
                checksum=sum(r[mode]["checksum"] for r in results),
                per_rank=ranks if job["impl"] == "tessel.distributed" else None)


def with_efficiency(row, base, cores):
    """Adds speedup and efficiency against `base` (strong: one process on one thread; weak: one
    process of the ring, whose time a rank of P would take P times, having P times the pairs)."""
    used = row["processes"] * row["threads_per_process"]
    if row["scaling"] == "strong":
        row["speedup"] = base / row["seconds"]
        row["efficiency"] = base / (used * row["seconds"])
    else:
        p = row["processes"]
        row["efficiency"] = p * base / row["seconds"]
        # The same work (p * p blocks of base's size) on the cores there are.
        row["cores_efficiency"] = p * p * base / (min(used, cores) * row["seconds"])
    return row


def jobs(args):
    """(job, processes) in the order run: each scaling's baseline first."""
    common = dict(backend=args.backend, device=args.device, repeats=args.repeats,
                  threads=args.threads)
    n, k = args.n, args.n_per_rank
    strong = dict(common, scaling="strong", n=n, m=n)
    out = [(dict(strong, impl="tessel.torch"), 1)]
    if args.device == "cpu":
        out.append((dict(strong, impl="tessel.torch", threads=2 * args.threads), 1))
    out += [(dict(strong, impl="tessel.distributed"), p) for p in args.strong]
    out += [(dict(common, scaling="weak", impl="tessel.distributed", n=k * p, m=k * p), p)
            for p in args.weak]
    return out


def machine(args):
    import torch
    gpus = torch.cuda.device_count() if args.device == "cuda" else 0
    return dict(bench="distributed", kind="machine", cpu=cpu_name(), cores=os.cpu_count(),
                gpus=gpus, gpu=torch.cuda.get_device_name(0) if gpus else None,
                torch=torch.__version__, load_before=os.getloadavg(), argv=sys.argv[1:])


def run(args):
    info = machine(args)
    print(json.dumps(info), flush=True)
    base = {}
    for job, world in jobs(args):
        if args.backend == "nccl" and job["impl"] != "tessel.torch" and world > info["gpus"]:
            print(json.dumps(dict(bench="distributed", scaling=job["scaling"], processes=world,
                                  skipped=f"{world} processes on {info['gpus']} GPU(s): NCCL "
                                  "refuses two ranks on one device")), flush=True)
            continue
        results = run_job(job, world)
        for mode in ("forward", "forward_backward"):
            row = summarize(job, world, results, mode)
            key = (job["scaling"], mode)
            first = (job["impl"] == "tessel.torch" if job["scaling"] == "strong" else
                     world == min(args.weak))
            if first and (key not in base) and row["threads_per_process"] == args.threads:
                base[key] = row["seconds"] * (1 if job["scaling"] == "strong" else
                                              1 / world)
            if key in base:
                with_efficiency(row, base[key], info["cores"])
            row["cpu"] = info["cpu"]
            print(json.dumps(row), flush=True)
    print(json.dumps(dict(bench="distributed", kind="machine", load_after=os.getloadavg())),
          flush=True)


def _ms(s):
    return f"{s:.3f}"


def table(paths):
    """Markdown tables (strong, then weak) of the JSON lines in `paths`."""
    rows = [json.loads(line) for p in paths for line in open(p)
            if line.startswith("{") and '"seconds"' in line]
    out = []
    for scaling in ("strong", "weak"):
        sel = [r for r in rows if r["scaling"] == scaling]
        if not sel:
            continue
        out += ["", f"{scaling} scaling", "",
                "| impl | N = M | processes x threads | mode | s (median) | speedup | "
                "efficiency | per rank: wait / check / compute s |",
                "| --- | --- | --- | --- | --- | --- | --- | --- |"]
        for r in sel:
            ranks = "; ".join(f"{_ms(q['wait_s'])} / {_ms(q['check_s'])} / "
                              f"{_ms(q['compute_s'])}" for q in r["per_rank"] or [])
            eff = r.get("efficiency")
            if eff is not None and r.get("cores_efficiency", eff) != eff:
                eff = f"{eff:.2f} ({r['cores_efficiency']:.2f} of the cores)"
            elif eff is not None:
                eff = f"{eff:.2f}"
            speed = r.get("speedup")
            out.append(f"| {r['impl']} | {r['n']} | {r['processes']} x "
                       f"{r['threads_per_process']} | {r['mode']} | {r['seconds']:.3f} | "
                       f"{'-' if speed is None else f'{speed:.2f}'} | {eff or '-'} | "
                       f"{ranks or '-'} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke sizes (a few seconds a row)")
    ap.add_argument("--n", type=int, help="strong scaling: N = M (default 60000; quick 4000)")
    ap.add_argument("--n-per-rank", type=int,
                    help="weak scaling: points per rank (default 30000; quick 2000)")
    ap.add_argument("--strong", type=int, nargs="+", default=[1, 2], help="process counts")
    ap.add_argument("--weak", type=int, nargs="+", default=[1, 2, 4], help="process counts")
    ap.add_argument("--repeats", type=int, help="timed calls per row (default 5; quick 2)")
    ap.add_argument("--threads", type=int, default=1, help="threads per process")
    ap.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--table", nargs="+", metavar="JSONL",
                    help="print the Markdown tables of these files' lines instead")
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    if (args.backend == "nccl") != (args.device == "cuda"):
        ap.error("--backend nccl goes with --device cuda, gloo with --device cpu")
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            ap.error("--device cuda: torch sees no CUDA device on this machine")
    for name, value in SIZES[args.quick].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
