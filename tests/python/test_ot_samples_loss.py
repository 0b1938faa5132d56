"""tessel.ot.SamplesLoss against GeomLoss's tensorized backend (float64): values, potentials and
gradients in x, y, a, b on a grid of options; degenerate inputs; grad mode; bad inputs."""
import itertools

import pytest
import torch

geomloss = pytest.importorskip("geomloss")

from tessel.ot import SamplesLoss  # noqa: E402


def exact_distances(x, y):
    """|x - y| with a zero gradient at 0. GeomLoss's own p = 1 cost clamps |x - y| below at 1e-4
    (sqrt(max(d^2, 1e-8))), a bias of order 1e-5 on the diagonal of C(x, x); tessel's p = 1 cost
    is the exact distance (GeomLoss's online formula Norm2(X-Y)), so the reference uses it too."""
    d2 = ((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1)
    pos = d2 > 0
    return torch.where(pos, d2.clamp_min(1e-300).sqrt(), torch.zeros_like(d2))


def reference(**kw):
    kw = dict(kw)
    cost = kw.pop("cost", exact_distances if kw.get("p", 2) == 1 else None)
    return geomloss.SamplesLoss(backend="tensorized", cost=cost, **kw)


def clouds(n, m, d, batch=None, seed=0, zero=()):
    g = torch.Generator().manual_seed(seed)
    lead = () if batch is None else (batch,)
    x = torch.rand(lead + (n, d), generator=g, dtype=torch.float64)
    y = torch.rand(lead + (m, d), generator=g, dtype=torch.float64) + 0.2
    a = torch.rand(lead + (n,), generator=g, dtype=torch.float64) + 0.1
    b = torch.rand(lead + (m,), generator=g, dtype=torch.float64) + 0.1
    for i in zero:
        a[..., i] = 0
    a, b = a / a.sum(-1, keepdim=True), b / b.sum(-1, keepdim=True)
    return [t.requires_grad_() for t in (a, x, b, y)]


def compare(kw, args, tol=1e-7):
    want = reference(**kw)(*args)
    got = SamplesLoss(**kw)(*args)
    if kw.get("potentials"):
        assert got[0].shape == want[0].shape and got[1].shape == want[1].shape
        for u, v in zip(got, want):
            assert torch.allclose(u, v, rtol=0, atol=tol), (u - v).abs().max()
        g = torch.Generator().manual_seed(5)
        r = [torch.rand(t.shape, generator=g, dtype=t.dtype) for t in want]
        want = (want[0] * r[0]).sum() + (want[1] * r[1]).sum()
        got = (got[0] * r[0]).sum() + (got[1] * r[1]).sum()
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=0, atol=tol), (got - want).abs().max()
    fix = None
    if kw.get("reach") is not None and not kw.get("potentials"):
        fix = unbalanced_gradients(kw, args)
    compare_grads(got, want, args, tol, fix)


def unbalanced_gradients(kw, args):
    """GeomLoss's unbalanced gradients turned into the fixed point's (tessel's): its
    UnbalancedWeight scales the exponentiated potentials by rho + eps/2 and documents rho + eps
    for the backward (Sejourne et al. 2019, Prop. 12), but autograd never calls an nn.Module's
    `backward` method, so GeomLoss's gradients in the points carry rho + eps/2. tessel applies
    rho + eps, and the envelope theorem's weight gradient (rho + eps)(1 - e^{-f/rho}) - eps/2,
    which tests/python/test_ot_implicit.py checks against dense float64 autograd.
    Returns g -> g' for the gradients in (a, x, b, y) or (x, y)."""
    p, blur, reach = kw.get("p", 2), kw.get("blur", 0.05), kw["reach"]
    eps, rho = blur ** p, reach ** p
    c = (rho + eps) / (rho + eps / 2)
    if kw.get("debias", True):
        return lambda k, g: c * g
    four = len(args) == 4
    F, G = reference(**dict(kw, potentials=True))(*args)
    pots = {0: F, 2: G} if four else {}

    def fix(k, g):
        if k in pots:  # a weight: g_geomloss = (rho + eps/2)(1 - e^{-f/rho}) for each weight
            return g - eps / 2 * torch.exp(-pots[k].detach().reshape(g.shape) / rho)
        return c * g
    return fix


