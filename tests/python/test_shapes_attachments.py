"""The shape data attachments (kernel norm, currents, varifold, Sinkhorn) against dense float64
torch references: values, gradients, Hessian-vector products, invariances and errors."""
import math
import os

import pytest
import torch

from tessel.shapes import Curve, Mesh, PointCloud
from tessel.shapes.attachments import Currents, KernelNorm, SinkhornLoss, Varifold

# The mathematics runs in the interpreter (no compile time); test_compiled_backend runs the
# default backend once.
pytestmark = pytest.mark.usefixtures("interpreted")
_CXX = os.environ.get("TESSEL_CXX")

F64 = torch.float64


# ---------------------------------------------------------------------------------------------
# Shapes built here.

def closed_curve(n=24, dim=2, shift=0.0, seed=0, dtype=F64):
    """A noisy closed loop of n vertices (a circle of radius ~1, 3-D ones tilted)."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n, dtype=F64) * 2 * math.pi / n
    r = 1 + 0.15 * torch.rand(n, generator=g, dtype=F64)
    p = torch.stack([r * t.cos(), r * t.sin()] + [0.3 * (2 * t).sin()] * (dim - 2), 1) + shift
    return Curve.polyline(p.to(dtype), closed=True)


def icosphere(level=1, radius=1.0, dtype=F64):
    """The unit icosahedron subdivided `level` times, vertices projected onto the sphere."""
    phi = (1 + 5 ** 0.5) / 2
    v = torch.tensor([[-1, phi, 0], [1, phi, 0], [-1, -phi, 0], [1, -phi, 0], [0, -1, phi],
                      [0, 1, phi], [0, -1, -phi], [0, 1, -phi], [phi, 0, -1], [phi, 0, 1],
                      [-phi, 0, -1], [-phi, 0, 1]], dtype=F64)
    f = torch.tensor([[0, 11, 5], [0, 5, 1], [0, 1, 7], [0, 7, 10], [0, 10, 11], [1, 5, 9],
                      [5, 11, 4], [11, 10, 2], [10, 7, 6], [7, 1, 8], [3, 9, 4], [3, 4, 2],
                      [3, 2, 6], [3, 6, 8], [3, 8, 9], [4, 9, 5], [2, 4, 11], [6, 2, 10],
                      [8, 6, 7], [9, 8, 1]])
    m = Mesh(v / v.norm(dim=1, keepdim=True), f)
    for _ in range(level):
        m = m.subdivide()
        m = m.with_points(m.points / m.points.norm(dim=1, keepdim=True))
    return m.with_points((radius * m.points).to(dtype))


def bumpy_mesh(seed=0, dtype=F64):
    """The level-0 icosphere (12 vertices, 20 faces), vertices moved at random."""
    g = torch.Generator().manual_seed(seed)
    m = icosphere(0)
    return m.with_points((m.points * (1 + 0.2 * torch.rand(12, 1, generator=g, dtype=F64))
                          + 0.1 * torch.randn(3, generator=g, dtype=F64)).to(dtype))


def point_cloud(n=30, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return PointCloud(torch.randn(n, 3, generator=g, dtype=F64).to(dtype),
                      torch.rand(n, generator=g, dtype=F64).to(dtype))


def pair(kind, dtype=F64):
    """(source, target) of a kind: 'curve2', 'curve3', 'mesh' or 'points'."""
    if kind == "curve2":
        return closed_curve(24, 2, 0.0, 0, dtype), closed_curve(30, 2, 0.2, 1, dtype)
    if kind == "curve3":
        return closed_curve(20, 3, 0.0, 2, dtype), closed_curve(26, 3, 0.1, 3, dtype)
    if kind == "mesh":
        return bumpy_mesh(0, dtype), bumpy_mesh(1, dtype)
    return point_cloud(30, 0, dtype), point_cloud(40, 1, dtype)


def free(shape):
    """The shape on a leaf copy of its points that requires grad, and that leaf."""
    x = shape.points.detach().clone().requires_grad_()
    return shape.with_points(x), x


# ---------------------------------------------------------------------------------------------
# The dense reference: N x M matrices in float64 torch, from the definitions.

def dense_kernel(kernel, x, y, s):
    d2 = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    return torch.exp(-d2 / s ** 2) if kernel == "gaussian" else 1 / (1 + d2 / s ** 2)


def dense_inner(att, a, b):
    k = dense_kernel(att["kernel"], a.centers, b.centers, att["scale"])
    if att["kind"] == "kernel":
        return a.measures @ k @ b.measures
    if att["kind"] == "currents":
        return (k * (a.normals @ b.normals.T)).sum()
    u = a.normals / a.normals.norm(dim=1, keepdim=True)
    v = b.normals / b.normals.norm(dim=1, keepdim=True)
    c, so = u @ v.T, att.get("orientation_scale")
    ko = {"constant": lambda: torch.ones_like(c), "linear": lambda: c,
          "oriented": lambda: torch.exp(-2 * (1 - c) / so ** 2),
          "unoriented": lambda: torch.exp(-2 * (1 - c ** 2) / so ** 2),
          "binet": lambda: c ** 2}[att["orientation"]]()
    return (a.measures[:, None] * b.measures[None, :] * k * ko).sum()


def dense_terms(att, s, t):
    return dense_inner(att, s, s), dense_inner(att, s, t), dense_inner(att, t, t)


def dense_loss(att, s, t):
    ss, st, tt = dense_terms(att, s, t)
    return ss - 2 * st + tt


def build(att):
    kw = dict(scale=att["scale"], kernel=att["kernel"])
    if att["kind"] == "kernel":
        return KernelNorm(**kw)
    if att["kind"] == "currents":
        return Currents(**kw)
    return Varifold(orientation=att["orientation"],
                    orientation_scale=att.get("orientation_scale"), **kw)


def config(kind, kernel="gaussian", orientation=None, so=None, scale=0.7):
    att = dict(kind=kind, kernel=kernel, scale=scale)
    if orientation is not None:
        att["orientation"] = orientation
    if so is not None:
        att["orientation_scale"] = so
    return att


ORIENTED = [config("currents"), config("currents", "cauchy"),
            config("varifold", orientation="constant"),
            config("varifold", orientation="linear"),
            config("varifold", orientation="oriented", so=0.8),
            config("varifold", orientation="unoriented", so=0.8),
            config("varifold", "cauchy", orientation="unoriented", so=0.6),
            config("varifold", orientation="binet"),
            config("varifold", "cauchy", orientation="binet")]
ALL = [config("kernel"), config("kernel", "cauchy")] + ORIENTED


def name(att):
    return "-".join(str(att[k]) for k in ("kind", "kernel", "orientation") if k in att)


def cases():
    for att in ALL:
        kinds = ("curve2", "curve3", "mesh") + (("points",) if att["kind"] == "kernel" else ())
        for kind in kinds:
            yield pytest.param(att, kind, id=f"{name(att)}-{kind}")


def close(got, want, rtol, what):
    err = float((got - want).abs().max() / want.abs().max().clamp_min(1e-300))
    assert err <= rtol, f"{what}: relative error {err:.2e} > {rtol:.0e}"


# ---------------------------------------------------------------------------------------------
# Values and derivatives.

@pytest.mark.parametrize("att, kind", list(cases()))
def test_value_and_gradient_match_dense(att, kind):
    s, t = pair(kind)
    s, x = free(s)
    loss = build(att)
    got, want = loss(s, t), dense_loss(att, s, t)
    assert got.shape == () and got.dtype == F64
    (g_got,) = torch.autograd.grad(got, x)
    (g_want,) = torch.autograd.grad(want, x)
    # The reduction sums in another order than torch's matrices: a few float64 roundings of
    # the terms, which cancel down to the value (hence relative to the largest term).
    scale = max(abs(float(v.detach())) for v in dense_terms(att, s, t))
    assert abs(float(got - want)) <= 1e-12 * scale
    close(g_got, g_want, 1e-11, "gradient")


@pytest.mark.parametrize("att", [config("kernel", "cauchy"),
                                 config("currents"), config("currents", "cauchy"),
                                 config("varifold", orientation="oriented", so=0.8),
                                 config("varifold", orientation="unoriented", so=0.8),
                                 config("varifold", "cauchy", orientation="binet")], ids=name)
@pytest.mark.parametrize("kind", ["curve3", "mesh"])
def test_hessian_vector_product_matches_dense(att, kind):
    s, t = pair(kind)
    s, x = free(s)
    v = torch.randn_like(x)
    hv = []
    for value in (build(att)(s, t), dense_loss(att, s, t)):
        (g,) = torch.autograd.grad(value, x, create_graph=True)
        hv.append(torch.autograd.grad((g * v).sum(), x)[0])
    close(hv[0], hv[1], 1e-10, "Hessian-vector product")


def test_target_points_get_gradients():
    s, t = pair("mesh")
    t, y = free(t)
    att = config("varifold", orientation="unoriented", so=0.8)
    (got,) = torch.autograd.grad(build(att)(s, t), y)
    (want,) = torch.autograd.grad(dense_loss(att, s, t), y)
    close(got, want, 1e-11, "target gradient")


def test_learned_scales_get_the_dense_gradients():
    s, t = pair("curve3")
    scale = torch.tensor(0.7, dtype=F64, requires_grad=True)
    so = torch.tensor(0.8, dtype=F64, requires_grad=True)
    for att in (config("kernel", scale=scale), config("currents", "cauchy", scale=scale),
                config("varifold", orientation="oriented", so=so, scale=scale)):
        loss = build(att)
        assert "tensor" in repr(loss)
        params = [scale] + ([so] if "orientation_scale" in att else [])
        got = torch.autograd.grad(loss(s, t), params)
        want = torch.autograd.grad(dense_loss(att, s, t), params)
        for g, w in zip(got, want):
            close(g, w, 1e-11, f"{name(att)} scale gradient")


def test_linear_varifold_is_currents_and_constant_is_kernel_norm():
    s, t = pair("curve2")
    v = Varifold(0.7, orientation="linear")(s, t)
    assert abs(float(v - Currents(0.7)(s, t))) <= 1e-13 * float(v)
    c = Varifold(0.7, orientation="constant", kernel="cauchy")(s, t)
    assert abs(float(c - KernelNorm(0.7, kernel="cauchy")(s, t))) <= 1e-13 * float(c)


def test_compiled_backend(monkeypatch):
    """The default backend (compiled kernels), as the attachments run outside the tests."""
    if _CXX is None:
        monkeypatch.delenv("TESSEL_CXX")
    else:
        monkeypatch.setenv("TESSEL_CXX", _CXX)
    att = config("varifold", orientation="unoriented", so=0.8)
    s, t = pair("mesh")
    s, x = free(s)
    got, want = build(att)(s, t), dense_loss(att, s, t)
    close(got, want, 1e-10, "value")
    close(torch.autograd.grad(got, x)[0], torch.autograd.grad(want, x)[0], 1e-10, "gradient")
    via = Varifold(0.7, "unoriented", 0.8, backend="interpreter")
    close(via(s, t), want, 1e-10, "value with backend='interpreter'")
    check_float32(att, "mesh")  # the compiled float32 kernels, with their own summation


# ---------------------------------------------------------------------------------------------
# Properties of a distance.

@pytest.mark.parametrize("att", ALL, ids=name)
def test_identical_shapes_are_at_distance_zero(att):
    s, _ = pair("mesh")
    twin = s.with_points(s.points.clone())
    # The three terms are the same sum of F^2 products (F = 20 faces), in other orders: what is
    # left of <S,S> - 2 <S,S> + <S,S> is their rounding, a few float64 epsilons of <S,S>.
    bound = 16 * torch.finfo(F64).eps * abs(float(dense_inner(att, s, s)))
    assert abs(float(build(att)(s, twin))) <= bound


def rigid(shape, rot, shift):
    return shape.with_points(shape.points @ rot.T + shift)


def random_rotation(dim, seed):
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(dim, dim, generator=g, dtype=F64))
    q = q * torch.sign(torch.diagonal(r))
    if torch.det(q) < 0:  # a proper rotation: a reflection would flip the currents' sign
        q[:, 0] = -q[:, 0]
    return q, torch.randn(dim, generator=g, dtype=F64)


@pytest.mark.parametrize("att", ALL, ids=name)
@pytest.mark.parametrize("kind", ["curve2", "mesh"])
def test_rigid_motion_invariance(att, kind):
    s, t = pair(kind)
    rot, shift = random_rotation(s.dim, 5)
    loss = build(att)
    a, b = loss(s, t), loss(rigid(s, rot, shift), rigid(t, rot, shift))
    scale = max(abs(float(v)) for v in dense_terms(att, s, t))
    assert abs(float(a - b)) <= 1e-12 * scale


def test_varifold_nearly_invariant_under_remeshing():
    s = icosphere(1)  # 80 faces, edge h ~ 0.55
    t = icosphere(1, radius=1.3).with_points(icosphere(1, radius=1.3).points + 0.1)
    for att in (config("varifold", orientation="unoriented", so=0.8, scale=1.0),
                config("varifold", orientation="binet", scale=1.0),
                config("currents", scale=1.0)):
        loss = build(att)
        v, fine = loss(s, t), loss(s.subdivide(), t)
        # Subdividing keeps the same flat faces (same normals, areas split in four): only the
        # quadrature of the kernel over each face changes, from its centroid to four
        # sub-centroids. Both rules integrate linear functions exactly, so the change is
        # O((h / scale)^2) of the terms (h the edge), ~ (0.55 / 1)^2 / 24 ~ 1e-2 of them;
        # the shapes differ by a scale factor 1.3, so V(S, T) is ~ 1/4 of the terms, and the
        # change stays under 5 % of it (measured: under 1 %).
        assert abs(float(fine - v)) <= 0.05 * float(v), name(att)


def check_float32(att, kind):
    """float32 against float64, value and gradient, within bounds from float32's epsilon."""
    eps = torch.finfo(torch.float32).eps
    s64, t64 = pair(kind)
    s32, x32 = free(s64.to(torch.float32))
    s64, x64 = free(s64)
    v32, v64 = build(att)(s32, t64.to(torch.float32)), build(att)(s64, t64)
    assert v32.dtype == torch.float32
    g32 = torch.autograd.grad(v32, x32)[0].double()
    g64 = torch.autograd.grad(v64, x64)[0]
    # Rounding the inputs (|x| <= R ~ 1.5) moves each kernel value by ~ eps |d k / d x| |x|
    # <= eps 2 R^2 / s^2 k and the normals, measures and orientation kernels by a few eps;
    # summing N + M terms in float32 adds (N + M) eps at most. Each term is off by that
    # fraction of its size, and the three terms cancel: the bound is relative to the largest
    # term (measured: ~1e-7 of it, 100 times below the bound).
    n = s64.measures.shape[0] + t64.measures.shape[0]
    frac = eps * (n + 2 * 1.5 ** 2 / att["scale"] ** 2 + 16)
    terms = max(abs(float(v)) for v in dense_terms(att, s64, t64))
    assert abs(float(v32) - float(v64)) <= frac * terms, name(att)
    # The gradient: the same fraction of the terms' gradients (each a sum of kernel derivatives
    # of size ~ terms / s per vertex).
    assert float((g32 - g64).abs().max()) <= frac * terms / att["scale"], name(att)


