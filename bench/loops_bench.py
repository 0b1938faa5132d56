"""Peak memory and time of differentiated loops, variant by variant, each in a fresh process.

Each program is an example in examples/python with a function
`run(variant, n, iters, dtype, **options) -> (value, gradient)`; a row of PROGRAMS below names it,
its variants and, for variants whose memory could outgrow the machine's, the bytes they would
need. Every (program, variant, n, iters) is measured by tessel.loops.run_isolated: the example is
imported and warmed up at a tiny size (kernel compilation, torch's lazy initialisation) in the
setup, then one run is timed and its rise of the peak resident set recorded. A variant predicted
not to fit in memory is skipped ("oom-skipped", with the prediction) rather than run into the OOM
killer.

A program run until convergence (sinkhorn_while: Sinkhorn until the marginal error is below
`tol`) runs its `while` variant first, with --iters as a cap; the other variants then take the
steps that one took (checkpoint_loop knowing n, unrolled autograd). Its rows report the steps
and the recomputations (untaped step evaluations beyond the n of the forward pass).

Prints one JSON line per measurement; `--table FILE...` turns such lines into a Markdown table.
Run: PYTHONPATH=build/python .venv/bin/python bench/loops_bench.py --programs sinkhorn
     --n 10000 --iters 1000 [--variants dense tessel] [--dtype float32] [--timeout 1800]
     [--repeats 3] (several --n and --iters values give one measurement per combination;
     --repeats runs each in that many fresh processes and reports the median time and peak)
"""
import argparse
import dataclasses
import json
import os
import pathlib
import statistics
import sys
from typing import Callable, Optional

from tessel.loops.memory import MeasureError, run_isolated

EXAMPLES = pathlib.Path(__file__).resolve().parents[1] / "examples" / "python"
MIB = 2.0**20


@dataclasses.dataclass
class Program:
    script: str                    # in examples/python; exposes run(variant, n, iters, dtype, **o)
    variants: tuple                # in the order they are run and shown
    options: dict                  # extra keyword arguments of run(), from the command line
    predict_bytes: Optional[Callable] = None  # (variant, n, iters, dtype) -> bytes, or None
    warmup_n: int = 64             # the setup's warm-up size
    until_convergence: bool = False  # variants[0] stops by itself; the others take its steps


def _itemsize(dtype):
    return {"float32": 4, "float64": 8}[dtype]


def _sinkhorn_bytes(variant, n, iters, dtype):
    # The dense variant's autograd holds some fifteen N x N matrices at its peak (K, the (N, N, 2)
    # differences kept for the backward of both squared-distance matrices, Gamma and the other
    # products' saved operands, the gradient of K and its updates): 15.0 N^2 itemsize measured
    # at N = 3,000 and 5,000 (float32). The other variants hold vectors only.
    return int(15.0 * n * n * _itemsize(dtype)) if variant == "dense" else None


# The other rows' fixed options: their predictions below read them.
_RECON = {"batch": 8, "coils": 4, "cg_iters": 10}
_INVERTIBLE = {"batch": 8, "channels": 32}
_LDDMM = {"dim": 3, "snapshots": 10}


def _recon_bytes(variant, n, iters, dtype):
    # Unrolled autograd keeps only about three real images per CG iteration, but the peak
    # resident set is that of the complex (batch, coils, n, n) temporaries of the FFTs as well:
    # glibc's malloc serves blocks below its mmap threshold (raised by each free, up to 32 MiB)
    # from the heap, which keeps them resident. Measured (float32): 6.0 such arrays per CG
    # iteration at n = 128 and 256 (temporaries of 4 and 16 MiB), 1.0 at n = 512 (64 MiB).
    if variant != "unrolled":
        return None
    o = _RECON
    temp = o["batch"] * o["coils"] * n * n * 2 * _itemsize(dtype)
    per_iter = (6.0 if temp < 32 * MIB else 1.2) * temp
    return int(per_iter * iters * o["cg_iters"])


def _invertible_bytes(variant, n, iters, dtype):
    # Plain autograd keeps about 5.6 tensors of the input's size per block (the halves, the two
    # branches' hidden layers and outputs, the concatenation): measured at n = 64, depth 4 to 32.
    if variant != "plain":
        return None
    o = _INVERTIBLE
    return int(5.7 * iters * o["batch"] * 2 * o["channels"] * n * n * _itemsize(dtype))


