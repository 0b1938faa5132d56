"""
Unrolled MRI reconstruction with a CG data step
===============================================

The second user story's unrolled MRI reconstruction with a conjugate-gradient data step.

A batch of real images x_true (B, 1, H, W), H = W = n, seen through `coils` smooth complex coil
sensitivities S_c and a Cartesian undersampling mask M in k-space: A x = (M F(S_c x))_c with F
the orthonormal 2-D FFT, data y = A x_true + noise. The reconstruction starts from the
zero-filled image x = Re(A^H y) and runs `iters` outer iterations of

    z = x + CNN(x)                                    (3 conv layers, shared by all iterations)
    x = argmin ``|A x - y|^2`` + lam ``|x - z|^2``, i.e.  (Re(A^H A) + lam I) x = Re(A^H y) + lam z

and returns loss = ``|x - x_true|^2`` and its gradient with respect to the first conv layer's
weights. The normal operator is real because x is real. Two variants, each (loss, gradient):

  unrolled  the story's code: `cg_iters` plain CG iterations (10 as in the story), autograd
            through every one of them (memory O(iters * cg_iters * image)). Its gradient is that
            of the truncated iteration.
  implicit  tessel.torch.cg_solve on the same operator, iterated to `tol`, implicit backward
            (memory O(iters * image)). Its gradient is that of the converged solve, so it is
            compared with `unrolled` at cg_iters large enough to converge (--ref-cg-iters).

With one coil the normal operator Re(F^H M F) has the eigenvalues 0, 1/2 and 1 only, and CG
converges exactly in 3 iterations; several coils make the solve a real iterative one. The figure
shows the first image: the truth, the zero-filled start and both reconstructions.

Run::

    PYTHONPATH=build/python python3 examples/python/unrolled_reconstruction.py [--n 64]
        [--iters 3] [--batch 2] [--coils 4] [--cg-iters 10] [--ref-cg-iters 60] [--dtype float64]
"""
import argparse
import math
import time

import matplotlib.pyplot as plt
import torch
from torch import nn

from tessel.torch import cg_solve

VARIANTS = ("unrolled", "implicit")
# Relative agreement of implicit with unrolled at --ref-cg-iters, and the CG tolerance that
# implicit solves to (forward and backward), by dtype. The gradient's relative error came out
# some 300 times the CG tolerance (float64, default size: 3.7e-4 at tol 1e-6, 1.9e-6 at 1e-8),
# hence tolerances well below the agreement asked.
TOLERANCE = {"float64": 1e-8, "float32": 1e-3}
CG_TOL = {"float64": 1e-11, "float32": 1e-6}


# ---- data ----------------------------------------------------------------------------------------
def _grid(n, dtype):
    t = torch.linspace(-1.0, 1.0, n, dtype=dtype)
    return torch.meshgrid(t, t, indexing="ij")


def phantom(batch, n, dtype, gen):
    """Random images on [-1, 1]^2: a soft disk plus a few Gaussian blobs, values in ~[0, 1.5]."""
    yy, xx = _grid(n, dtype)
    imgs = []
    for _ in range(batch):
        r = torch.sqrt(xx**2 + yy**2)
        img = 0.5 * torch.sigmoid((0.8 - r) * 40.0)
        for _ in range(5):
            cx, cy = (torch.rand(2, generator=gen, dtype=dtype) - 0.5) * 1.0
            w = 0.05 + 0.15 * torch.rand((), generator=gen, dtype=dtype)
            a = 0.2 + 0.8 * torch.rand((), generator=gen, dtype=dtype)
            img = img + a * torch.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * w**2))
        imgs.append(img)
    return torch.stack(imgs).unsqueeze(1)


def sensitivities(coils, n, dtype):
    """(1, coils, n, n) complex maps, Gaussians centred around the image with a phase ramp each,
    normalised so that sum_c |S_c|^2 = 1 (then the normal operator has norm <= 1)."""
    if coils == 1:
        return torch.ones(1, 1, n, n, dtype=dtype).to(_complex(dtype))
    yy, xx = _grid(n, dtype)
    maps = []
    for c in range(coils):
        a = 2 * math.pi * c / coils
        mag = torch.exp(-((xx - 1.2 * math.cos(a)) ** 2 + (yy - 1.2 * math.sin(a)) ** 2) / 1.5)
        phase = math.pi * (math.cos(a) * xx + math.sin(a) * yy) / 2 + a
        maps.append(torch.polar(mag, phase))
    s = torch.stack(maps).unsqueeze(0)
    return s / torch.sqrt((s.abs() ** 2).sum(1, keepdim=True))