def test_float32_agrees_with_float64():
    for kind, att in (("mesh", config("varifold", orientation="unoriented", so=0.8)),
                      ("curve3", config("currents", "cauchy")),
                      ("points", config("kernel"))):
        check_float32(att, kind)


# ---------------------------------------------------------------------------------------------
# Sinkhorn, against a dense log-domain Sinkhorn to convergence.

def dense_ot(a, x, b, y, eps, iters=500):
    """Entropic OT_eps(a, b), cost |x - y|^2 / 2: the dual objective at converged potentials,
    which are then held constant (its gradient there is the exact one: envelope theorem)."""
    c = ((x[:, None] - y[None]) ** 2).sum(-1) / 2
    f, g = torch.zeros_like(a), torch.zeros_like(b)
    with torch.no_grad():
        la, lb, cd = a.log(), b.log(), c.detach()
        for _ in range(iters):
            f_new = -eps * torch.logsumexp(lb.detach() + (g - cd) / eps, 1)
            if x is y:  # a self-transport: the symmetric averaged update converges fast
                f = g = (f + f_new) / 2
            else:
                f = f_new
                g = -eps * torch.logsumexp(la.detach()[:, None] + (f[:, None] - cd) / eps, 0)
    plan = a[:, None] * b[None] * torch.exp((f[:, None] + g[None] - c) / eps)
    return (a * f).sum() + (b * g).sum() - eps * (plan.sum() - a.sum() * b.sum())


