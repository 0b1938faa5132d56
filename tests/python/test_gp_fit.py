"""tessel.gp's fit() and per-point noise: L-BFGS reaches scikit-learn's optimum (exact mode) and,
in BBMM mode, the exact mode's; Adam descends; the history, progress lines, callback, CG and
non-finite warnings and errors; known per-point variances against scikit-learn's array alpha."""
import math

import numpy as np
import pytest
import torch

import sklearn.gaussian_process as sklearn_gp
from sklearn.gaussian_process import kernels as sk

from tessel.gp import RBF, ExactGP, Matern, Scale


def _data(n=150, d=2, seed=0):
    g = np.random.default_rng(seed)
    x = g.uniform(0, 1, (n, d))
    y = np.sin(5 * x[:, 0]) + 0.5 * x[:, 1] + 0.1 * g.standard_normal(n)
    return torch.tensor(x), torch.tensor(y)


def _gp(x, y, **kw):
    return ExactGP(x, y, Scale(RBF(lengthscale=[0.5] * x.shape[1])), noise=0.2, mean="zero",
                   **kw)


def test_lbfgs_reaches_the_optimum_scikit_learn_finds():
    x, y = _data()
    gp = _gp(x, y)
    history = gp.fit(max_iter=100, mode="exact", gtol=1e-7)
    ours = float(gp.log_marginal_likelihood(mode="exact"))
    kernel = sk.ConstantKernel(1.0, (1e-5, 1e5)) * sk.RBF([0.5, 0.5], (1e-5, 1e5)) + \
        sk.WhiteKernel(0.2, (1e-8, 1e5))
    reg = sklearn_gp.GaussianProcessRegressor(kernel, n_restarts_optimizer=0).fit(x.numpy(),
                                                                                  y.numpy())
    theirs = reg.log_marginal_likelihood_value_
    # Both are local optimisers from the same start: at least as good, to the optimiser's noise.
    assert ours >= theirs - 1e-6 * abs(theirs), (ours, theirs)
    assert history[-1]["loss"] == pytest.approx(-ours / x.shape[0], rel=1e-12)
    assert history[-1]["loss"] < history[0]["loss"]
    assert history[-1]["grad_norm"] < 1e-3
    assert set(history[0]) == {"iteration", "loss", "grad_norm", "cg_iterations", "seconds"}
    assert [r["iteration"] for r in history] == list(range(len(history)))
    assert all(b["seconds"] >= a["seconds"] for a, b in zip(history, history[1:]))
    assert gp.history_ is history


def test_adam_descends():
    x, y = _data()
    gp = _gp(x, y)
    history = gp.fit(optimizer="adam", max_iter=40, mode="exact")
    assert len(history) == 41
    assert history[-1]["loss"] < history[0]["loss"] - 0.1


def test_bbmm_fit_reaches_the_exact_optimum():
    x, y = _data(n=400, d=3, seed=1)
    exact = _gp(x, y)
    start = float(exact.log_marginal_likelihood(mode="exact"))
    exact.fit(max_iter=40, mode="exact")
    bbmm = _gp(x, y)
    history = bbmm.fit(max_iter=40, mode="bbmm", probes=20, rank=30, tol=1e-6)
    assert all(r["cg_iterations"] > 0 for r in history)
    best = float(exact.log_marginal_likelihood(mode="exact"))
    reached = float(bbmm.log_marginal_likelihood(mode="exact"))
    # The BBMM objective is a fixed-probe estimate of log p(y): its optimiser closes the gap
    # from the start to the exact optimum but for the estimate's error.
    print(f"start {start:.4f}, exact optimum {best:.4f}, BBMM fit's exact value {reached:.4f}")
    assert reached >= best - 0.01 * (best - start), (start, reached, best)


def test_progress_lines_on_request_and_quiet_by_default(capsys):
    x, y = _data(n=60)
    _gp(x, y).fit(max_iter=3, mode="exact", progress=True)
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) >= 3 and lines[0].startswith("ExactGP.fit: iteration 0/3, loss ")
    _gp(x, y).fit(max_iter=3, mode="exact")  # None: quiet for a fit shorter than 3 s
    _gp(x, y).fit(max_iter=3, mode="exact", progress=False)
    assert capsys.readouterr().err == ""


def test_callback_stops_the_fit():
    x, y = _data(n=60)
    seen = []
    history = _gp(x, y).fit(max_iter=50, mode="exact",
                            callback=lambda row: seen.append(row) or row["iteration"] == 2)
    assert [r["iteration"] for r in seen] == [0, 1, 2]
    assert len(history) == 4  # three iterations and where the fit ended


def test_cg_that_does_not_converge_warns():
    x, y = _data(n=300, d=3)
    gp = _gp(x, y)
    with pytest.warns(RuntimeWarning, match=r"ExactGP.fit: CG did not converge at iteration 0"):
        gp.fit(max_iter=2, mode="bbmm", cg_maxiter=2, tol=1e-10)


