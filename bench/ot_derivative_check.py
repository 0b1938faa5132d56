"""tessel.ot's derivatives against finite differences of what it computes, per gradient mode.

For SamplesLoss("sinkhorn", p=2) on x (N, 3) and y (M, 3) in float64 (N = 16, M = 32 uniform
points, y shifted by 0.3) and a random direction v, each line gives, for a blur, a mode and a
diameter (None: from the clouds, as GeomLoss):
  first:  |<grad, v> - (L(x + h v) - L(x - h v)) / 2h| / |that difference|
  second: |H v - (grad(x + h v) - grad(x - h v)) / 2h| / |that difference|   (not for envelope,
          whose gradient is first order only)
at h = 1e-6, where central differences are good to about 1e-9 here. "implicit" differentiates
the fixed point; "unrolled" the loop, with its eps schedule held fixed: the schedule starts at
the clouds' diameter, which moves with the points, so its figures reach 1e-3 unless diameter is
given; "envelope" is GeomLoss's gradient of the converged dual, not the slope of the loop's
unconverged value.

Run: PYTHONPATH=build/python python bench/ot_derivative_check.py [--blurs 0.05 0.5 1e3 1e8]
"""
import argparse
import json

import torch

from tessel.ot import SamplesLoss


def clouds(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(16, 3, generator=g, dtype=torch.float64)
    y = torch.rand(32, 3, generator=g, dtype=torch.float64) + 0.3
    return x, y, torch.randn(16, 3, generator=g, dtype=torch.float64)


def check(blur, mode, diameter, h=1e-6):
    x, y, v = clouds()
    loss = SamplesLoss("sinkhorn", p=2, blur=blur, gradient=mode, diameter=diameter)
    second = mode != "envelope"

    def grad(z):
        z = z.clone().requires_grad_()
        return torch.autograd.grad(loss(z, y), z, create_graph=second)[0], z

    gx, z = grad(x)
    fd1 = (float(loss(x + h * v, y)) - float(loss(x - h * v, y))) / (2 * h)
    out = dict(blur=blur, mode=mode, diameter=diameter,
               first=abs(float((gx * v).sum()) - fd1) / abs(fd1))
    if second:
        (hv,) = torch.autograd.grad((gx * v).sum(), z)
        fd2 = (grad(x + h * v)[0] - grad(x - h * v)[0]).detach() / (2 * h)
        out["second"] = float((hv - fd2).norm() / fd2.norm())
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blurs", nargs="+", type=float, default=[0.05, 0.5, 1e3, 1e8])
    ap.add_argument("--modes", nargs="+", default=["envelope", "unrolled", "implicit"])
    a = ap.parse_args()
    for blur in a.blurs:
        for mode in a.modes:
            for diameter in (None, 2.0):
                print(json.dumps(check(blur, mode, diameter)), flush=True)


if __name__ == "__main__":
    main()
