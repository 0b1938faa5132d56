"""tessel.shapes on edge inputs: defaults that work; shapes whose pieces collapse (the limit's value
and gradient); widths and sizes far from 1 (computed rescaled); and inputs that cannot be computed,
refused by a ValueError naming the function, the argument, what was expected and what was given."""
import math

import pytest
import torch

from tessel.shapes import (LDDMM, Curve, GaussianKernel, Mesh, NormalizedLDDMM, PointCloud,
                           SumOfGaussians, register)
from tessel.shapes.attachments import Currents, KernelNorm, SinkhornLoss, Varifold

pytestmark = pytest.mark.usefixtures("interpreted")

F64 = torch.float64


def test_varifold_defaults_to_the_binet_orientation():
    s = Mesh.icosphere(1)
    t = s.with_points(s.points * torch.tensor([1.2, 0.9, 1.0], dtype=F64))
    v = Varifold(0.5)
    assert v.orientation == "binet" and v.orientation_scale is None
    assert float(v(s, t)) == float(Varifold(0.5, orientation="binet")(s, t)) > 0


def cloud(n, seed, d=2):
    return torch.rand(n, d, dtype=F64, generator=torch.Generator().manual_seed(seed))


def spoiled(t, value, row=2):
    t = t.clone()
    t[row, 1] = value
    return t


MODELS = [LDDMM(GaussianKernel(0.5)), LDDMM(GaussianKernel(0.5), integrator="reversible"),
          LDDMM(GaussianKernel(0.5), snapshots=2), NormalizedLDDMM(GaussianKernel(0.5))]


@pytest.mark.parametrize("model", MODELS, ids=repr)
@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_shooting_refuses_non_finite_starts(model, value):
    q, p, x = cloud(6, 0), 0.1 * cloud(6, 1), cloud(4, 2)
    who = type(model).__name__
    for args, name in (((spoiled(q, value), p), "q0"), ((q, spoiled(p, value)), "p0"),
                       ((q, p, spoiled(x, value)), "points")):
        with pytest.raises(ValueError, match=rf"{who}.shoot: {name}\[2\] = \[.*\] is not finite"):
            model.shoot(*args)
    with pytest.raises(ValueError, match=rf"{who}.energy: p0\[2\] = .* is not finite"):
        model.energy(q, spoiled(p, value))
    with pytest.raises(ValueError, match=rf"{who}.shoot: p0\[2\] = .* is not finite"):
        model.deform(Curve.polyline(q), spoiled(p, value))


def test_register_names_its_non_finite_arguments():
    src = Curve.polyline(cloud(6, 3), closed=True)
    tgt = src.with_points(src.points + 0.1)
    model = LDDMM(GaussianKernel(0.5, backend="interpreter"), n_steps=2)
    q = src.points
    cases = [(dict(control_points=spoiled(q, math.nan)), r"control_points\[2\]"),
             (dict(momenta=spoiled(torch.zeros_like(q), math.inf)), r"momenta\[2\]"),
             (dict(control_points=q[:, :1]), r"control_points must be an \(N, 2\) tensor"),
             (dict(momenta=[[0.0, 0.0]]), r"momenta must be an \(N, 2\) tensor, got list")]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=rf"tessel.shapes.register: {message}"):
            register(src, tgt, model=model, max_iter=1, **kwargs)
    for s, t, name in ((src.with_points(spoiled(q, math.nan)), tgt, "source"),
                       (src, tgt.with_points(spoiled(q, math.inf)), "target")):
        with pytest.raises(ValueError, match=rf"register: {name}.points\[2\] = .* is not finite"):
            register(s, t, model=model, max_iter=1)


def test_a_non_finite_iterate_blames_the_step():
    src = Curve.polyline(cloud(6, 3), closed=True)
    model = LDDMM(GaussianKernel(0.5, backend="interpreter"), n_steps=2)
    with pytest.raises(FloatingPointError, match=r"register: the optimizer's step made the "
                                                 r"parameters non-finite at iteration 1"):
        register(src, src.with_points(src.points + 0.1), model=model, optimizer="sgd",
                 lr=math.inf, max_iter=2)


# ---------------------------------------------------------------------------------------------
# Widths and sizes far from 1: computed rescaled by powers of two, or refused, never NaN.

X = torch.rand(20, 3, dtype=F64, generator=torch.Generator().manual_seed(5))
Y = torch.rand(25, 3, dtype=F64, generator=torch.Generator().manual_seed(6)) + 0.3


