"""tessel.gp's pathwise posterior samples: their mean and covariance are the exact posterior's
(exact and BBMM modes, RBF, Matérn, rational quadratic, linear, sums), to the Monte Carlo error
and the random features' stated error; kernels without a random-feature draw are refused."""
import math

import numpy as np
import pytest
import torch

from tessel.gp import (RBF, ExactGP, Linear, Matern, Periodic, RationalQuadratic, Scale)

S = 3000


def _gp(kernel, n=40, noise=0.01):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, 2, generator=g, dtype=torch.float64)
    y = torch.sin(5 * x[:, 0]) + x[:, 1] + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    return ExactGP(x, y, kernel, noise=noise), torch.rand(6, 2, generator=g,
                                                          dtype=torch.float64) * 1.2 - 0.1


KERNELS = {"rbf": Scale(RBF([0.3, 0.5]), 1.5), "matern12": Matern(0.5, 0.4),
           "matern32": Matern(1.5, [0.3, 0.6]), "matern52": Matern(2.5, 0.5),
           "rq": RationalQuadratic(0.4, alpha=1.5), "rbf+linear": Scale(RBF(0.4)) + Linear(0.5)}
# Every prior draw in the exact mode; the BBMM mode's solves and products (each kernel compiled
# for the core) on two of them.
CASES = [(k, "exact") for k in KERNELS] + [("matern32", "bbmm"), ("rbf+linear", "bbmm")]


@pytest.mark.parametrize("name, mode", CASES, ids=[f"{k}-{m}" for k, m in CASES])
def test_samples_have_the_posteriors_mean_and_covariance(name, mode):
    kernel = KERNELS[name]
    gp, xt = _gp(kernel)
    f = gp.sample(xt, samples=S, features=4096, seed=1, mode=mode, rank=40, tol=1e-10)
    assert f.shape == (6, S) and f.dtype == torch.float64
    mean, var = gp.predict(xt, mode="exact")
    cov = gp.predict_covariance(xt, mode="exact")
    # The mean is exact for any prior draw's quality only in expectation: Monte Carlo error
    # (5 standard errors), plus the prior's feature error carried through the update.
    se = torch.sqrt(var / S)
    prior_sd = float(torch.sqrt(gp.kernel.diag(xt).max()))
    feature_err = math.sqrt(2 / 4096) * prior_sd
    assert torch.all((f.mean(1) - mean).abs() <= 5 * se + feature_err), (f.mean(1), mean)
    emp = torch.cov(f)
    # Covariance: sampling error ~ sqrt(2 / S) and the features' ~ sqrt(2 / L), relative to the
    # prior variance (the posterior's can be far smaller), at 4 standard deviations.
    tol = 4 * (math.sqrt(2 / S) * float(var.max()) + math.sqrt(2 / 4096) * prior_sd ** 2)
    assert float((emp - cov).abs().max()) <= tol, (emp, cov)


def test_the_same_seed_gives_the_same_functions():
    gp, xt = _gp(Matern(2.5, 0.4))
    a = gp.sample(xt, samples=4, seed=3, mode="exact")
    b = gp.sample(xt, samples=4, seed=3, mode="exact")
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not torch.equal(a, gp.sample(xt, samples=4, seed=4, mode="exact"))


def test_kernels_without_random_features_are_refused():
    gp, xt = _gp(Periodic())
    with pytest.raises(NotImplementedError, match="prior draws of a Periodic kernel"):
        gp.sample(xt)
    gp, xt = _gp(RBF() * Matern())
    with pytest.raises(NotImplementedError, match="product of kernels"):
        gp.sample(xt)
    with pytest.raises(ValueError, match="samples must be an integer >= 1"):
        gp.sample(xt, samples=0)
