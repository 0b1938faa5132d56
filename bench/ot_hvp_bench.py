"""Second derivatives of Sinkhorn losses side by side: a Hessian-vector product in x of the debiased
Sinkhorn divergence by tessel.ot's implicit mode and by dense PyTorch autograd through the
log-domain iterations run to convergence (the reference), in one run. (The unrolled mode
differentiates GeomLoss's eps schedule, which stops before convergence: another function.)

The problem: N points of a standard normal cloud x against M = ratio * N points y shifted by 1,
D = 3, uniform weights, p = 2, float64, `--blur` and `--reach` (none: balanced). The dense
reference runs as many iterations as the tessel loop needed to converge (counted first, without a
graph), at the final eps, so its value is the same fixed point; it is skipped when its graph
(iterations x N x M x 8 bytes, times 4) exceeds --dense-gib. A row gives the forward, gradient
and HVP times (median of --repeats runs after one warm-up run, so compilation is not timed), and
the relative difference of its value and HVP from the first implementation's.

Prints one JSON line per (impl, N) and, with --table, a Markdown table. Run:
  PYTHONPATH=build/python .venv/bin/python bench/ot_hvp_bench.py --n 300 2000 [--reach 0.5]
  [--impls tessel-implicit dense] [--repeats 3] > hvp.jsonl
  python bench/ot_hvp_bench.py --table hvp.jsonl
"""
import argparse
import json
import math
import statistics
import sys
import time

from ot_bench import cpu_name

IMPLS = ("tessel-implicit", "dense")


def problem(n, ratio, seed=0):
    import torch
    g = torch.Generator().manual_seed(seed)
    m = max(1, round(ratio * n))
    x = torch.randn(n, 3, generator=g, dtype=torch.float64)
    y = torch.randn(m, 3, generator=g, dtype=torch.float64) + 1
    v = torch.randn(n, 3, generator=g, dtype=torch.float64)
    return x, y, v


def tessel_loss(args):
    from tessel.ot import SamplesLoss
    return SamplesLoss("sinkhorn", p=2, blur=args.blur, reach=args.reach, gradient="implicit")


def alternating(x, y, args):
    """The (f, g) of each alternating log-domain update from zero at the final eps, dense."""
    import torch
    eps = args.blur ** 2
    damp = 1.0 if args.reach is None else 1 / (1 + eps / args.reach ** 2)
    c = ((x[:, None] - y[None]) ** 2).sum(-1) / 2
    la, lb = -math.log(len(x)), -math.log(len(y))  # float64 logs: sum a = sum b exactly
    f, g = x.new_zeros(len(x)), x.new_zeros(len(y))
    while True:
        f = -damp * eps * torch.logsumexp(lb + (g[None] - c) / eps, 1)
        g = -damp * eps * torch.logsumexp(la + (f[:, None] - c) / eps, 0)
        yield f, g


def dense_loss(args, iters):
    """The debiased divergence by `iters` dense updates at the final eps."""
    import torch
    eps = args.blur ** 2
    damp = 1.0 if args.reach is None else 1 / (1 + eps / args.reach ** 2)

    def potentials(x, y):
        for _, fg in zip(range(iters), alternating(x, y, args)):
            pass
        return fg

    def side(pot, n):
        if args.reach is None:
            return pot.sum() / n
        rho = args.reach ** 2
        return ((rho + eps / 2) * (1 - torch.exp(-pot / rho))).sum() / n

    def symmetric(x):
        # The averaged update p <- (p + softmin(p)) / 2: alternating ones converge slowly along
        # the antisymmetric shifts of far-apart clusters.
        c = ((x[:, None] - x[None]) ** 2).sum(-1) / 2
        p = x.new_zeros(len(x))
        for _ in range(iters):
            p = (p - damp * eps * torch.logsumexp(-math.log(len(x)) + (p[None] - c) / eps, 1)) / 2
        return p

    def loss(x, y):
        f, g = potentials(x, y)
        return (side(f, len(x)) + side(g, len(y)) - side(symmetric(x), len(x))
                - side(symmetric(y), len(y)))
    return loss


