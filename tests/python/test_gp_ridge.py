"""tessel.gp.NystromRidge: the Falkon-preconditioned CG solution equals the dense normal
equations' in float64, with every training point as a centre it is scikit-learn's KernelRidge,
several outputs at once equal one at a time, and bad input gets clear errors."""
import numpy as np
import pytest
import torch
from sklearn.kernel_ridge import KernelRidge

from tessel.gp import RBF, Matern, NystromRidge, Scale


def _data(n=600, d=3, seed=0, outputs=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, d, generator=g, dtype=torch.float64)
    y = torch.sin(5 * x[:, 0]) + x[:, 1] * x[:, 2] + 0.05 * torch.randn(n, generator=g,
                                                                        dtype=torch.float64)
    if outputs:
        y = torch.stack([y * (1 + k) + k for k in range(outputs)], 1)
    return x, y


def _dense_alpha(kernel, x, c, y, lam):
    knm = kernel.dense(x, c).detach()
    kmm = kernel.dense(c, c).detach()
    n = x.shape[0]
    return torch.linalg.solve(knm.T @ knm + lam * n * kmm, knm.T @ y)


@pytest.mark.parametrize("lam", [1e-3, 1e-7])
def test_equals_the_dense_normal_equations(lam):
    x, y = _data()
    kernel = Scale(Matern(2.5, lengthscale=[0.3, 0.5, 0.8]), outputscale=1.5)
    model = NystromRidge(kernel, centres=120, lam=lam, tol=1e-9).fit(x, y)
    assert all(model.report_["converged"]) and model.report_["iterations"] < 120
    want = _dense_alpha(kernel, x, model.centres_, y, lam)
    xt = _data(n=50, seed=1)[0]
    pred = model.predict(xt)
    pred_ref = kernel.dense(xt, model.centres_).detach() @ want
    scale = float(pred_ref.abs().max())
    # The normal equations square K_nM's condition: compare predictions, which CG's tolerance
    # bounds, rather than the coefficients themselves.
    np.testing.assert_allclose(pred.numpy(), pred_ref.numpy(), rtol=0, atol=1e-7 * scale)


def test_every_point_a_centre_is_scikit_learns_kernel_ridge():
    x, y = _data(n=300)
    lam = 1e-4
    model = NystromRidge(RBF(0.4), centres=x, lam=lam, tol=1e-7).fit(x, y)
    ref = KernelRidge(alpha=lam * x.shape[0], kernel="rbf", gamma=1 / (2 * 0.4 ** 2)).fit(x, y)
    xt = _data(n=40, seed=2)[0]
    np.testing.assert_allclose(model.predict(xt).numpy(), ref.predict(xt), rtol=0, atol=1e-6)


def test_several_outputs_at_once_equal_one_at_a_time():
    x, y = _data(outputs=3)
    kernel = RBF([0.4, 0.6, 0.9])
    both = NystromRidge(kernel, centres=80, lam=1e-5, tol=1e-9).fit(x, y)
    assert both.alpha_.shape == (80, 3) and len(both.report_["converged"]) == 3
    xt = _data(n=30, seed=3)[0]
    pred = both.predict(xt)
    for k in range(3):
        one = NystromRidge(kernel, centres=80, lam=1e-5, tol=1e-9).fit(x, y[:, k])
        np.testing.assert_allclose(pred[:, k].numpy(), one.predict(xt).numpy(), rtol=0,
                                   atol=1e-8 * float(y[:, k].abs().max()))


def test_float32_points_reach_their_precision_and_say_when_they_stall():
    x, y = _data()
    a = NystromRidge(RBF(0.4), centres=100, lam=1e-2, tol=1e-4).fit(x, y)
    b = NystromRidge(RBF(0.4), centres=100, lam=1e-2, tol=1e-3).fit(x.float(), y)
    assert all(b.report_["converged"])
    # A residual of 1e-3 in the preconditioned system: predictions to about that, relative.
    np.testing.assert_allclose(b.predict(x.float()).numpy(), a.predict(x).numpy(), rtol=0,
                               atol=2e-3 * float(y.abs().max()))
    with pytest.warns(RuntimeWarning, match="NystromRidge.fit: CG did not converge"):
        NystromRidge(RBF(0.4), centres=100, lam=1e-4, tol=1e-10).fit(x.float(), y)


def test_repeated_centres_get_a_stated_jitter():
    x, y = _data(n=200)
    c = torch.cat([x[:20], x[:5]])
    model = NystromRidge(RBF(0.4), centres=c, lam=1e-4, tol=1e-7).fit(x, y)
    assert model.report_["jitter"] > 0
    assert np.isfinite(model.predict(x).numpy()).all()


@pytest.mark.parametrize("args, kw, exc, match", [
    ((RBF(),), dict(lam=0.0), ValueError, "lam must be a finite number > 0"),
    (("rbf",), {}, TypeError, "kernel must be a tessel.gp kernel"),
])
def test_bad_construction_is_named(args, kw, exc, match):
    with pytest.raises(exc, match=match):
        NystromRidge(*args, **kw)