@pytest.mark.parametrize("scale", [1e-160, 1e-200, 1e-300])
def test_kernel_norm_at_tiny_widths_is_the_sum_of_squared_weights(scale):
    # k -> the indicator of x = y: <mu, mu> -> sum w_i^2, and the cross term -> 0.
    x = X.clone().requires_grad_()
    v = KernelNorm(scale)(PointCloud(x), PointCloud(Y))
    assert float(v) == pytest.approx(1 / 20 + 1 / 25, rel=1e-15)
    assert float(torch.autograd.grad(v, x)[0].abs().max()) == 0


@pytest.mark.parametrize("scale", [1e200, 1e300])
def test_kernel_norm_at_huge_widths_compares_total_masses(scale):
    # k -> 1: |mu - nu|^2 -> (mass(mu) - mass(nu))^2; the three terms are O(1) each.
    y = PointCloud(Y, torch.full((25,), 2 / 25, dtype=F64))
    assert abs(float(KernelNorm(scale)(PointCloud(X), PointCloud(Y)))) <= 1e-14
    assert float(KernelNorm(scale)(PointCloud(X), y)) == pytest.approx(1.0, rel=1e-14)


@pytest.mark.parametrize("size", [2.0 ** -500, 1e-150, 1e-20, 1e20, 1e150])
def test_attachments_are_invariant_under_a_common_rescaling(size):
    t = torch.arange(16, dtype=F64) * 2 * math.pi / 16
    curve = Curve.polyline(torch.stack([t.cos(), t.sin(), 0.3 * t.sin()], 1), closed=True)
    other = curve.with_points(curve.points * 1.2 + 0.1)
    for make in (KernelNorm, Currents, Varifold):
        want = float(make(0.5)(curve, other))
        got = make(0.5 * size)(curve.with_points(curve.points * size),
                               other.with_points(other.points * size))
        # Lengths scale by size: the value by size^2 (exact), each term summed to a few ulps.
        assert float(got) / size ** 2 == pytest.approx(want, rel=1e-12)


def test_float32_clouds_far_from_unit_size():
    want = float(KernelNorm(0.5)(PointCloud(X), PointCloud(Y)))
    for size in (1e20, 1e-20):
        got = KernelNorm(0.5 * size)(PointCloud((X * size).float()),
                                     PointCloud((Y * size).float()))
        # float32 roundings of terms O(0.1) that cancel to about 0.2: 1e-5 absolute.
        assert abs(float(got) - want) <= 1e-5


def test_float32_meshes_and_curves_whose_measures_leave_float32():
    m = Mesh.icosphere(1, dtype=torch.float32)
    with pytest.raises(ValueError, match=r"Mesh: faces\[0\] has area 10\^39.* \(its vertices "
                                         r"are distinct\), outside torch.float32's normal range"):
        Mesh(m.points * 1e20, m.faces)
    big = m.with_points(m.points * 1e20)
    with pytest.raises(ValueError, match=r"Varifold: source's measures .* reach inf, past "
                                         r"torch.float32's range"):
        Varifold(1e20)(big, big)
    with pytest.raises(ValueError, match=r"faces\[0\] has area 10\^-40.* outside"):
        Mesh(m.points * 1e-20, m.faces)
    # Measures in range are computed at unit size (their squares would underflow): 1e-30.
    small = Mesh(m.points * 1e-15, m.faces)
    ref = Mesh.icosphere(1).area * 1e-30
    assert float(small.area) == pytest.approx(float(ref), rel=1e-5)
    # ... but their loss, of size area^2 = 1e-60, is not a float32 number.
    with pytest.raises(ValueError, match=r"Varifold: the shapes' measures reach .*outside "
                                         r"torch.float32's normal range"):
        Varifold(1e-15)(small, small)
    c = Curve.polyline((X[:, :2] * 1e-25).float())
    want = Curve.polyline(X[:, :2]).length * 1e-25
    assert float(c.length) == pytest.approx(float(want), rel=1e-5)


def test_deformation_kernels_at_extreme_widths():
    b = torch.rand(20, 2, dtype=F64, generator=torch.Generator().manual_seed(7))
    assert torch.equal(GaussianKernel(1e-200)(X, X, b), b)   # k = 1 at x = y, 0 elsewhere
    torch.testing.assert_close(GaussianKernel(1e200)(X, X, b), b.sum(0).expand(20, 2),
                               rtol=1e-14, atol=0)
    # The field at width s on points s x is the unit one, forces divided by s.
    p = b.repeat(1, 2)[:, :3]
    v1, f1 = GaussianKernel(1.0).field(X, p)
    for s in (1e-250, 1e-30, 1e30, 1e250):
        v, f = GaussianKernel(s).field(X * s, p)
        torch.testing.assert_close(v, v1, rtol=1e-13, atol=1e-13)
        torch.testing.assert_close(f * s, f1, rtol=1e-13, atol=1e-13)


