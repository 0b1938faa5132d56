"""Half-precision accuracy: float16 and bfloat16 (and float32) against float64, one run.

Cases (N = M, D = 3, points uniform in the unit cube, weights in (0, 1)): gauss-sum
(sum_j exp(-g|x_i - y_j|^2) b_j, g = 10), lse (log sum_j exp(-g|x_i - y_j|^2)) and gauss-grad
(the x-gradient of <gauss-sum, w>). For each dtype the inputs are the float64 data rounded to that
dtype; tessel reduces them in float32 (half inputs are converted on load) and rounds the results
to the dtype. Two relative errors per output entry, reported as median and max over entries
(scaled by the largest |reference| for the gradient, whose entries cross zero):
- total: against float64 on the original data (what a user of that dtype gets);
- compute: against float64 on the rounded inputs (the reduction's own error and its output
  rounding, without the inputs' quantisation).
Prints JSON lines; --table prints a Markdown table of a saved run.

Run: PYTHONPATH=build/python python3 bench/half_accuracy.py --n 10000 [--device cuda]
"""
import argparse
import json
import sys

import torch

from tessel.torch import Genred

ALIASES = ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)", "G = Pm(1)"]
SUM = Genred("Exp(-G*SqDist(X,Y)) * B", ALIASES, reduction_op="Sum")
LSE = Genred("-G*SqDist(X,Y)", ALIASES[:2] + ALIASES[3:], reduction_op="LogSumExp")
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def outputs(x, y, b, g, w):
    """The three cases' outputs, in the inputs' dtype."""
    xg = x.clone().requires_grad_()
    s = SUM(xg, y, b, g)
    (grad,) = torch.autograd.grad((s * w).sum(), xg)
    return {"gauss-sum": s.detach(), "lse": LSE(x, y, g), "gauss-grad": grad}


def rel(got, ref, scaled):
    err = (got.double() - ref).abs()
    den = ref.abs().max() if scaled else ref.abs().clamp_min(1e-300)
    r = (err / den).flatten()
    return float(r.median()), float(r.max())


def run(n, device):
    gen = torch.Generator().manual_seed(0)
    data = [torch.rand(n, 3, generator=gen, dtype=torch.float64),
            torch.rand(n, 3, generator=gen, dtype=torch.float64),
            torch.rand(n, 1, generator=gen, dtype=torch.float64),
            torch.tensor([10.0], dtype=torch.float64),
            torch.rand(n, 1, generator=gen, dtype=torch.float64)]
    data = [t.to(device) for t in data]
    exact = outputs(*data)
    for name, dt in DTYPES.items():
        rounded = [t.to(dt) for t in data]
        got = outputs(*rounded)
        exact_q = outputs(*(t.double() for t in rounded))
        for case, out in got.items():
            scaled = case == "gauss-grad"
            t_med, t_max = rel(out, exact[case], scaled)
            c_med, c_max = rel(out, exact_q[case], scaled)
            print(json.dumps(dict(case=case, dtype=name, n=n, device=str(device),
                                  total_median=t_med, total_max=t_max, compute_median=c_med,
                                  compute_max=c_max, eps=float(torch.finfo(dt).eps))), flush=True)


def table(path):
    rows = [r for r in (json.loads(line) for line in open(path) if line.startswith("{"))
            if "case" in r]
    out = ["| case | dtype | total error (median / max) | compute error (median / max) | "
           "dtype eps |", "|---|---|--:|--:|--:|"]
    for r in rows:
        out.append(f"| {r['case']} | {r['dtype']} | {r['total_median']:.1e} / {r['total_max']:.1e}"
                   f" | {r['compute_median']:.1e} / {r['compute_max']:.1e} | {r['eps']:.1e} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10000])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--table", help="print the Markdown table of a saved JSON-lines run")
    args = ap.parse_args()
    if args.table:
        print(table(args.table))
        return
    print(json.dumps(dict(torch=torch.__version__, device=args.device,
                          argv=" ".join(sys.argv[1:]))), flush=True)
    for n in args.n:
        run(n, torch.device(args.device))


if __name__ == "__main__":
    main()
