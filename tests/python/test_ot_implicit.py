"""tessel.ot's implicit gradient mode: first derivatives and Hessian-vector products of Sinkhorn
losses (balanced, unbalanced, semi-unbalanced, debiased or not) against dense float64 autograd
through the same iterations run to convergence, and against the envelope mode at convergence."""
import warnings

import pytest
import torch

from ot_cases import weighted_clouds
from tessel.ot import SamplesLoss, solve_sample

EPS_BLUR = 0.3  # blur; eps = 0.09: the dense reference converges in a few hundred iterations


def clouds(n=24, m=19, d=2, seed=0):
    return weighted_clouds(n, m, d, seed)


def dense_potentials(a, x, b, y, eps, rho_x, rho_y, iters=1500):
    """Alternating log-domain Sinkhorn on dense matrices, differentiable by plain autograd."""
    C = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1) / 2
    dx = 1.0 if rho_x is None else 1 / (1 + eps / rho_x)
    dy = 1.0 if rho_y is None else 1 / (1 + eps / rho_y)
    f = torch.zeros(len(a), dtype=a.dtype)
    g = torch.zeros(len(b), dtype=b.dtype)
    for _ in range(iters):
        f = -dx * eps * torch.logsumexp(b.log()[None, :] + (g[None, :] - C) / eps, 1)
        g = -dy * eps * torch.logsumexp(a.log()[:, None] + (f[:, None] - C) / eps, 0)
    return f, g


def side(w, pot, rho, eps):
    if rho is None:
        return (w * pot).sum()
    return (w * ((rho + eps / 2) * (1 - torch.exp(-pot / rho)))).sum()


def dense_loss(a, x, b, y, eps, rho_x, rho_y, debias):
    f, g = dense_potentials(a, x, b, y, eps, rho_x, rho_y)
    value = side(a, f, rho_x, eps) + side(b, g, rho_y, eps)
    if debias:  # a balanced pair (f, g) is known up to (f + c, g - c): its mean is the gauge-free p
        p = sum(dense_potentials(a, x, a, x, eps, rho_x, rho_x)) / 2
        q = sum(dense_potentials(b, y, b, y, eps, rho_y, rho_y)) / 2
        value = value - side(a, p, rho_x, eps) - side(b, q, rho_y, eps)
    return value


def grad_and_hvp(loss_fn, x, y, vx, vy):
    x, y = x.clone().requires_grad_(), y.clone().requires_grad_()
    value = loss_fn(x, y)
    gx, gy = torch.autograd.grad(value, (x, y), create_graph=True)
    hx, hy = torch.autograd.grad((gx * vx).sum() + (gy * vy).sum(), (x, y))
    return float(value), gx.detach(), gy.detach(), hx, hy


CASES = [  # (reach_x, reach_y, debias)
    (None, None, False), (None, None, True), (0.6, 0.6, False), (0.6, 0.6, True),
    (None, 0.5, False), (0.8, None, True),
]


@pytest.mark.parametrize("reach_x,reach_y,debias", CASES)
def test_gradients_and_hvp_equal_dense_autograd(reach_x, reach_y, debias):
    a, x, b, y = clouds()
    eps = EPS_BLUR ** 2
    rx = None if reach_x is None else reach_x ** 2
    ry = None if reach_y is None else reach_y ** 2
    gen = torch.Generator().manual_seed(1)
    vx = torch.randn(x.shape, generator=gen, dtype=torch.float64)
    vy = torch.randn(y.shape, generator=gen, dtype=torch.float64)

    def ours(x_, y_):
        return solve_sample(a, x_, b, y_, blur=EPS_BLUR, reach_x=reach_x, reach_y=reach_y,
                            debias=debias, tol=1e-12, max_iter=20000,
                            gradient="implicit").value

    v1, gx1, gy1, hx1, hy1 = grad_and_hvp(ours, x, y, vx, vy)
    v2, gx2, gy2, hx2, hy2 = grad_and_hvp(
        lambda x_, y_: dense_loss(a, x_, b, y_, eps, rx, ry, debias), x, y, vx, vy)
    assert v1 == pytest.approx(v2, abs=1e-11)
    for mine, ref in ((gx1, gx2), (gy1, gy2), (hx1, hx2), (hy1, hy2)):
        assert torch.allclose(mine, ref, rtol=0, atol=1e-9 * max(1.0, float(ref.abs().max())))
    assert float(hx2.abs().max()) > 1e-3  # the test sees a real second derivative


@pytest.mark.parametrize("reach,debias", [(None, True), (0.7, True), (None, False)])
def test_samples_loss_implicit_equals_envelope_at_convergence(reach, debias):
    # GeomLoss's envelope gradient is exact at the fixed point: the two modes must agree there.
    a, x, b, y = clouds(seed=2)
    x = x.clone().requires_grad_()
    kw = dict(blur=EPS_BLUR, reach=reach, debias=debias)
    g_imp, = torch.autograd.grad(SamplesLoss(gradient="implicit", **kw)(a, x, b, y), x)
    r = solve_sample(a, x, b, y, tol=1e-12, max_iter=20000, **kw)
    g_env, = torch.autograd.grad(r.value, x)
    assert torch.allclose(g_imp, g_env, atol=1e-9)


