"""tessel.ot.solve_sample against dense float64 references: the converged value, the plan (its
marginals, products with vectors, argmax matches), primal = dual for balanced, unbalanced and
semi-unbalanced problems, envelope gradients, batches, custom costs, zero weights, bad input."""
import warnings

import pytest
import torch

from ot_cases import weighted_clouds
from tessel.ot import SamplesLoss, solve_sample


def clouds(n, m, d=3, batch=None, seed=0):
    return weighted_clouds(n, m, d, seed, shift=0.3, floor=0.1, batch=batch)


def cost_matrix(x, y, p=2):
    d2 = ((x[..., :, None, :] - y[..., None, :, :]) ** 2).sum(-1)
    return d2 / 2 if p == 2 else d2.sqrt()


def dense_sinkhorn(a, x, b, y, eps, rho_x=None, rho_y=None, p=2, iters=20000):
    """Alternating log-domain Sinkhorn on the dense float64 matrix, to convergence."""
    C = cost_matrix(x, y, p)
    la, lb = a.log(), b.log()
    dx = 1.0 if rho_x is None else 1 / (1 + eps / rho_x)
    dy = 1.0 if rho_y is None else 1 / (1 + eps / rho_y)
    f, g = torch.zeros_like(a), torch.zeros_like(b)
    for _ in range(iters):
        f_old = f
        f = -dx * eps * torch.logsumexp(lb[None, :] + (g[None, :] - C) / eps, 1)
        g = -dy * eps * torch.logsumexp(la[:, None] + (f[:, None] - C) / eps, 0)
        if (f - f_old).abs().max() < 1e-13:
            break
    plan = torch.exp(la[:, None] + lb[None, :] + (f[:, None] + g[None, :] - C) / eps)
    return f, g, plan, C


def kl(p, q):
    return (p * (p / q).log() - p + q).sum()


def primal(plan, C, a, b, eps, rho_x, rho_y):
    """<P, C> + eps KL(P | a x b) + rho_x KL(P 1 | a) + rho_y KL(P^T 1 | b)."""
    out = (plan * C).sum() + eps * kl(plan, a[:, None] * b[None, :])
    if rho_x is not None:
        out = out + rho_x * kl(plan.sum(1), a)
    if rho_y is not None:
        out = out + rho_y * kl(plan.sum(0), b)
    return out


def test_balanced_converged_value_plan_and_matches():
    a, x, b, y = clouds(60, 45)
    r = solve_sample(a, x, b, y, blur=0.2, tol=1e-11, max_iter=5000)
    assert r.converged and r.marginal_error <= 1e-11
    eps = 0.2 ** 2
    f, g, plan, C = dense_sinkhorn(a, x, b, y, eps)
    assert r.eps == pytest.approx(eps)
    # Balanced potentials are defined up to f + c, g - c: compare the plan and the value.
    assert float(r.value) == pytest.approx(float((a * f).sum() + (b * g).sum()), abs=1e-9)
    assert float(r.value) == pytest.approx(float(primal(plan, C, a, b, eps, None, None)),
                                           abs=1e-8)
    mx, my = r.marginals
    assert torch.allclose(mx, a, atol=1e-10) and torch.allclose(my, b, atol=1e-10)
    v = torch.randn(45, 2, dtype=torch.float64)
    assert torch.allclose(r.plan @ v, plan @ v, atol=1e-10)
    u = torch.randn(60, 1, dtype=torch.float64)
    assert torch.allclose(r.plan.t() @ u, plan.t() @ u, atol=1e-10)
    assert torch.equal(r.plan.argmax(1)[:, 0], plan.argmax(1))
    assert torch.equal(r.plan.argmax(0)[:, 0], plan.argmax(0))


@pytest.mark.parametrize("reach_x,reach_y", [(0.5, 0.5), (0.7, None), (None, 0.4), (2.0, 0.3)])
def test_unbalanced_and_semi_unbalanced_primal_equals_dual(reach_x, reach_y):
    a, x, b, y = clouds(50, 40, seed=1)
    blur = 0.25
    r = solve_sample(a, x, b, y, blur=blur, reach_x=reach_x, reach_y=reach_y, tol=1e-12,
                     max_iter=20000)
    assert r.converged
    eps = blur ** 2
    rx = None if reach_x is None else reach_x ** 2
    ry = None if reach_y is None else reach_y ** 2
    f, g, plan, C = dense_sinkhorn(a, x, b, y, eps, rx, ry)
    assert torch.allclose(r.f, f, atol=1e-9) and torch.allclose(r.g, g, atol=1e-9)
    # Strong duality, with an independent formula: the primal objective of the dense plan.
    assert float(r.value) == pytest.approx(float(primal(plan, C, a, b, eps, rx, ry)), abs=1e-8)
    mx, my = r.marginals
    assert torch.allclose(mx, plan.sum(1), atol=1e-10)
    assert torch.allclose(my, plan.sum(0), atol=1e-10)
    if reach_x is None:
        assert torch.allclose(mx, a, atol=1e-10)
    if reach_y is None:
        assert torch.allclose(my, b, atol=1e-10)


def test_envelope_gradient_at_convergence():
    # At the optimum d OT / d x_i = sum_j P_ij (x_i - y_j) for the cost |x - y|^2 / 2.
    a, x, b, y = clouds(40, 30, seed=2)
    x.requires_grad_()
    r = solve_sample(a, x, b, y, blur=0.3, tol=1e-12, max_iter=5000)
    (gx,) = torch.autograd.grad(r.value, x)
    _, _, plan, _ = dense_sinkhorn(a, x.detach(), b, y, 0.09)
    want = plan.sum(1)[:, None] * x.detach() - plan @ y
    assert torch.allclose(gx, want, atol=1e-9)