def dense_sinkhorn(s, t, blur):
    a, b = s.measures / s.measures.sum(), t.measures / t.measures.sum()
    x, y, eps = s.centers, t.centers, blur ** 2
    return (dense_ot(a, x, b, y, eps) - dense_ot(a, x, a, x, eps) / 2
            - dense_ot(b, y, b, y, eps) / 2)


def sinkhorn_pair(kind):
    if kind != "points":
        return pair(kind)
    # Uniform weights: with the random weights of pair("points") some masses are tiny and the
    # self-transport problem's Newton refinement (gradient="implicit") is too ill-conditioned.
    s, t = pair("points")
    return PointCloud(0.5 * s.points), PointCloud(0.5 * t.points + 0.2)


@pytest.mark.parametrize("kind", ["curve2", "mesh", "points"])
def test_sinkhorn_matches_dense(kind):
    s, t = sinkhorn_pair(kind)
    s, x = free(s)
    want = dense_sinkhorn(s, t, 0.3)
    (g_want,) = torch.autograd.grad(want, x, retain_graph=True)
    # Converged and differentiated at the fixed point: the dense reference's own accuracy.
    exact = SinkhornLoss(blur=0.3, gradient="implicit")(s, t)
    close(exact, want, 1e-9, "Sinkhorn value (implicit)")
    close(torch.autograd.grad(exact, x)[0], g_want, 1e-8, "Sinkhorn gradient (implicit)")
    # The default stops after the annealing schedule, GeomLoss's way: its potentials are those
    # of the last (blur-level) step, not converged. With scaling=0.9 the error is measured at
    # ~2e-4 (value) and ~1e-2 (gradient) on the curve; the bounds check that it is the same
    # divergence, not its convergence.
    got = SinkhornLoss(blur=0.3, scaling=0.9)(s, t)
    close(got, want, 2e-2, "Sinkhorn value (envelope)")
    close(torch.autograd.grad(got, x)[0], g_want, 0.3, "Sinkhorn gradient (envelope)")
    assert abs(float(SinkhornLoss(blur=0.3)(s, s))) <= 1e-10


