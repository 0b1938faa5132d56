"""Attachments on deformed shapes whose pieces collapse (a face of zero area, a segment of zero
length): the value and gradient of the limit, where the piece contributes nothing."""
import pytest
import torch

from tessel.shapes import Curve, Mesh
from tessel.shapes.attachments import Currents, KernelNorm, SinkhornLoss, Varifold

pytestmark = pytest.mark.usefixtures("interpreted")

F64 = torch.float64

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