def test_bad_fit_input_is_named():
    x, y = _data(n=50)
    m = NystromRidge(RBF(0.2), centres=10, lam=1e-3)
    with pytest.raises(ValueError, match=r"y must be \(50,\) or \(50, k\)"):
        m.fit(x, y[:10])
    with pytest.raises(ValueError, match="y holds a NaN"):
        m.fit(x, torch.where(y > 0, y, torch.tensor(float("nan"), dtype=torch.float64)))
    with pytest.raises(ValueError, match=r"centres must be \(M, 3\)"):
        NystromRidge(RBF(), centres=torch.rand(5, 2)).fit(x, y)
    with pytest.raises(RuntimeError, match="call fit first"):
        m.predict(x)
    with pytest.raises(ValueError, match=r"x must be \(m, 3\)"):
        m.fit(x, y).predict(x[:, :2])


def test_gcv_equals_the_dense_hat_matrix_formula_within_its_error():
    x, y = _data(n=400)
    kernel = RBF([0.4, 0.6, 0.9])
    model = NystromRidge(kernel, centres=60, lam=1e-4, tol=1e-9)
    score, se = model.gcv(x, y, probes=64, seed=1)
    knm = kernel.dense(x, model.centres_).detach()
    kmm = kernel.dense(model.centres_, model.centres_).detach()
    n = x.shape[0]
    hat = knm @ torch.linalg.solve(knm.T @ knm + 1e-4 * n * kmm, knm.T)
    trace = float(torch.trace(hat))
    want = n * float(((y - hat @ y) ** 2).sum()) / (n - trace) ** 2
    assert abs(score - want) <= 4 * se + 1e-9 * want, (score, want, se)
    assert 0 < se < 0.05 * want


def test_gcv_prefers_the_right_amount_of_smoothing():
    x, y = _data(n=500)
    scores = {lam: NystromRidge(RBF(0.3), centres=80, lam=lam).gcv(x, y)[0]
              for lam in (1e-4, 1.0)}
    assert scores[1e-4] < scores[1.0]  # heavy smoothing misses the signal
    with pytest.raises(ValueError, match="probes must be an integer >= 2"):
        NystromRidge(RBF()).gcv(x, y, probes=1)


def _dense_gcv(kernel, x, y, c, lam):
    """The score from the n x n hat matrix, differentiable by autograd (the reference)."""
    knm = kernel.dense(x.to(torch.float64), c)
    kmm = kernel.dense(c, c)
    n = x.shape[0]
    hat = knm @ torch.linalg.solve(knm.T @ knm + lam * n * kmm, knm.T)
    resid = y.reshape(n, -1) - hat @ y.reshape(n, -1)
    return n * (resid ** 2).sum() / (n - torch.trace(hat)) ** 2


@pytest.mark.parametrize("outputs,chunk,dtype", [(None, 37, torch.float64),
                                                 (2, None, torch.float64),
                                                 (None, 64, torch.float32)])
def test_exact_gcv_and_its_gradient_equal_the_dense_hat_matrix(outputs, chunk, dtype):
    from tessel.gp._ridge_gcv import GCVObjective
    x, y = _data(n=300, outputs=outputs)
    x = x.to(dtype)
    kernel = Scale(Matern(2.5, lengthscale=[0.3, 0.5, 0.8]), outputscale=1.5)
    c = x[::5].to(torch.float64)
    obj = GCVObjective(kernel, x, y, c, 1e-4, True, chunk, "test")
    score = obj.score()
    score.backward()
    got = {name: p.grad.clone() for name, p in obj.named_parameters()}
    for p in obj.parameters():
        p.grad = None
    want = _dense_gcv(kernel, x, y, c, torch.exp(obj.log_lam))
    want.backward()
    # float64 sums of the same terms; the jitter (M * 1e-14, or 1e-7 for float32 points, of
    # K_MM's mean diagonal) moves the float32 case's score by about that much relatively.
    tol = 1e-9 if dtype == torch.float64 else 2e-5
    assert abs(float(score) / float(want) - 1) < tol
    # The score hardly moves with the output scale (only through lam's weight against it), so
    # each gradient is compared on the scale of the largest.
    scale = max(float(p.grad.abs().max()) for p in obj.parameters())
    for name, p in obj.named_parameters():
        assert float((got[name] - p.grad).abs().max()) <= 100 * tol * scale, name
    assert 0 < obj.trace_ < c.shape[0]