def cartesian_mask(n, dtype, gen, keep=0.25, centre=0.04):
    """(1, 1, n, n): all k-space rows with |frequency| < centre, and a fraction `keep` of the others
    at random (phase encoding), unshifted like torch.fft's output."""
    f = torch.fft.fftfreq(n, dtype=dtype).abs()
    rows = (f < centre) | (torch.rand(n, generator=gen, dtype=dtype) < keep)
    return rows.to(dtype).reshape(1, 1, n, 1).expand(1, 1, n, n).contiguous()


def _complex(dtype):
    return torch.complex128 if dtype == torch.float64 else torch.complex64


class Problem:
    """One reconstruction problem: x_true, the operator's pieces, the data and the CNN."""

    def __init__(self, n, batch=2, coils=4, lam=0.05, noise=0.01, features=8,
                 dtype=torch.float64):
        # Drawn in float64 whatever the dtype, so that float32 and float64 solve one problem.
        gen = torch.Generator().manual_seed(0)
        f64 = torch.float64
        self.lam = lam
        self.x_true = phantom(batch, n, f64, gen)
        self.sens = sensitivities(coils, n, f64)
        self.mask = cartesian_mask(n, f64, gen)
        clean = self.forward_op(self.x_true)
        shape = clean.shape + (2,)
        noise_c = torch.view_as_complex(torch.randn(shape, generator=gen, dtype=f64))
        self.y = clean + noise * self.mask * noise_c
        self.x_true, self.mask = self.x_true.to(dtype), self.mask.to(dtype)
        self.sens, self.y = self.sens.to(_complex(dtype)), self.y.to(_complex(dtype))
        self.aty = self.adjoint_op(self.y)
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Conv2d(1, features, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(features, features, 3, padding=1), nn.ReLU(),
                                 nn.Conv2d(features, 1, 3, padding=1)).to(dtype)
        with torch.no_grad():
            # A small residual correction: the outer iterations stay close to the data.
            self.net[-1].weight.mul_(0.1)

    def forward_op(self, x):
        return self.mask * torch.fft.fft2(self.sens * x, norm="ortho")

    def adjoint_op(self, k):
        return (self.sens.conj() * torch.fft.ifft2(self.mask * k, norm="ortho")).sum(
            1, keepdim=True).real

    def normal(self, v):
        """(Re(A^H A) + lam I) v; M is 0/1, so A^H A = sum_c conj(S_c) F^H M F S_c."""
        return self.adjoint_op(self.forward_op(v)) + self.lam * v

    def weight(self):
        return self.net[0].weight


# ---- the two data-consistency solves ---------------------------------------------------------
_DIMS = (1, 2, 3)


def cg_unrolled(op, b, cg_iters):
    """The story's loop: a fixed number of CG iterations, each image its own step sizes."""
    x = torch.zeros_like(b)
    r = b
    p = r
    rs = (r * r).sum(_DIMS, keepdim=True)
    # Once the residual is at rounding level, a further step divides ~0 by ~0 (NaN, as with one
    # coil, where CG is exact in 3 steps): stop there, as any CG code would.
    floor = torch.finfo(b.dtype).eps ** 2 * rs.detach()
    for _ in range(cg_iters):
        if bool((rs <= floor).all()):
            break
        ap = op(p)
        alpha = rs / (p * ap).sum(_DIMS, keepdim=True)
        x = x + alpha * p
        r = r - alpha * ap
        rs_new = (r * r).sum(_DIMS, keepdim=True)
        p = r + (rs_new / rs) * p
        rs = rs_new
    return x


def cg_implicit(op, b, tol, log=None):
    """cg_solve on the images as columns (n*n, B); stats of each solve are appended to log."""
    shape, batch = b.shape, b.shape[0]

    def matvec(v):
        return op(v.T.reshape(shape)).reshape(batch, -1).T

    stats = {}
    x = cg_solve(matvec, b.reshape(batch, -1).T, tol=tol, stats=stats)
    if log is not None:
        log.append(stats)
    return x.T.reshape(shape)


def images(prob, variant, iters, cg_iters=10, tol=1e-11, log=None):
    """The images after `iters` outer iterations, from the zero-filled x = Re(A^H y)."""
    x = prob.aty
    for _ in range(iters):
        z = x + prob.net(x)
        b = prob.aty + prob.lam * z
        if variant == "unrolled":
            x = cg_unrolled(prob.normal, b, cg_iters)
        else:
            x = cg_implicit(prob.normal, b, tol, log)
    return x


def reconstruct(prob, variant, iters, cg_iters=10, tol=1e-11, log=None):
    """(loss, d loss / d first conv weight) of `iters` outer iterations."""
    x = images(prob, variant, iters, cg_iters, tol, log)
    loss = ((x - prob.x_true) ** 2).sum()
    (grad,) = torch.autograd.grad(loss, prob.weight())
    return loss.detach(), grad