def test_widths_the_arithmetic_cannot_hold_are_named():
    with pytest.raises(ValueError, match=r"KernelNorm: scale = 1e-300 is too small for "
                                         r"coordinates of size 1\.29e\+10"):
        KernelNorm(1e-300)(PointCloud(X * 1e10), PointCloud(Y * 1e10))
    with pytest.raises(ValueError, match=r"GaussianKernel: its width is too small for "
                                         r"coordinates of size 9\.67e\+09"):
        GaussianKernel(1e-300)(X * 1e10, X * 1e10, X)
    with pytest.raises(ValueError, match=r"SumOfGaussians: scales\[0\] = 1e-200 is 2\^-\d+ "
                                         r"times the kernel's largest width"):
        SumOfGaussians([1e-200, 1e200])(X, X, X)
    with pytest.raises(ValueError, match=r"Varifold: orientation_scale = 1e-30; expected a "
                                         r"number in \[2\^-60, 2\^60\]"):
        Varifold(0.5, "oriented", 1e-30)


# ---------------------------------------------------------------------------------------------
# Deformed shapes whose pieces collapse (a face of zero area, a segment of zero length).

ATTACHMENTS = [KernelNorm(0.4), KernelNorm(0.4, kernel="cauchy"), Currents(0.4),
               Varifold(0.4, orientation="constant"), Varifold(0.4, orientation="linear"),
               Varifold(0.4, orientation="oriented", orientation_scale=0.7),
               Varifold(0.4, orientation="unoriented", orientation_scale=0.7),
               Varifold(0.4, orientation="binet"),
               Varifold(0.4, orientation="binet", kernel="cauchy")]


def collapsed_mesh():
    """The level-1 icosphere with the second vertex of face 0 moved onto the first (the two
    faces around that edge collapse), the mesh without them, the two vertex indices, and a
    target."""
    s = Mesh.icosphere(1)
    a, b = (int(i) for i in s.faces[0, :2])
    q = s.points.clone()
    q[b] = q[a]
    keep = ~((s.faces == a).any(1) & (s.faces == b).any(1))
    return s.with_points(q), Mesh(q, s.faces[keep]), (a, b), s.with_points(s.points * 1.2)


def collapsed_curve():
    """A closed 3-D curve with vertex 4 moved onto vertex 3 (segment 3 has zero length), the
    curve without that segment, the two vertex indices, and a target."""
    t = torch.arange(16, dtype=F64) * 2 * torch.pi / 16
    p = torch.stack([t.cos(), (1.3 * t).sin(), 0.3 * (2 * t).sin()], 1)
    c = Curve.polyline(p, closed=True)
    q = p.clone()
    q[4] = q[3]
    keep = torch.arange(16) != 3
    return c.with_points(q), Curve(q, c.edges[keep]), (3, 4), c.with_points(0.9 * p + 0.1)


def value_and_grad(att, shape, target):
    x = shape.points.detach().clone().requires_grad_()
    v = att(shape.with_points(x), target)
    return v.detach(), torch.autograd.grad(v, x)[0]


@pytest.mark.parametrize("make", [collapsed_mesh, collapsed_curve], ids=["mesh", "curve"])
@pytest.mark.parametrize("att", ATTACHMENTS, ids=repr)
def test_a_collapsed_piece_contributes_nothing(att, make):
    shape, reduced, (a, b), target = make()
    v, g = value_and_grad(att, shape, target)
    v_ref, g_ref = value_and_grad(att, reduced, target)
    assert torch.isfinite(g).all()
    # The same sums up to terms that are exactly 0: a few roundings of the value's terms.
    assert abs(float(v - v_ref)) <= 1e-13 * max(1.0, abs(float(v_ref)))
    # Away from the two coincident vertices the loss is the reduced shape's (the collapsed
    # piece stays collapsed when they are fixed), hence so is its gradient.
    others = torch.ones(g.shape[0], dtype=torch.bool)
    others[[a, b]] = False
    scale = float(g_ref.abs().max())
    assert float((g[others] - g_ref[others]).abs().max()) <= 1e-12 * scale


