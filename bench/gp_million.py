"""A GP fit to a million points in d = 3 on the CPU: tessel.gp.SparseGP (Titsias's bound on M
inducing points, its (n, M) kernel block made in chunks and never kept) against an exact GP on a
random subset (what fits otherwise) and against GPyTorch's SGPR (InducingPointKernel, which keeps
the block), by fit time, peak memory, test RMSE and mean negative log predictive density (NLL).

Data: the Ishigami function sin(x1) + 7 sin(x2)^2 + 0.1 x3^4 sin(x1) (a standard test function
of sensitivity analysis), x uniform on [-pi, pi]^3, plus Gaussian noise of deviation --noise;
the targets standardised with the training mean and deviation, the metrics on the original scale,
on --n-test held-out points. Model: an ARD Matérn 5/2 with an output scale, a learned noise and a
constant mean, starting at lengthscales 1, output scale 1, noise 0.1; float64. Optimiser:
--optimizer (L-BFGS with a strong Wolfe line search, or Adam at --lr), --iters iterations.

Each library runs in a process of its own, so that its peak resident memory (ru_maxrss, the
interpreter and PyTorch included) is its own; with --device cuda the data and models live on the
GPU and the row also holds the GPU's peak (torch.cuda.max_memory_allocated). One JSON line per library (--table: Markdown).

Run: PYTHONPATH=build/python .venv/bin/python bench/gp_million.py --n 1000000
     [--inducing 512] [--iters 50] [--libraries tessel-sparse exact-subset] [--table]
"""
import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

import torch

from ot_bench import blas_name, cpu_name  # a sibling in bench/, which a script run there finds

LIBRARIES = ("tessel-sparse", "exact-subset", "gpytorch-sgpr")


def data(n, n_test, noise, seed):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.rand(n + n_test, 3, dtype=torch.float64, generator=gen) * 2 - 1) * math.pi
    f = torch.sin(x[:, 0]) * (1 + 0.1 * x[:, 2] ** 4) + 7 * torch.sin(x[:, 1]) ** 2
    y = f + noise * torch.randn(n + n_test, dtype=torch.float64, generator=gen)
    mu, sd = y[:n].mean(), y[:n].std()
    return x[:n], (y[:n] - mu) / sd, x[n:], y[n:], float(mu), float(sd)


def _kernel():
    from tessel.gp import Matern, Scale
    return Scale(Matern(nu=2.5, lengthscale=[1.0] * 3), outputscale=1.0)


def _fit_and_predict(gp, xte, args):
    t0 = time.perf_counter()
    history = gp.fit(optimizer=args.optimizer, max_iter=args.iters, lr=args.lr,
                     progress=args.progress)
    fit_s = time.perf_counter() - t0
    mean, var = gp.predict(xte, include_noise=True)
    return mean, var, fit_s, float(gp.noise), len(history) - 1  # its last row: where it ended


def run_tessel_sparse(xtr, ytr, xte, args):
    from tessel.gp import SparseGP
    gp = SparseGP(xtr, ytr, _kernel(), inducing=args.inducing, noise=0.1, seed=args.seed)
    return _fit_and_predict(gp, xte, args)


def run_exact_subset(xtr, ytr, xte, args):
    from tessel.gp import ExactGP
    gen = torch.Generator().manual_seed(args.seed)
    rows = torch.randperm(xtr.shape[0], generator=gen)[:args.subset]
    gp = ExactGP(xtr[rows], ytr[rows], _kernel(), noise=0.1, exact_max=args.subset)
    return _fit_and_predict(gp, xte, args)


def run_gpytorch_sgpr(xtr, ytr, xte, args):
    import gpytorch
    gen = torch.Generator().manual_seed(args.seed)
    z = xtr[torch.randperm(xtr.shape[0], generator=gen)[:args.inducing]].clone()

    class Model(gpytorch.models.ExactGP):
        def __init__(self, likelihood):
            super().__init__(xtr, ytr, likelihood)
            self.mean = gpytorch.means.ConstantMean()
            base = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(nu=2.5,
                                                                              ard_num_dims=3))
            self.covar = gpytorch.kernels.InducingPointKernel(base, z, likelihood)

        def forward(self, q):
            return gpytorch.distributions.MultivariateNormal(self.mean(q), self.covar(q))

    lik = gpytorch.likelihoods.GaussianLikelihood()
    model = Model(lik).double()
    with torch.no_grad():  # the same start as tessel's
        lik.noise = torch.tensor(0.1, dtype=torch.float64)
        model.covar.base_kernel.outputscale = torch.tensor(1.0, dtype=torch.float64)
        model.covar.base_kernel.base_kernel.lengthscale = torch.ones(1, 3, dtype=torch.float64)
    model = model.to(xtr.device)  # the likelihood is one of its modules
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    params = list(model.parameters())
    if args.optimizer == "lbfgs":
        opt = torch.optim.LBFGS(params, lr=args.lr, max_iter=1, line_search_fn="strong_wolfe")
    else:
        opt = torch.optim.Adam(params, lr=args.lr)

    def closure():
        opt.zero_grad()
        loss = -mll(model(xtr), ytr)
        loss.backward()
        return loss

    t0 = time.perf_counter()
    for _ in range(args.iters):
        opt.step(closure)
    fit_s = time.perf_counter() - t0
    model.eval()
    with torch.no_grad(), gpytorch.settings.sgpr_diagonal_correction(False):
        pred = lik(model(xte))  # Titsias's predictive, as tessel's (see test_gp_sparse.py)
    return pred.mean, pred.variance, fit_s, float(lik.noise), args.iters