def run(variant, n, iters, dtype="float32", batch=8, coils=4, cg_iters=10, lam=0.05,
        features=8, tol=None):
    """One variant on a problem of images n x n: (loss, gradient). Used by bench/loops_bench.py."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
    prob = Problem(n, batch, coils, lam, features=features, dtype=getattr(torch, dtype))
    tol = CG_TOL[dtype] if tol is None else tol
    return reconstruct(prob, variant, iters, cg_iters, tol)


def _rel(a, b):
    return float((a - b).norm() / b.norm())


def main(argv=None):
    ap = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n")[0])
    ap.add_argument("--n", type=int, default=64, help="image side")
    ap.add_argument("--iters", type=int, default=3, help="outer iterations")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--coils", type=int, default=4)
    ap.add_argument("--lam", type=float, default=0.05)
    ap.add_argument("--cg-iters", type=int, default=10, help="CG iterations of unrolled")
    ap.add_argument("--ref-cg-iters", type=int, default=60,
                    help="CG iterations of the converged unrolled reference")
    ap.add_argument("--dtype", default="float64", choices=("float32", "float64"))
    args = ap.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    prob = Problem(args.n, args.batch, args.coils, args.lam, dtype=dtype)
    tol = CG_TOL[args.dtype]
    print(f"Unrolled reconstruction, {args.batch} images {args.n} x {args.n}, {args.coils} "
          f"coils, {float(prob.mask.mean()):.0%} of k-space, lam = {args.lam}, {args.iters} "
          f"outer iterations, {args.dtype}")
    runs = [("unrolled", args.cg_iters), ("implicit", None), ("unrolled", args.ref_cg_iters)]
    results = {}
    for variant, cg_iters in runs:
        log = []
        t0 = time.perf_counter()
        loss, grad = reconstruct(prob, variant, args.iters, cg_iters or 0, tol, log)
        elapsed = time.perf_counter() - t0
        name = f"{variant} (cg_iters={cg_iters})" if cg_iters else f"{variant} (tol={tol:g})"
        results[name] = (loss, grad)
        extra = ""
        if log:
            fwd = [s["iterations"] for s in log]
            bwd = [s.get("backward_iterations", 0) for s in log]
            extra = f"  (CG iterations per solve: forward {fwd}, backward {bwd})"
        print(f"  {name:<26} loss {loss.item():.15g}  |dW| {grad.norm().item():.15g}  "
              f"{elapsed:6.2f} s{extra}")
    names = list(results)
    trunc, implicit, ref = (results[k] for k in names)
    tol_ok = TOLERANCE[args.dtype]
    el, eg = _rel(implicit[0], ref[0]), _rel(implicit[1], ref[1])
    ok = el <= tol_ok and eg <= tol_ok and math.isfinite(el) and math.isfinite(eg)
    print(f"  {names[1]} vs {names[2]}: relative difference loss {el:.1e}, dW {eg:.1e} "
          f"(tolerance {tol_ok:.0e}) {'ok' if ok else 'FAILED'}")
    tl, tg = _rel(trunc[0], ref[0]), _rel(trunc[1], ref[1])
    print(f"  {names[0]} vs {names[2]}: relative difference loss {tl:.1e}, dW {tg:.1e} "
          "(the truncated CG's own answer, not an error of either tool)")
    return 0 if ok else 1, (prob, args, tol)


def plot(prob, args, tol):
    """The first image of the batch: truth, zero-filled start, unrolled and implicit results
    (the forward passes again, without gradients), each with its relative error."""
    with torch.no_grad():
        shown = [("truth", prob.x_true), ("zero-filled Re(A^H y)", prob.aty),
                 (f"unrolled, {args.cg_iters} CG iterations",
                  images(prob, "unrolled", args.iters, args.cg_iters)),
                 (f"implicit, CG to tol {tol:g}", images(prob, "implicit", args.iters, tol=tol))]
    fig, axes = plt.subplots(1, len(shown), figsize=(3 * len(shown), 3.6), layout="constrained")
    truth = prob.x_true[0, 0]
    for k, (ax, (name, img)) in enumerate(zip(axes, shown)):
        img = img[0, 0]
        ax.imshow(img.cpu(), cmap="gray", vmin=0, vmax=float(truth.max()))
        err = f"\nrelative error {_rel(img, truth):.1%}" if k else "\n(the phantom)"
        ax.set_title(name + err, fontsize=9)
        ax.set_axis_off()
    fig.suptitle(f"{args.coils} coils, {float(prob.mask.mean()):.0%} of k-space, "
                 f"{args.iters} outer iterations (untrained CNN)", fontsize=10)
    return fig


if __name__ == "__main__":
    from _common import run_example  # main, plot, show; exit non-zero after a failed check

    run_example(main, plot)
