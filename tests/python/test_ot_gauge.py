"""The derivatives of the potentials themselves (potentials=True, solve_sample's f and g) with
gradient="implicit": a balanced problem's potentials are defined up to a shift (f + c, g - c),
and the returned ones must move as finite differences of the forward say, shift included."""
import pytest
import torch

from ot_cases import weighted_clouds
from tessel.ot import SamplesLoss, solve_sample

BLUR = 0.3


def clouds(degenerate):
    a, x, b, y = weighted_clouds(14, 11, seed=7)
    if degenerate:  # a zero weight, and two coincident points
        a = torch.cat((a, a.new_zeros(1)))
        x = torch.cat((x, x[:1]))
    return a, x, b, y


def directional(fn, args, dirs, h=1e-5):
    """d/dt fn(args + t dirs) at 0 by central differences (error O(h^2))."""
    plus = fn(*(t + h * d for t, d in zip(args, dirs)))
    minus = fn(*(t - h * d for t, d in zip(args, dirs)))
    return (plus - minus) / (2 * h)


@pytest.mark.parametrize("reach", [None, 0.6])
@pytest.mark.parametrize("debias", [True, False])
@pytest.mark.parametrize("degenerate", [False, True])
def test_implicit_potentials_match_finite_differences_of_the_forward(reach, debias, degenerate):
    # Before: the gauge had no derivative, and d(F.sum())/dx was 110 % off (balanced only).
    a, x, b, y = clouds(degenerate)
    loss = SamplesLoss(blur=BLUR, reach=reach, debias=debias, potentials=True,
                       gradient="implicit")
    g = torch.Generator().manual_seed(1)
    dx, dy = torch.randn(x.shape, generator=g, dtype=x.dtype), torch.randn(y.shape, generator=g,
                                                                           dtype=y.dtype)
    wf = torch.rand(x.shape[0], generator=g, dtype=x.dtype)
    wg = torch.rand(y.shape[0], generator=g, dtype=y.dtype)

    def objective(u, v):
        F, G = loss(a, u, b, v)
        return (F[0] * wf).sum() + (G[0] * wg).sum()

    u, v = x.clone().requires_grad_(), y.clone().requires_grad_()
    gu, gv = torch.autograd.grad(objective(u, v), (u, v))
    fd = float(directional(objective, (x, y), (dx, dy)))
    # The forward converges to a marginal error of 1e-9, the Newton steps to rounding; the
    # differences' truncation error is O(h^2) ~ 1e-10 for these smooth, O(1) potentials.
    assert float((gu * dx).sum() + (gv * dy).sum()) == pytest.approx(fd, rel=1e-6, abs=1e-7)


@pytest.mark.parametrize("reach", [None, 0.6])
def test_implicit_potentials_match_the_unrolled_loop_at_convergence(reach):
    # Differentiated through every iteration of a converged loop, the potentials put in the same
    # gauge (<a, f> = <b, g>, a function of the fixed point) have the implicit mode's derivative.
    a, x, b, y = clouds(False)
    g = torch.Generator().manual_seed(2)
    wf = torch.rand(x.shape[0], generator=g, dtype=x.dtype)
    wg = torch.rand(y.shape[0], generator=g, dtype=y.dtype)
    grads = {}
    for mode in ("implicit", "unrolled"):
        u = x.clone().requires_grad_()
        r = solve_sample(a, u, b, y, blur=BLUR, reach=reach, tol=1e-13, max_iter=5000,
                         gradient=mode)
        f, gg = r.f, r.g
        if reach is None and mode == "unrolled":
            t = ((a * f).sum() - (b * gg).sum()) / (a.sum() + b.sum())
            f, gg = f - t, gg + t
        (grads[mode],) = torch.autograd.grad((f * wf).sum() + (gg * wg).sum(), u)
    assert torch.allclose(grads["implicit"], grads["unrolled"], rtol=1e-6, atol=1e-8)


def test_the_gauge_leaves_the_value_and_the_plan_alone():
    # Only the potentials' constant moves: the value and the plan's marginals stay.
    a, x, b, y = clouds(False)
    r = solve_sample(a, x, b, y, blur=BLUR, tol=1e-12, gradient="implicit")
    assert float((a * r.f).sum()) == pytest.approx(float((b * r.g).sum()), abs=1e-14)
    value = SamplesLoss(blur=BLUR, gradient="implicit", debias=False)(a, x, b, y)
    assert float(r.value) == pytest.approx(float(value), rel=1e-12)
    row, col = r.marginals
    assert torch.allclose(row, a, atol=1e-10) and torch.allclose(col, b, atol=1e-10)
