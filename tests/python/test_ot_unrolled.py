"""tessel.ot's unrolled gradient mode: the loop's own iterations differentiated, against a dense
float64 replay of the same iterations under plain autograd (values, gradients, Hessian-vector
products), with and without checkpointing; equal to the implicit mode once converged."""
import pytest
import torch

from ot_cases import weighted_clouds
from tessel.ot import SamplesLoss, solve_sample


def clouds(n=21, m=17, d=2, seed=0):
    return weighted_clouds(n, m, d, seed)


def dense_replay(a, x, b, y, schedule, eps, rho, debias, p=2):
    """GeomLoss's loop (symmetric averaged updates over `schedule`, then one extrapolation at
    eps) on dense matrices; returns the loss, differentiable by plain autograd."""
    def cost(u, v):
        d2 = ((u[:, None, :] - v[None, :, :]) ** 2).sum(-1)
        return d2 / 2 if p == 2 else d2.clamp_min(1e-300).sqrt() * (d2 > 0)

    def softmin(e, C, logw, pot):
        return -e * torch.logsumexp(logw[None, :] + (pot[None, :] - C) / e, 1)

    def damp(e):
        return 1.0 if rho is None else 1 / (1 + e / rho)

    Cxy, Cxx, Cyy = cost(x, y), cost(x, x), cost(y, y)
    la, lb = a.log(), b.log()

    def extrapolate(st, e):
        f, g = damp(e) * softmin(e, Cxy, lb, st[1]), damp(e) * softmin(e, Cxy.t(), la, st[0])
        if not debias:
            return (f, g)
        return (f, g, damp(e) * softmin(e, Cxx, la, st[2]), damp(e) * softmin(e, Cyy, lb, st[3]))

    zero = (torch.zeros_like(a), torch.zeros_like(b))
    st = extrapolate(zero * 2, schedule[0])
    for e in schedule:
        new = extrapolate(st, e)
        st = tuple((u + v) / 2 for u, v in zip(st, new))
    st = extrapolate(st, eps)

    def side(w, pot):
        return (w * pot).sum() if rho is None else (
            w * ((rho + eps / 2) * (1 - torch.exp(-pot / rho)))).sum()

    value = side(a, st[0]) + side(b, st[1])
    return value - side(a, st[2]) - side(b, st[3]) if debias else value


# The mathematics of many second-order derivative reductions: interpreted (compiling them all
# cost minutes); the compiled path of these reductions is the other tests'.
@pytest.mark.usefixtures("interpreted")
@pytest.mark.parametrize("reach,debias,p,snapshots", [
    (None, True, 2, None), (None, False, 2, 3), (0.5, True, 2, 2), (0.5, False, 2, None),
    (None, True, 1, 4)])
def test_equal_dense_replay_to_second_order(reach, debias, p, snapshots):
    a, x, b, y = clouds()
    blur = 0.1
    kw = dict(p=p, blur=blur, reach=reach, debias=debias)
    hist = solve_sample(a, x, b, y, tol=0.0, update="symmetric", **kw).history
    schedule = [h[0] for h in hist]
    eps, rho = blur ** p, None if reach is None else reach ** p
    v = torch.randn_like(x)

    def derivs(fn):
        xx = x.clone().requires_grad_()
        value = fn(xx)
        (g,) = torch.autograd.grad(value, xx, create_graph=True)
        (h,) = torch.autograd.grad((g * v).sum(), xx)
        return float(value), g.detach(), h

    loss = SamplesLoss(gradient="unrolled", snapshots=snapshots, **kw)
    v1, g1, h1 = derivs(lambda xx: loss(a, xx, b, y))
    v2, g2, h2 = derivs(lambda xx: dense_replay(a, xx, b, y, schedule, eps, rho, debias, p))
    assert v1 == pytest.approx(v2, abs=1e-12)
    assert torch.allclose(g1, g2, atol=1e-11)
    assert torch.allclose(h1, h2, atol=1e-9 * max(1.0, float(h2.abs().max())))


