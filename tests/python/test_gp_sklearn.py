"""tessel.gp's scikit-learn estimators. GaussianProcessRegressor: scikit-learn's own estimator
checks, the same predictions, standard deviations, covariances and samples as scikit-learn's
GaussianProcessRegressor with the same fixed kernel, and use in a pipeline and a grid search.
NystromKernelRidge: the checks, scikit-learn's KernelRidge when every point is a centre, several
outputs, a grid search, and the hyperparameters learned by GCV."""
import numpy as np
import pytest
import torch

import sklearn.gaussian_process as sklearn_gp
from sklearn.gaussian_process import kernels as sk
from sklearn.kernel_ridge import KernelRidge
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from tessel.gp import RBF, GaussianProcessRegressor, Matern, NystromKernelRidge, Scale


# The default kernels only: joblib's hash of a PyTorch tensor differs from its deep copy's, so
# scikit-learn's check that fit leaves the parameters alone cannot take a kernel object.
@parametrize_with_checks([GaussianProcessRegressor(max_iter=5),
                          NystromKernelRidge(centres=40, max_iter=5),
                          NystromKernelRidge(optimizer=None)])
def test_scikit_learn_estimator_checks(estimator, check):
    check(estimator)


def _data(n=200, d=3, seed=0):
    g = np.random.default_rng(seed)
    x = g.uniform(-1, 1, (n, d))
    return x, np.cos(3 * x[:, 0]) + x[:, 1] * x[:, 2] + 0.05 * g.standard_normal(n)


@pytest.mark.parametrize("mode", ["exact", "bbmm"])
def test_same_predictions_as_scikit_learn_with_the_same_fixed_kernel(mode):
    x, y = _data()
    xt = _data(n=40, seed=1)[0]
    ell = [0.5, 0.8, 1.1]
    ours = GaussianProcessRegressor(
        Scale(Matern(nu=1.5, lengthscale=ell), outputscale=2.0), noise=0.01, fixed_noise=True,
        mean="zero", normalize_y=False, optimizer=None, mode=mode, rank=100, tol=1e-10).fit(x, y)
    theirs = sklearn_gp.GaussianProcessRegressor(
        sk.ConstantKernel(2.0) * sk.Matern(ell, nu=1.5), alpha=0.01, optimizer=None).fit(x, y)
    # CG to 1e-10 in BBMM mode: its solves agree to about that, the log-determinant is an
    # estimate (not compared).
    rtol = 1e-8 if mode == "exact" else 1e-6
    m, s = ours.predict(xt, return_std=True)
    m_ref, s_ref = theirs.predict(xt, return_std=True)
    np.testing.assert_allclose(m, m_ref, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(s, s_ref, rtol=rtol, atol=rtol)
    _, cov = ours.predict(xt, return_cov=True)
    _, cov_ref = theirs.predict(xt, return_cov=True)
    np.testing.assert_allclose(cov, cov_ref, rtol=rtol, atol=rtol)
    if mode == "exact":
        assert ours.log_marginal_likelihood_value_ == pytest.approx(
            theirs.log_marginal_likelihood_value_, rel=1e-10)


def test_normalize_y_changes_units_only():
    x, y = _data(n=80)
    kw = dict(kernel=Scale(RBF(0.7)), noise=0.01, fixed_noise=True, optimizer=None,
              mode="exact")
    a = GaussianProcessRegressor(normalize_y=True, **kw).fit(x, 1000 * y + 5)
    b = GaussianProcessRegressor(normalize_y=True, **kw).fit(x, y)
    ma, sa = a.predict(x[:5], return_std=True)
    mb, sb = b.predict(x[:5], return_std=True)
    np.testing.assert_allclose(ma, 1000 * mb + 5, rtol=1e-10)
    np.testing.assert_allclose(sa, 1000 * sb, rtol=1e-10)


def test_sample_y_draws_from_the_posterior():
    x, y = _data(n=60)
    reg = GaussianProcessRegressor(max_iter=10, mode="exact").fit(x, y)
    xt = x[:4] + 0.3
    samples = reg.sample_y(xt, n_samples=4000, random_state=3)
    assert samples.shape == (4, 4000)
    mean, cov = reg.predict(xt, return_cov=True)
    se = np.sqrt(np.diag(cov) / 4000)
    assert np.all(np.abs(samples.mean(1) - mean) < 5 * se)
    np.testing.assert_allclose(np.cov(samples), cov, atol=0.15 * np.abs(cov).max())
    np.testing.assert_array_equal(reg.sample_y(xt, 3, random_state=7),
                                  reg.sample_y(xt, 3, random_state=7))


def test_fits_in_a_pipeline_and_a_grid_search():
    x, y = _data(n=120)
    pipe = make_pipeline(StandardScaler(), GaussianProcessRegressor(max_iter=15, mode="exact"))
    search = GridSearchCV(pipe, {"gaussianprocessregressor__kernel": [Scale(RBF()),
                                                                       Scale(Matern(nu=2.5))]},
                          cv=3).fit(x, y)
    assert search.best_score_ > 0.8
    # The estimator's kernel parameter is left as given; the fitted copy is kernel_.
    est = search.best_estimator_[-1]
    assert est.kernel is not est.kernel_
    assert est.history_ and est.history_[-1]["loss"] < est.history_[0]["loss"]


def test_float32_kernels_give_float64_quality_predictions():
    x, y = _data(n=300)
    a = GaussianProcessRegressor(max_iter=10, mode="bbmm", dtype="float32",
                                 random_state=1).fit(x, y)
    b = GaussianProcessRegressor(max_iter=10, mode="bbmm", random_state=1).fit(x, y)
    assert a.score(x, y) == pytest.approx(b.score(x, y), abs=2e-3)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(kernel=sk.RBF()), TypeError, "kernel must be a tessel.gp kernel"),
    (dict(optimizer="bfgs"), ValueError, "optimizer must be 'lbfgs', 'adam' or None"),
    (dict(dtype="float16"), ValueError, "dtype must be one of"),
    (dict(noise=-1.0), ValueError, "noise must be finite and > noise_min"),
])
def test_bad_parameters_are_named_at_fit(kw, exc, match):
    x, y = _data(n=20)
    with pytest.raises(exc, match=match):
        GaussianProcessRegressor(**kw).fit(x, y)


