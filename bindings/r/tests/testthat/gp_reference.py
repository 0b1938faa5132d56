"""The Python side of the R GP test: tessel.gp's ExactGP on the data and hyperparameters R wrote
(a CSV per table), at those hyperparameters and after its own fit from the same start; writes
what it got as CSV for R to compare. Where R also wrote kernel.py (a kernel as a Python
expression of tessel.gp's kernels), that kernel at R's hyperparameters only."""
import csv
import os
import sys

import torch

from tessel import gp as tgp
from tessel.gp import ExactGP, Matern, Scale


def read(path):
    with open(path) as f:
        rows = [[float(v) for v in r] for r in csv.reader(f)]
    return torch.tensor(rows, dtype=torch.float64)


def main(folder):
    data, xnew, hyper = read(f"{folder}/data.csv"), read(f"{folder}/xnew.csv"), read(
        f"{folder}/hyper.csv")[0]
    x, y = data[:, :-1], data[:, -1]
    if os.path.exists(f"{folder}/kernel.py"):
        return given_kernel(folder, x, y, xnew, hyper)
    outputscale, noise, constant = float(hyper[0]), float(hyper[1]), float(hyper[2])
    ls = hyper[3:].tolist()
    out = []
    for fit in (False, True):
        gp = ExactGP(x, y, Scale(Matern(nu=2.5, lengthscale=ls), outputscale=outputscale),
                     noise=noise)
        with torch.no_grad():
            gp.mean_constant.fill_(constant)
        if fit:
            gp.fit(mode="exact", max_iter=200)
        with torch.no_grad():
            lml = float(gp.log_marginal_likelihood(mode="exact"))
            mean, var = gp.predict(xnew, mode="exact")
        head = [lml, float(gp.kernel.outputscale), float(gp.noise), float(gp.mean_constant)]
        head += gp.kernel.base.lengthscale.tolist()
        out.append(head + mean.tolist() + var.sqrt().tolist())
    with open(f"{folder}/python.csv", "w", newline="") as f:
        csv.writer(f).writerows(out)


def given_kernel(folder, x, y, xnew, hyper):
    """R's kernel, noise hyper[0] and constant mean hyper[1]: log p(y), the mean and sd."""
    with open(f"{folder}/kernel.py") as f:
        kernel = eval(f.read(), {name: getattr(tgp, name) for name in tgp.__all__})
    gp = ExactGP(x, y, kernel, noise=float(hyper[0]))
    with torch.no_grad():
        gp.mean_constant.fill_(float(hyper[1]))
        lml = float(gp.log_marginal_likelihood(mode="exact"))
        mean, var = gp.predict(xnew, mode="exact")
    with open(f"{folder}/python.csv", "w", newline="") as f:
        csv.writer(f).writerow([lml] + mean.tolist() + var.sqrt().tolist())


if __name__ == "__main__":
    main(sys.argv[1])