def run_once(loss, x, y, v):
    import torch
    xg = x.clone().requires_grad_()
    t0 = time.perf_counter()
    value = loss(xg, y)
    t1 = time.perf_counter()
    (g,) = torch.autograd.grad(value, xg, create_graph=True)
    t2 = time.perf_counter()
    (h,) = torch.autograd.grad((g * v).sum(), xg)
    t3 = time.perf_counter()
    return dict(forward_s=t1 - t0, grad_s=t2 - t1, hvp_s=t3 - t2, total_s=t3 - t0,
                value=float(value), hvp=h.detach())


def converged_iterations(x, y, args, tol=1e-12, most=20000):
    """How many alternating updates from zero the dense x-y problem needs at the final eps for
    its potentials to move less than tol (in the cost's units; counted without a graph)."""
    f, g = x.new_zeros(len(x)), x.new_zeros(len(y))
    for it, (f1, g1) in zip(range(1, most + 1), alternating(x, y, args)):
        moved = max(float((f1 - f).abs().max()), float((g1 - g).abs().max()))
        if moved < tol:
            return it
        f, g = f1, g1
    return most


def measure(impl, n, args, ref):
    x, y, v = problem(n, args.ratio)
    row = dict(impl=impl, n=n, m=len(y), d=3, dtype="float64", blur=args.blur, reach=args.reach,
               repeats=args.repeats)
    if impl == "dense":
        iters = converged_iterations(x, y, args)
        gib = 4 * 3 * iters * max(n, len(y)) ** 2 * 8 / 2**30
        if gib > args.dense_gib:
            why = f"graph of {iters} iterations ~{gib:.0f} GiB > --dense-gib"
            return dict(row, skipped=why), None
        loss, row["iterations"] = dense_loss(args, iters), iters
    else:
        loss = tessel_loss(args)
    try:
        run_once(loss, x, y, v)
        runs = [run_once(loss, x, y, v) for _ in range(args.repeats)]
    except Exception as e:  # a failing implementation is a row, not the end of the run
        return dict(row, skipped=f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"), None
    for key in ("forward_s", "grad_s", "hvp_s", "total_s"):
        row[key] = statistics.median(r[key] for r in runs)
    row["value"], h = runs[0]["value"], runs[0]["hvp"]
    row["hvp_norm"] = float(h.norm())
    if ref is not None:
        row["value_rel_diff"] = abs(row["value"] - ref[0]) / max(abs(ref[0]), 1e-300)
        row["hvp_rel_diff"] = float((h - ref[1]).norm() / ref[1].norm().clamp_min(1e-300))
    return row, (row["value"], h)


def table(paths):
    rows = [json.loads(line) for p in paths for line in open(p) if line.startswith("{")]
    out = ["| N | M | reach | impl | forward (s) | gradient (s) | HVP (s) "
           "| value / HVP rel. diff. |",
           "|--:|--:|--:|---|--:|--:|--:|--:|"]
    for r in rows:
        head = f"| {r['n']:,} | {r['m']:,} | {r['reach']} | {r['impl']} |"
        if "skipped" in r:
            out.append(f"{head} skipped: {r['skipped']} | | | |")
            continue
        diff = (f"{r['value_rel_diff']:.1e} / {r['hvp_rel_diff']:.1e}"
                if "hvp_rel_diff" in r else "reference")
        out.append(f"{head} {r['forward_s']:.3g} | {r['grad_s']:.3g} | {r['hvp_s']:.3g} | {diff} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[80, 300, 2000])
    ap.add_argument("--ratio", type=float, default=1.5, help="M / N")
    ap.add_argument("--blur", type=float, default=0.05)
    ap.add_argument("--reach", type=float, default=None)
    ap.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--dense-gib", type=float, default=4.0)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    ap.add_argument("--table", nargs="+", metavar="JSONL")
    args = ap.parse_args()
    if args.table:
        print(table(args.table))
        return
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    print(json.dumps(dict(machine=cpu_name(), torch=torch.__version__,
                          torch_threads=torch.get_num_threads())), file=sys.stderr)
    for n in args.n:
        ref = None
        for impl in args.impls:
            row, got = measure(impl, n, args, ref)
            ref = ref if ref is not None else got
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