def compare_grads(got, want, args, tol, fix=None):
    """The gradients of got and want in every argument (None counts as zeros); fix(k, g) maps
    the reference's gradient in argument k to the one expected of tessel."""
    wrt = [t for t in args if t.requires_grad]
    gw = torch.autograd.grad(want.sum(), wrt, allow_unused=True)
    if fix is not None:
        idx = [k for k, t in enumerate(args) if t.requires_grad]
        gw = [None if v is None else fix(k, v) for k, v in zip(idx, gw)]
    gg = torch.autograd.grad(got.sum(), wrt, allow_unused=True)
    for u, v in zip(gg, gw):
        if u is None and v is None:
            continue
        u = torch.zeros_like(v) if u is None else u
        v = torch.zeros_like(u) if v is None else v
        assert torch.allclose(u, v, rtol=0, atol=tol), (u - v).abs().max()


GRID = list(itertools.product([1, 2], [True, False], [None, 0.5], [0.05, 0.5], [0.5, 0.9],
                              [1, 2, 3]))


@pytest.mark.parametrize("p,debias,reach,blur,scaling,d", GRID)
def test_matches_geomloss(p, debias, reach, blur, scaling, d):
    kw = dict(p=p, debias=debias, reach=reach, blur=blur, scaling=scaling)
    compare(kw, clouds(13, 9, d, seed=d))


@pytest.mark.parametrize("p,debias,reach",
                         list(itertools.product([1, 2], [True, False], [None, 0.5])))
def test_batched_and_potentials(p, debias, reach):
    kw = dict(p=p, debias=debias, reach=reach, blur=0.1)
    compare(kw, clouds(11, 7, 2, batch=3, seed=1))
    compare(dict(kw, potentials=True), clouds(11, 7, 2, batch=3, seed=2))
    compare(dict(kw, potentials=True), clouds(11, 7, 3, seed=3))


def test_two_argument_call_and_weight_shapes():
    a, x, b, y = clouds(10, 8, 2)
    L = SamplesLoss()
    compare({}, (x, y))
    v = L(a[:, None], x, b[:, None], y)
    assert torch.allclose(v, L(a, x, b, y), rtol=0, atol=1e-15)


def test_coincident_points_give_zero_divergence():
    a, x, _, _ = clouds(12, 12, 3)
    for kw in (dict(), dict(reach=0.5), dict(p=1)):
        v = SamplesLoss(**kw)(a, x, a, x)
        assert abs(float(v)) < 1e-12
        gx, = torch.autograd.grad(v, [x])
        assert float(gx.abs().max()) < 1e-10


def test_zero_weights_and_single_points():
    compare(dict(), clouds(10, 8, 2, zero=(0, 3)))
    compare(dict(reach=0.5), clouds(10, 8, 2, zero=(2,)))
    compare(dict(blur=0.1), clouds(1, 6, 2))
    compare(dict(p=1, debias=False), clouds(1, 1, 3))


def test_cost_formula_string_equals_builtin():
    args = clouds(9, 7, 2)
    want = SamplesLoss(blur=0.1)(*args)
    got = SamplesLoss(blur=0.1, cost="SqDist(X,Y) / IntCst(2)")(*args)
    assert torch.allclose(got, want, rtol=0, atol=1e-13)


def test_float32_close_to_float64():
    args = clouds(40, 30, 3)
    want = SamplesLoss(blur=0.1)(*args)
    got = SamplesLoss(blur=0.1)(*[t.detach().float() for t in args])
    assert got.dtype == torch.float32
    assert abs(float(got) - float(want)) < 1e-4