def test_hvp_by_finite_differences_of_the_gradient():
    a, x, b, y = clouds(seed=3)
    loss = SamplesLoss(blur=EPS_BLUR, reach=0.6, gradient="implicit")
    v = torch.randn_like(x)

    def grad(x_):
        x_ = x_.clone().requires_grad_()
        return torch.autograd.grad(loss(a, x_, b, y), x_, create_graph=True)

    x1 = x.clone().requires_grad_()
    (gx,) = torch.autograd.grad(loss(a, x1, b, y), x1, create_graph=True)
    (hv,) = torch.autograd.grad((gx * v).sum(), x1)
    h = 1e-5
    fd = (grad(x + h * v)[0] - grad(x - h * v)[0]) / (2 * h)
    assert torch.allclose(hv, fd, atol=1e-7 * max(1.0, float(fd.abs().max())))


def test_batched_and_float32():
    a, x, b, y = clouds(seed=4)
    xb = torch.stack([x, x + 0.1]).requires_grad_()
    yb, ab, bb = torch.stack([y, y]), torch.stack([a, a]), torch.stack([b, b])
    loss = SamplesLoss(blur=EPS_BLUR, gradient="implicit")
    values = loss(ab, xb, bb, yb)
    assert values.shape == (2,)
    (g,) = torch.autograd.grad(values.sum(), xb)
    x0 = x.clone().requires_grad_()
    (g0,) = torch.autograd.grad(loss(a, x0, b, y), x0)
    assert torch.allclose(g[0], g0, atol=1e-10)
    x32 = x.float().requires_grad_()
    v32 = loss(a.float(), x32, b.float(), y.float())
    (g32,) = torch.autograd.grad(v32, x32)
    assert torch.allclose(g32.double(), g0, atol=1e-4)


def test_bad_gradient_mode():
    with pytest.raises(ValueError, match="gradient must be one of"):
        SamplesLoss(gradient="unrolled-ish")
    a, x, b, y = clouds()
    with pytest.raises(ValueError, match="solve_sample: gradient must be one of"):
        solve_sample(a, x, b, y, gradient="exact")


def test_zero_weights_potentials_and_gradients():
    # A zero-weight point's potential is its softmin against the other cloud; its own gradient
    # vanishes (it carries no mass) and the others are those of the problem without it.
    a, x, b, y = clouds(seed=5)
    a0 = torch.cat((a, a.new_zeros(1)))
    x0 = torch.cat((x, torch.tensor([[0.4, 0.9]], dtype=x.dtype))).requires_grad_()
    kw = dict(blur=EPS_BLUR, reach=0.6)
    F1, G1 = SamplesLoss(gradient="implicit", potentials=True, **kw)(a0, x0, b, y)
    # The envelope mode's potentials come from softmins; converged, they are the reference.
    F2, G2 = solve_sample(a0, x0, b, y, debias=True, tol=1e-12, max_iter=20000, **kw).potentials
    assert torch.allclose(F1[0], F2, atol=1e-9) and torch.allclose(G1[0], G2, atol=1e-9)
    (g0,) = torch.autograd.grad(SamplesLoss(gradient="implicit", **kw)(a0, x0, b, y), x0)
    x1 = x.clone().requires_grad_()
    (g1,) = torch.autograd.grad(SamplesLoss(gradient="implicit", **kw)(a, x1, b, y), x1)
    assert float(g0[-1].abs().max()) == 0.0
    assert torch.allclose(g0[:-1], g1, atol=1e-10)


def test_small_blur_that_newton_cannot_refine_is_a_clear_error():
    # At blur 0.005 the loop stops at max_iter far from the fixed point, and Newton steps from
    # there diverge: a clear error, never a value (it used to return 7.6e7 or crash in CG).
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(200, 3, dtype=torch.float64, generator=gen)
    y = torch.rand(150, 3, dtype=torch.float64, generator=gen) + 0.2
    a = torch.rand(200, dtype=torch.float64, generator=gen) + 0.1
    b = torch.rand(150, dtype=torch.float64, generator=gen) + 0.1
    a, b = a / a.sum(), b / b.sum()
    with warnings.catch_warnings():  # CG's own non-convergence warnings, on the way
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="stopped at max_iter"):
            SamplesLoss(gradient="implicit", blur=0.005, debias=False)(a, x, b, y)
    # Converged to its tolerance but Newton steps still diverging (tol=0: the schedule only, a
    # start far from the fixed point): the Newton error itself.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError, match="could not refine"):
            solve_sample(a, x, b, y, blur=0.005, debias=False, gradient="implicit")