def test_sinkhorn_rigid_motion_invariance():
    s, t = pair("mesh")
    rot, shift = random_rotation(3, 7)
    loss = SinkhornLoss(blur=0.3, gradient="implicit")  # converged: no schedule left in it
    a, b = loss(s, t), loss(rigid(s, rot, shift), rigid(t, rot, shift))
    close(b, a, 1e-9, "Sinkhorn after a rigid motion")


def test_sinkhorn_normalize_and_reach():
    s, t = pair("curve2")
    assert SinkhornLoss().normalize and not SinkhornLoss(reach=1.0).normalize
    with pytest.raises(ValueError, match="equal total masses"):
        SinkhornLoss(normalize=False)(s, t.with_points(2 * t.points))
    v = SinkhornLoss(blur=0.3, reach=1.0)(s, t)
    assert v.shape == () and math.isfinite(float(v))
    assert "reach=1.0" in repr(SinkhornLoss(reach=1.0))
    with pytest.raises(ValueError, match="SinkhornLoss: gradient must be one of"):
        SinkhornLoss(gradient="exact")


# ---------------------------------------------------------------------------------------------
# Errors.

def test_point_clouds_have_no_normals():
    p, _ = pair("points")
    c = closed_curve(dim=3)
    with pytest.raises(ValueError, match=r"Currents: source is a PointCloud, which has no "
                                         r"normals.*expected a Curve or a Mesh"):
        Currents(0.5)(p, c)
    with pytest.raises(ValueError, match=r"Varifold: target is a PointCloud"):
        Varifold(0.5, "binet")(c, p)
    m = bumpy_mesh()
    with pytest.raises(ValueError, match=r"Varifold: source is a Curve but target a Mesh; "
                                         r"expected two curves or two meshes"):
        Varifold(0.5, "binet")(c, m)
    assert float(KernelNorm(0.5)(c, m)) > 0  # measures compare across kinds