def _lddmm_bytes(variant, n, iters, dtype):
    # Plain autograd keeps the states and the reductions' inputs and outputs of both Heun stages:
    # some 11 (n, dim) arrays per step (measured at n = 20,000, 100 steps, float32).
    if variant != "plain":
        return None
    return int(11 * iters * n * _LDDMM["dim"] * _itemsize(dtype))


PROGRAMS = {
    "sinkhorn": Program("sinkhorn_seed.py", ("dense", "tessel", "checkpoint", "logdomain"),
                        {"snapshots": 10}, _sinkhorn_bytes),
    "reconstruction": Program("unrolled_reconstruction.py", ("unrolled", "implicit"), _RECON,
                              _recon_bytes, warmup_n=32),
    "invertible": Program("invertible_network.py", ("plain", "reversible"), _INVERTIBLE,
                          _invertible_bytes, warmup_n=16),
    "lddmm": Program("lddmm_reversible.py", ("plain", "checkpoint", "reversible"), _LDDMM,
                     _lddmm_bytes),
    "sinkhorn_while": Program("sinkhorn_until_convergence.py", ("while", "loop", "unrolled"),
                              {"snapshots": 8, "tol": 1e-2}, until_convergence=True),
}


def memory_limit_bytes():
    """What a measured process may use: 80% of the machine's memory (the rest for the others)."""
    return int(0.8 * os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


_SETUP = """
import importlib.util
_spec = importlib.util.spec_from_file_location({name!r}, {path!r})
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
_mod.run({variant!r}, {warm_n}, {warm_iters}, {dtype!r}, **{options!r})
"""

_WORK = """
_out = _mod.run({variant!r}, {n}, {iters}, {dtype!r}, **{options!r})
RESULT = dict(value=float(_out[0]), grad_norm=float(_out[1].norm()),
              info=_out[2] if len(_out) > 2 else {{}})
"""


def measure(name, variant, n, iters, dtype, options, timeout, limit):
    prog = PROGRAMS[name]
    row = dict(bench=name, variant=variant, n=n, iters=iters, dtype=dtype, **options,
               threads=int(os.environ.get("TESSEL_NUM_THREADS", "0") or 0) or os.cpu_count())
    predicted = prog.predict_bytes(variant, n, iters, dtype) if prog.predict_bytes else None
    if predicted is not None:
        row["predicted_mib"] = round(predicted / MIB, 1)
        if predicted > limit:
            return dict(row, status="oom-skipped",
                        reason=f"predicted {predicted / 2**30:.1f} GiB > the {limit / 2**30:.1f} "
                               "GiB allowed (80% of the machine's memory); not run")
    path = EXAMPLES / prog.script
    args = dict(variant=variant, dtype=dtype, options=options)
    setup = _SETUP.format(name=path.stem, path=str(path), warm_n=prog.warmup_n,
                          warm_iters=min(iters, 2), **args)
    work = _WORK.format(n=n, iters=iters, **args)
    try:
        r = run_isolated(setup, work, timeout=timeout)
        # The machine may be shared: a 1-minute load well above the thread count means the
        # time was measured while others competed for the cores.
        row["loadavg_1m"] = round(os.getloadavg()[0], 2)
    except MeasureError as e:
        if "ran past" in str(e):
            return dict(row, status="timeout", timeout_s=timeout)
        return dict(row, status="error", reason=str(e)[-600:])
    info = r["result"]["info"]
    if "n_steps" in info:
        row["iters"] = iters = info["n_steps"]
    return dict(row, status="ok", peak_mib=round(r["peak_bytes"] / MIB, 1),
                seconds=round(r["seconds"], 3),
                seconds_per_iter=round(r["seconds"] / max(iters, 1), 5),
                cost=r["result"]["value"], grad_norm=r["result"]["grad_norm"], **info)


def measure_median(repeats, *args):
    """measure() in `repeats` fresh processes: the median time and peak (all times listed)."""
    rows = [measure(*args) for _ in range(repeats)]
    ok = [r for r in rows if r["status"] == "ok"]
    if len(ok) < len(rows) or repeats == 1:
        return next((r for r in rows if r["status"] != "ok"), rows[0])
    row = dict(ok[0], repeats=repeats, seconds_all=[r["seconds"] for r in ok])
    for key in ("seconds", "seconds_per_iter", "peak_mib"):
        row[key] = statistics.median(r[key] for r in ok)
    return row


def _fmt_num(v, fmt):
    return "" if v is None else format(v, fmt)


def markdown(rows):
    """A Markdown table of JSON rows (one per measurement), by program, n, iters, variant."""
    def order(r):
        variants = PROGRAMS[r["bench"]].variants if r["bench"] in PROGRAMS else ()
        v = variants.index(r["variant"]) if r["variant"] in variants else len(variants)
        return (r["bench"], r["n"], r["iters"], v)

    rows = sorted(rows, key=order)
    out = ["| program | variant | n | iters | recomputations | peak memory | time "
           "| time / iteration | cost | status |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for r in rows:
        if r["status"] == "ok":
            mem = f"{r['peak_mib']:,.1f} MiB"
            status = "ok"
        else:
            mem = "—"
            status = r["status"]
            if "predicted_mib" in r:
                status += f" (predicted {r['predicted_mib'] / 1024:,.1f} GiB)"
        secs = r.get("seconds")
        out.append(
            f"| {r['bench']} | {r['variant']} | {r['n']:,} | {r['iters']:,} "
            f"| {_fmt_num(r.get('recomputations'), ',')} | {mem} "
            f"| {_fmt_num(secs, '.1f') + ' s' if secs is not None else '—'} "
            f"| {_fmt_num(r.get('seconds_per_iter'), '.3g') + ' s' if secs is not None else '—'} "
            f"| {_fmt_num(r.get('cost'), '.6g') or '—'} | {status} |")
    return "\n".join(out)


def read_rows(paths):
    rows = []
    for p in paths:
        text = sys.stdin.read() if p == "-" else pathlib.Path(p).read_text()
        rows += [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", nargs="+", default=list(PROGRAMS), choices=list(PROGRAMS))
    ap.add_argument("--variants", nargs="+", default=None,
                    help="variants to run (default: all of each program's)")
    ap.add_argument("--n", type=int, nargs="+", default=[10000])
    ap.add_argument("--iters", type=int, nargs="+", default=[1000])
    ap.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    ap.add_argument("--snapshots", type=int, default=None,
                    help="checkpointed variants' snapshot budget (default: the program's)")
    ap.add_argument("--tol", type=float, default=None,
                    help="marginal error a program run until convergence stops at")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per measurement")
    ap.add_argument("--repeats", type=int, default=1,
                    help="fresh processes per measurement (median time and peak reported)")
    ap.add_argument("--max-mib", type=float, default=None,
                    help="skip variants predicted to need more (default: 80%% of the memory)")
    ap.add_argument("--table", nargs="+", metavar="JSONL",
                    help="print a Markdown table of these files' JSON lines ('-': stdin), "
                         "then exit")
    args = ap.parse_args(argv)
    if args.table:
        print(markdown(read_rows(args.table)))
        return 0
    limit = args.max_mib * MIB if args.max_mib is not None else memory_limit_bytes()
    for name in args.programs:
        prog = PROGRAMS[name]
        options = dict(prog.options)
        if args.snapshots is not None and "snapshots" in options:
            options["snapshots"] = args.snapshots
        if args.tol is not None and "tol" in options:
            options["tol"] = args.tol
        unknown = set(args.variants or ()) - set(prog.variants)
        if unknown and len(args.programs) == 1:
            ap.error(f"{name} has no variant {', '.join(sorted(unknown))}; it has "
                     f"{', '.join(prog.variants)}")
        variants = [v for v in prog.variants if args.variants is None or v in args.variants]
        for n in args.n:
            for iters in args.iters:
                steps = iters  # until convergence: the steps the first variant took
                for v in variants:
                    row = measure_median(args.repeats, name, v, n, steps, args.dtype, options,
                                         args.timeout, limit)
                    if prog.until_convergence and v == prog.variants[0] and "n_steps" in row:
                        steps = row["n_steps"]
                    print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
