"""tessel.gp's pathwise posterior samples: their mean and covariance are the exact posterior's
(exact and BBMM modes; RBF, Matérn, rational quadratic, periodic, spectral mixture, linear,
polynomial, sums and products), to the Monte Carlo error and the random features' stated error;
the prior draws' covariance is the kernel's to that error (exactly for Linear and Polynomial);
kernels and products without a feature draw are refused by name."""
import math

import numpy as np
import pytest
import torch

from tessel.gp import (RBF, ExactGP, Kernel, Linear, Matern, Periodic, Polynomial,
                       RationalQuadratic, Scale, SpectralMixture)
from tessel.gp.samples import PriorSampler

S = 3000


def _gp(kernel, n=40, noise=0.01):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, 2, generator=g, dtype=torch.float64)
    y = torch.sin(5 * x[:, 0]) + x[:, 1] + 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    return ExactGP(x, y, kernel, noise=noise), torch.rand(6, 2, generator=g,
                                                          dtype=torch.float64) * 1.2 - 0.1


KERNELS = {"rbf": Scale(RBF([0.3, 0.5]), 1.5), "matern12": Matern(0.5, 0.4),
           "matern32": Matern(1.5, [0.3, 0.6]), "matern52": Matern(2.5, 0.5),
           "rq": RationalQuadratic(0.4, alpha=1.5), "rbf+linear": Scale(RBF(0.4)) + Linear(0.5),
           "periodic": Periodic(0.8, period=0.6),
           "spectral_mixture": SpectralMixture(2, d=2, weights=[0.6, 1.2],
                                               means=[[0.5, 1.5], [2.0, 0.4]],
                                               scales=[[1.0, 0.6], [0.8, 1.5]]),
           "rbf*periodic": Scale(RBF([0.6, 0.9]), 1.5) * Periodic(1.0, period=0.5),
           "linear*matern": Linear(0.8) * Matern(1.5, 0.5), "polynomial": Polynomial(2, 0.5)}
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


SM = SpectralMixture(2, d=2, weights=[0.7, 1.3], means=[[0.5, 1.0], [2.0, 0.3]],
                     scales=[[0.8, 0.5], [1.0, 2.0]])
PRIORS = {"periodic": (Periodic(0.7, period=0.8), 2),
          "periodic-short": (Periodic(0.2, period=1.3), 1),
          "periodic-euclidean-1d": (Periodic(0.6, period=0.5, distance="euclidean"), 1),
          "spectral_mixture": (SM, 2),
          "spectral_mixture-3d": (SpectralMixture(3, d=3), 3),
          "rbf*periodic": (Scale(RBF([0.5, 0.9]), 2.0) * Periodic(1.0, period=0.6), 2),
          "matern*rq": (Matern(1.5, 0.7) * RationalQuadratic(0.5, alpha=2.0), 2),
          "sm*rbf": (SM * RBF(0.8), 2),
          "linear*rbf": (Linear(0.5) * RBF(0.5), 2),
          "polynomial*matern": (Polynomial(2, 1.0) * Matern(2.5, 0.6), 2),
          "(rbf+linear)*periodic": ((RBF(0.4) + Linear()) * Periodic(1.0, period=0.7), 2),
          "polynomial": (Polynomial(3, 1.5), 3), "linear*linear": (Linear(0.5) * Linear(2.0), 2),
          "linear*polynomial": (Scale(Linear(), 0.5) * Polynomial(2, 0.3), 2)}
EXACT = ("polynomial", "linear*linear", "linear*polynomial")


@pytest.mark.parametrize("name", PRIORS)
def test_prior_draws_have_the_kernels_covariance(name):
    kernel, d = PRIORS[name]
    g = torch.Generator().manual_seed(0)
    x = torch.rand(8, d, generator=g, dtype=torch.float64) * 2 - 0.5
    k = kernel.dense(x, x).detach()
    sd = k.diag().sqrt()
    # The features' covariance is the kernel's to sqrt(2 / L) of the two standard deviations
    # (4 of them for the largest of 36 entries), exactly for Linear and Polynomial alone.
    features = 2 ** 14
    prior = PriorSampler(kernel, d, 1, features, g, "test")
    rel = (prior.covariance(x, x) - k).abs() / (sd[:, None] * sd[None, :])
    assert float(rel.max()) <= (1e-12 if name in EXACT else 4 * math.sqrt(2 / features)), rel
    # The functions drawn have the features' covariance, to the Monte Carlo error.
    s = 4000
    prior = PriorSampler(kernel, d, s, 256, g, "test")
    f = prior(x)
    assert f.shape == (8, s) and f.dtype == torch.float64
    np.testing.assert_array_equal(prior(x[3:5]).numpy(), f[3:5].numpy())
    given = prior.covariance(x, x)
    rel = (torch.cov(f) - given).abs() / (sd[:, None] * sd[None, :])
    assert float(rel.max()) <= 4 * math.sqrt(2 / s), rel


class _Constant(Kernel):
    def _text(self, pack, d):
        return "IntCst(1)"

    def dense(self, x1, x2):
        return torch.ones(x1.shape[0], x2.shape[0], dtype=torch.float64)

    def diag(self, x):
        return torch.ones(x.shape[0], dtype=torch.float64)


def test_kernels_without_a_feature_draw_are_refused():
    gp, xt = _gp(Periodic(distance="euclidean"))
    with pytest.raises(NotImplementedError, match=r"Periodic\(distance='euclidean'\) has no prior "
                       "draw for points of dimension 2"):
        gp.sample(xt)
    gp, xt = _gp(Polynomial(power=4))
    with pytest.raises(NotImplementedError, match=r"Polynomial\(power=4\) has 15 exact features"):
        gp.sample(xt, features=8)
    g = torch.Generator().manual_seed(0)
    # 66 monomials of degree <= 2 in 10 dimensions, each beside the RBF's features: refused.
    with pytest.raises(NotImplementedError, match=r"Polynomial\(power=2\) has 66 exact features "
                       "for points of dimension 10, more than the 64"):
        PriorSampler(Scale(RBF()) + Polynomial(2) * RBF(), 10, 1, 16, g, "ExactGP.sample")
    with pytest.raises(NotImplementedError, match="prior draws of a _Constant kernel"):
        PriorSampler(RBF() * _Constant(), 2, 1, 16, g, "ExactGP.sample")
    with pytest.raises(ValueError, match="samples must be an integer >= 1"):
        gp.sample(xt, samples=0)
