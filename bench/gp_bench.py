"""Exact GP regression, one marginal-likelihood-plus-gradient step: tessel.gp against GPyTorch
(its dense default path and its KeOps kernels on pykeops) and scikit-learn, same data and start.

The step is what a fit repeats: log p(y) and its gradient in every hyperparameter (an ARD
Matérn 5/2 with an output scale, a learned Gaussian noise and a constant mean; d = 8 by
default), at the same starting hyperparameters for every library:
- tessel: ExactGP(mode="bbmm") on float32 points (tessel-f64: float64), probes 10, rank 15,
  CG tol 0.01 (--tol; at n = 2000 its log p(y) is -179.8 against the exact -181.1, GPyTorch's
  at its training tolerance 1 is -172.3);
- gpytorch: GPyTorch's ExactMarginalLogLikelihood with its MaternKernel (dense kernel matrix,
  CG above max_cholesky_size = 800), float32;
- gpytorch-keops: the same with gpytorch.kernels.keops.MaternKernel on pykeops (real KeOps).
  With GPyTorch 1.11 (the newest for PyTorch 1.13) it fails from n = 2000 on, GPyTorch's
  min_preconditioning_size: its preconditioner asks linear_operator for the kernel's diagonal
  as a dense tensor, which a KeOps LazyTensor is not ("object of class LazyTensor cannot be made
  into a Tensor"); the row then holds that error;
- sklearn: GaussianProcessRegressor.log_marginal_likelihood(theta, eval_gradient=True), float64
  dense Cholesky (O(n^3)), skipped above --sklearn-max.
Each (library, n) runs in a fresh process (tessel.loops.run_isolated): setup builds the model
and takes one warm-up step (kernel compilation, pykeops's build), then --repeats steps are timed;
the median is reported with the peak memory of the resident set during them. One JSON line per
measurement (--table: a Markdown table with each library's ratio to tessel's time).

Run: PYTHONPATH=build/python .venv/bin/python bench/gp_bench.py --n 10000 30000
     [--libraries tessel gpytorch gpytorch-keops sklearn] [--repeats 3] [--table]
"""
import argparse
import json
import statistics
import sys

from ot_bench import cpu_name  # a sibling in bench/, which a script run there finds
from tessel.loops.memory import MeasureError, run_isolated

LIBRARIES = ("tessel", "tessel-f64", "gpytorch", "gpytorch-keops", "sklearn")

_DATA = """
import numpy as np, torch, time
g = np.random.default_rng(0)
X = g.uniform(0, 1, ({n}, {d}))
Y = np.sin(4 * X[:, 0]) + X[:, 1] ** 2 - 0.5 * X[:, 2] + 0.1 * g.standard_normal({n})
Y = Y - Y.mean()
ELL = np.linspace(0.5, 1.5, {d})  # every library starts here, output scale 1, noise 0.1, mean 0
"""

_SETUP = {
    "tessel": """
from tessel.gp import ExactGP, Matern, Scale
gp = ExactGP(torch.tensor(X, dtype=torch.{dtype}), torch.tensor(Y),
             Scale(Matern(2.5, lengthscale=ELL.tolist()), outputscale=1.0), noise=0.1)
params = list(gp.parameters())
def step():
    stats = {{}}
    v = gp.log_marginal_likelihood(mode="bbmm", probes=10, rank=15, tol={tol}, stats=stats)
    grads = torch.autograd.grad(v, params)
    return float(v), stats["cg"]["iterations"]
step()
""",
    "gpytorch": """
import gpytorch
{keops_import}
x, y = torch.tensor(X, dtype=torch.float32), torch.tensor(Y, dtype=torch.float32)
class Model(gpytorch.models.ExactGP):
    def __init__(self):
        super().__init__(x, y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean = gpytorch.means.ConstantMean()
        self.kernel = gpytorch.kernels.ScaleKernel(Kern(nu=2.5, ard_num_dims={d}))
    def forward(self, z):
        return gpytorch.distributions.MultivariateNormal(self.mean(z), self.kernel(z))
model = Model()
with torch.no_grad():
    model.kernel.base_kernel.lengthscale = torch.tensor(ELL, dtype=torch.float32)[None]
    model.kernel.outputscale = 1.0
    model.likelihood.noise = 0.1
model.train()
mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
params = list(model.parameters())
def step():
    v = mll(model(x), y) * x.shape[0]
    grads = torch.autograd.grad(v, params)
    return float(v), None
step()
""",
    "sklearn": """
from sklearn.gaussian_process import GaussianProcessRegressor, kernels as sk
kernel = sk.ConstantKernel(1.0) * sk.Matern(ELL, nu=2.5) + sk.WhiteKernel(0.1)
reg = GaussianProcessRegressor(kernel, optimizer=None).fit(X, Y)
def step():
    v, grad = reg.log_marginal_likelihood(reg.kernel_.theta, eval_gradient=True)
    return float(v), None
step()
""",
}

_WORK = """
times, out = [], None
for _ in range({repeats}):
    t = time.perf_counter()
    out = step()
    times.append(time.perf_counter() - t)
RESULT = dict(times=times, value=out[0], cg_iterations=out[1])
"""


def setup_source(library, n, d, tol):
    data = _DATA.format(n=n, d=d)
    if library.startswith("tessel"):
        dtype = "float64" if library == "tessel-f64" else "float32"
        return data + _SETUP["tessel"].format(dtype=dtype, tol=tol)
    if library.startswith("gpytorch"):
        keops = library == "gpytorch-keops"
        imp = ("from gpytorch.kernels.keops import MaternKernel as Kern" if keops else
               "from gpytorch.kernels import MaternKernel as Kern")
        return data + _SETUP["gpytorch"].format(keops_import=imp, d=d)
    return data + _SETUP["sklearn"]


def measure(library, n, d, repeats, tol, timeout):
    r = run_isolated(setup_source(library, n, d, tol), _WORK.format(repeats=repeats),
                     timeout=timeout)
    res = r["result"]
    return dict(bench="gp_step", library=library, n=n, d=d, seconds=statistics.median(
        res["times"]), times=res["times"], log_likelihood=res["value"],
        cg_iterations=res["cg_iterations"], peak_mb=round(r["peak_bytes"] / 2**20, 1),
        cpu=cpu_name())


def table(rows):
    """Markdown: one line per (n, library), with the ratio to tessel's time at that n."""
    base = {r["n"]: r["seconds"] for r in rows if r["library"] == "tessel"}
    lines = ["| n | library | seconds per step (median) | × tessel | log p(y) | peak MB |",
             "| --- | --- | --- | --- | --- | --- |"]
    for r in sorted(rows, key=lambda r: (r["n"], LIBRARIES.index(r["library"]))):
        ratio = f"{r['seconds'] / base[r['n']]:.1f}" if r["n"] in base else "—"
        lines.append(f"| {r['n']} | {r['library']} | {r['seconds']:.3g} | {ratio} | "
                     f"{r['log_likelihood']:.6g} | {r['peak_mb']} |")
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
    ap.add_argument("--sklearn-max", type=int, default=20000)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--table", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    for n in args.n:
        for library in args.libraries:
            if library == "sklearn" and n > args.sklearn_max:
                continue
            try:
                row = measure(library, n, args.d, args.repeats, args.tol, args.timeout)
            except MeasureError as e:
                lines = str(e).splitlines()  # the exit status first, the child's last words
                row = dict(bench="gp_step", library=library, n=n, d=args.d,
                           error=" / ".join(dict.fromkeys([lines[0], lines[-1]]))[:300])
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.table:
        print(table([r for r in rows if "error" not in r]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