def test_gcv_gradient_equals_finite_differences():
    from tessel.gp._ridge_gcv import GCVObjective
    x, y = _data(n=200)
    obj = GCVObjective(RBF([0.4, 0.6, 0.9]), x, y, x[::4], 1e-3, True, 50, "test")
    obj.score().backward()
    for p in obj.parameters():
        flat, grad = p.data.reshape(-1), p.grad.reshape(-1)
        for i in range(flat.numel()):
            h = 1e-5
            flat[i] += h
            up = float(obj.score())
            flat[i] -= 2 * h
            down = float(obj.score())
            flat[i] += h
            fd = (up - down) / (2 * h)
            assert abs(fd - float(grad[i])) <= 1e-6 * abs(fd) + 1e-10, (i, fd, float(grad[i]))


def test_tune_beats_a_grid_and_predicts_better():
    x, y = _data(n=500)
    xt, yt = _data(n=300, seed=3)
    model = NystromRidge(RBF([2.0, 2.0, 2.0]), centres=60, lam=1e-1)
    before = float(((model.fit(x, y).predict(xt) - yt) ** 2).mean())
    model.tune(x, y, max_iter=40)
    after = float(((model.predict(xt) - yt) ** 2).mean())
    rows = model.history_
    assert rows[-1]["loss"] < 0.2 * rows[0]["loss"] and after < 0.2 * before
    assert set(rows[0]) >= {"iteration", "loss", "grad_norm", "seconds"}
    assert model.gcv_ == pytest.approx(rows[-1]["loss"] * float((y * y).mean()), rel=1e-12)
    # Every point of a grid over lam and one lengthscale scores no better than the descent.
    for lam in (1e-5, 1e-3, 1e-1):
        for ls in (0.2, 0.5, 1.0):
            score = float(_dense_gcv(RBF(ls), x, y, model.centres_, lam).detach())
            assert model.gcv_ <= score * (1 + 1e-9)
    # The probes' estimate (core CG) agrees with the exact score within its error.
    est, se = NystromRidge(model.kernel, centres=60, lam=model.lam, tol=1e-7).gcv(
        x, y, probes=64)
    assert abs(est - model.gcv_) <= 4 * se + 1e-6 * model.gcv_


def test_tune_keeps_a_fixed_lam_and_copes_with_repeated_centres():
    x, y = _data(n=200)
    x = torch.cat([x, x[:50]])  # coincident points, so the drawn centres repeat
    y = torch.cat([y, y[:50]])
    model = NystromRidge(RBF(1.0), centres=120, lam=1e-3, seed=1)
    model.tune(x, y, max_iter=5, learn_lam=False)
    assert model.lam == 1e-3
    assert all(np.isfinite(r["loss"]) and np.isfinite(r["grad_norm"]) for r in model.history_)


def test_tune_bad_input_and_second_order():
    from tessel.gp._ridge_gcv import GCVObjective
    x, y = _data(n=100)
    model = NystromRidge(RBF(), centres=10)
    for kw, msg in (({"chunk": 0}, "chunk must be None or an int >= 1"),
                    ({"learn_lam": "yes"}, "learn_lam must be a bool"),
                    ({"optimizer": "sgd"}, "optimizer must be one of")):
        with pytest.raises(ValueError, match=f"NystromRidge.tune: {msg}"):
            model.tune(x, y, **kw)
    with pytest.raises(ValueError, match="NystromRidge.tune: y holds a NaN"):
        model.tune(x, torch.full_like(y, float("nan")))
    obj = GCVObjective(RBF(), x, y, x[:10], 1e-3, True, None, "NystromRidge.tune")
    with pytest.raises(RuntimeError, match="NystromRidge.tune: second derivatives"):
        torch.autograd.grad(obj.score(), [obj.log_lam], create_graph=True)


def test_tune_does_not_depend_on_the_units_of_y():
    # The loss is the score over y's mean square: the same descent for y in any units (the
    # stopping tests are absolute; on the raw score, y * 1e-3 stopped after two iterations).
    x, y = _data(n=300)
    runs = [NystromRidge(Scale(RBF(0.5)), centres=40, lam=1e-1).tune(x, y * s, max_iter=30)
            for s in (1.0, 1e-3, 1e3)]
    for r, s in zip(runs[1:], (1e-3, 1e3)):
        assert len(r.history_) == len(runs[0].history_)
        assert r.lam == pytest.approx(runs[0].lam, rel=1e-6)
        assert r.gcv_ / s**2 == pytest.approx(runs[0].gcv_, rel=1e-6)


def test_lam_any_real_scalar_and_empty_input():
    x, y = _data(n=100)
    for lam in (np.float32(1e-3), torch.tensor(1e-3), 1e-3):
        assert NystromRidge(RBF(), centres=10, lam=lam).lam == pytest.approx(1e-3)
    model = NystromRidge(RBF(), centres=10, lam=1e-3)
    with pytest.raises(ValueError, match=r"NystromRidge.tune: x must be \(n, d\) with n >= 1"):
        model.tune(x[:0], y[:0])
    assert model.fit(x, y).predict(x[:0]).shape == (0,)
    # A list of Python floats is float64, as numpy makes it (torch.as_tensor: float32).
    assert model.fit(x.tolist(), y).centres_.dtype == torch.float64

