"""tessel.ot at the edges of float32's range: clouds far from unit size, blurs tiny against
them, and kernel losses, against dense float64; and the messages of inputs it refuses."""
import pytest
import torch

from ot_cases import weighted_clouds
from tessel.ot import SamplesLoss, solve_sample


def unequal_masses(dtype=torch.float64):
    a, x, b, y = weighted_clouds(12, 9, seed=4)
    return (a * (1 + 1e-6)).to(dtype), x.to(dtype), (b * (1 - 1e-6)).to(dtype), y.to(dtype)


@pytest.mark.parametrize("call", [
    lambda *t: SamplesLoss(blur=0.1)(*t),
    lambda *t: SamplesLoss(blur=0.1, backend="multiscale")(*t),
    lambda *t: SamplesLoss(blur=0.1, gradient="implicit")(*t),
    lambda *t: SamplesLoss(blur=0.1, cost=lambda u, v: ((u[:, :, None] - v[:, None]) ** 2)
                           .sum(-1) / 2)(*t),
    lambda *t: solve_sample(*t, blur=0.1)])
def test_unequal_masses_print_digits_that_tell_them_apart(call):
    # Before: "a sums to 1 and b to 0.999999" from the core (six digits, the core's name), and
    # no error at all with a cost function of dense tensors.
    with pytest.raises(ValueError, match=r"tessel\.ot\.(SamplesLoss|solve_sample): balanced OT "
                       r".* weights a sum to 1\.000001 and b to 0\.999999"):
        call(*unequal_masses())


def exact_clouds(degenerate=False, d=3):
    """Uniform weights that float32 holds exactly (1/16, 1/32), so float32 and float64 solve
    the same problem; degenerate: a zero weight and two coincident points."""
    g = torch.Generator().manual_seed(3)
    x = torch.rand(16, d, generator=g, dtype=torch.float64)
    y = torch.rand(32, d, generator=g, dtype=torch.float64) + 0.3
    a, b = torch.full((16,), 1 / 16, dtype=torch.float64), torch.full((32,), 1 / 32,
                                                                      dtype=torch.float64)
    if degenerate:
        x, a = torch.cat((x, x[:1])), torch.cat((a, a.new_zeros(1)))
        y[1] = y[0]
    return [t.float().double() for t in (a, x, b, y)]


def value_and_grad(loss, a, x, b, y, dtype):
    a, b, y = a.to(dtype), b.to(dtype), y.to(dtype)
    x = x.to(dtype).requires_grad_()
    out = loss(a, x, b, y)
    value = out if not isinstance(out, tuple) else (out[0] * 1.0).sum() + (out[1] * 1.0).sum()
    (gx,) = torch.autograd.grad(value, x)
    return out, gx


# gradient="implicit" refuses such blurs in float64 too (its Newton steps at eps = 1e-40), and
# "unrolled" takes minutes through a thousand float64 iterations of points at 2^60.
OPTIONS = [dict(), dict(backend="multiscale"), dict(potentials=True), dict(reach=0.5)]


@pytest.mark.parametrize("blur,size", [(0.1, 2.0 ** 60), (1e-20, 1.0), (2.0 ** -82, 2.0 ** -30)])
@pytest.mark.parametrize("opts", OPTIONS)
@pytest.mark.parametrize("degenerate", [False, True])
def test_float32_sinkhorn_with_a_blur_tiny_against_the_clouds(blur, size, opts, degenerate):
    """(diameter / blur)^p past 2^100: C / eps, the same at every scale, leaves float32 (NaN
    before: 1.33e35 at 1e18 with blur 0.1, 0.133 with blur 1e-20). The float32 points are
    solved on their exact float64 copies: the result is the float64 one rounded once to float32,
    the gradient too (each a single rounding: 2^-24 relative)."""
    a, x, b, y = exact_clouds(degenerate)
    x, y = x * size, y * size
    reach = opts.get("reach")
    kw = dict(opts, blur=blur, reach=None if reach is None else reach * size)
    ref, g_ref = value_and_grad(SamplesLoss(**kw), a, x, b, y, torch.float64)
    got, g_got = value_and_grad(SamplesLoss(**kw), a, x, b, y, torch.float32)
    u = 2.0 ** -24
    for r, t in zip(ref if isinstance(ref, tuple) else (ref,),
                    got if isinstance(got, tuple) else (got,)):
        assert t.dtype == torch.float32
        assert torch.allclose(t.double(), r, rtol=u, atol=0)
    assert g_got.dtype == torch.float32
    # The float64 envelope gradient itself is not finite at some of these blurs (a limit of the
    # float64 solver, not of the rounding): the float32 one is then that same one.
    ok = torch.isfinite(g_ref)
    assert torch.equal(torch.isfinite(g_got), ok)
    g_ref, g_got = g_ref[ok], g_got[ok]
    assert torch.allclose(g_got.double(), g_ref, rtol=u, atol=u * float(g_ref.abs().max()))


def test_float32_sinkhorn_whose_value_overflows_float32_is_a_clear_error():
    a, x, b, y = (t.float() for t in exact_clouds())
    with pytest.raises(ValueError, match="past float32's range; pass float64 points"):
        SamplesLoss(blur=1e-3)(a, x * 1e30, b, y * 1e30)


