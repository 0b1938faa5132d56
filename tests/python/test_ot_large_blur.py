"""tessel.ot's Sinkhorn losses at a blur far above the costs (up to 1e70), against a stable reference.

At eps = blur^p >> C the log-sum-exp softmin loses everything (exp(-C / eps) rounds to 1): the
loss read 0 in float64 past blur ~ 1e8 and garbage in float32. The reference here is a dense
float64 Sinkhorn that never forms eps-sized numbers: each softmin is nu_i - eps log1p(E[e2(z)])
with nu the weighted mean of C_i. - g, z the centred exponent and e2(z) = exp(z) - 1 - z by its
Taylor series where |z| is small; it iterates to the fixed point (relative change 1e-16).
"""
import functools
import math

import pytest
import torch

import tessel.ot
from tessel.ot import SamplesLoss, _large_blur

F64 = torch.float64
BLURS = [0.1, 1.0, 10.0, 1e3, 1e8, 1e30, 1e70]


def _e2(z):
    small = z.abs() < 1e-2
    zs = torch.where(small, z, torch.zeros_like(z))
    series = zs ** 2 / 2 * (1 + zs / 3 * (1 + zs / 4 * (1 + zs / 5 * (1 + zs / 6 * (1 + zs / 7)))))
    return torch.where(small, series, torch.expm1(z) - z)


def _softmin(eps, C, b, g):
    """-eps log sum_j b_j exp((g_j - C_ij) / eps) without eps-sized intermediates."""
    mass = b.sum()
    beta = b / mass
    h = C - g[None, :]
    nu = (beta * h).sum(1)
    z = -(h - nu[:, None]) / eps
    near = torch.log1p((beta * z).sum(1) + (beta * _e2(z)).sum(1))
    far = torch.logsumexp(z + torch.log(beta), 1)
    return -eps * torch.log(mass) + nu - eps * torch.where(z.max(1)[0] > 1e-2, far, near)


def _cost(u, v, p):
    d2 = ((u[:, None] - v[None]) ** 2).sum(-1)
    return d2 / 2 if p == 2 else d2.sqrt()


def _fixed(step, start, most=20000):
    z = start
    for k in range(most):
        new = step(z)
        change = max(float((n - o).abs().max()) for n, o in zip(new, z))
        z = new
        if k > 3 and change <= 1e-16 * max(float(t.abs().max()) for t in z):
            break
    return z


def reference(a, x, b, y, blur, p=2, reach=None):
    """(divergence, f, g, p, q) at the fixed point, differentiable (through the iterations)."""
    eps = blur ** p
    d = 1.0 if reach is None else 1 / (1 + eps / reach ** p)
    cxy, cyx, cxx, cyy = _cost(x, y, p), _cost(y, x, p), _cost(x, x, p), _cost(y, y, p)

    def xy(z):
        f = d * _softmin(eps, cxy, b, z[1])
        return f, d * _softmin(eps, cyx, a, f)

    f, g = _fixed(xy, (torch.zeros_like(a), torch.zeros_like(b)))
    (pp,) = _fixed(lambda z: ((z[0] + d * _softmin(eps, cxx, a, z[0])) / 2,), (torch.zeros_like(a),))
    (qq,) = _fixed(lambda z: ((z[0] + d * _softmin(eps, cyy, b, z[0])) / 2,), (torch.zeros_like(b),))

    def side(w, pot):
        if reach is None:
            return (w * pot).sum()
        return (w * (reach ** p + eps / 2) * -torch.expm1(-pot / reach ** p)).sum()

    value = side(a, f) + side(b, g) - side(a, pp) - side(b, qq)
    return value, f, g, pp, qq


@functools.lru_cache(maxsize=None)
def balanced_reference(blur):
    """(divergence, its gradient in x) on clouds(): the fixed point iterated without a graph (once
    per blur, for both dtypes), the gradient by the envelope theorem: at the optimal potentials the
    divergence's derivative is that of the dual objectives with the potentials held fixed, the
    plan-weighted derivative of the cost (written with expm1: no eps-sized terms either)."""
    a, x, b, y = clouds()
    with torch.no_grad():
        value, f, g, pp, _ = reference(a, x, b, y, blur)
    eps = blur ** 2
    xx = x.clone().requires_grad_()

    def plan_term(u, w, v, h, fu, gv):
        return -eps * (u[:, None] * w[None, :] *
                       torch.expm1((fu[:, None] + gv[None, :] - _cost(v, h, 2)) / eps)).sum()

    dual = plan_term(a, b, xx, y, f, g) - plan_term(a, a, xx, xx, pp, pp) / 2
    (grad,) = torch.autograd.grad(dual, xx)
    return float(value), grad


