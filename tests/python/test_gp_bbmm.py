"""tessel.gp's BBMM mode: unbiased within 3 standard errors over 20 probe seeds (the likelihood
and its gradient against the exact mode), converging as probes and rank grow, gradients against
finite differences; and bad input (NaN targets, duplicates with zero noise, a zero lengthscale,
mismatched dims, float16) getting clear errors."""
import math

import numpy as np
import pytest
import torch

from gp_cases import exact_finite_differences
from tessel.gp import RBF, ExactGP, Matern, Periodic, Scale


def _gp(n=400, d=8, seed=0, noise=0.1):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, d, generator=g, dtype=torch.float64)
    y = torch.sin(4 * x[:, 0]) + x[:, 1] - 0.1 * torch.randn(n, generator=g, dtype=torch.float64)
    k = Scale(Matern(2.5, lengthscale=torch.linspace(0.5, 1.5, d).tolist())) + \
        Scale(RBF(0.8), 0.3) * Periodic(1.2, 2.0)
    return ExactGP(x, y, k, noise=noise)


def _value_and_grad(gp, **kw):
    params = list(gp.parameters())
    v = gp.log_marginal_likelihood(**kw)
    g = torch.autograd.grad(v, params)
    return float(v), torch.cat([t.reshape(-1) for t in g]).numpy()


@pytest.fixture(scope="module")
def runs():
    gp = _gp()
    exact = _value_and_grad(gp, mode="exact")
    samples = [_value_and_grad(gp, mode="bbmm", probes=10, rank=20, seed=s, tol=1e-6)
               for s in range(20)]
    return gp, exact, samples


def test_bbmm_unbiased_within_three_standard_errors(runs):
    _, (v_exact, g_exact), samples = runs
    values = np.array([v for v, _ in samples])
    grads = np.stack([g for _, g in samples])
    se = values.std(ddof=1) / math.sqrt(len(values))
    assert abs(values.mean() - v_exact) < 3 * se + 1e-8 * abs(v_exact), (values.mean(), v_exact,
                                                                          se)
    g_se = grads.std(0, ddof=1) / math.sqrt(len(grads))
    outside = np.abs(grads.mean(0) - g_exact) > 3 * g_se + 1e-8 * np.abs(g_exact)
    # 3 standard errors: each component fails by chance with probability ~0.3 %; the seeds are
    # fixed, so this is deterministic, and more than one outlier means a bias.
    assert outside.sum() <= 1, (grads.mean(0), g_exact, g_se)


def test_bbmm_converges_as_probes_and_rank_grow():
    gp = _gp(n=300)
    v_exact, g_exact = _value_and_grad(gp, mode="exact")

    def spread(probes, rank):
        vals = [_value_and_grad(gp, mode="bbmm", probes=probes, rank=rank, seed=s, tol=1e-8)
                for s in range(6)]
        v = np.array([a for a, _ in vals])
        g = np.stack([b for _, b in vals])
        return np.abs(v - v_exact).max(), np.abs(g - g_exact).max()

    v_small, g_small = spread(4, 5)
    v_big, g_big = spread(64, 150)
    assert v_big < 0.5 * v_small and g_big < 0.5 * g_small, (v_small, v_big, g_small, g_big)
    # Full rank: P = K + noise exactly, so log det P is exact and the probes only touch the trace.
    stats = {}
    v_full, _ = _value_and_grad(gp, mode="bbmm", probes=2, rank=300, tol=1e-10, stats=stats)
    assert stats["rank"] == 300
    assert abs(v_full - v_exact) < 1e-6 * abs(v_exact)


def test_bbmm_gradient_matches_finite_differences(runs):
    gp, _, samples = runs
    grads = np.stack([g for _, g in samples])
    mean, se = grads.mean(0), grads.std(0, ddof=1) / math.sqrt(len(grads))
    fd = exact_finite_differences(gp, h=1e-5)
    assert (np.abs(mean - fd) > 3 * se + 1e-5 * (1 + np.abs(fd))).sum() <= 1, (mean, fd, se)


def test_bbmm_reports_cg_and_float32_points_work():
    gp = _gp(n=200)
    stats = {}
    gp.log_marginal_likelihood(mode="bbmm", stats=stats)
    cg = stats["cg"]
    assert len(cg["residuals"]) == 11 and all(cg["converged"]) and cg["iterations"] > 0
    assert "columns" in cg["summary"]
    gp32 = ExactGP(gp.x.float(), gp.y, gp.kernel, noise=0.1)
    v32 = float(gp32.log_marginal_likelihood(mode="bbmm", probes=10, rank=200, tol=1e-5))
    assert abs(v32 - float(gp.log_marginal_likelihood(mode="exact"))) < 1e-3 * abs(v32)