def test_float32_sinkhorn_with_an_eps_float32_cannot_hold_at_the_clouds_scale():
    # Clouds of size 2^-16 (left as given before) with blur 2^-62: eps = 2^-124 and 1/eps
    # overflow float32 (NaN before). Divided by a power of two, exactly, they are a problem of
    # unit size, as accurate as the unit-size float32 one.
    a, x, b, y = (t.float() for t in exact_clouds())
    s = 2.0 ** -16
    got = SamplesLoss(blur=2.0 ** -62)(a, x * s, b, y * s)
    unit = SamplesLoss(blur=2.0 ** -46)(a, x, b, y)
    ref = SamplesLoss(blur=2.0 ** -46)(*(t.double() for t in (a, x, b, y)))
    # float32 costs are rounded to 2^-24 and eps is tiny: the softmins are minima of rounded
    # costs, so the value is the float64 one to a few float32 roundings of the costs.
    assert float(unit) == pytest.approx(float(ref), rel=1e-6)
    assert float(got) / s ** 2 == pytest.approx(float(ref), rel=1e-6)


def test_solve_sample_refuses_float32_clouds_too_wide_for_their_blur():
    a, x, b, y = (t.float() for t in exact_clouds())
    with pytest.raises(ValueError, match=r"solve_sample: float32 clouds .* blur=1e-20 .* pass "
                       "float64 points"):
        solve_sample(a, x, b, y, blur=1e-20)


KERNEL_CASES = [("energy", 0.05, 1e-25), ("energy", 0.05, 1e25), ("laplacian", 0.3e-20, 1e-20),
                ("laplacian", 0.3e20, 1e20), ("gaussian", 0.3e20, 1e20),
                ("gaussian", 0.3e-20, 1e-20)]


@pytest.mark.parametrize("name,blur,size", KERNEL_CASES)
@pytest.mark.parametrize("potentials", [False, True])
@pytest.mark.parametrize("degenerate", [False, True])
def test_float32_kernel_losses_far_from_unit_size(name, blur, size, potentials, degenerate):
    """Before: energy at 1e-25 gave 0 (true 1.33e-26), laplacian at 1e-20 -1.2e-7 (true 0.075),
    gaussian at 1e20 NaN. The points and blur are divided by a power of two, exactly: the
    float32 problem is then one of unit size, as far from float64 as those are. Each kernel
    value is a few float32 roundings (2^-24) of O(1) numbers, summed: 1e-5 relative bounds
    the error of the sums of 48^2 of them; the energy's value is a difference of such sums."""
    a, x, b, y = exact_clouds(degenerate)
    loss = SamplesLoss(name, blur=blur, potentials=potentials)
    ref, g_ref = value_and_grad(loss, a, x * size, b, y * size, torch.float64)
    got, g_got = value_and_grad(loss, a, x * size, b, y * size, torch.float32)
    for r, t in zip(ref if potentials else (ref,), got if potentials else (got,)):
        assert t.dtype == torch.float32
        assert torch.allclose(t.double(), r, rtol=1e-5, atol=1e-5 * float(r.abs().max()))
    assert torch.allclose(g_got.double(), g_ref, rtol=1e-4, atol=1e-5 * float(g_ref.abs().max()))


@pytest.mark.parametrize("loss", ["sinkhorn", "energy", "gaussian", "laplacian"])
def test_unit_scale_float32_and_float64_inputs_are_solved_as_given(loss):
    # Ordinary inputs take none of the rescaled or float64 paths: their results are as before.
    a, x, b, y = exact_clouds()
    for dtype in (torch.float32, torch.float64):
        L = SamplesLoss(loss, blur=0.05)
        assert L._float32_scale(x.to(dtype)[None], y.to(dtype)[None], None) == 1


DIST_CASES = [("sinkhorn", 0.1, 2.0 ** 60), ("sinkhorn", 1e-20, 1.0), ("sinkhorn", 0.1 * 2 ** 30,
                                                                      2.0 ** 30)] + KERNEL_CASES


def _sharded(rank, world):
    """Each case's float32 loss and potentials on two ranks (x's rows split 10 + 6), and the
    unequal masses' message."""
    import tessel.distributed as td
    a, x, b, y = exact_clouds()
    rows = slice(0, 10) if rank == 0 else slice(10, 16)
    out = []
    for name, blur, size in DIST_CASES:
        args = (a[rows].float(), (x[rows] * size).float(), b.float() / world, (y * size).float())
        value = td.SamplesLoss(name, blur=blur)(*args)
        F, G = td.SamplesLoss(name, blur=blur, potentials=True)(*args)
        out.append((float(value), F.numpy().copy(), G.numpy().copy(), str(value.dtype)))
    try:
        am, xm, bm, ym = unequal_masses()
        half = slice(0, 6) if rank == 0 else slice(6, 12)
        td.SamplesLoss(blur=0.1)(am[half], xm[half], bm / world, ym)
    except ValueError as e:
        out.append(str(e))
    return out


def test_distributed_float32_far_from_unit_size_matches_one_float64_process():
    # Before: NaN (a tiny blur), a NotImplementedError (clouds at 2^30) or a wrong kernel loss.
    from gloo_ranks import run_ranks
    results = run_ranks(_sharded, 2, 60)
    a, x, b, y = exact_clouds()
    for k, (name, blur, size) in enumerate(DIST_CASES):
        ref = float(SamplesLoss(name, blur=blur)(a, x * size, b, y * size))
        F, G = SamplesLoss(name, blur=blur, potentials=True)(a, x * size, b, y * size)
        for rank in (0, 1):
            value, f, g, dtype = results[rank][k]
            assert dtype == "torch.float32" and value == pytest.approx(ref, rel=1e-5)
            rows = slice(0, 10) if rank == 0 else slice(10, 16)
            assert torch.allclose(torch.from_numpy(f).double(), F[:, rows], rtol=1e-5,
                                  atol=1e-5 * float(F.abs().max()))
            assert torch.allclose(torch.from_numpy(g).double(), G, rtol=1e-5,
                                  atol=1e-5 * float(G.abs().max()))
    assert "weights a sum to 1.000001 and b to 0.999999" in results[0][-1]
