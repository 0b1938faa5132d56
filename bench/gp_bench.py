"""Exact GP regression, one marginal-likelihood-plus-gradient step: tessel.gp against GPyTorch
(its dense path, its KeOps kernels on pykeops, and tessel.gp's kernel in its algorithm) and
scikit-learn, same data and start, on the CPU or a GPU.

The step is what a fit repeats: log p(y) and its gradient in every hyperparameter (an ARD
Matérn 5/2 with an output scale, a learned Gaussian noise and a constant mean; d = 8 by
default), at the same starting hyperparameters for every library:
- tessel: ExactGP(mode="bbmm") on float32 points (tessel-f64: float64), probes 10, rank 15
  (--rank; GPyTorch's preconditioner size), CG tol 0.01 (--tol; at n = 2000 its log p(y) is -179.8 against the exact -181.1, GPyTorch's
  at its training tolerance 1 is -172.3);
- gpytorch: GPyTorch's ExactMarginalLogLikelihood with its MaternKernel (dense kernel matrix,
  CG above max_cholesky_size = 800), float32;
- gpytorch-keops: the same with gpytorch.kernels.keops.MaternKernel on pykeops (real KeOps).
  With GPyTorch 1.11 (the newest for PyTorch 1.13) it fails from n = 2000 on, GPyTorch's
  min_preconditioning_size: its preconditioner asks linear_operator for the kernel's diagonal
  as a dense tensor, which a KeOps LazyTensor is not ("object of class LazyTensor cannot be made
  into a Tensor"); the row then holds that error;
- gpytorch-keops-noprec: the same KeOps kernels with GPyTorch's preconditioner turned off
  (gpytorch.settings.max_preconditioner_size(0)), the way they run in GPyTorch 1.11: unpreconditioned
  CG at its tolerance 1, and its log-determinant from the same Lanczos runs;
- tessel-exact: the same model in float64 with mode="exact" (dense Cholesky in PyTorch, O(n^2)
  memory): the value the estimates above aim at, where n x n float64 matrices fit;
- tessel-gpytorch: GPyTorch's step (its preconditioner, CG and Lanczos, at its own tolerances)
  with tessel.gp.GPyTorchKernel: the same Matérn as a tessel.gp kernel, whose products, diagonal
  and rows are tessel reductions (float32), so GPyTorch's preconditioned path runs at any n;
- sklearn: GaussianProcessRegressor.log_marginal_likelihood(theta, eval_gradient=True), float64
  dense Cholesky (O(n^3)), skipped above --sklearn-max.
--fit STEPS times a whole fit instead: STEPS Adam steps (--lr, 0.1) on -log p(y) from that start,
each library's own step (tessel's probes drawn afresh each step, as GPyTorch's are); the row
gives the fit's seconds and log p(y) at its first and last steps (scikit-learn has no such step).
Each (library, n) runs in a fresh process (tessel.loops.run_isolated): setup builds the model
and takes one warm-up step (kernel compilation, pykeops's build; on --warmup-n points where
given), then --repeats steps are timed; the median is reported with the peak memory of the
resident set during them. One JSON line per measurement (--table: a Markdown table with each
library's ratio to tessel's time). tessel's BBMM rows give log_likelihood_se, the standard error
of their log p(y) from the spread of the probes' log-determinant estimates (the last step's);
the other rows have none (exact values, or GPyTorch, which does not expose its probes).

--device cuda puts the points, the targets and the GPyTorch models on the GPU; peak_mb is then
PyTorch's peak allocation (what a library allocates through the driver itself is not in it).
On CUDA, tessel.gp.ExactGP runs its BBMM step in PyTorch on the device with tessel's reductions
(the core's GP functions take host arrays); tessel-gpytorch is GPyTorch's step with tessel's
kernel beside it.
scikit-learn is CPU-only, and GPyTorch's dense path is skipped where its n x n matrices would not
fit the GPU (--dense-gib). A case that cannot run gives a row with "skipped" and the reason.

Run: PYTHONPATH=build/python .venv/bin/python bench/gp_bench.py --n 10000 30000
     [--libraries tessel gpytorch gpytorch-keops gpytorch-keops-noprec tessel-gpytorch sklearn]
     [--repeats 3 | --fit 50]
     [--device cuda] [--table]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from ot_bench import blas_name, cpu_name  # a sibling in bench/, which a script run there finds
from tessel.loops.memory import MeasureError, run_isolated

LIBRARIES = ("tessel", "tessel-f64", "tessel-exact", "gpytorch", "gpytorch-keops",
             "gpytorch-keops-noprec", "tessel-gpytorch", "sklearn")

# GPyTorch's dense Matérn step holds about this many n x n float32 matrices at its peak (the
# distances, the exponential and polynomial factors, their product, the scaled copy and what
# autograd keeps of them): the estimate that decides whether its row can run on a GPU.
_DENSE_MATRICES = 8

NO_CUDA = {
    "sklearn": "not available on CUDA: scikit-learn runs on the CPU only",
}

_DATA = """
import numpy as np, os, torch, time
# PyTorch's default may be fewer threads than cores (one per physical core); tessel uses every
# core, so the dense and GPyTorch rows get them too.
torch.set_num_threads(os.cpu_count())
DEV = torch.device({device!r})
def sync():
    if DEV.type == "cuda":
        torch.cuda.synchronize()