def clouds(n=16, m=32, seed=0):
    """Clouds whose uniform weights sum to 1 exactly (powers of two): a mass off by one rounding
    changes OT_eps by eps * 1e-16, which is real at eps = 1e60."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, generator=g, dtype=F64)
    y = torch.rand(m, 3, generator=g, dtype=F64) + 0.3
    return torch.full((n,), 1 / n, dtype=F64), x, torch.full((m,), 1 / m, dtype=F64), y


def _value_and_grad(loss, dtype, a, x, b, y):
    xx = x.to(dtype).requires_grad_()
    v = loss(a.to(dtype), xx, b.to(dtype), y.to(dtype))
    (gx,) = torch.autograd.grad(v, xx)
    return float(v), gx.double()


def _bound(dtype, scale):
    """What each solver is held to, in units of `scale` (the costs' size): float64, the implicit
    loop's marginal tolerance 1e-9 (and rounding); float32, its 1e-5 and float32's rounding."""
    return (1e-9 if dtype == F64 else 1e-5) * scale


@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("blur", BLURS)
def test_divergence_and_gradient_match_reference_at_any_blur(blur, dtype):
    a, x, b, y = clouds()
    ref, gref = balanced_reference(blur)
    v, gx = _value_and_grad(SamplesLoss("sinkhorn", p=2, blur=blur, gradient="implicit"), dtype,
                            a, x, b, y)
    assert abs(v - ref) <= _bound(dtype, 1.0)
    assert float((gx - gref).abs().max()) <= _bound(dtype, float(gref.abs().max()) * 10)


def test_large_blur_limit_is_half_the_squared_mean_difference():
    # The reported case: blur 1e8 read 0.0 in float64 and -7.7e25 or NaN in float32.
    g = torch.Generator().manual_seed(1)
    x = torch.rand(20, 3, generator=g, dtype=F64)
    y = torch.rand(25, 3, generator=g, dtype=F64) + 0.3
    limit = float(((x.mean(0) - y.mean(0)) ** 2).sum() / 2)
    for blur in (1e8, 1e12, 1e30, 1e70):
        for gradient in ("envelope", "implicit", "unrolled"):
            loss = SamplesLoss("sinkhorn", p=2, blur=blur, gradient=gradient)
            assert abs(float(loss(x, y)) - limit) <= 1e-14
            assert abs(float(loss(x.float(), y.float())) - limit) <= 1e-6 * limit * 4
        xx = x.clone().requires_grad_()
        (gx,) = torch.autograd.grad(SamplesLoss("sinkhorn", p=2, blur=blur)(xx, y), xx)
        want = ((x.mean(0) - y.mean(0)) / x.shape[0]).expand_as(gx)
        assert torch.allclose(gx, want, rtol=1e-12, atol=0)


@pytest.mark.parametrize("gradient", ["envelope", "unrolled", "implicit"])
def test_potentials_match_reference(gradient):
    a, x, b, y = clouds()
    # The schedule's loop (envelope, unrolled) stops short of the fixed point by ~span / eps.
    for blur in ((1e4,) if gradient == "implicit" else ()) + (1e8, 1e30):
        _, f, g, pp, qq = reference(a, x, b, y, blur)
        F, G = SamplesLoss("sinkhorn", p=2, blur=blur, potentials=True, gradient=gradient)(x, y)
        # Balanced potentials are defined up to (F + c, G - c): compare in one gauge.
        t = ((a * (F[0] - (f - pp))).sum() - (b * (G[0] - (g - qq))).sum()) / 2
        assert float((F[0] - t - (f - pp)).abs().max()) <= 1e-13
        assert float((G[0] + t - (g - qq)).abs().max()) <= 1e-13


@pytest.mark.parametrize("dtype", [F64, torch.float32])
def test_unbalanced_matches_reference(dtype):
    a, x, b, y = clouds()
    for blur in (1e4, 1e30):
        xx = x.clone().requires_grad_()
        ref, *_ = reference(a, xx, b, y, blur, reach=1.0)
        (gref,) = torch.autograd.grad(ref, xx)
        loss = SamplesLoss("sinkhorn", p=2, blur=blur, reach=1.0, gradient="implicit")
        v, gx = _value_and_grad(loss, dtype, a, x, b, y)
        tol = 1e-13 if dtype == F64 else 1e-6
        assert abs(v - float(ref)) <= tol * abs(float(ref)) * 4
        assert float((gx - gref).abs().max()) <= tol * float(gref.abs().max()) * 4


@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("gradient", ["envelope", "implicit", "unrolled"])
def test_the_switch_is_continuous(monkeypatch, dtype, gradient):
    """At the switch the log-sum-exp loop (the core's) and the series replay of it agree to the
    loop's rounding there: ~rounding * eps / span, eps / span = 1 / _SWITCH."""
    a, x, b, y = clouds()
    switch = _large_blur._SWITCH[dtype]
    span = _large_blur.cost_span(x, y, None, 2)
    blur = math.sqrt(span / switch) * 1.001
    loss = SamplesLoss("sinkhorn", p=2, blur=blur, gradient=gradient)
    series = _value_and_grad(loss, dtype, a, x, b, y)
    monkeypatch.setitem(_large_blur._SWITCH, dtype, 0.0)
    looped = _value_and_grad(loss, dtype, a, x, b, y)
    rounding = torch.finfo(dtype).eps * 64 / switch
    assert abs(series[0] - looped[0]) <= rounding * span
    assert float((series[1] - looped[1]).abs().max()) <= rounding * float(looped[1].abs().max())


def test_debias_off_and_multiscale_and_solve_sample_at_large_blur():
    a, x, b, y = clouds()
    blur = 1e30
    ref_div, f, g, pp, qq = reference(a, x, b, y, blur)
    ot_ref = float((a * f).sum() + (b * g).sum())
    assert abs(float(SamplesLoss("sinkhorn", blur=blur, debias=False)(x, y)) - ot_ref) <= 1e-14
    ms = SamplesLoss("sinkhorn", blur=blur, backend="multiscale")(x, y)
    assert abs(float(ms) - float(ref_div)) <= 1e-14
    r = tessel.ot.solve_sample(None, x, None, y, blur=blur, tol=1e-12)
    assert r.converged and abs(float(r.value) - ot_ref) <= 1e-14
    assert r.marginal_error <= 1e-12


def test_degenerate_inputs_at_large_blur():
    a, x, b, y = clouds()
    blur = 1e30
    same = torch.zeros(5, 3, dtype=F64, requires_grad=True)
    v = SamplesLoss("sinkhorn", blur=blur)(same, torch.zeros(7, 3, dtype=F64))
    (gx,) = torch.autograd.grad(v, same)
    assert float(v) == 0.0 and bool((gx == 0).all())
    a0 = a.clone()
    a0[:4] = 0
    a0 = a0 / a0.sum()
    ref, *_ = reference(a0, x, b, y, blur)
    v = SamplesLoss("sinkhorn", blur=blur, gradient="implicit")(a0, x, b, y)
    assert abs(float(v) - float(ref)) <= 1e-14


def kernel_reference(name, blur, a, x, b, y):
    """Half the squared kernel norm of a - b with 1 - k = -expm1(-t) (no rounding of 1), and
    the size of its terms (what rounding is relative to)."""
    def q(u, v):
        d2 = ((u[:, None] - v[None]) ** 2).sum(-1)
        # |x - y| with a zero derivative at 0 (KeOps's and tessel's convention), not NaN.
        dist = torch.where(d2 > 0, d2, torch.ones_like(d2)).sqrt() * (d2 > 0)
        return -torch.expm1(-(d2 / (2 * blur ** 2) if name == "gaussian" else dist / blur))

    terms = [0.5 * a @ q(x, x) @ a, 0.5 * b @ q(y, y) @ b, a @ q(x, y) @ b]
    dm = a.sum() - b.sum()
    return 0.5 * dm * dm - terms[0] - terms[1] + terms[2], float(sum(t.abs() for t in terms))


@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("name", ["gaussian", "laplacian"])
@pytest.mark.parametrize("blur", [0.1, 1.0, 100.0, 1e4, 1e8, 1e30])
def test_kernel_losses_at_any_blur(name, blur, dtype):
    """A very wide kernel is 1 - t + ...: the norm is a difference of sums of k ~ 1 (0.0 in
    float64 at blur 1e8 for the Gaussian, -2e9 in float32)."""
    a, x, b, y = clouds()
    xx = x.clone().requires_grad_()
    ref, size = kernel_reference(name, blur, a, xx, b, y)
    (gref,) = torch.autograd.grad(ref, xx)
    v, gx = _value_and_grad(SamplesLoss(name, blur=blur), dtype, a, x, b, y)
    rounding, tiny = 64 * torch.finfo(dtype).eps, torch.finfo(dtype).tiny  # tiny: underflow
    assert abs(v - float(ref)) <= rounding * size + tiny
    assert float((gx - gref).abs().max()) <= rounding * 64 * float(gref.abs().max()) + tiny
    F, G = SamplesLoss(name, blur=blur, potentials=True)(a.to(dtype), x.to(dtype), b.to(dtype),
                                                          y.to(dtype))
    # GeomLoss's potentials: F = K(x, x) a - K(x, y) b, here exactly -(Q(x, x) a - Q(x, y) b).
    blur2 = blur ** 2
    dxx, dxy = ((x[:, None] - x[None]) ** 2).sum(-1), ((x[:, None] - y[None]) ** 2).sum(-1)
    t = (dxx / (2 * blur2), dxy / (2 * blur2)) if name == "gaussian" else (
        dxx.sqrt() / blur, dxy.sqrt() / blur)
    fref = -(-torch.expm1(-t[0]) @ a - -torch.expm1(-t[1]) @ b)
    assert float((F[0].double() - fref).abs().max()) <= rounding * 4 * max(
        float(t[1].max()), 1.0) + 1e-300


def _sharded(rank, world):
    """Each rank's value and gradient rows for the sharded losses at large blurs (world 2)."""
    import tessel.distributed as td
    a, x, b, y = clouds()
    rows_x, rows_y = (slice(0, 5), slice(5, 16)), (slice(0, 20), slice(20, 32))
    out = []
    for name, blur, debias, dtype in (("sinkhorn", 1e30, True, F64), ("sinkhorn", 1e8, False, F64),
                                      ("sinkhorn", 1e30, True, torch.float32),
                                      ("gaussian", 1e8, True, F64),
                                      ("laplacian", 1e30, True, torch.float32)):
        xr = x[rows_x[rank]].to(dtype).requires_grad_()
        loss = td.SamplesLoss(name, blur=blur, debias=debias)
        v = loss(a[rows_x[rank]].to(dtype), xr, b[rows_y[rank]].to(dtype),
                 y[rows_y[rank]].to(dtype))
        v.backward()
        out.append((float(v), xr.grad.double()))
    return out


def test_sharded_losses_at_large_blur():
    from gloo_ranks import run_ranks
    results = run_ranks(_sharded, 2, 120)
    a, x, b, y = clouds()
    cases = [("sinkhorn", 1e30, True, F64), ("sinkhorn", 1e8, False, F64),
             ("sinkhorn", 1e30, True, torch.float32), ("gaussian", 1e8, True, F64),
             ("laplacian", 1e30, True, torch.float32)]
    for k, (name, blur, debias, dtype) in enumerate(cases):
        want, gwant = _value_and_grad(SamplesLoss(name, blur=blur, debias=debias), dtype,
                                      a, x, b, y)
        got = results[0][k][0]
        grad = torch.cat([results[r][k][1] for r in range(2)])
        rounding = 64 * torch.finfo(dtype).eps
        assert got == results[1][k][0]
        assert abs(got - want) <= rounding * abs(want) and want != 0
        assert float((grad - gwant).abs().max()) <= rounding * float(gwant.abs().max())


def _dense_cost(u, v):
    return ((u[:, :, None] - v[:, None]) ** 2).sum(-1) / 2


@pytest.mark.parametrize("dtype", [F64, torch.float32])
@pytest.mark.parametrize("reach", [None, 1.0])
def test_dense_cost_function_at_large_blur(dtype, reach):
    """A cost given as a function of dense tensors (GeomLoss's tensorized backend) runs its own
    loop on the stored matrices: the same series there, the same values and gradients."""
    a, x, b, y = clouds()
    for blur in (10.0, 1e8, 1e30):
        for debias in (True, False):
            online = SamplesLoss("sinkhorn", blur=blur, reach=reach, debias=debias)
            dense = SamplesLoss("sinkhorn", blur=blur, reach=reach, debias=debias,
                                cost=_dense_cost)
            want, gwant = _value_and_grad(online, dtype, a, x, b, y)
            got, grad = _value_and_grad(dense, dtype, a, x, b, y)
            rounding = 1e-12 if dtype == F64 else 1e-5  # float32: its loops' own rounding
            assert abs(got - want) <= rounding * abs(want) and want != 0
            assert float((grad - gwant).abs().max()) <= rounding * float(gwant.abs().max())