def test_grad_mode_is_never_changed():
    args = clouds(8, 6, 2)
    L = SamplesLoss()
    with torch.no_grad():
        v = L(*args)
        assert not torch.is_grad_enabled()
    assert not v.requires_grad
    assert torch.is_grad_enabled()
    with torch.enable_grad():
        L(*args)
        assert torch.is_grad_enabled()
    with torch.no_grad():
        SamplesLoss(potentials=True)(*args)
        assert not torch.is_grad_enabled()


def test_bad_inputs():
    a, x, b, y = clouds(6, 5, 2)
    L = SamplesLoss()
    with pytest.raises(ValueError, match="takes"):
        L(x)
    with pytest.raises(ValueError, match="last dimension"):
        L(x, y[:, :1])
    with pytest.raises(TypeError, match="dtype"):
        L(x, y.detach().float())
    with pytest.raises(ValueError, match="a has shape"):
        L(a[:3], x, b, y)
    with pytest.raises(TypeError, match="torch tensor"):
        L(x.detach().numpy(), y)
    with pytest.raises(ValueError, match="weights must be finite and >= 0"):
        L(-a, x, b, y)
    with pytest.raises(ValueError, match="equal total masses"):
        L(2 * a, x, b, y)
    SamplesLoss(reach=1.0)(2 * a, x, b, y)  # unbalanced OT takes any masses
    with pytest.raises(NotImplementedError, match="hausdorff"):
        SamplesLoss("hausdorff")
    with pytest.raises(ValueError, match="unknown loss"):
        SamplesLoss("wasserstein")
    with pytest.raises(NotImplementedError, match="multiscale solver gives envelope"):
        SamplesLoss(backend="multiscale", gradient="implicit")
    with pytest.raises(ValueError, match="cluster_scale must be a finite number > 0"):
        SamplesLoss(backend="multiscale", cluster_scale=-0.1)
    with pytest.raises(ValueError, match="truncate must be a finite number > 0"):
        SamplesLoss(backend="multiscale", truncate=0)
    with pytest.raises(ValueError, match="scaling"):
        SamplesLoss(scaling=1.0)
    with pytest.raises(ValueError, match="blur"):
        SamplesLoss(blur=0)
    with pytest.raises(ValueError, match="needs a cost"):
        SamplesLoss(p=3)
    with pytest.raises(ValueError, match="cost 'Norm2.X-Y. . Z' is not a formula"):
        SamplesLoss(cost="Norm2(X-Y) + Z")(x, y)
    with pytest.raises(ValueError, match="expected a scalar"):
        SamplesLoss(cost="X - Y")(x, y)


def exact_kernel(name):
    """GeomLoss's kernels with the exact distance (its own clamps |x - y| below at 1e-4)."""
    def k(x, y, blur=0.05, **_):
        d = exact_distances(x, y)
        if name == "gaussian":
            return (-d ** 2 / (2 * blur ** 2)).exp()
        if name == "laplacian":
            return (-d / blur).exp()
        return -d
    return k


@pytest.mark.parametrize("name,blur,batch,potentials",
                         list(itertools.product(["gaussian", "laplacian", "energy"], [0.1, 0.5],
                                                [None, 2], [False, True])))
def test_kernel_losses_match_geomloss(name, blur, batch, potentials):
    args = clouds(12, 9, 3, batch=batch, seed=4)
    want = geomloss.SamplesLoss(name, blur=blur, backend="tensorized", kernel=exact_kernel(name),
                                potentials=potentials)(*args)
    got = SamplesLoss(name, blur=blur, potentials=potentials)(*args)
    if potentials:
        assert got[0].shape == want[0].shape and got[1].shape == want[1].shape
        r = [torch.rand(t.shape, dtype=t.dtype, generator=torch.Generator().manual_seed(6))
             for t in want]
        want = (want[0] * r[0]).sum() + (want[1] * r[1]).sum()
        got = (got[0] * r[0]).sum() + (got[1] * r[1]).sum()
    assert got.shape == want.shape
    assert torch.allclose(got, want, rtol=0, atol=1e-12), (got - want).abs().max()
    compare_grads(got, want, args, 1e-12)


