"""LOVE predictive variances (ExactGP.predict(mode="love")) against the exact ones: never below
them (a Galerkin projection of (K + noise)^-1), down to them as the Lanczos rank grows, the
stated excess measured where asked, and the root and mean kept only while the hyperparameters
and points stay the same."""
import numpy as np
import pytest
import torch

from tessel.gp import ExactGP, Matern, Scale

N, D = 400, 2


def _model(dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(N, D, generator=g, dtype=torch.float64)
    y = torch.sin(5 * x[:, 0]) + x[:, 1] ** 2 + 0.1 * torch.randn(N, generator=g,
                                                                 dtype=torch.float64)
    kernel = Scale(Matern(nu=2.5, lengthscale=[0.3, 0.5]), outputscale=1.3)
    xt = torch.rand(150, D, generator=g, dtype=torch.float64) * 1.4 - 0.2
    return ExactGP(x.to(dtype), y, kernel, noise=0.02), xt.to(dtype)


def test_love_bounds_the_exact_variances_and_converges():
    gp, xt = _model()
    mean, var = gp.predict(xt, mode="exact")
    last = np.inf
    for rank in (12, 40, N):
        stats = {}
        m, v = gp.predict(xt, mode="love", love_rank=rank, seed=3, stats=stats)
        assert torch.allclose(m, mean, rtol=0, atol=1e-6)  # the mean is CG's, tol 1e-8
        excess = (v - var).numpy()
        # The Galerkin bound holds to rounding: a few ulps of the prior variance 1.3.
        assert excess.min() > -1e-9, (rank, excess.min())
        assert excess.max() <= last + 1e-9, (rank, excess.max(), last)
        last = excess.max()
        assert stats["love_rank"] <= rank
    assert last < 1e-7  # the whole Lanczos space (or an invariant one): exact
    assert stats["love_rank"] < N or last < 1e-7


def test_love_check_measures_the_excess_at_spread_test_points():
    gp, xt = _model()
    _, var = gp.predict(xt, mode="exact")
    stats = {}
    _, v = gp.predict(xt, mode="love", love_rank=12, love_check=5, stats=stats)
    chk = stats["love_check"]
    assert len(chk["points"]) == 5 and chk["points"][0] == 0 and chk["points"][-1] == 149
    np.testing.assert_allclose(chk["exact"], var.numpy()[chk["points"]], rtol=0, atol=1e-7)
    np.testing.assert_allclose(chk["excess"], (v - var).numpy()[chk["points"]], rtol=0,
                               atol=1e-7)
    assert chk["max_excess"] == pytest.approx(float(chk["excess"].max()))
    assert chk["solves"]["converged"].all() if hasattr(chk["solves"]["converged"], "all") \
        else all(chk["solves"]["converged"])


def test_the_root_is_kept_until_the_hyperparameters_or_points_change():
    gp, xt = _model()
    gp.predict(xt, mode="love", love_rank=40)
    root = gp._love_root[1]
    gp.predict(xt[:7], mode="love", love_rank=40)
    assert gp._love_root[1] is root  # test points do not matter
    with torch.no_grad():
        gp.kernel.raw_outputscale += 0.1
    _, v = gp.predict(xt, mode="love", love_rank=40)
    assert gp._love_root[1] is not root
    _, var = gp.predict(xt, mode="exact")
    assert (v - var).min() > -1e-9
    root = gp._love_root[1]
    with torch.no_grad():
        gp.x[0] += 0.05  # the caller's storage, written in place
    m, v = gp.predict(xt, mode="love", love_rank=40)
    assert gp._love_root[1] is not root
    mean, var = gp.predict(xt, mode="exact")
    assert torch.allclose(m, mean, rtol=0, atol=1e-6)
    assert (v - var).min() > -1e-9


def test_another_kernel_with_the_same_parameter_values_is_not_served_the_cache():
    gp, xt = _model()
    for mode in ("love", "bbmm"):
        gp.predict(xt, mode=mode, love_rank=N)
    gp.kernel = Scale(Matern(nu=0.5, lengthscale=[0.3, 0.5]), outputscale=1.3)
    mean, var = gp.predict(xt, mode="exact")
    for mode in ("love", "bbmm"):
        m, v = gp.predict(xt, mode=mode, love_rank=N)
        assert torch.allclose(m, mean, rtol=0, atol=1e-6), mode
        low = -1e-9 if mode == "love" else -1e-6  # LOVE's are bounds, CG's within its tol
        assert (v - var).min() > low and (v - var).max() < 1e-6, mode


def test_love_with_the_noise_added():
    gp, xt = _model()
    _, var = gp.predict(xt, mode="exact", include_noise=True)
    _, v = gp.predict(xt, mode="love", love_rank=N, include_noise=True)
    np.testing.assert_allclose(v.numpy(), var.numpy(), rtol=0, atol=1e-7)


def test_bad_love_options_get_clear_errors():
    gp, xt = _model()
    with pytest.raises(ValueError, match=r"ExactGP.predict: love_rank must be an integer >= 1"):
        gp.predict(xt, mode="love", love_rank=0)
    with pytest.raises(ValueError, match=r"ExactGP.predict: love_check must be an integer >= 0"):
        gp.predict(xt, mode="love", love_check=-1)
    with pytest.raises(ValueError, match=r"mode must be one of .*'love'"):
        gp.predict(xt, mode="lanczos")
