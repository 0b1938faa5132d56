"""LDDMM surface registration: tessel.shapes against the same pipeline written with pykeops.

One registration iteration is the loss (shooting + attachment) and its gradient in the momenta.
Both sides compute the same thing, the pipeline of KeOps's LDDMM surface tutorial:
- deformation kernel exp(-|x - y|^2 / sigma^2), momenta on the source's vertices, 10 Ralston
  (RK2) steps of the geodesic equations;
- unoriented (Binet) varifold attachment exp(-|x - y|^2 / sigma_v^2) <u, v>^2 between the
  deformed source and the target, weighted by the faces' areas.
The pykeops side is written as that tutorial does: LazyTensor reductions, the Hamiltonian's
gradient by torch.autograd.grad with create_graph at every step. tessel's side is
tessel.shapes: LDDMM(GaussianKernel) (its field one reduction, the force by the formula's
symbolic gradient) and Varifold(orientation="binet"). The variant "normalized" is tessel with
the normalized Hamiltonian (NormalizedLDDMM, 2 iterations): its cost against plain LDDMM.

Surfaces: --surface sphere (an icosphere of about --n vertices against an ellipsoid) or fsaverage
(FreeSurfer's fsaverage5 left pial surface against the mirrored right one, 10,242 vertices each,
from the nilearn wheel). Each (variant, n) runs in a fresh process (tessel.loops.run_isolated):
setup loads the meshes and warms up on a small sphere (kernel compilation), then --iters
iterations at full size are timed; peak memory is the rise of the resident set during them
(the meshes themselves excluded). Prints one JSON line per measurement
(`--table` prints them as a Markdown table).

--memory-steps S measures instead the peak memory of one shooting gradient through S steps
(plain autograd, snapshots=4, the reversible integrator): the time-for-memory options.

Run: PYTHONPATH=build/python .venv/bin/python bench/shapes_bench.py --surface fsaverage
     [--variants tessel pykeops] [--iters 3] [--repeats 3] [--dtype float32] [--table]
     or bench/shapes_bench.py --n 10242 --memory-steps 100
"""
import argparse
import json
import pathlib
import platform
import statistics
import sys

from tessel.loops.memory import MeasureError, run_isolated

BENCH = pathlib.Path(__file__).resolve().parent
VARIANTS = ("tessel", "pykeops", "normalized")
SIGMA, SIGMA_V, STEPS = 0.1, 0.05, 10  # relative to the shapes' diameter


def _cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def surfaces(kind, n, dtype, device="cpu"):
    """(source, target) Meshes of about n vertices: sphere -> ellipsoid, or fsaverage5."""
    import torch
    from tessel.shapes import Mesh
    dt = getattr(torch, dtype)
    if kind == "fsaverage":
        from tessel.shapes.io import fsaverage5, mirror
        return (fsaverage5("left", dtype=dt, device=device),
                mirror(fsaverage5("right", dtype=dt, device=device)))
    level = 0
    while 10 * 4 ** (level + 1) + 2 <= n:
        level += 1
    src = Mesh.icosphere(level, dtype=dt, device=device)
    tgt = src.with_points(src.points * torch.tensor([1.3, 0.8, 1.0], dtype=dt, device=device)
                          + 0.1)
    return src, Mesh(tgt.points, tgt.faces)


def tessel_step(source, target, normalized=False):
    """A function p0 -> loss(p0), backward done: tessel.shapes' pipeline (normalized: with the
    normalized Hamiltonian, 2 symmetric Sinkhorn iterations, instead of LDDMM's)."""
    from tessel.shapes import LDDMM, GaussianKernel, NormalizedLDDMM
    from tessel.shapes.attachments import Varifold
    from tessel.shapes.registration import diameter
    d = diameter(source, target)
    kind = NormalizedLDDMM if normalized else LDDMM
    model = kind(GaussianKernel(SIGMA * d), n_steps=STEPS, integrator="ralston")
    att = Varifold(SIGMA_V * d, orientation="binet")

    def step(p0):
        loss = att(model.deform(source, p0), target)
        loss.backward()
        return loss
    return step


