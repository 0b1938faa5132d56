"""How long odeint_reversible takes to give up on a field it cannot integrate well: reversible
Heun on contracting fields (stiff, or dissipative over a long time), beside dopri5 on the same.

Each case prints one JSON line: the field, the method, "ok" or the first words of the error, the
accepted and rejected steps, and the seconds. Reversible Heun's parasitic mode grows like
exp(|lambda| t) on any contracting field, so its controller shrinks the steps without end; the
solver says so once the steps' fall, extrapolated, would pass options["max_num_steps"]. On a
revision without that check the same cases run to max_num_steps (a million attempts: minutes).

Run: PYTHONPATH=build/python python bench/odeint_stiff.py [--cases decay100 vdp ...]
     [--max-steps 1000000]
"""
import argparse
import json
import time

import torch

from tessel.loops import odeint_reversible

F64 = torch.float64


def _vdp(t, y):
    return torch.stack([y[1], (1 - y[0] ** 2) * y[1] - y[0]])


def _lorenz(t, y):
    return torch.stack([10 * (y[1] - y[0]), y[0] * (28 - y[2]) - y[1], y[0] * y[1] - 8 / 3 * y[2]])


# name: (field, y0, t_end, rtol); atol = rtol / 100.
CASES = {
    "decay100": (lambda t, y: -100 * (y - torch.cos(t)), torch.zeros(3, dtype=F64), 10.0, 1e-6),
    "decay1e4": (lambda t, y: -1e4 * (y - torch.cos(t)), torch.zeros(3, dtype=F64), 10.0, 1e-6),
    "decay1": (lambda t, y: -y, torch.ones(3, dtype=F64), 10.0, 1e-4),
    "decay1_short": (lambda t, y: -y, torch.ones(3, dtype=F64), 5.0, 1e-3),
    "vdp": (_vdp, torch.tensor([2.0, 0.0], dtype=F64), 20.0, 1e-4),
    "lorenz": (_lorenz, torch.ones(3, dtype=F64), 5.0, 1e-4),
    "harmonic": (lambda t, y: torch.stack([y[1], -y[0]]), torch.tensor([1.0, 0.0], dtype=F64),
                 50.0, 1e-6),
}


def run(name, method, max_steps):
    f, y0, t_end, rtol = CASES[name]
    stats = {}
    t0 = time.perf_counter()
    try:
        odeint_reversible(f, y0, torch.tensor([0.0, t_end], dtype=F64), method=method, rtol=rtol,
                          atol=rtol / 100, options={"max_num_steps": max_steps}, stats=stats)
        outcome = "ok"
    except RuntimeError as e:
        outcome = str(e).split(";")[0][:120]
    return dict(case=name, method=method, outcome=outcome, steps=stats.get("steps"),
                rejected=stats.get("rejected"), seconds=round(time.perf_counter() - t0, 3))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--methods", nargs="+", default=["reversible_heun", "dopri5"])
    ap.add_argument("--max-steps", type=int, default=1_000_000)
    a = ap.parse_args()
    for name in a.cases:
        for method in a.methods:
            print(json.dumps(run(name, method, a.max_steps)), flush=True)


if __name__ == "__main__":
    main()