def measure(library, args):
    xtr, ytr, xte, yte, mu, sd = data(args.n, args.n_test, args.noise, args.seed)
    xtr, ytr, xte = (t.to(args.device) for t in (xtr, ytr, xte))  # each model follows its data
    run = {"tessel-sparse": run_tessel_sparse, "exact-subset": run_exact_subset,
           "gpytorch-sgpr": run_gpytorch_sgpr}[library]
    mean, var, fit_s, noise, iters = run(xtr, ytr, xte, args)
    m, v = mu + sd * mean.double().cpu(), sd * sd * var.double().cpu()
    rmse = float(((m - yte) ** 2).mean().sqrt())
    nll = float((0.5 * torch.log(2 * math.pi * v) + 0.5 * (yte - m) ** 2 / v).mean())
    return dict(bench="gp_million", library=library, n=args.n, d=3, n_test=args.n_test,
                inducing=args.inducing if library != "exact-subset" else None,
                subset=args.subset if library == "exact-subset" else None,
                optimizer=args.optimizer, iters=iters, seed=args.seed, rmse=rmse, nll=nll,
                fit_seconds=fit_s, noise=noise * sd * sd, true_noise=args.noise ** 2,
                peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                threads=torch.get_num_threads(), torch=torch.__version__,
                blas=blas_name(), cpu=cpu_name(), device=args.device,
                **_gpu_fields(args.device))


def _gpu_fields(device):
    if not device.startswith("cuda"):
        return {}
    return dict(gpu=torch.cuda.get_device_name(torch.device(device)),
                peak_gpu_mb=torch.cuda.max_memory_allocated(torch.device(device)) / 2**20)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=1000000)
    p.add_argument("--n-test", type=int, default=10000)
    p.add_argument("--noise", type=float, default=0.5, help="the noise's standard deviation")
    p.add_argument("--inducing", type=int, default=512)
    p.add_argument("--subset", type=int, default=4000, help="exact-subset's points")
    p.add_argument("--optimizer", choices=["lbfgs", "adam"], default="lbfgs")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--lr", type=float, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--libraries", nargs="+", default=["tessel-sparse", "exact-subset"],
                   choices=LIBRARIES)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--device", default="cpu", help="cpu or cuda[:index]: where the data and "
                   "models live (peak_gpu_mb: torch.cuda.max_memory_allocated)")
    p.add_argument("--progress", action="store_true")
    p.add_argument("--table", action="store_true")
    p.add_argument("--one", choices=LIBRARIES, help=argparse.SUPPRESS)  # the child's library
    args = p.parse_args(argv)
    if args.lr is None:
        args.lr = 1.0 if args.optimizer == "lbfgs" else 0.05
    torch.set_num_threads(args.threads)
    if args.one:
        print(json.dumps(measure(args.one, args)), flush=True)
        return [True]
    rows = []
    forwarded = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--table"]
    for lib in args.libraries:
        cmd = [sys.executable, os.path.abspath(__file__), *forwarded, "--one", lib]
        out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True,
                             cwd=os.path.dirname(os.path.abspath(__file__)))
        if out.returncode != 0:
            row = dict(bench="gp_million", library=lib, n=args.n, error=f"exit {out.returncode}")
        else:
            row = json.loads(out.stdout.strip().splitlines()[-1])
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.table:
        print("\n| library | n | M / subset | fit (s) | iterations | peak memory (MB) | "
              "test RMSE | test NLL |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            if "error" in r:
                print(f"| {r['library']} | {r['n']} | | failed: {r['error']} | | | | |")
                continue
            size = r["inducing"] if r["inducing"] is not None else r["subset"]
            print(f"| {r['library']} | {r['n']} | {size} | {r['fit_seconds']:.0f} | "
                  f"{r['iters']} | {r['peak_rss_mb']:.0f} | {r['rmse']:.4f} | {r['nll']:.4f} |")
    return rows


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