@pytest.mark.parametrize("make", [collapsed_mesh, collapsed_curve], ids=["mesh", "curve"])
def test_linear_varifold_gradient_at_a_collapsed_piece_is_the_exact_one(make):
    """<u, v> m is the smooth <n, v>: the gradient exists at the coincident vertices too, and
    is the currents' one (central finite differences agree to their O(h^2) error)."""
    shape, _, (a, b), target = make()
    v, g = value_and_grad(Varifold(0.4, orientation="linear"), shape, target)
    _, g_currents = value_and_grad(Currents(0.4), shape, target)
    assert float((g - g_currents).abs().max()) <= 1e-12 * float(g_currents.abs().max())
    att, h = Varifold(0.4, orientation="linear"), 1e-5
    for i in (a, b):
        for d in range(shape.dim):
            step = torch.zeros_like(shape.points)
            step[i, d] = h
            fd = (att(shape.with_points(shape.points + step), target)
                  - att(shape.with_points(shape.points - step), target)) / (2 * h)
            # Truncation h^2 |f'''| / 6 plus rounding eps |f| / h on O(1) values.
            assert abs(float(fd) - float(g[i, d])) <= 1e-8


@pytest.mark.parametrize("att", ATTACHMENTS[3:], ids=repr)
def test_finite_differences_on_the_other_vertices(att):
    """The third vertex of the collapsed face: its gradient against central differences (the
    face stays collapsed when it moves)."""
    shape, _, (a, b), target = collapsed_mesh()
    c = int(shape.faces[0, 2])
    _, g = value_and_grad(att, shape, target)
    h = 1e-5
    for d in range(3):
        step = torch.zeros_like(shape.points)
        step[c, d] = h
        fd = (att(shape.with_points(shape.points + step), target)
              - att(shape.with_points(shape.points - step), target)) / (2 * h)
        assert abs(float(fd) - float(g[c, d])) <= 1e-8


@pytest.mark.parametrize("make", [collapsed_mesh, collapsed_curve], ids=["mesh", "curve"])
def test_sinkhorn_loss_with_a_collapsed_piece(make):
    shape, reduced, _, target = make()
    loss = SinkhornLoss(blur=0.3)
    v, g = value_and_grad(loss, shape, target)
    v_ref, _ = value_and_grad(loss, reduced, target)
    assert torch.isfinite(g).all()
    # A zero weight is exactly absent from every softmin, but the removed piece's center may
    # change the support's extent that the eps-scaling schedule reads: the two runs stop at
    # different (converged) iterates, a relative 1e-4 apart at this blur.
    assert abs(float(v - v_ref)) <= 1e-4 * abs(float(v_ref))


# ---------------------------------------------------------------------------------------------
# Messages.

def test_shape_arguments_are_named():
    s = Mesh.icosphere(1)
    with pytest.raises(ValueError, match=r"Mesh.icosphere: subdivisions = 2.5; expected an "
                                         r"integer >= 0"):
        Mesh.icosphere(2.5)
    with pytest.raises(ValueError, match=r"Mesh.icosphere: radius = -1.0; expected a finite"):
        Mesh.icosphere(1, radius=-1.0)
    cloud = PointCloud(X)
    curve = Curve.polyline(X)
    for shape in (s, cloud, curve):
        n, d = shape.points.shape
        who = type(shape).__name__
        with pytest.raises(ValueError, match=rf"{who}.with_points: points has shape "
                                             rf"\({n - 3}, {d}\); expected \({n}, {d}\), one "
                                             r"row per vertex"):
            shape.with_points(shape.points[:-3])
        with pytest.raises(ValueError, match=rf"{who}.with_points: points has shape "
                                             rf"\({n}, 2\); expected \({n}, {d}\)"):
            shape.with_points(shape.points[:, :2])
        with pytest.raises(TypeError, match=rf"{who}.with_points: points must be a "
                                            r"torch.Tensor"):
            shape.with_points(shape.points.tolist())
        with pytest.raises(TypeError, match=rf"{who}.with_points: points has dtype torch.int64"):
            shape.with_points(shape.points.long())


def test_register_optimization_arguments_are_named():
    src = Curve.polyline(cloud(6, 3), closed=True)
    tgt = src.with_points(src.points + 0.1)
    model = LDDMM(GaussianKernel(0.5, backend="interpreter"), n_steps=2)
    cases = [(dict(regularization="abc"), r"regularization = 'abc'; expected a finite number"),
             (dict(regularization=math.inf), r"regularization = inf; expected a finite number"),
             (dict(tol=-1.0), r"tol = -1.0; expected a finite number >= 0"),
             (dict(max_iter=0), r"max_iter = 0; expected an integer >= 1"),
             (dict(max_iter=True), r"max_iter = True; expected an integer >= 1")]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=rf"tessel.shapes.register: {message}"):
            register(src, tgt, model=model, **kwargs)
    from tessel.shapes import atlas
    with pytest.raises(ValueError, match=r"tessel.shapes.atlas: max_iter = 0; expected"):
        atlas([src, tgt], model=model, max_iter=0)