def test_bad_input_gets_clear_errors():
    x = torch.rand(30, 3, dtype=torch.float64)
    y = x[:, 0].clone()
    y[4] = float("nan")
    with pytest.raises(ValueError, match="y holds a NaN"):
        ExactGP(x, y, RBF())
    y = x[:, 0].clone()
    dup = x.clone()
    dup[7] = dup[2]
    gp = ExactGP(dup, y, RBF(), noise=0.0, fixed_noise=True)
    with pytest.raises(ValueError, match="points 2 and 7 are equal"):
        gp.log_marginal_likelihood(mode="bbmm")
    with pytest.raises(ValueError, match="points 2 and 7 are equal"):
        gp.log_marginal_likelihood(mode="exact")
    with pytest.raises(ValueError, match="lengthscale must be finite and > 0"):
        RBF(lengthscale=0.0)
    with pytest.raises(ValueError, match="lengthscale must be finite and > 0"):
        Matern(lengthscale=[1.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="y must be"):
        ExactGP(x, y[:20], RBF())
    with pytest.raises(ValueError, match="2 lengthscales for points of dimension 3"):
        ExactGP(x, y, RBF([1.0, 2.0])).log_marginal_likelihood(mode="bbmm")
    with pytest.raises(ValueError, match="x_test must be"):
        ExactGP(x, y, RBF()).predict(torch.rand(4, 2, dtype=torch.float64))
    with pytest.raises(TypeError, match="float16"):
        ExactGP(x.half(), y, RBF())
    # Points and targets on two devices (meta stands for CUDA here): named, not a mismatch deep
    # down.
    with pytest.raises(ValueError, match="x is on cpu and y on meta; expected one device"):
        ExactGP(x, y.to("meta"), RBF())
    with pytest.raises(ValueError, match="mode must be one of"):
        ExactGP(x, y, RBF()).log_marginal_likelihood(mode="dense")
    with pytest.raises(ValueError, match="rank must be >= 0"):
        ExactGP(x, y, RBF()).log_marginal_likelihood(mode="bbmm", rank=-1)


def test_fewer_points_than_the_rank_and_empty_test_sets():
    # GPyTorch's min(rank, n): the default rank 15 on 10 points is a full-rank preconditioner.
    g = torch.Generator().manual_seed(3)
    x = torch.rand(10, 1, generator=g, dtype=torch.float64)
    gp = ExactGP(x, torch.sin(3 * x[:, 0]), Scale(RBF(0.5)), noise=0.01)
    exact = float(gp.log_marginal_likelihood(mode="exact"))
    assert float(gp.log_marginal_likelihood(mode="bbmm", tol=1e-10)) == pytest.approx(exact,
                                                                                      rel=1e-6)
    mean, var = gp.predict(x[:3], mode="exact")
    for mode in ("bbmm", "love"):
        m, v = gp.predict(x[:3], mode=mode)
        assert torch.allclose(m, mean, atol=1e-6) and torch.allclose(v, var, atol=1e-6), mode
        m, v = gp.predict(x[:0], mode=mode)
        assert m.shape == v.shape == (0,)
    with pytest.raises(ValueError, match=r"ExactGP: x must be \(n, d\) with n >= 1"):
        ExactGP(x[:0], x[:0, 0], RBF())
    with pytest.raises(TypeError, match="ExactGP.predict: x_test has dtype torch.float16"):
        gp.predict(x[:2].half())


def test_equal_points_without_noise_are_refused_by_every_solve():
    g = torch.Generator().manual_seed(4)
    x = torch.rand(30, 2, generator=g, dtype=torch.float64)
    x = torch.cat([x, x[:2]])
    gp = ExactGP(x, torch.sin(4 * x[:, 0]), RBF(0.5), noise=0.0, fixed_noise=True)
    xt = torch.rand(4, 2, generator=g, dtype=torch.float64)
    for call in (lambda: gp.sample(xt, mode="bbmm"),
                 lambda: gp.predict_covariance(xt, mode="bbmm"),
                 lambda: gp.predict(xt, mode="bbmm")):
        with pytest.raises(ValueError, match=r"points [01] and 3[01] are equal and the noise is 0"):
            call()


def test_second_derivatives_are_refused_not_missing_terms():
    # The gradient is the estimator's numbers: create_graph=True would give a Hessian without
    # their derivatives. The exact mode is a dense graph and has them.
    x = torch.linspace(0, 1, 30, dtype=torch.float64)[:, None]
    gp = ExactGP(x, torch.sin(5 * x[:, 0]), RBF(lengthscale=0.3), noise=0.05)
    with pytest.raises(RuntimeError, match="ExactGP.log_marginal_likelihood: second derivatives"):
        torch.autograd.grad(gp.log_marginal_likelihood(mode="bbmm"), gp.raw_noise,
                            create_graph=True)
    g, = torch.autograd.grad(gp.log_marginal_likelihood(mode="exact"), gp.raw_noise,
                             create_graph=True)
    assert g.requires_grad
