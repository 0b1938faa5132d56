"""tessel.gp against scikit-learn's GaussianProcessRegressor (float64, n = 2000, d = 8): the log
marginal likelihood, its gradient in every hyperparameter, the predictive mean and standard
deviation, to 1e-6 relative; each kernel's formula against its dense matrix."""
import numpy as np
import pytest
import torch

# scripts/python_env.sh installs scikit-learn: a missing one is an error, not a skip.
import sklearn.gaussian_process as sklearn_gp  # noqa: E402
from sklearn.gaussian_process import kernels as sk  # noqa: E402

from gp_cases import exact_finite_differences  # noqa: E402
from tessel import _core  # noqa: E402
from tessel.gp import (RBF, ExactGP, Linear, Matern, Periodic, Polynomial,  # noqa: E402
                       RationalQuadratic, Scale, SpectralMixture)

N, D = 2000, 8


def _data(n=N, d=D, seed=0):
    g = np.random.default_rng(seed)
    x = g.uniform(0, 1, (n, d))
    y = np.sin(4 * x[:, 0]) + x[:, 1] ** 2 - 0.5 * x[:, 2] + 0.1 * g.standard_normal(n)
    return torch.tensor(x), torch.tensor(y)


def _matern_pair():
    ell = np.linspace(0.6, 1.6, D)
    ours = Scale(Matern(nu=2.5, lengthscale=ell.tolist()), outputscale=1.7)
    theirs = sk.ConstantKernel(1.7) * sk.Matern(length_scale=ell, nu=2.5)
    # (our parameter, its natural value) in the order of scikit-learn's theta (logs).
    order = lambda gp: [(gp.kernel.raw_outputscale, gp.kernel.outputscale),  # noqa: E731
                        (gp.kernel.base.raw_lengthscale, gp.kernel.base.lengthscale)]
    return ours, theirs, order


def _rbf_periodic_pair():
    ell = np.linspace(0.8, 2.0, D)
    ours = Scale(RBF(lengthscale=ell.tolist()), outputscale=1.2) + \
        Scale(Periodic(lengthscale=1.5, period=4.0, distance="euclidean"), outputscale=0.5)
    theirs = sk.ConstantKernel(1.2) * sk.RBF(length_scale=ell) + \
        sk.ConstantKernel(0.5) * sk.ExpSineSquared(length_scale=1.5, periodicity=4.0)
    order = lambda gp: [(gp.kernel.a.raw_outputscale, gp.kernel.a.outputscale),  # noqa: E731
                        (gp.kernel.a.base.raw_lengthscale, gp.kernel.a.base.lengthscale),
                        (gp.kernel.b.raw_outputscale, gp.kernel.b.outputscale),
                        (gp.kernel.b.base.raw_lengthscale, gp.kernel.b.base.lengthscale),
                        (gp.kernel.b.base.raw_period, gp.kernel.b.base.period)]
    return ours, theirs, order


PAIRS = {"matern52_ard": _matern_pair, "rbf_ard_plus_periodic": _rbf_periodic_pair}


@pytest.fixture(scope="module", params=sorted(PAIRS))
def pair(request):
    x, y = _data()
    ours, theirs, order = PAIRS[request.param]()
    noise = 0.05
    gp = ExactGP(x, y, ours, noise=noise, mean="zero")
    reg = sklearn_gp.GaussianProcessRegressor(theirs + sk.WhiteKernel(noise), optimizer=None)
    reg.fit(x.numpy(), y.numpy())
    return gp, reg, order(gp) + [(gp.raw_noise, gp.noise)], x


def _rel(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-12)))


def test_log_marginal_likelihood_and_gradient_match_sklearn(pair):
    gp, reg, params, _ = pair
    lml = gp.log_marginal_likelihood(mode="exact")
    grads = torch.autograd.grad(lml, [p for p, _ in params])
    want, want_grad = reg.log_marginal_likelihood(reg.kernel_.theta, eval_gradient=True)
    assert _rel(float(lml), want) < 1e-6
    # scikit-learn differentiates in log p; ours in raw (p = softplus(raw), dp/draw = sigmoid).
    ours = []
    for (raw, value), g in zip(params, grads):
        ours.extend((g * value / torch.sigmoid(raw)).detach().reshape(-1).tolist())
    assert len(ours) == len(want_grad)
    np.testing.assert_allclose(ours, want_grad, rtol=1e-6, atol=1e-6 * np.abs(want_grad).max())


def test_predictive_mean_and_std_match_sklearn(pair):
    gp, reg, _, x = pair
    xt, _ = _data(n=200, seed=5)
    mean, var = gp.predict(xt, mode="exact", include_noise=True)
    want_mean, want_std = reg.predict(xt.numpy(), return_std=True)
    assert _rel(mean, want_mean) < 1e-6 or np.abs(mean.numpy() - want_mean).max() < 1e-9
    assert _rel(torch.sqrt(var), want_std) < 1e-6