g = np.random.default_rng(0)
X = g.uniform(0, 1, ({n}, {d}))
Y = np.sin(4 * X[:, 0]) + X[:, 1] ** 2 - 0.5 * X[:, 2] + 0.1 * g.standard_normal({n})
Y = Y - Y.mean()
ELL = np.linspace(0.5, 1.5, {d})  # every library starts here, output scale 1, noise 0.1, mean 0
STEP = [0]  # a fit's step: tessel's probes are drawn afresh each step, as GPyTorch's are
def keep(params, grads):
    for p, g in zip(params, grads):  # Adam descends -log p(y)
        p.grad = -g
"""

_SETUP = {
    "tessel": """
from tessel.gp import ExactGP, Matern, Scale
gp = ExactGP(torch.tensor(X, dtype=torch.{dtype}, device=DEV), torch.tensor(Y, device=DEV),
             Scale(Matern(2.5, lengthscale=ELL.tolist()), outputscale=1.0), noise=0.1)
params = list(gp.parameters())
def step():
    stats = {{}}
    v = gp.log_marginal_likelihood(mode="{mode}", probes=10, rank={rank}, tol={tol},
                                 stats=stats, seed=STEP[0])
    keep(params, torch.autograd.grad(v, params))
    sync()
    # The probes' standard error of log p(y) = -(y'K^-1 y + log det K + n log 2 pi) / 2: the
    # log-determinant is their mean, the quadratic term has no sampling error.
    z = np.asarray(stats.get("logdet_samples", []), dtype=np.float64)
    se = 0.5 * z.std(ddof=1) / np.sqrt(z.size) if z.size > 1 else None
    return float(v), stats["cg"]["iterations"] if "cg" in stats else None, se
""",
    # GPyTorch's own step on its model; {imports} and {kernel} pick the kernel, {init} sets the
    # start (the likelihood's noise for both).
    "gpytorch": """
import gpytorch
{imports}
x = torch.tensor(X, dtype=torch.float32, device=DEV)
y = torch.tensor(Y, dtype=torch.float32, device=DEV)
class Model(gpytorch.models.ExactGP):
    def __init__(self):
        super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean = gpytorch.means.ConstantMean()
        self.kernel = {kernel}
    def forward(self, z):
        return gpytorch.distributions.MultivariateNormal(self.mean(z), self.kernel(z))
model = Model().to(DEV)
with torch.no_grad():
{init}    model.likelihood.noise = 0.1
model.train()
mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
params = list(model.parameters())
def step():
    with {settings}:
        v = mll(model(x), y) * x.shape[0]
        keep(params, torch.autograd.grad(v, params))
    sync()
    return float(v), None, None
""",
    "sklearn": """
from sklearn.gaussian_process import GaussianProcessRegressor, kernels as sk
kernel = sk.ConstantKernel(1.0) * sk.Matern(ELL, nu=2.5) + sk.WhiteKernel(0.1)
reg = GaussianProcessRegressor(kernel, optimizer=None).fit(X, Y)
def step():
    v, grad = reg.log_marginal_likelihood(reg.kernel_.theta, eval_gradient=True)
    return float(v), None, None
""",
}

# A fit: --fit Adam steps (lr --lr) from the same start, timed as a whole; one value per step.
_FIT = """
opt = torch.optim.Adam(params, lr={lr})
values, t = [], time.perf_counter()
for it in range({iters}):
    STEP[0] = it
    out = step()
    values.append(out[0])
    opt.step()
RESULT = dict(times=[time.perf_counter() - t], value=out[0], cg_iterations=None, value_se=None,
              values=values, gpu=torch.cuda.get_device_name(DEV) if DEV.type == "cuda" else None)
