"""Second derivatives of tessel.ot's losses: torch.autograd.functional.hvp (the double-backward
trick) of the implicit and unrolled modes against dense float64 autograd, exact kernel-loss
Hessians, and a clear error wherever a gradient is an envelope one (first order only)."""
import pytest
import torch

from ot_cases import weighted_clouds
from tessel.ot import SamplesLoss, solve_sample
from test_ot_implicit import EPS_BLUR, dense_loss
from test_ot_unrolled import dense_replay

# About the derivatives, not compiled code: a functional.hvp needs some 160 derivative kernels.
pytestmark = pytest.mark.usefixtures("interpreted")


def sq_cost(x, y):
    return ((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1) / 2


def direction(like, seed=1):
    return torch.randn(like.shape, generator=torch.Generator().manual_seed(seed),
                       dtype=like.dtype)


def hvp_by_create_graph(fn, x, v):
    xx = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(fn(xx), xx, create_graph=True)
    (h,) = torch.autograd.grad((g * v).sum(), xx)
    return h


def close(mine, ref, rel):
    """|mine - ref| <= rel * max(1, |ref|_inf): float64 rounding of the solvers' tolerances."""
    err = float((mine - ref).abs().max())
    assert err <= rel * max(1.0, float(ref.abs().max())), err


# ---- functional.hvp: the backward differentiated with respect to its incoming gradient ---------

@pytest.mark.parametrize("reach,debias", [(None, True), (0.6, False)])
def test_functional_hvp_of_the_implicit_mode_equals_dense_autograd(reach, debias):
    a, x, b, y = weighted_clouds(24, 19, seed=0)
    v = direction(x)
    rho = None if reach is None else reach ** 2

    def ours(x_):
        return solve_sample(a, x_, b, y, blur=EPS_BLUR, reach=reach, debias=debias, tol=1e-12,
                            max_iter=20000, gradient="implicit").value

    _, h1 = torch.autograd.functional.hvp(ours, x, v)
    _, h2 = torch.autograd.functional.hvp(
        lambda x_: dense_loss(a, x_, b, y, EPS_BLUR ** 2, rho, rho, debias), x, v)
    # The same tolerance as the create_graph HVP against the same reference (test_ot_implicit).
    close(h1, h2, 1e-9)
    assert float(h2.abs().max()) > 1e-3  # a real second derivative
    loss = SamplesLoss(blur=EPS_BLUR, reach=reach, debias=debias, gradient="implicit")
    _, h3 = torch.autograd.functional.hvp(lambda x_: loss(a, x_, b, y), x, v)
    close(h3, hvp_by_create_graph(lambda x_: loss(a, x_, b, y), x, v), 1e-10)


@pytest.mark.parametrize("reach,debias,p", [(None, True, 2), (0.5, False, 2), (None, True, 1)])
def test_functional_hvp_of_the_unrolled_mode_equals_a_dense_replay(reach, debias, p):
    a, x, b, y = weighted_clouds(21, 17, seed=0)
    blur = 0.1
    kw = dict(p=p, blur=blur, reach=reach, debias=debias)
    schedule = [h[0] for h in solve_sample(a, x, b, y, tol=0.0, update="symmetric",
                                           **kw).history]
    eps, rho = blur ** p, None if reach is None else reach ** p
    v = direction(x)
    loss = SamplesLoss(gradient="unrolled", **kw)
    _, h1 = torch.autograd.functional.hvp(lambda x_: loss(a, x_, b, y), x, v)
    _, h2 = torch.autograd.functional.hvp(
        lambda x_: dense_replay(a, x_, b, y, schedule, eps, rho, debias, p), x, v)
    # The same iterations in the same order: the create_graph test's tolerance (test_ot_unrolled).
    close(h1, h2, 1e-9)
    assert float(h2.abs().max()) > 1e-3


def test_the_kernel_losses_hessian_equals_dense_autograd():
    a, x, b, y = weighted_clouds(12, 9, seed=1)
    v, blur = direction(x), 0.3

    def dense(x_):
        def k(u, w):
            return torch.exp(-((u[:, None] - w[None]) ** 2).sum(-1) / (2 * blur ** 2))
        return 0.5 * a @ k(x_, x_) @ a + 0.5 * b @ k(y, y) @ b - a @ k(x_, y) @ b

    loss = SamplesLoss("gaussian", blur=blur)
    h_ref = hvp_by_create_graph(dense, x, v)
    close(hvp_by_create_graph(lambda x_: loss(a, x_, b, y), x, v), h_ref, 1e-12)
    _, h = torch.autograd.functional.hvp(lambda x_: loss(a, x_, b, y), x, v)
    close(h, h_ref, 1e-12)


# ---- envelope gradients: first order only, in every backend -------------------------------------

ENVELOPES = {
    "online": dict(),
    "online unbalanced": dict(reach=0.5),
    "multiscale": dict(backend="multiscale"),
    "multiscale unbalanced": dict(backend="multiscale", reach=0.5),
    "dense": dict(cost=sq_cost),
}


@pytest.mark.parametrize("name", list(ENVELOPES))
@pytest.mark.parametrize("wrt", ["x", "a"])
def test_an_envelope_gradient_differentiated_again_is_a_clear_error(name, wrt):
    a, x, b, y = weighted_clouds(12, 9, seed=2)
    a, x = a.clone().requires_grad_(), x.clone().requires_grad_()
    loss = SamplesLoss(blur=0.3, **ENVELOPES[name])
    t = x if wrt == "x" else a
    with pytest.raises(RuntimeError, match="first derivatives only"):
        torch.autograd.grad(loss(a, x, b, y), t, create_graph=True)
    with pytest.raises(RuntimeError, match="first derivatives only"):
        torch.autograd.functional.hvp(
            lambda t_: loss(t_, x, b, y) if wrt == "a" else loss(a, t_, b, y), t.detach(),
            torch.ones_like(t))


def test_the_multiscale_error_says_which_backend_gives_second_derivatives():
    a, x, b, y = weighted_clouds(12, 9, seed=2)
    x = x.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="backend='online' with gradient='implicit'"):
        torch.autograd.grad(SamplesLoss(backend="multiscale")(a, x, b, y), x,
                            create_graph=True)


@pytest.mark.parametrize("name", list(ENVELOPES))
def test_envelope_first_derivatives_are_unchanged_by_the_refusal(name):
    a, x, b, y = weighted_clouds(12, 9, seed=3)
    a, x = a.clone().requires_grad_(), x.clone().requires_grad_()
    loss = SamplesLoss(blur=0.3, **ENVELOPES[name])
    ga, gx = torch.autograd.grad(loss(a, x, b, y), (a, x))
    # First order: the same gradient with and without a graph-free backward afterwards.
    ga2, gx2 = torch.autograd.grad(loss(a, x, b, y), (a, x), retain_graph=False)
    assert torch.equal(ga, ga2) and torch.equal(gx, gx2)
    assert bool(torch.isfinite(gx).all()) and float(gx.abs().max()) > 0