def test_bbmm_predictions_match_exact(pair):
    gp, _, _, _ = pair
    xt, _ = _data(n=50, seed=6)
    stats = {}
    mean_e, var_e = gp.predict(xt, mode="exact")
    mean_b, var_b = gp.predict(xt, mode="bbmm", tol=1e-10, rank=100, stats=stats)
    assert all(stats["mean_solve"]["converged"]) and all(stats["variance_solves"]["converged"])
    np.testing.assert_allclose(mean_b, mean_e, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(var_b, var_e, rtol=1e-6, atol=1e-8)


KERNELS = [RBF(lengthscale=[0.5, 1.0, 2.0]), Matern(0.5, 0.7), Matern(1.5, [0.4, 0.8, 1.2]),
           Matern(2.5, 0.9), RationalQuadratic(0.8, alpha=1.7), Periodic(0.9, 1.3),
           Periodic(0.9, 1.3, distance="euclidean"), Linear(0.6), Polynomial(3, offset=0.5),
           Scale(RBF(), 2.0) * Matern(1.5) + Linear(),
           SpectralMixture(3, d=3, weights=[0.5, 1.0, 0.3],
                           means=[[0.2, 0.5, 1.0], [1.5, 0.1, 0.4], [0.7, 0.7, 0.7]],
                           scales=[[0.5, 1.0, 2.0], [0.3, 0.3, 0.3], [1.0, 0.2, 0.6]])]


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: type(k).__name__)
def test_formula_products_and_diagonal_match_dense(kernel):
    x, _ = _data(n=120, d=3, seed=2)
    text, aliases, theta = kernel.formula(3)
    f = _core.parse(text, aliases)
    params = [theta.detach().numpy().astype(np.float64)]
    v = np.random.default_rng(1).standard_normal((120, 2))
    kv = _core.gp_kernel_product(f, params, x.numpy(), x.numpy(), v, 2)
    dense = kernel.dense(x, x).detach().numpy()
    np.testing.assert_allclose(kv, dense @ v, rtol=1e-9, atol=1e-9 * np.abs(dense).max())
    diag = _core.gp_kernel_diag(f, params, x.numpy())
    np.testing.assert_allclose(diag, np.diag(dense), rtol=1e-12)
    np.testing.assert_allclose(kernel.diag(x).detach().numpy(), np.diag(dense), rtol=1e-12)


def test_exact_gradient_matches_finite_differences():
    x, y = _data(n=80, d=3, seed=3)
    gp = ExactGP(x, y, Scale(RationalQuadratic([0.5, 0.9, 1.3], alpha=2.0)) + Linear(0.3),
                 noise=0.1)
    grads = torch.autograd.grad(gp.log_marginal_likelihood(mode="exact"), list(gp.parameters()))
    grads = torch.cat([g.reshape(-1) for g in grads]).numpy()
    np.testing.assert_allclose(grads, exact_finite_differences(gp), rtol=1e-5, atol=1e-5)


def test_spectral_mixture_gradient_matches_finite_differences():
    x, y = _data(n=80, d=3, seed=4)
    x = x[:, :2]
    k = SpectralMixture(2, d=2, weights=[0.8, 0.4], means=[[0.3, 0.9], [1.2, 0.2]],
                        scales=[[0.6, 0.4], [1.1, 0.8]])
    gp = ExactGP(x, y, k, noise=0.1)
    grads = torch.autograd.grad(gp.log_marginal_likelihood(mode="exact"), list(gp.parameters()))
    grads = torch.cat([g.reshape(-1) for g in grads]).numpy()
    np.testing.assert_allclose(grads, exact_finite_differences(gp), rtol=1e-5, atol=1e-5)
    # BBMM differentiates the formula in every one of its 10 hyperparameters.
    fd = exact_finite_differences(gp)
    v = gp.log_marginal_likelihood(mode="bbmm", probes=200, rank=80, tol=1e-10)
    g = torch.autograd.grad(v, list(gp.parameters()))
    g = torch.cat([t.reshape(-1) for t in g]).numpy()
    np.testing.assert_allclose(g, fd, rtol=0.05, atol=0.05 * np.abs(fd).max())


@pytest.mark.parametrize("kw, match", [
    (dict(num_mixtures=0), "num_mixtures must be an integer >= 1"),
    (dict(d=1.5), "d must be an integer >= 1"),
    (dict(num_mixtures=2, weights=[1.0]), r"weights must have shape \(2,\)"),
    (dict(num_mixtures=2, d=2, means=[1.0, 2.0]), r"means must have shape \(2, 2\)"),
    (dict(num_mixtures=1, scales=[[-1.0]]), "scales must be finite and > 0"),
])
def test_bad_spectral_mixtures_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        SpectralMixture(**kw)