def normalized_step(source, target):
    return tessel_step(source, target, normalized=True)


def pykeops_step(source, target):
    """The same loss with pykeops LazyTensors, written as KeOps's LDDMM tutorial does."""
    import torch
    from pykeops.torch import Vi, Vj
    from tessel.shapes.registration import diameter
    d = diameter(source, target)
    gamma, gamma_v = 1 / (SIGMA * d) ** 2, 1 / (SIGMA_V * d) ** 2

    def kernel(x, y, b):
        return ((-Vi(x).sqdist(Vj(y)) * gamma).exp() * Vj(b)).sum(1)

    def hamiltonian(p, q):
        return 0.5 * (p * kernel(q, q, p)).sum()

    def system(p, q):
        gp, gq = torch.autograd.grad(hamiltonian(p, q), (p, q), create_graph=True)
        return -gq, gp

    def shoot(p, q):
        dt = 1.0 / STEPS
        for _ in range(STEPS):
            dp, dq = system(p, q)
            pi, qi = p + 2 * dt / 3 * dp, q + 2 * dt / 3 * dq
            dpi, dqi = system(pi, qi)
            p, q = p + 0.25 * dt * (dp + 3 * dpi), q + 0.25 * dt * (dq + 3 * dqi)
        return p, q

    def geometry(v, f):
        v0, v1, v2 = v[f[:, 0]], v[f[:, 1]], v[f[:, 2]]
        normals = 0.5 * torch.linalg.cross(v1 - v0, v2 - v0, dim=1)
        areas = normals.norm(dim=1, keepdim=True)
        return (v0 + v1 + v2) / 3, areas, normals / areas

    def varifold(cx, lx, ux, cy, ly, uy):
        k = (-Vi(cx).sqdist(Vj(cy)) * gamma_v).exp() * ((Vi(ux) * Vj(uy)).sum() ** 2)
        return (lx * (k * Vj(ly)).sum(1)).sum()

    ct, lt, ut = geometry(target.points, target.faces)
    const = varifold(ct, lt, ut, ct, lt, ut)
    q0, faces = source.points, source.faces

    def step(p0):
        q = shoot(p0, q0.clone().requires_grad_(True))[1]
        cs, ls, us = geometry(q, faces)
        loss = const + varifold(cs, ls, us, cs, ls, us) - 2 * varifold(cs, ls, us, ct, lt, ut)
        loss.backward()
        return loss
    return step


def memory_step(source, target, mode, steps):
    """p0 -> loss(p0) with backward through `steps` shooting steps: plain autograd ("plain"),
    checkpointed with 4 snapshots ("snapshots") or the reversible integrator ("reversible")."""
    from tessel.shapes import LDDMM, GaussianKernel
    from tessel.shapes.registration import diameter
    d = diameter(source, target)
    kw = dict(integrator="reversible") if mode == "reversible" else dict(
        integrator="ralston", snapshots=4 if mode == "snapshots" else None)
    model = LDDMM(GaussianKernel(SIGMA * d), n_steps=steps, **kw)

    def step(p0):
        loss = ((model.shoot(source.points, p0)[0] - target.points) ** 2).sum()
        loss.backward()
        return loss
    return step


_MEMORY_SETUP = """
import sys, torch
sys.path.insert(0, {bench!r})
import shapes_bench as sb
source, target = sb.surfaces("sphere", {n}, {dtype!r})
step = sb.memory_step(source, target, {mode!r}, {steps})
torch.manual_seed(0)  # the same momenta in every mode's process
p0 = (0.01 * torch.randn_like(source.points)).requires_grad_(True)
small_src, small_tgt = sb.surfaces("sphere", 40, {dtype!r})
sb.memory_step(small_src, small_tgt, {mode!r}, 2)(torch.zeros_like(small_src.points)
                                                   .requires_grad_(True))
"""