def test_a_non_finite_loss_is_an_error_naming_the_iteration():
    x, y = _data(n=60)
    gp = _gp(x, y * 1e200)  # finite targets whose squared norm overflows
    with pytest.raises(FloatingPointError,
                       match=r"ExactGP.fit: the loss is (inf|nan) at iteration 0"):
        gp.fit(max_iter=5, mode="exact")
    gp = _gp(x, y)
    with torch.no_grad():
        gp.raw_noise.fill_(float("nan"))
    with pytest.raises(ValueError, match=r"ExactGP.fit: at iteration 0 with hyperparameters"):
        gp.fit(max_iter=5, mode="exact")


@pytest.mark.parametrize("kw, match", [
    (dict(optimizer="sgd"), "optimizer must be one of"),
    (dict(max_iter=-1), "max_iter must be an int >= 0"),
    (dict(lr=0.0), "lr must be a finite number > 0"),
    (dict(progress="yes"), "progress must be None, True or False"),
    (dict(mode="dense"), "mode must be one of"),
])
def test_bad_options_are_named(kw, match):
    x, y = _data(n=30)
    with pytest.raises(ValueError, match=match):
        _gp(x, y).fit(**kw)


def test_nothing_to_fit_is_an_error():
    x, y = _data(n=30)
    gp = _gp(x, y, fixed_noise=True)
    for p in gp.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="no parameter to fit"):
        gp.fit()


def _per_point(n=300, d=3, seed=2):
    x, y = _data(n=n, d=d, seed=seed)
    alpha = torch.tensor(np.random.default_rng(seed).uniform(0.01, 0.3, n))
    ell = [0.4, 0.7, 1.0][:d]
    ours = ExactGP(x, y, Scale(Matern(nu=2.5, lengthscale=ell), outputscale=1.3), noise=alpha,
                   mean="zero")
    theirs = sklearn_gp.GaussianProcessRegressor(
        sk.ConstantKernel(1.3) * sk.Matern(length_scale=ell, nu=2.5), alpha=alpha.numpy(),
        optimizer=None).fit(x.numpy(), y.numpy())
    return x, ours, theirs


def test_per_point_noise_equals_scikit_learns_alpha():
    x, ours, theirs = _per_point()
    assert ours.raw_noise is None and ours.noise.shape == (x.shape[0],)
    lml = float(ours.log_marginal_likelihood(mode="exact"))
    assert lml == pytest.approx(theirs.log_marginal_likelihood_value_, rel=1e-9)
    xt = torch.rand(50, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    mean, var = ours.predict(xt, mode="exact")
    m_ref, s_ref = theirs.predict(xt.numpy(), return_std=True)
    np.testing.assert_allclose(mean.numpy(), m_ref, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(var.sqrt().numpy(), s_ref, rtol=1e-6, atol=1e-8)
    # BBMM and the CG-based predictions read the same per-point noise.
    stats = {}
    bbmm = float(ours.log_marginal_likelihood(mode="bbmm", probes=40, rank=60, tol=1e-8,
                                              stats=stats))
    samples = np.array(stats["logdet_samples"])
    se = samples.std(ddof=1) / math.sqrt(len(samples))  # of the log-determinant's estimate
    assert abs(bbmm - lml) <= 4 * 0.5 * se + 1e-9 * abs(lml), (bbmm, lml, se)
    m2, v2 = ours.predict(xt, mode="bbmm", rank=60, tol=1e-10)
    np.testing.assert_allclose(m2.numpy(), m_ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(v2.numpy(), s_ref ** 2, rtol=1e-5, atol=1e-7)
    # The kernel's hyperparameters still fit with the noise held.
    history = ours.fit(max_iter=20, mode="exact")
    assert history[-1]["loss"] <= history[0]["loss"]
    assert ours.raw_noise is None


def test_per_point_noise_zero_only_at_distinct_points_is_fine():
    x, y = _data(n=40)
    noise = torch.full((40,), 0.1, dtype=torch.float64)
    x = torch.cat([x, x[:1]])
    y = torch.cat([y, y[:1]])
    noise = torch.cat([noise, torch.zeros(1, dtype=torch.float64)])
    gp = ExactGP(x, y, Scale(RBF(0.5)), noise=noise)  # the copy of point 0 has noise, it not
    assert math.isfinite(float(gp.log_marginal_likelihood(mode="exact")))
    noise[0] = 0.0
    bad = ExactGP(x, y, Scale(RBF(0.5)), noise=noise)
    with pytest.raises(ValueError, match=r"points 0 and 40 are equal and the noise is 0 there"):
        bad.log_marginal_likelihood(mode="exact")


@pytest.mark.parametrize("noise, kw, match", [
    (torch.ones(7), {}, r"noise must be a number or \(30,\) per-point variances"),
    (torch.ones(30) * -1, {}, "noise must be finite and >= 0"),
    (torch.full((30,), float("nan")), {}, "noise must be finite and >= 0"),
    (torch.ones(30), dict(fixed_noise=False), "per-point noise is known, not learned"),
])
def test_bad_per_point_noise_is_named(noise, kw, match):
    x, y = _data(n=30)
    with pytest.raises(ValueError, match=match):
        ExactGP(x, y, RBF(), noise=noise, **kw)


def test_include_noise_with_per_point_noise_is_refused():
    x, y = _data(n=30)
    gp = ExactGP(x, y, RBF(), noise=torch.full((30,), 0.1))
    with pytest.raises(ValueError, match="include_noise with per-point noise"):
        gp.predict(x[:2], include_noise=True)