"""

_WORK = """
times, out = [], None
for _ in range({repeats}):
    t = time.perf_counter()
    out = step()
    times.append(time.perf_counter() - t)
RESULT = dict(times=times, value=out[0], cg_iterations=out[1], value_se=out[2],
              gpu=torch.cuda.get_device_name(DEV) if DEV.type == "cuda" else None)
"""


def model_source(library, d, tol, rank=15):
    if library == "tessel-gpytorch":
        return _SETUP["gpytorch"].format(
            imports="from tessel.gp import GPyTorchKernel, Matern, Scale",
            kernel="GPyTorchKernel(Scale(Matern(2.5, lengthscale=ELL.tolist()), outputscale=1.0))",
            init="", settings="gpytorch.settings.max_preconditioner_size(15)")
    if library.startswith("tessel"):
        dtype = "float32" if library == "tessel" else "float64"
        mode = "exact" if library == "tessel-exact" else "bbmm"
        return _SETUP["tessel"].format(dtype=dtype, tol=tol, rank=rank, mode=mode)
    if library.startswith("gpytorch"):
        keops = library.startswith("gpytorch-keops")
        imp = ("from gpytorch.kernels.keops import MaternKernel as Kern" if keops else
               "from gpytorch.kernels import MaternKernel as Kern")
        init = ("    model.kernel.base_kernel.lengthscale = torch.tensor(ELL, dtype=torch.float32, "
                "device=DEV)[None]\n    model.kernel.outputscale = 1.0\n")
        return _SETUP["gpytorch"].format(
            imports=imp, kernel=f"gpytorch.kernels.ScaleKernel(Kern(nu=2.5, ard_num_dims={d}))",
            init=init, settings=("gpytorch.settings.max_preconditioner_size(0)"
                                 if library == "gpytorch-keops-noprec" else
                                 "gpytorch.settings.max_preconditioner_size(15)"))
    return _SETUP["sklearn"]


def setup_source(library, n, d, tol, device="cpu", warmup_n=None, rank=15):
    """The data, the model and one untimed step. With warmup_n, that step runs on a problem of
    warmup_n points first and the model of n points is built after it: at n = 1e6 a warm-up step
    at full size would double the case's time, and above GPyTorch's preconditioning size a small
    problem takes the same path, with the same formulas and column counts (what the compiled
    kernels are keyed by)."""
    model = model_source(library, d, tol, rank)
    part = [_DATA.format(n=m, d=d, device=device) + model
            for m in ((warmup_n, n) if warmup_n and warmup_n != n else (n,))]
    return part[0] + "step()\n" + "".join(part[1:])


def measure(library, n, d, repeats, tol, timeout, device="cpu", warmup_n=None, rank=15,
            fit=0, lr=0.1):
    cuda = device.startswith("cuda")
    work = _FIT.format(iters=fit, lr=lr) if fit else _WORK.format(repeats=repeats)
    r = run_isolated(setup_source(library, n, d, tol, device, warmup_n, rank), work, cuda=cuda,
                     timeout=timeout)
    res = r["result"]
    row = dict(bench="gp_fit" if fit else "gp_step", library=library, n=n, d=d, device=device,
               seconds=statistics.median(res["times"]), times=res["times"],
               log_likelihood=res["value"], cg_iterations=res["cg_iterations"],
               log_likelihood_se=res["value_se"],
               peak_mb=round(r["peak_bytes"] / 2**20, 1),
               peak_of="torch.cuda.max_memory_allocated" if cuda else "resident set",
               cpu=cpu_name(), torch_threads=os.cpu_count(), blas=blas_name())
    if cuda:
        row["gpu"] = res["gpu"]
    if warmup_n and warmup_n != n:
        row["warmup_n"] = warmup_n
    if library in ("tessel", "tessel-f64"):
        row.update(rank=rank, tol=tol)
    if fit:
        # The fit's time is the whole loop's; log p(y) at its first and last steps (the last
        # before the last update), each the library's own estimate.
        row.update(iterations=fit, lr=lr, log_likelihood_start=res["values"][0],
                   cg_iterations=None)
    return row


def gpu_memory_gib(device):
    """The GPU's memory, asked in a process of its own: a CUDA context here would hold device
    memory through every measured case."""
    index = int(device.split(":", 1)[1]) if ":" in device else 0
    code = f"import torch; print(torch.cuda.get_device_properties({index}).total_memory)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"gp_bench: no CUDA device {index}: {last[:300]}")
    return int(out.stdout.split()[-1]) / 2**30


def skip_reason(library, n, args, dense_gib):
    """Why this case cannot run where asked, or None."""
    if args.device.startswith("cuda") and library in NO_CUDA:
        return NO_CUDA[library]
    if args.fit and library == "sklearn":
        return ("a fit is Adam on each library's step; scikit-learn's step gives the gradient "
                "in its own parameters, not in tensors Adam can update")
    if library == "gpytorch" and dense_gib is not None:
        need = _DENSE_MATRICES * 4 * n * n / 2**30
        if need > dense_gib:
            return (f"GPyTorch's dense step holds about {_DENSE_MATRICES} n x n float32 "
                    f"matrices, {need:,.0f} GiB, over --dense-gib {dense_gib:,.0f}")
    return None


def table(rows):
    """Markdown: one line per (n, library), with the ratio to tessel's time at that n (to
    tessel-gpytorch's where tessel's own step has no row)."""
    base = {}
    for library in ("tessel-gpytorch", "tessel"):
        base.update({r["n"]: r["seconds"] for r in rows if r["library"] == library})
    fit = rows and rows[0]["bench"] == "gp_fit"
    lines = [f"| n | library | {'seconds per fit' if fit else 'seconds per step (median)'} | "
             "× tessel | log p(y) (± probes' standard error) | peak MB |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in sorted(rows, key=lambda r: (r["n"], LIBRARIES.index(r["library"]))):
        ratio = f"{r['seconds'] / base[r['n']]:.1f}" if r["n"] in base else "—"
        se = f" ± {r['log_likelihood_se']:.2g}" if r.get("log_likelihood_se") else ""
        lines.append(f"| {r['n']} | {r['library']} | {r['seconds']:.3g} | {ratio} | "
                     f"{r['log_likelihood']:.6g}{se} | {r['peak_mb']} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10000])
    ap.add_argument("--d", type=int, default=8)
    ap.add_argument("--libraries", nargs="+", choices=LIBRARIES, default=list(LIBRARIES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tol", type=float, default=0.01,
                    help="tessel's CG tolerance (0.01: its log p(y) within the probes' error of "
                         "the exact one; GPyTorch trains with 1, a coarser value)")
    ap.add_argument("--rank", type=int, default=15,
                    help="tessel's preconditioner rank (15: GPyTorch's preconditioner size)")
    ap.add_argument("--sklearn-max", type=int, default=20000)
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:index]")
    ap.add_argument("--dense-gib", type=float, default=None,
                    help="the memory GPyTorch's dense step may take (default: the GPU's memory "
                         "on CUDA, no limit on the CPU)")
    ap.add_argument("--warmup-n", type=int, default=None,
                    help="take the untimed warm-up step on this many points (default: on n; "
                         "above 2000, GPyTorch's preconditioning size, it takes the same path)")
    ap.add_argument("--fit", type=int, default=0, metavar="STEPS",
                    help="time a fit instead: this many Adam steps from the same start")
    ap.add_argument("--lr", type=float, default=0.1, help="Adam's learning rate in --fit")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per case")
    ap.add_argument("--table", action="store_true")
    args = ap.parse_args(argv)
    if args.device != "cpu" and not args.device.startswith("cuda"):
        ap.error(f"--device must be cpu or cuda[:index], got {args.device!r}")
    dense_gib = args.dense_gib
    if dense_gib is None and args.device.startswith("cuda") and "gpytorch" in args.libraries:
        dense_gib = gpu_memory_gib(args.device)
    rows = []
    for n in args.n:
        for library in args.libraries:
            if library == "sklearn" and n > args.sklearn_max:
                continue
            head = dict(bench="gp_fit" if args.fit else "gp_step", library=library, n=n,
                        d=args.d, device=args.device)
            if args.warmup_n and args.warmup_n != n:
                head["warmup_n"] = args.warmup_n
            reason = skip_reason(library, n, args, dense_gib)
            if reason is not None:
                print(json.dumps(dict(head, skipped=reason)), flush=True)
                continue
            try:
                row = measure(library, n, args.d, args.repeats, args.tol, args.timeout,
                              args.device, args.warmup_n, args.rank, args.fit, args.lr)
            except MeasureError as e:
                lines = str(e).splitlines()  # the exit status first, the child's last words
                row = dict(head, error=" / ".join(dict.fromkeys([lines[0], lines[-1]]))[:300])
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.table:
        print(table([r for r in rows if "seconds" in r]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
