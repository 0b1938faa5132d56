"""tessel.gp.SparseGP: Titsias's bound and its gradient in every hyperparameter and inducing point
against the dense float64 formula, against the exact log p(y) (never above it, equal where Z = X),
against GPyTorch's SGPR (InducingPointKernel) with the same points and hyperparameters, and its
errors."""
import math

import pytest
import torch

from tessel.gp import RBF, ExactGP, Matern, Periodic, Scale, SparseGP

F64 = torch.float64


def _data(n=120, d=2, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.rand(n, d, dtype=F64, generator=gen)
    y = torch.sin(5 * x[:, 0]) + x[:, 1] ** 2 + 0.1 * torch.randn(n, dtype=F64, generator=gen)
    return x, y


def _dense_bound(gp):
    """log N(y | mean, Q + noise) - tr(W (K - Q)) / 2, Q = K_XZ (K_ZZ + jitter)^-1 K_ZX, built
    as n x n matrices."""
    x, z, k = gp.x, gp.inducing, gp.kernel
    kzz = k.dense(z, z)
    kzz = kzz + gp.jitter * kzz.diagonal().mean().detach() * torch.eye(z.shape[0], dtype=F64)
    kxz = k.dense(x, z)
    q = kxz @ torch.linalg.solve(kzz, kxz.T)
    noise = gp.noise.expand(x.shape[0])
    cov = q + torch.diag(noise)
    r = gp.y - (gp.mean_constant if gp.mean_constant is not None else 0.0)
    chol = torch.linalg.cholesky(cov)
    alpha = torch.cholesky_solve(r[:, None], chol)[:, 0]
    log_p = -0.5 * (r @ alpha) - torch.log(chol.diagonal()).sum() - \
        0.5 * x.shape[0] * math.log(2 * math.pi)
    return log_p - 0.5 * ((k.diag(x) - q.diagonal()) / noise).sum()


def _grads(gp, value):
    for p in gp.parameters():
        p.grad = None
    value.backward()
    return {name: p.grad.clone() for name, p in gp.named_parameters()}


@pytest.mark.parametrize("case", ["learned", "per_point", "zero_mean_product"])
def test_bound_and_gradient_equal_the_dense_formula(case):
    x, y = _data()
    kernel = Scale(Matern(nu=2.5, lengthscale=[0.3, 0.5]), outputscale=1.3)
    opts = dict(inducing=17, jitter=1e-8, chunk=37)  # chunks of 37 rows: 4 blocks, one partial
    if case == "per_point":
        opts["noise"] = 0.02 + 0.05 * torch.rand(x.shape[0], dtype=F64)
    if case == "zero_mean_product":
        kernel = Scale(RBF(lengthscale=0.4)) * Periodic(period=0.7)
        opts.update(mean="zero", noise=0.03)
    gp = SparseGP(x, y, kernel, **opts)
    if gp.mean_constant is not None:
        with torch.no_grad():
            gp.mean_constant.fill_(0.3)
    ours = gp.log_marginal_likelihood()
    got = _grads(gp, ours)
    ref = _dense_bound(gp)
    want = _grads(gp, ref)
    assert float(ours) == pytest.approx(float(ref), rel=1e-9, abs=1e-9)
    assert set(got) == set(want) and "inducing" in got
    for name in want:
        scale = float(want[name].abs().max()) + 1e-12
        assert float((got[name] - want[name]).abs().max()) <= 1e-7 * scale, name


def test_the_bound_is_below_the_exact_likelihood_and_equals_it_at_the_training_points():
    x, y = _data(n=150)
    kernel = Scale(Matern(nu=1.5, lengthscale=[0.4, 0.6]))
    exact = ExactGP(x, y, kernel, noise=0.05)
    want = float(exact.log_marginal_likelihood(mode="exact"))
    bounds = []
    for m in (5, 20, 60):
        gp = SparseGP(x, y, kernel, inducing=m, noise=0.05, learn_inducing=False)
        bounds.append(float(gp.log_marginal_likelihood()))
    assert all(b <= want + 1e-9 for b in bounds)
    assert bounds[0] < bounds[1] < bounds[2]
    full = SparseGP(x, y, kernel, inducing=x, noise=0.05, jitter=1e-12)
    assert float(full.log_marginal_likelihood()) == pytest.approx(want, rel=1e-8)
    mean, var = full.predict(x[:20])
    want_mean, want_var = exact.predict(x[:20], mode="exact")
    torch.testing.assert_close(mean, want_mean, rtol=0, atol=1e-7)
    torch.testing.assert_close(var, want_var, rtol=0, atol=1e-7)


def test_fit_raises_the_bound_and_predictions_follow_the_data():
    x, y = _data(n=400)
    gp = SparseGP(x, y, Scale(Matern(nu=2.5)), inducing=25, noise=0.1)
    z0 = gp.inducing.detach().clone()
    history = gp.fit(max_iter=30)
    assert history[-1]["loss"] < history[0]["loss"] - 0.3
    assert {"iteration", "loss", "grad_norm", "seconds"} <= set(history[-1])
    assert not torch.equal(gp.inducing.detach(), z0)  # the inducing points moved
    xt, yt = _data(n=200, seed=1)
    mean, var = gp.predict(xt)
    rmse = float(((mean - yt) ** 2).mean().sqrt())
    assert rmse < 0.2, rmse
    _, var_y = gp.predict(xt, include_noise=True)
    torch.testing.assert_close(var_y - var, gp.noise.detach().expand(200))
    assert bool((var >= 0).all())
    fixed = SparseGP(x, y, RBF(), inducing=10, learn_inducing=False)
    assert "inducing" not in dict(fixed.named_parameters())
    with torch.no_grad():  # the bound without a graph
        assert math.isfinite(float(fixed.log_marginal_likelihood()))


def test_predictions_follow_an_edit_of_the_hyperparameters():
    x, y = _data()
    gp = SparseGP(x, y, Scale(RBF(lengthscale=0.3)), inducing=15)
    before = gp.predict(x[:5], return_var=False)
    with torch.no_grad():
        gp.kernel.base.raw_lengthscale.add_(1.0)
    assert not torch.allclose(before, gp.predict(x[:5], return_var=False))


def test_a_second_backward_of_the_same_graph_adds_the_same_gradient():
    x, y = _data()
    gp = SparseGP(x, y, Scale(RBF(lengthscale=0.3)), inducing=10, chunk=50)
    bound = gp.log_marginal_likelihood()
    bound.backward(retain_graph=True)
    first = gp.inducing.grad.clone()
    bound.backward()
    torch.testing.assert_close(gp.inducing.grad, 2 * first)


def test_against_gpytorch_sgpr():
    gpytorch = pytest.importorskip("gpytorch", reason="scripts/python_env.sh installs GPyTorch")
    x, y = _data(n=300)
    xt, _ = _data(n=40, seed=2)
    ours = SparseGP(x, y, Scale(Matern(nu=2.5, lengthscale=[0.3, 0.5]), outputscale=1.2),
                    inducing=25, noise=0.04, jitter=0.0)
    with torch.no_grad():
        ours.mean_constant.fill_(0.2)

    class Model(gpytorch.models.ExactGP):
        def __init__(self):
            likelihood = gpytorch.likelihoods.GaussianLikelihood()
            super().__init__(x, y, likelihood)
            self.mean = gpytorch.means.ConstantMean()
            base = gpytorch.kernels.ScaleKernel(gpytorch.kernels.MaternKernel(
                nu=2.5, ard_num_dims=2))
            self.covar = gpytorch.kernels.InducingPointKernel(
                base, ours.inducing.detach().clone(), likelihood)

        def forward(self, z):
            return gpytorch.distributions.MultivariateNormal(self.mean(z), self.covar(z))

    theirs = Model().double()
    with torch.no_grad():  # float64 values: GPyTorch's setters round a float through float32
        theirs.likelihood.noise = torch.tensor(0.04, dtype=F64)
        theirs.mean.constant.fill_(0.2)
        theirs.covar.base_kernel.outputscale = torch.tensor(1.2, dtype=F64)
        theirs.covar.base_kernel.base_kernel.lengthscale = torch.tensor([[0.3, 0.5]], dtype=F64)
    theirs.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(theirs.likelihood, theirs)
    value = mll(theirs(x), y) * x.shape[0]
    value.backward()
    bound = ours.log_marginal_likelihood()
    got = _grads(ours, bound)
    assert float(bound) == pytest.approx(float(value), rel=1e-8)
    pairs = {"inducing": theirs.covar.inducing_points,
             "raw_noise": theirs.likelihood.noise_covar.raw_noise,
             "kernel.raw_outputscale": theirs.covar.base_kernel.raw_outputscale,
             "kernel.base.raw_lengthscale": theirs.covar.base_kernel.base_kernel.raw_lengthscale,
             "mean_constant": theirs.mean.constant}
    for name, p in pairs.items():
        # Without jitter K_ZZ's conditioning (about 1e6 here) scales the two implementations'
        # rounding: within 1e-7 of the largest component.
        torch.testing.assert_close(got[name].reshape(-1), p.grad.reshape(-1), rtol=1e-6,
                                   atol=1e-7 * float(p.grad.abs().max()), msg=name)
    theirs.eval()
    # GPyTorch's diagonal correction also changes the training points' covariance (to FITC's);
    # without it its SGPR predicts Titsias's q(f), the variance k(x, x) - Q(x, x) included.
    with torch.no_grad(), gpytorch.settings.sgpr_diagonal_correction(False):
        pred = theirs(xt)
        mean, var = ours.predict(xt)
    torch.testing.assert_close(mean, pred.mean, rtol=0, atol=1e-7)
    torch.testing.assert_close(var, pred.variance, rtol=0, atol=1e-7)


@pytest.mark.parametrize("kwargs, match", [
    (dict(inducing=0), "inducing must be between 1 and n"),
    (dict(inducing=500), "inducing must be between 1 and n"),
    (dict(inducing=torch.zeros(4, 3)), r"inducing must be \(M, 2\)"),
    (dict(inducing=torch.full((4, 2), float("nan"))), "inducing holds a NaN"),
    (dict(inducing=2.5), "inducing must be an int or an"),
    (dict(noise=0.0, fixed_noise=True), "noise must be > 0"),
    (dict(jitter=-1.0), "jitter must be"),
    (dict(chunk=0), "chunk must be"),
])
def test_bad_input_is_named(kwargs, match):
    x, y = _data()
    with pytest.raises(ValueError, match=match):
        SparseGP(x, y, RBF(), **kwargs)


def test_bad_calls_are_named():
    x, y = _data()
    gp = SparseGP(x, y, RBF(), inducing=10, noise=torch.full((120,), 0.1))
    with pytest.raises(ValueError, match="SparseGP.log_marginal_likelihood: mode"):
        gp.log_marginal_likelihood(mode="exact")
    with pytest.raises(ValueError, match="include_noise=True needs one noise level"):
        gp.predict(x[:2], include_noise=True)
    with pytest.raises(ValueError, match=r"SparseGP.predict: x_test must be \(m, 2\)"):
        gp.predict(x[:2, :1])
    with pytest.raises(ValueError, match="SparseGP: y holds a NaN"):
        SparseGP(x, y * float("nan"), RBF())
    with pytest.raises(TypeError, match="SparseGP: x has dtype torch.float16"):
        SparseGP(x.half(), y, RBF())
    twin = torch.cat([x[:1], x[:1]])  # equal inducing points: K_ZZ singular without jitter
    gp = SparseGP(x, y, RBF(), inducing=twin, jitter=0.0)
    with pytest.raises(ValueError, match="not positive definite .* raise jitter"):
        gp.log_marginal_likelihood()
    gp.jitter = 1e-6
    assert math.isfinite(float(gp.log_marginal_likelihood()))
    with pytest.raises(RuntimeError, match="second derivatives"):  # not a Hessian missing terms
        torch.autograd.grad(gp.log_marginal_likelihood(), gp.kernel.raw_lengthscale,
                            create_graph=True)