def test_envelope_mode_refuses_create_graph():
    # First derivatives only: a gradient penalty or a Hessian-vector product through the default
    # mode raises instead of silently missing the second-order terms.
    a, x, b, y = clouds()
    x = x.clone().requires_grad_()
    value = SamplesLoss(blur=EPS_BLUR)(a, x, b, y)
    with pytest.raises(RuntimeError, match="first derivatives only"):
        torch.autograd.grad(value, x, create_graph=True)
    (g,) = torch.autograd.grad(SamplesLoss(blur=EPS_BLUR)(a, x, b, y), x)  # first order works
    assert torch.isfinite(g).all()


@pytest.mark.parametrize("balanced", [True, False])
def test_block_elimination_solves_the_plan_system_with_its_derivatives(balanced):
    # The Newton step's linear solve (D eliminated, CG on the Schur complement, Jacobi by its
    # diagonal) must give exactly H'^-1 r, H' the dense plan operator with the shift term, and
    # its derivatives: the dense solve is the reference. Weights spanning two decades and a small
    # blur make plain CG on H' slow; the block solve must need far fewer iterations.
    from tessel.loops import cg_solve
    from tessel.ot._implicit import _solve_blocks, plan_operator, sqdist_cost

    a, x, b, y = clouds(30, 40, seed=7)
    a = a * torch.logspace(-1, 1, 30, dtype=a.dtype)
    a = (a / a.sum()).requires_grad_()
    x = x.clone().requires_grad_()
    eps, rho = 0.02, (None if balanced else 0.3)
    g_ = torch.Generator().manual_seed(8)
    with torch.no_grad():  # near the fixed point, where the Newton steps solve
        f, g = dense_potentials(a, x, b, y, eps, rho, rho, iters=300)
    rf, rg = torch.randn(30, dtype=x.dtype, generator=g_), torch.randn(40, dtype=x.dtype,
                                                                           generator=g_)
    if balanced:  # a consistent right-hand side: no part along the shift (1, -1)
        rf, rg = rf - rf.mean(), rg - rg.mean()
    plan = plan_operator(a, x, b, y, f, g, eps, sqdist_cost)
    dense = torch.exp(torch.log(a)[:, None] + torch.log(b)[None] + (
        f[:, None] + g[None] - ((x[:, None] - y[None]) ** 2).sum(-1) / 2) / eps)
    d1 = dense.sum(1) / eps + (0 if balanced else a * torch.exp(-f / rho) / rho)
    d2 = dense.sum(0) / eps + (0 if balanced else b * torch.exp(-g / rho) / rho)
    c = float(torch.cat((d1, d2)).mean()) / 70 if balanced else 0.0
    s = torch.cat((torch.ones(30, dtype=x.dtype), -torch.ones(40, dtype=x.dtype)))
    h = torch.block_diag(torch.diag(d1), torch.diag(d2)) + c * torch.outer(s, s)
    h[:30, 30:] += dense / eps
    h[30:, :30] += dense.t() / eps
    r = torch.cat((rf, rg))
    stats = {}
    got = _solve_blocks(plan, d1, d2, c, eps, rf, rg, 1e-13, stats)
    ref = torch.linalg.solve(h, r)
    torch.testing.assert_close(got, ref, rtol=1e-9, atol=1e-9 * float(ref.abs().max()))
    plain = {}
    cg_solve(lambda v: h.detach() @ v, r, tol=1e-13, maxiter=10000, stats=plain)
    assert stats["iterations"] * 3 < plain["iterations"], (stats, plain)
    w = torch.randn(70, dtype=x.dtype, generator=g_)

    def first_and_second(v):
        gx, ga = torch.autograd.grad((w * v).sum(), (x, a), create_graph=True)
        return (gx, ga) + torch.autograd.grad((gx ** 2).sum() + (ga ** 2).sum(), (x, a),
                                              retain_graph=True)

    for u, v in zip(first_and_second(got), first_and_second(ref)):
        torch.testing.assert_close(u, v, rtol=1e-7, atol=1e-7 * float(v.abs().max()))


def test_loop_stopped_at_max_iter_is_finished_by_newton_steps_and_hvp_exact():
    # Gaussian clouds at blur 0.05, balanced and debiased: the loop stops at max_iter with a
    # marginal error near 4e-5, outside Newton's quadratic region. Two differentiated steps from
    # there gave an HVP 1.4 % off the gradient's finite differences, with only warnings; steps
    # without a graph first bring the start to the tolerance, and the derivatives are exact.
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(80, 3, dtype=torch.float64, generator=gen)
    y = torch.randn(120, 3, dtype=torch.float64, generator=gen) + 1
    v = torch.randn(80, 3, dtype=torch.float64, generator=gen)
    loss = SamplesLoss(blur=0.05, gradient="implicit")

    def grad(x_, create_graph=False):
        x_ = x_.clone().requires_grad_()
        return torch.autograd.grad(loss(x_, y), x_, create_graph=create_graph)[0], x_

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # converged after all: no max_iter warning, no CG one
        g, x1 = grad(x, True)
        (hv,) = torch.autograd.grad((g * v).sum(), x1)
        h = 1e-5
        fd = (grad(x + h * v)[0] - grad(x - h * v)[0]) / (2 * h)
    assert float((hv - fd).norm() / fd.norm()) < 1e-5
