"""Exact GP regression on scikit-learn's make_friedman1: tessel.gp against GPyTorch on the CPU
with the same kernel, start and optimiser, by test RMSE and mean negative log predictive
density (NLL), and the fit's time.

Data: make_friedman1(n_train + n_test, 10 features, noise 1, --seed); the targets standardised
with the training mean and deviation, the metrics on the original scale. Model, for both: an
ARD Matérn 5/2 with an output scale, a learned Gaussian noise and a constant mean, all starting
at GPyTorch's defaults (every raw parameter 0: lengthscales, output scale and noise - 1e-4 at
softplus(0)); float32 points. Optimiser: Adam, --lr, --iters steps, on -log p(y) / n by BBMM
with 10 probes and a rank-15 pivoted-Cholesky preconditioner (GPyTorch's defaults, at
GPyTorch's training CG tolerance 1; tessel at --tol). Predictions: the mean by CG, the
variances by LOVE (GPyTorch's fast_pred_var; tessel's predict(mode="love")), both with Lanczos
rank 100, plus the noise.

One JSON line per library (--table: a Markdown table).

Run: PYTHONPATH=build/python .venv/bin/python bench/gp_friedman.py --n-train 20000
     [--n-test 1000] [--iters 50] [--libraries tessel gpytorch] [--table]
"""
import argparse
import json
import math
import os
import sys
import time

import torch

from ot_bench import blas_name, cpu_name  # a sibling in bench/, which a script run there finds

START = math.log(2.0)  # softplus(0): GPyTorch's initial lengthscale, output scale and noise


def data(n_train, n_test, seed):
    from sklearn.datasets import make_friedman1
    x, y = make_friedman1(n_train + n_test, n_features=10, noise=1.0, random_state=seed)
    x = torch.tensor(x, dtype=torch.float32)
    y = torch.tensor(y, dtype=torch.float64)
    mu, sd = y[:n_train].mean(), y[:n_train].std()
    return x[:n_train], (y[:n_train] - mu) / sd, x[n_train:], y[n_train:], float(mu), float(sd)


def run_tessel(xtr, ytr, xte, iters, lr, tol):
    from tessel.gp import ExactGP, Matern, Scale
    kernel = Scale(Matern(nu=2.5, lengthscale=[START] * xtr.shape[1]), outputscale=START)
    gp = ExactGP(xtr, ytr, kernel, noise=1e-4 + START, exact_max=0)
    t0 = time.perf_counter()
    gp.fit(optimizer="adam", max_iter=iters, lr=lr, mode="bbmm", probes=10, rank=15, tol=tol,
           progress=False)
    fit_s = time.perf_counter() - t0
    mean, var = gp.predict(xte, mode="love", love_rank=100, include_noise=True, tol=0.01)
    return mean.double(), var.double(), fit_s, float(gp.noise)


def run_gpytorch(xtr, ytr, xte, iters, lr):
    import gpytorch

    class Model(gpytorch.models.ExactGP):
        def __init__(self, x, y, likelihood):
            super().__init__(x, y, likelihood)
            self.mean = gpytorch.means.ConstantMean()
            self.cov = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=x.shape[1]))

        def forward(self, z):
            return gpytorch.distributions.MultivariateNormal(self.mean(z), self.cov(z))

    lik = gpytorch.likelihoods.GaussianLikelihood()
    y32 = ytr.float()
    model = Model(xtr, y32, lik)
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(lik, model)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    lik.train()
    t0 = time.perf_counter()
    for _ in range(iters):
        opt.zero_grad()
        loss = -mll(model(xtr), y32)
        loss.backward()
        opt.step()
    fit_s = time.perf_counter() - t0
    model.eval()
    lik.eval()
    with torch.no_grad(), gpytorch.settings.fast_pred_var():
        pred = lik(model(xte))
    return pred.mean.double(), pred.variance.double(), fit_s, float(lik.noise)


def measure(library, args):
    xtr, ytr, xte, yte, mu, sd = data(args.n_train, args.n_test, args.seed)
    torch.manual_seed(args.seed)
    if library == "tessel":
        mean, var, fit_s, noise = run_tessel(xtr, ytr, xte, args.iters, args.lr, args.tol)
    else:
        mean, var, fit_s, noise = run_gpytorch(xtr, ytr, xte, args.iters, args.lr)
    m, v = mu + sd * mean, sd * sd * var
    rmse = float(((m - yte) ** 2).mean().sqrt())
    nll = float((0.5 * torch.log(2 * math.pi * v) + 0.5 * (yte - m) ** 2 / v).mean())
    return dict(bench="gp_friedman", library=library, n_train=args.n_train, n_test=args.n_test,
                iters=args.iters, lr=args.lr, seed=args.seed, rmse=rmse, nll=nll,
                fit_seconds=fit_s, noise=noise, threads=torch.get_num_threads(), cpu=cpu_name(),
                blas=blas_name())


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n-train", type=int, default=20000)
    p.add_argument("--n-test", type=int, default=1000)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--tol", type=float, default=0.01, help="tessel's CG tolerance in training")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--libraries", nargs="+", default=["tessel", "gpytorch"],
                   choices=["tessel", "gpytorch"])
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="PyTorch's threads (its default may be fewer than tessel's, which uses "
                        "every core)")
    p.add_argument("--table", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    for lib in args.libraries:
        row = measure(lib, args)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.table:
        print("\n| library | n_train | test RMSE | test NLL | fit (s) | noise |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['library']} | {r['n_train']} | {r['rmse']:.4f} | {r['nll']:.4f} | "
                  f"{r['fit_seconds']:.1f} | {r['noise']:.4f} |")
    return rows


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