def anisotropic(x, y):
    """A cost GeomLoss users write as a function of dense tensors: a weighted squared distance."""
    w = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype) / x.shape[-1]
    return (((x[:, :, None, :] - y[:, None, :, :]) ** 2) * w).sum(-1) / 2


@pytest.mark.parametrize("cost,p", [(anisotropic, 2), (exact_distances, 1)])
@pytest.mark.parametrize("debias,reach,potentials", [(True, None, False), (False, 0.5, False),
                                                      (True, 0.7, False), (True, None, True)])
@pytest.mark.parametrize("batch", [None, 2])
def test_cost_function_of_dense_tensors_matches_geomloss(cost, p, debias, reach, potentials,
                                                         batch):
    # GeomLoss's tensorized backend with a cost function: tessel runs the same loop on the same
    # (stored) matrices, so code passing such a function switches by changing the import.
    kw = dict(p=p, blur=0.1, debias=debias, reach=reach, potentials=potentials, cost=cost)
    compare(kw, clouds(9, 7, 3, batch=batch, seed=4))
    compare(kw, clouds(9, 7, 3, batch=batch, seed=4)[1::2])  # (x, y): uniform weights


def test_cost_function_errors():
    with pytest.raises(ValueError, match="needs a cost formula"):
        SamplesLoss(cost=anisotropic, backend="online")
    with pytest.raises(NotImplementedError, match="envelope gradients only"):
        SamplesLoss(cost=anisotropic, gradient="implicit")
    with pytest.raises(TypeError, match="cost must be a formula string"):
        SamplesLoss(cost=3.0)
    a, x, b, y = clouds(5, 4, 2)
    with pytest.raises(ValueError, match=r"expected a tensor of shape \(1, 5, 4\)"):
        SamplesLoss(cost=lambda u, v: u.sum())(a, x, b, y)
    from tessel.ot import solve_sample
    with pytest.raises(TypeError, match="solve_sample: cost must be a formula"):
        solve_sample(a, x, b, y, cost=anisotropic)


def cauchy_kernel(x, y, blur=0.05, **kw):
    """A kernel function as GeomLoss users write one (its tensorized backend calls it with
    blur, use_keops and ranges)."""
    d2 = ((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1)
    return 1 / (1 + d2 / blur ** 2)


@pytest.mark.parametrize("batch,potentials", [(None, False), (2, False), (None, True)])
def test_kernel_function_matches_geomloss(batch, potentials):
    args = clouds(12, 9, 3, batch=batch, seed=8)
    kw = dict(blur=0.3, kernel=cauchy_kernel, potentials=potentials)
    # "hausdorff" is GeomLoss 0.3's name for the same norm with a kernel function.
    name = "hausdorff" if batch == 2 else "gaussian"
    want = geomloss.SamplesLoss(name, backend="tensorized", **kw)(*args)
    got = SamplesLoss(name, **kw)(*args)
    if potentials:
        for u, v in zip(got, want):
            assert torch.allclose(u, v, rtol=0, atol=1e-12)
        want, got = want[0].sum() + want[1].sum(), got[0].sum() + got[1].sum()
    assert torch.allclose(got, want, rtol=0, atol=1e-12), (got - want).abs().max()
    compare_grads(got, want, args, 1e-12)


def test_kernel_function_errors():
    with pytest.raises(ValueError, match="kernel= applies to the kernel losses"):
        SamplesLoss("sinkhorn", kernel=cauchy_kernel)
    with pytest.raises(ValueError, match="runs tensorized"):
        SamplesLoss("gaussian", kernel=cauchy_kernel, backend="online")
    with pytest.raises(TypeError, match="kernel must be a function"):
        SamplesLoss("gaussian", kernel="Exp(-SqDist(X,Y))")
    a, x, b, y = clouds(5, 4, 2)
    with pytest.raises(ValueError, match=r"expected a tensor of shape \(1, 5, 5\)"):
        SamplesLoss("gaussian", kernel=lambda u, v, **kw: u.sum())(a, x, b, y)