@pytest.mark.parametrize("make", [lambda: KernelNorm(0.5), lambda: Currents(0.5),
                                  lambda: Varifold(0.5, "binet"), lambda: SinkhornLoss()])
def test_mismatched_pairs(make):
    c2, c3 = closed_curve(dim=2), closed_curve(dim=3)
    with pytest.raises(ValueError, match="source has dimension 2 but target 3"):
        make()(c2, c3)
    with pytest.raises(TypeError, match="source is torch.float64 but target torch.float32"):
        make()(c3, c3.to(torch.float32))
    with pytest.raises(TypeError, match="target must be a PointCloud, Curve or Mesh"):
        make()(c3, c3.points)


def test_bad_arguments():
    cases = [(lambda: KernelNorm(0.5, kernel="laplace"), r"KernelNorm: unknown kernel 'laplace'"
              r"; expected one of 'gaussian', 'cauchy'"),
             (lambda: Currents(0.0), r"Currents: scale = 0.0; expected a finite number > 0"),
             (lambda: KernelNorm(float("nan")), r"KernelNorm: scale = nan"),
             (lambda: Varifold(-1.0), r"Varifold: scale = -1.0"),
             (lambda: Varifold(torch.tensor([0.5])), r"Varifold: scale is a tensor of shape "
                                                      r"\(1,\)"),
             (lambda: Currents("1"), r"Currents: scale must be a number or a 0-dim tensor"),
             (lambda: Varifold(0.5, "orientd", 0.5), r"Varifold: unknown orientation 'orientd'"
                                                      r"; expected one of 'constant'"),
             (lambda: Varifold(0.5, "oriented"), r"Varifold: orientation='oriented'.* needs "
                                                  r"orientation_scale"),
             (lambda: Varifold(0.5, "unoriented"), r"Varifold: orientation='unoriented'.* needs "
                                                   r"orientation_scale"),
             (lambda: Varifold(0.5, "binet", 0.5), r"Varifold: orientation='binet' has no "
                                                   r"scale; expected orientation_scale=None"),
             (lambda: Varifold(0.5, "oriented", math.inf), r"orientation_scale = inf"),
             (lambda: SinkhornLoss(blur=0), r"SinkhornLoss: blur = 0; expected a finite"),
             (lambda: SinkhornLoss(reach=-1.0), r"SinkhornLoss: reach = -1.0"),
             (lambda: SinkhornLoss(scaling=1.5), r"SinkhornLoss: scaling = 1.5; expected a "
                                                 r"number in \(0, 1\)")]
    for make, message in cases:
        with pytest.raises(ValueError, match=message):
            make()


def test_repr():
    assert repr(KernelNorm(0.5)) == "KernelNorm(scale=0.5, kernel='gaussian')"
    assert repr(Varifold(0.5, "oriented", 0.3, kernel="cauchy")) == (
        "Varifold(scale=0.5, orientation='oriented', orientation_scale=0.3, kernel='cauchy')")
    assert repr(SinkhornLoss()) == ("SinkhornLoss(blur=0.05, reach=None, scaling=0.5, "
                                    "normalize=True)")