def test_return_std_and_cov_together_is_refused():
    x, y = _data(n=20)
    reg = GaussianProcessRegressor(optimizer=None).fit(x, y)
    with pytest.raises(RuntimeError, match="at most one of return_std or return_cov"):
        reg.predict(x, return_std=True, return_cov=True)
    assert torch.get_default_dtype() == torch.float32  # nothing global was changed


def test_every_point_a_centre_is_scikit_learns_kernel_ridge():
    x, y = _data()
    xt = _data(n=50, seed=1)[0]
    lam, ell = 1e-4, 0.7
    ours = NystromKernelRidge(RBF(ell), lam=lam, centres=10_000, optimizer=None,
                              tol=1e-10).fit(x, y)
    ref = KernelRidge(alpha=lam * x.shape[0], kernel="rbf", gamma=0.5 / ell**2).fit(x, y)
    want = ref.predict(xt)
    assert np.abs(ours.predict(xt) - want).max() <= 1e-6 * np.abs(want).max()


def test_ridge_several_outputs_at_once_equal_one_at_a_time():
    x, y = _data()
    ys = np.stack([y, 2 * y + 1], 1)
    opts = dict(centres=80, lam=1e-5, optimizer=None, tol=1e-9)
    both = NystromKernelRidge(Matern(2.5), **opts).fit(x, ys)
    pred = both.predict(x[:20])
    assert pred.shape == (20, 2)
    for k in range(2):
        one = NystromKernelRidge(Matern(2.5), **opts).fit(x, ys[:, k])
        assert np.abs(one.predict(x[:20]) - pred[:, k]).max() <= 1e-7 * np.abs(pred).max()


def test_gcv_learned_hyperparameters_predict_better_and_fit_in_a_grid_search():
    x, y = _data(n=500)
    xt, yt = _data(n=300, seed=2)
    plain = NystromKernelRidge(RBF(3.0), lam=1e-1, centres=60, optimizer=None).fit(x, y)
    tuned = NystromKernelRidge(RBF(3.0), lam=1e-1, centres=60, max_iter=30).fit(x, y)
    assert tuned.score(xt, yt) > 0.95 > plain.score(xt, yt)
    assert tuned.lam_ < 1e-1 and tuned.gcv_ < tuned.history_[0]["loss"] * float((y * y).mean())
    assert float(tuned.kernel_.lengthscale.reshape(-1)[0]) < 3.0
    assert float(tuned.kernel.lengthscale.reshape(-1)[0]) == pytest.approx(3.0)  # not touched
    search = GridSearchCV(make_pipeline(StandardScaler(),
                                        NystromKernelRidge(centres=60, optimizer=None)),
                          {"nystromkernelridge__lam": [1e-6, 1e-2]}, cv=3).fit(x, y)
    assert search.best_params_["nystromkernelridge__lam"] == 1e-6


@pytest.mark.parametrize("kw,exc,match", [
    ({"dtype": "float16"}, ValueError, "dtype must be one of"),
    ({"kernel": "rbf"}, TypeError, "kernel must be a tessel.gp kernel"),
    ({"optimizer": "sgd"}, ValueError, "optimizer must be 'lbfgs', 'adam' or None"),
    ({"centres": 0}, ValueError, "centres must be an int >= 1"),
    ({"lam": 0.0}, ValueError, "lam must be a finite number > 0")])
def test_ridge_bad_parameters_are_named_at_fit(kw, exc, match):
    x, y = _data(n=20)
    with pytest.raises(exc, match=match):
        NystromKernelRidge(**kw).fit(x, y)