def test_unrolled_values_equal_envelope_and_converged_gradients_equal_implicit():
    a, x, b, y = clouds(seed=1)
    assert float(SamplesLoss(gradient="unrolled")(a, x, b, y)) == pytest.approx(
        float(SamplesLoss()(a, x, b, y)), abs=1e-14)
    grads = []
    for mode in ("unrolled", "implicit"):
        xx = x.clone().requires_grad_()
        r = solve_sample(a, xx, b, y, blur=0.3, reach=0.6, tol=1e-12, max_iter=5000,
                         gradient=mode, snapshots=4)
        grads.append(torch.autograd.grad(r.value, xx)[0])
    assert torch.allclose(grads[0], grads[1], atol=1e-11)


def test_bad_snapshots():
    with pytest.raises(ValueError, match="snapshots must be None"):
        SamplesLoss(gradient="unrolled", snapshots=0)


@pytest.mark.parametrize("gradient", ["envelope", "implicit", "unrolled"])
def test_grad_mode_untouched(gradient):
    a, x, b, y = clouds(seed=2)
    loss = SamplesLoss(gradient=gradient, snapshots=2 if gradient == "unrolled" else None)
    with torch.no_grad():
        v = loss(a, x.clone().requires_grad_(), b, y)
        assert not torch.is_grad_enabled() and not v.requires_grad
    xx = x.clone().requires_grad_()
    v = loss(a, xx, b, y)
    assert torch.is_grad_enabled() and v.requires_grad
    (g,) = torch.autograd.grad(v, xx)
    assert torch.isfinite(g).all()


def test_hvp_with_a_given_diameter_is_the_derivative_of_the_gradient():
    """With diameter= the eps schedule does not move with the points, so the unrolled Hessian-
    vector product is the derivative of the unrolled gradient, to finite differences' accuracy.
    (With the diameter taken from the clouds it is held fixed, as documented: 6e-3 apart here.)"""
    g = torch.Generator().manual_seed(0)
    x = torch.rand(16, 3, generator=g, dtype=torch.float64)
    y = torch.rand(32, 3, generator=g, dtype=torch.float64) + 0.3
    v = torch.randn(16, 3, generator=g, dtype=torch.float64)
    loss = SamplesLoss("sinkhorn", p=2, blur=0.5, gradient="unrolled", diameter=2.0)

    def grad(xx):
        xx = xx.clone().requires_grad_()
        return torch.autograd.grad(loss(xx, y), xx, create_graph=True)[0], xx

    gx, xx = grad(x)
    (hv,) = torch.autograd.grad((gx * v).sum(), xx)
    h = 1e-5  # central differences: h^2 times the third derivative, plus rounding / h
    fd = (grad(x + h * v)[0] - grad(x - h * v)[0]).detach() / (2 * h)
    assert float((hv - fd).norm() / fd.norm()) < 1e-7


def _rel(got, ref):
    return float((got - ref).norm() / ref.norm())


@pytest.mark.parametrize("gradient,snapshots", [
    ("unrolled", 3), ("unrolled", 1), ("unrolled", None), ("implicit", None), ("envelope", None)])
def test_non_leaf_inputs_get_their_leaves_gradients(gradient, snapshots):
    """Points moved to the GPU or made by a network are non-leaf tensors: the gradient with
    respect to them is that of their leaves (a clone is the identity), and with snapshots it is
    the unrolled loop's without. The checkpointed loop read the batch's k-th cloud x[k], a view of
    x: x's own share of the loop went straight to the leaf (d/dx was 70 % off, d/dx0 right)."""
    a0, x0, b0, y0 = (t.clone().requires_grad_() for t in clouds(n=30, m=25, d=3, seed=5))
    leaves = (a0, x0, b0, y0)
    per_mode = {}
    for snaps in {snapshots, None}:
        loss = SamplesLoss("sinkhorn", blur=0.1, gradient=gradient, snapshots=snaps)
        made = tuple(t.clone() for t in leaves)
        per_mode[snaps] = torch.autograd.grad(loss(*made), made + leaves)
    got = per_mode[snapshots]
    for j in range(4):
        # The values differ from the no-snapshots ones by the order of the additions only.
        assert _rel(got[j], got[4 + j]) <= 1e-12
        assert _rel(got[j], per_mode[None][j]) <= 1e-12
