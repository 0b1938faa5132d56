"""tessel.shapes.GaussianMixture: EM on tessel reductions against a dense float64 EM written
here, recovery of a known mixture, weights, the differentiable log-likelihood, bad input."""
import math

import pytest
import torch

from tessel.shapes.mixture import GaussianMixture

F64 = torch.float64


def dense_em(x, w, m, cov, wk, n_iter, jitter):
    """The same EM, with the (N, K) responsibilities stored."""
    d = x.shape[1]
    for _ in range(n_iter):
        dist = torch.distributions.MultivariateNormal(m, covariance_matrix=cov)
        logp = dist.log_prob(x[:, None, :]) + torch.log(wk)
        r = torch.softmax(logp, 1) * w[:, None]
        mass = r.sum(0)
        m = (r.T @ x) / mass[:, None]
        diff = x[:, None, :] - m[None]
        cov = torch.einsum("ik,ikd,ike->kde", r, diff, diff) / mass[:, None, None] + \
            jitter * torch.eye(d, dtype=x.dtype)
        wk = mass / w.sum()
    return m, cov, wk


def mixture_sample(n, seed):
    g = torch.Generator().manual_seed(seed)
    means = torch.tensor([[0.0, 0.0], [4.0, 1.0], [1.0, 5.0]], dtype=F64)
    covs = torch.tensor([[[1.0, 0.3], [0.3, 0.5]], [[0.4, 0.0], [0.0, 1.5]],
                         [[0.8, -0.4], [-0.4, 0.6]]], dtype=F64)
    weights = torch.tensor([0.5, 0.3, 0.2], dtype=F64)
    comp = torch.multinomial(weights, n, replacement=True, generator=g)
    z = torch.randn(n, 2, dtype=F64, generator=g)
    x = means[comp] + (torch.linalg.cholesky(covs)[comp] @ z[:, :, None])[:, :, 0]
    return x, means, covs, weights


def test_em_iterations_equal_a_dense_em():
    x, *_ = mixture_sample(300, 1)
    w = torch.rand(300, dtype=F64, generator=torch.Generator().manual_seed(2)) + 0.5
    init = x[[0, 100, 200]].clone()
    gm = GaussianMixture(3, max_iter=5, tol=0, backend="interpreter").fit(x, w, means=init)
    assert gm.n_iter_ == 5 and len(gm.history_) == 6
    # The same start: global diagonal covariance plus jitter, equal weights; 5 EM steps.
    total = w.sum()
    mean = (w[:, None] * x).sum(0) / total
    var = (w[:, None] * (x - mean) ** 2).sum(0) / total
    jitter = 1e-6 * float(var.mean())
    cov0 = (torch.diag(var) + jitter * torch.eye(2, dtype=F64)).expand(3, 2, 2)
    m, cov, wk = dense_em(x, w, init, cov0, torch.full((3,), 1 / 3, dtype=F64), 5, jitter)
    for got, want in ((gm.means_, m), (gm.covariances_, cov), (gm.weights_, wk)):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)
    dist = torch.distributions.MultivariateNormal(m, covariance_matrix=cov)
    dense_score = torch.logsumexp(dist.log_prob(x[:, None, :]) + torch.log(wk), 1)
    torch.testing.assert_close(gm.score_samples(x), dense_score, rtol=1e-11, atol=1e-11)


def test_a_known_mixture_is_recovered():
    n = 4000
    x, means, covs, weights = mixture_sample(n, 3)
    gm = GaussianMixture(3).fit(x)
    assert gm.converged_ and gm.n_iter_ < 200 and len(gm.history_) == gm.n_iter_ + 1
    # EM never lowers the likelihood (up to rounding of the mean over n points).
    h = torch.tensor(gm.history_)
    assert bool((h[1:] - h[:-1] >= -1e-12 * h.abs()[1:]).all())
    order = torch.cdist(means, gm.means_).argmin(1)
    # Sampling error of the estimates: about sd / sqrt(n_k) with n_k >= 0.2 n = 800; 5 sd.
    tol = 5 * math.sqrt(1.5 / 800)
    torch.testing.assert_close(gm.means_[order], means, rtol=0, atol=tol)
    torch.testing.assert_close(gm.covariances_[order], covs, rtol=0, atol=2 * tol)
    torch.testing.assert_close(gm.weights_[order], weights, rtol=0, atol=5 * math.sqrt(0.25 / n))


def test_weights_count_like_repeated_points():
    x, *_ = mixture_sample(200, 4)
    twice = torch.cat((x, x[:50]))
    w = torch.ones(200, dtype=F64)
    w[:50] = 2
    init = x[[0, 1, 2]].clone()
    a = GaussianMixture(3, max_iter=5, tol=0).fit(twice, means=init)
    b = GaussianMixture(3, max_iter=5, tol=0).fit(x, w, means=init)
    torch.testing.assert_close(a.means_, b.means_, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(a.covariances_, b.covariances_, rtol=1e-10, atol=1e-12)


def test_log_likelihood_is_differentiable():
    x, *_ = mixture_sample(100, 5)
    gm = GaussianMixture(2, max_iter=20).fit(x)
    xs = x.clone().requires_grad_()
    gx, = torch.autograd.grad(gm.log_likelihood(xs), xs)
    dist = torch.distributions.MultivariateNormal(gm.means_, covariance_matrix=gm.covariances_)
    xd = x.clone().requires_grad_()
    dense = torch.logsumexp(dist.log_prob(xd[:, None, :]) + torch.log(gm.weights_), 1).mean()
    want, = torch.autograd.grad(dense, xd)
    torch.testing.assert_close(gx, want, rtol=1e-10, atol=1e-12)
    assert gm.sample(10, generator=torch.Generator().manual_seed(0)).shape == (10, 2)


def test_degenerate_and_bad_input():
    # Coincident points: the jitter keeps every covariance invertible.
    x = torch.zeros(10, 2, dtype=F64)
    x[5:] = 1.0
    gm = GaussianMixture(2, reg=1e-3).fit(x)
    assert torch.isfinite(gm.score_samples(x)).all()
    with pytest.raises(ValueError, match="n_components must be an integer >= 1"):
        GaussianMixture(0)
    with pytest.raises(ValueError, match="3 components for 2 points of positive weight"):
        GaussianMixture(3).fit(torch.rand(2, 2, dtype=F64))
    with pytest.raises(ValueError, match="points must be finite"):
        GaussianMixture(1).fit(torch.tensor([[0.0, math.nan]], dtype=F64))
    with pytest.raises(ValueError, match="weights must be finite, >= 0"):
        GaussianMixture(1).fit(torch.rand(3, 2, dtype=F64), torch.tensor([1.0, -1, 1], dtype=F64))
    with pytest.raises(RuntimeError, match="call fit"):
        GaussianMixture(1).score_samples(x)
    with pytest.raises(ValueError, match="points have dimension 3 but the mixture 2"):
        gm.score_samples(torch.rand(4, 3, dtype=F64))