def measure_memory(n, steps, dtype, timeout):
    """Peak memory of one shooting gradient through `steps` steps, per memory mode."""
    rows = []
    for mode in ("plain", "snapshots", "reversible"):
        setup = _MEMORY_SETUP.format(bench=str(BENCH), n=n, dtype=dtype, mode=mode, steps=steps)
        r = run_isolated(setup, _WORK.format(iters=1), timeout=timeout)
        rows.append(dict(bench="shapes_shooting_memory", variant=mode, n=r["result"]["n"],
                         steps=steps, dtype=dtype, seconds=r["seconds"],
                         peak_mib=r["peak_bytes"] / 2 ** 20, loss=r["result"]["loss"],
                         cpu=_cpu_name()))
    return rows


_SETUP = """
import sys, torch
sys.path.insert(0, {bench!r})
import shapes_bench as sb
source, target = sb.surfaces({surface!r}, {n}, {dtype!r}, {device!r})
step = getattr(sb, {variant!r} + "_step")(source, target)
p0 = torch.zeros_like(source.points).requires_grad_(True)
small_src, small_tgt = sb.surfaces("sphere", 40, {dtype!r}, {device!r})
sb_warm = getattr(sb, {variant!r} + "_step")(small_src, small_tgt)
sb_warm(torch.zeros_like(small_src.points).requires_grad_(True))  # kernel compilation
"""
_WORK = """
losses = []
for _ in range({iters}):
    p0.grad = None
    losses.append(float(step(p0)))
if torch.cuda.is_available():
    torch.cuda.synchronize()
RESULT = dict(loss=losses[-1], grad_norm=float(p0.grad.norm()), n=source.points.shape[0])
"""


def measure(variant, surface, n, dtype, iters, repeats, timeout, device="cpu"):
    runs = []
    for _ in range(repeats):
        setup = _SETUP.format(bench=str(BENCH), surface=surface, n=n, dtype=dtype,
                              variant=variant, device=device)
        runs.append(run_isolated(setup, _WORK.format(iters=iters), timeout=timeout,
                                 cuda=device != "cpu"))
    res = runs[0]["result"]
    return dict(bench="shapes_registration", variant=variant, surface=surface, n=res["n"],
                dtype=dtype, device=device, iters=iters, repeats=repeats,
                seconds_per_iter=statistics.median(r["seconds"] for r in runs) / iters,
                peak_mib=statistics.median(r["peak_bytes"] for r in runs) / 2 ** 20,
                loss=res["loss"], grad_norm=res["grad_norm"], cpu=_cpu_name())


def table(rows):
    out = ["| surface | N | dtype | variant | s / iteration | peak MiB | loss | vs tessel |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    base = {(r["surface"], r["n"], r["dtype"]): r["seconds_per_iter"] for r in rows
            if r["variant"] == "tessel"}
    for r in rows:
        ref = base.get((r["surface"], r["n"], r["dtype"]))
        ratio = f"{r['seconds_per_iter'] / ref:.2f}x" if ref else "-"
        out.append(f"| {r['surface']} | {r['n']} | {r['dtype']} | {r['variant']} | "
                   f"{r['seconds_per_iter']:.3f} | {r['peak_mib']:.0f} | {r['loss']:.6g} | "
                   f"{ratio} |")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--surface", choices=("sphere", "fsaverage"), default="sphere")
    ap.add_argument("--n", type=int, nargs="+", default=[2562])
    ap.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (peak memory: the GPU's)")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--table", action="store_true")
    ap.add_argument("--memory-steps", type=int, default=0,
                    help="instead: peak memory of a shooting gradient through this many steps, "
                         "plain / snapshots=4 / reversible, on a sphere of --n vertices")
    args = ap.parse_args(argv)
    if args.memory_steps:
        for n in args.n:
            for row in measure_memory(n, args.memory_steps, args.dtype, args.timeout):
                print(json.dumps(row), flush=True)
        return 0
    rows = []
    sizes = [10242] if args.surface == "fsaverage" else args.n
    for n in sizes:
        for variant in args.variants:
            try:
                row = measure(variant, args.surface, n, args.dtype, args.iters, args.repeats,
                              args.timeout, args.device)
            except MeasureError as e:
                row = dict(bench="shapes_registration", variant=variant, surface=args.surface,
                           n=n, error=str(e).splitlines()[-1][:300])
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.table:
        print(table([r for r in rows if "error" not in r]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
