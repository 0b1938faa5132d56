"""tessel.ot on edge inputs, every backend alike: one weight given and the other None, one-point
and empty clouds, points and lengths at extreme scales; references are GeomLoss (tensorized,
float64) and the same problem at unit scale."""
import re

import pytest
import torch

from ot_cases import weighted_clouds

geomloss = pytest.importorskip("geomloss")

from tessel.ot import SamplesLoss, solve_sample  # noqa: E402
from test_ot_samples_loss import exact_kernel  # noqa: E402


def sq_cost(x, y):
    """|x - y|^2 / 2 as a function of dense tensors (tessel's dense backend)."""
    return ((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1) / 2


# Every way tessel.ot computes a loss: the online envelope, implicit and unrolled modes, the
# dense backend (a cost function), the multiscale solver and the three kernel losses.
BACKENDS = {
    "online": dict(),
    "implicit": dict(gradient="implicit"),
    "unrolled": dict(gradient="unrolled"),
    "dense": dict(cost=sq_cost),
    "multiscale": dict(backend="multiscale", truncate=None),
    "gaussian": dict(loss="gaussian"),
    "laplacian": dict(loss="laplacian"),
    "energy": dict(loss="energy"),
}
KERNEL_NAMES = ("gaussian", "laplacian", "energy")


def geomloss_reference(name, blur):
    """GeomLoss's tensorized loss of the same kind (exact kernels: see exact_kernel)."""
    if name in KERNEL_NAMES:
        return geomloss.SamplesLoss(name, blur=blur, backend="tensorized",
                                    kernel=exact_kernel(name))
    return geomloss.SamplesLoss("sinkhorn", blur=blur, backend="tensorized")


def uniform(n, like):
    return torch.full((n,), 1 / n, dtype=like.dtype)


# ---- one weight None: uniform for that cloud only (GeomLoss's semantics) ----------------------

@pytest.mark.parametrize("name", list(BACKENDS))
@pytest.mark.parametrize("missing", ["a", "b"])
def test_a_none_weight_is_uniform_for_its_own_cloud_only(name, missing):
    a, x, b, y = weighted_clouds(14, 11, seed=3, floor=0.02)
    a, b = a ** 4 / (a ** 4).sum(), b ** 4 / (b ** 4).sum()  # far from uniform
    blur = 0.3
    loss = SamplesLoss(blur=blur, **BACKENDS[name])
    given = (None, x, b, y) if missing == "a" else (a, x, None, y)
    explicit = ((uniform(14, x), x, b, y) if missing == "a" else (a, x, uniform(11, y), y))
    got, want = loss(*given), loss(*explicit)
    # The same computation once the weights are built: equal to rounding.
    assert float(got) == pytest.approx(float(want), rel=1e-12, abs=1e-15)
    # Not the loss between two uniform clouds (what the four-argument call used to give).
    both = float(loss(x, y))
    assert abs(float(got) - both) > 1e-3 * both
    if name in ("online", "unrolled", "dense") or name in KERNEL_NAMES:
        # GeomLoss runs the same schedule (Sinkhorn; the implicit mode iterates further, to
        # convergence) or the same closed form (kernels).
        ref = float(geomloss_reference(name, blur)(*explicit))
        assert float(got) == pytest.approx(ref, abs=1e-7 if name not in KERNEL_NAMES else 1e-12)


@pytest.mark.parametrize("name", ["online", "multiscale", "gaussian"])
def test_a_none_weight_gives_the_other_weights_gradient(name):
    a, x, b, y = weighted_clouds(12, 9, seed=5)
    b = b.clone().requires_grad_()
    loss = SamplesLoss(blur=0.3, **BACKENDS[name])
    (g_none,) = torch.autograd.grad(loss(None, x, b, y), b)
    (g_expl,) = torch.autograd.grad(loss(uniform(12, x), x, b, y), b)
    assert torch.allclose(g_none, g_expl, rtol=0, atol=1e-13)


def test_a_none_weight_in_a_batch_and_in_solve_sample():
    a, x, b, y = weighted_clouds(10, 8, batch=3, seed=2)
    loss = SamplesLoss(blur=0.3)
    got = loss(None, x, b, y)
    want = loss(torch.full((3, 10), 0.1, dtype=x.dtype), x, b, y)
    assert torch.allclose(got, want, rtol=1e-12, atol=0)
    a, x, b, y = weighted_clouds(10, 8, seed=2)
    for given, explicit in (((None, x, b, y), (uniform(10, x), x, b, y)),
                            ((a, x, None, y), (a, x, uniform(8, y), y))):
        r1 = solve_sample(*given, blur=0.3, debias=True)
        r2 = solve_sample(*explicit, blur=0.3, debias=True)
        assert float(r1.value) == pytest.approx(float(r2.value), rel=1e-12)
        assert torch.allclose(r1.marginals[1], r2.marginals[1], rtol=0, atol=1e-14)


# ---- one-point clouds --------------------------------------------------------------------------

@pytest.mark.parametrize("name", KERNEL_NAMES)
@pytest.mark.parametrize("n,m", [(1, 6), (6, 1), (1, 1)])
@pytest.mark.parametrize("potentials", [False, True])
def test_kernel_losses_of_one_point_clouds_match_geomloss(name, n, m, potentials):
    a, x, b, y = weighted_clouds(n, m, d=3, seed=n + 2 * m)
    args = [t.clone().requires_grad_() for t in (a, x, b, y)]
    kw = dict(blur=0.4, potentials=potentials)
    got = SamplesLoss(name, **kw)(*args)
    want = geomloss.SamplesLoss(name, backend="tensorized", kernel=exact_kernel(name),
                                **kw)(*args)
    if potentials:
        assert got[0].shape == want[0].shape and got[1].shape == want[1].shape
        got, want = got[0].sum() + 2 * got[1].sum(), want[0].sum() + 2 * want[1].sum()
    # Closed forms with a handful of terms of size O(1): float64 rounding only.
    assert float(got) == pytest.approx(float(want), abs=1e-13)
    gg = torch.autograd.grad(got, args, allow_unused=True)
    gw = torch.autograd.grad(want, args, allow_unused=True)
    for u, v in zip(gg, gw):
        u = torch.zeros_like(v) if u is None else u
        v = torch.zeros_like(u) if v is None else v
        assert torch.allclose(u, v, rtol=0, atol=1e-12), (u - v).abs().max()


# ---- empty clouds ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["online", "implicit", "unrolled", "dense", "multiscale"])
@pytest.mark.parametrize("n,m,empty", [(0, 5, "x"), (5, 0, "y"), (0, 0, "x")])
def test_sinkhorn_of_an_empty_cloud_is_one_clear_error(name, n, m, empty):
    x = torch.rand(n, 2, dtype=torch.float64)
    y = torch.rand(m, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match=rf"SamplesLoss: {empty} has shape .*at least one point"):
        SamplesLoss(**BACKENDS[name])(x, y)
    with pytest.raises(ValueError, match=rf"solve_sample: {empty} has shape .*at least one"):
        solve_sample(None, x, None, y, backend="multiscale" if name == "multiscale" else "auto")


def test_an_empty_cloud_in_a_list_batch_is_the_same_error():
    x = [torch.rand(4, 2, dtype=torch.float64), torch.rand(0, 2, dtype=torch.float64)]
    y = [torch.rand(3, 2, dtype=torch.float64), torch.rand(3, 2, dtype=torch.float64)]
    with pytest.raises(ValueError, match=r"SamplesLoss: x\[1\] has shape \(0, 2\)"):
        SamplesLoss(backend="multiscale")(x, y)


def test_a_kernel_loss_of_an_empty_cloud_is_the_other_clouds_norm():
    _, _, b, y = weighted_clouds(1, 7, seed=1)
    x = torch.zeros(0, 2, dtype=torch.float64)
    a = torch.zeros(0, dtype=torch.float64)
    got = SamplesLoss("gaussian", blur=0.5)(a, x, b, y)
    k = torch.exp(-torch.cdist(y, y) ** 2 / (2 * 0.5 ** 2))
    assert float(got) == pytest.approx(float(0.5 * b @ k @ b), rel=1e-13)


# ---- extreme scales ----------------------------------------------------------------------------

@pytest.mark.parametrize("name,value", [("blur", 1e-200), ("blur", 1e-300), ("blur", 1e200),
                                        ("reach", 1e-300), ("reach", 1e200),
                                        ("diameter", 1e-250), ("reach_x", 1e-200)])
@pytest.mark.parametrize("loss", ["sinkhorn", "gaussian"])
def test_a_length_whose_power_float64_cannot_hold_is_a_clear_error(name, value, loss):
    a, x, b, y = weighted_clouds(8, 6, seed=1)
    if loss != "sinkhorn" and name != "blur":
        return
    want = re.escape(f"{name}={value!r} gives {name}^p")
    with pytest.raises(ValueError, match="SamplesLoss: " + want):
        SamplesLoss(loss, **{name: value})(a, x, b, y)
    if loss == "sinkhorn":
        with pytest.raises(ValueError, match=want):
            solve_sample(a, x, b, y, **{name: value})


@pytest.mark.parametrize("p,reach", [(2, None), (1, None), (2, 0.6)])
@pytest.mark.parametrize("k", [-200, 200])
def test_a_problem_scaled_by_a_power_of_two_gives_the_value_times_scale_to_the_p(p, reach, k):
    # Scaling every length by 2^k is exact in floating point, so the solver meets the same
    # numbers times powers of two: the value scales as (2^k)^p to rounding.
    a, x, b, y = weighted_clouds(12, 9, seed=4)
    s = 2.0 ** k
    kw = dict(p=p, blur=0.2, reach=reach)
    unit = float(SamplesLoss(**kw)(a, x, b, y))
    scaled_kw = dict(kw, blur=0.2 * s, reach=None if reach is None else reach * s)
    got = float(SamplesLoss(**scaled_kw)(a, x * s, b, y * s))
    assert got / s ** p == pytest.approx(unit, rel=1e-12)


@pytest.mark.parametrize("backend", ["online", "implicit", "unrolled", "multiscale"])
@pytest.mark.parametrize("p,reach", [(2, None), (1, None), (2, 0.6)])
@pytest.mark.parametrize("k", [-70, -40, 40, 90])
def test_float32_clouds_far_from_unit_size_are_as_accurate_as_at_unit_size(backend, p, reach, k):
    """float32 costs of points at 2^90 overflow (NaN before) and those of points at 2^-70 fall
    below the normal range (a silently wrong value before, 2e-34 for 2.5e-21): tessel.ot divides
    the points and lengths by a power of two, which is exact, and scales the value back. The
    solver's float32 arithmetic is then that of a unit-size problem, up to the rounding of its
    own schedule: the value and the gradient, scaled back, are as far from the float64 answer as
    the unit-size float32 problem's are (twice that, plus a few float32 roundings)."""
    if not -120 <= p * k <= 120:
        pytest.skip("the value itself is outside float32's normal range")
    kw = {"implicit": dict(gradient="implicit"), "unrolled": dict(gradient="unrolled"),
          "multiscale": dict(backend="multiscale")}.get(backend, {})
    clouds = weighted_clouds(12, 9, seed=4)
    s, u = 2.0 ** k, 2.0 ** -24

    def loss_and_grad(dtype, scale):
        a, x, b, y = (t.to(dtype) for t in clouds)
        xs = (x * scale).requires_grad_()
        L = SamplesLoss(p=p, blur=0.2 * scale, reach=None if reach is None else reach * scale,
                        **kw)(a, xs, b, y * scale)
        (g,) = torch.autograd.grad(L, xs)
        return float(L) / scale ** p, g.double() / scale ** (p - 1)

    ref, g_ref = loss_and_grad(torch.float64, 1.0)
    unit, g_unit = loss_and_grad(torch.float32, 1.0)
    got, g_got = loss_and_grad(torch.float32, s)
    assert abs(got - ref) <= 2 * abs(unit - ref) + 4 * u * abs(ref)
    assert (g_got - g_ref).norm() <= 2 * (g_unit - g_ref).norm() + 4 * u * g_ref.norm()


def test_a_float32_loss_past_float32s_range_is_a_clear_error():
    a, x, b, y = (t.float() for t in weighted_clouds(12, 9, seed=4))
    with pytest.raises(ValueError, match="past float32's range; pass float64 points"):
        SamplesLoss(blur=0.2 * 1e30)(a, x * 1e30, b, y * 1e30)


@pytest.mark.parametrize("k", [-70, 100])
def test_solve_sample_refuses_float32_clouds_whose_squared_distances_float32_cannot_hold(k):
    # Its result (potentials, plan, history) is not rescaled: NaN before, now a clear error.
    a, x, b, y = weighted_clouds(12, 9, seed=4)
    s = 2.0 ** k
    with pytest.raises(ValueError, match="float32 clouds of size .* pass float64 points"):
        solve_sample(a.float(), x.float() * s, b.float(), y.float() * s, blur=0.2 * s)
    r = solve_sample(a, x * s, b, y * s, blur=0.2 * s)
    assert torch.isfinite(r.value).all()