@pytest.mark.parametrize("debias", [False, True])
def test_schedule_only_equals_samples_loss(debias):
    a, x, b, y = clouds(30, 35, seed=3)
    x.requires_grad_()
    kw = dict(blur=0.1, reach=0.8, debias=debias)
    r = solve_sample(a, x, b, y, tol=0.0, update="symmetric", **kw)
    want = SamplesLoss("sinkhorn", **kw)(a, x, b, y)
    assert float(r.value.detach()) == pytest.approx(float(want.detach()), abs=1e-12)
    g1, = torch.autograd.grad(r.value, x)
    g2, = torch.autograd.grad(SamplesLoss("sinkhorn", **kw)(a, x, b, y), x)
    assert torch.allclose(g1, g2, atol=1e-12)
    F, G = SamplesLoss("sinkhorn", potentials=True, **kw)(a, x, b, y)
    assert torch.allclose(r.potentials[0], F[0], atol=1e-12)
    assert torch.allclose(r.potentials[1], G[0], atol=1e-12)
    assert (r.p is None) == (not debias)


def test_batches_equal_separate_problems():
    a, x, b, y = clouds(25, 20, batch=3, seed=4)
    r = solve_sample(a, x, b, y, blur=0.3, tol=1e-10)
    assert r.value.shape == (3,) and r.f.shape == (3, 25) and r.g.shape == (3, 20)
    mx, my = r.marginals
    assert mx.shape == (3, 25) and my.shape == (3, 20)
    for k in range(3):
        one = solve_sample(a[k], x[k], b[k], y[k], blur=0.3, tol=1e-10, diameter=r.diameter)
        assert float(one.value) == pytest.approx(float(r.value[k]), abs=1e-10)
        assert torch.allclose(one.marginals[0], mx[k], atol=1e-10)


def test_formula_cost_equals_builtin():
    a, x, b, y = clouds(30, 30, seed=5)
    r1 = solve_sample(a, x, b, y, blur=0.2)
    r2 = solve_sample(a, x, b, y, blur=0.2, cost="SqDist(X,Y) / IntCst(2)")
    assert float(r1.value) == pytest.approx(float(r2.value), abs=1e-12)
    v = torch.ones(30, 1, dtype=torch.float64)
    assert torch.allclose(r1.plan @ v, r2.plan @ v, atol=1e-12)
    r3 = solve_sample(a, x, b, y, p=1, blur=0.2, tol=1e-10)
    _, _, plan, _ = dense_sinkhorn(a, x, b, y, 0.2, p=1)
    assert torch.allclose(r3.plan @ v, plan @ v, atol=1e-9)


def test_uniform_weights_zero_weights_and_coincident_points():
    _, x, _, y = clouds(20, 20, seed=6)
    r = solve_sample(None, x, None, y, blur=0.2)
    assert torch.allclose(r.marginals[0], torch.full((20,), 1 / 20, dtype=torch.float64),
                          atol=1e-6)
    a = torch.full((20,), 1 / 18, dtype=torch.float64)
    a[[3, 7]] = 0
    b = torch.full((20,), 1 / 20, dtype=torch.float64)
    r = solve_sample(a, x, b, x.clone(), blur=0.2, tol=1e-10)
    mx, my = r.marginals
    assert torch.isfinite(r.value) and torch.isfinite(mx).all() and torch.isfinite(my).all()
    assert mx[3] == 0 and mx[7] == 0
    assert torch.allclose(my, b, atol=1e-9)


def test_float32_close_to_float64():
    a, x, b, y = clouds(50, 50, seed=7)
    r64 = solve_sample(a, x, b, y, blur=0.2, tol=1e-9)
    r32 = solve_sample(a.float(), x.float(), b.float(), y.float(), blur=0.2, tol=1e-5)
    assert r32.value.dtype == torch.float32
    assert float(r32.value) == pytest.approx(float(r64.value), rel=1e-4)


def test_warns_when_not_converged_and_grad_mode_untouched():
    a, x, b, y = clouds(30, 30, seed=8)
    with torch.no_grad():
        with pytest.warns(RuntimeWarning, match="max_iter=3"):
            solve_sample(a, x, b, y, blur=0.05, tol=1e-12, max_iter=3)
        assert not torch.is_grad_enabled()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        solve_sample(a, x, b, y, blur=0.05, tol=0.0, max_iter=3)  # tol 0: no stopping rule


@pytest.mark.parametrize("kw,err,match", [
    (dict(update="jacobi"), ValueError, "update must be"),
    (dict(tol=-1.0), ValueError, "tol must be"),
    (dict(max_iter=0), ValueError, "max_iter must be"),
    (dict(reach_x=-1.0), ValueError, "reach_x must be"),
    (dict(blur=0.0), ValueError, "blur must be"),
])
def test_bad_input(kw, err, match):
    a, x, b, y = clouds(5, 5)
    with pytest.raises(err, match=match):
        solve_sample(a, x, b, y, **kw)


@pytest.mark.parametrize("reach_x,reach_y", [(0.5, None), (None, 0.4), (0.7, 0.3)])
def test_samples_loss_semi_unbalanced_equals_solve_sample(reach_x, reach_y):
    a, x, b, y = clouds(30, 25, seed=9)
    x = x.clone().requires_grad_()
    kw = dict(blur=0.2, reach_x=reach_x, reach_y=reach_y, debias=True)
    v1 = SamplesLoss(**kw)(a, x, b, y)
    v2 = solve_sample(a, x, b, y, tol=0.0, update="symmetric", **kw).value
    assert float(v1.detach()) == pytest.approx(float(v2.detach()), abs=1e-13)
    g1, = torch.autograd.grad(v1, x)
    g2, = torch.autograd.grad(v2, x)
    assert torch.allclose(g1, g2, atol=1e-13)
