"""tessel.shapes' deformation kernels and LDDMM shooting against dense float64 autograd: the
Hamiltonian, its fields, shooting's first and second derivatives, learned widths, integrator
orders, checkpointed and reversible shooting, mesh decimation, and bad input."""
import pytest
import torch

from tessel.shapes import Curve, Mesh
from tessel.shapes.kernels import (AnisotropicGaussian, CauchyKernel, GaussianKernel,
                                   SumOfGaussians)
from tessel.shapes.lddmm import LDDMM, NormalizedLDDMM

F64 = torch.float64
# Dense float64 and tessel's float64 reductions sum the same terms in different orders: a few
# ulps of the largest partial sums (sizes <= 40, values O(10)).
TOL = 1e-11


def _sq(a, b):
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)


def dense_k(name, a, b, s):
    """The dense (N, M) kernel matrix of the kernel `name` with parameters s."""
    if name == "gaussian":
        return torch.exp(-_sq(a, b) / s ** 2)
    if name == "cauchy":
        return 1 / (1 + _sq(a, b) / s ** 2)
    if name == "sum":
        return sum(w * torch.exp(-_sq(a, b) / sk ** 2) for sk, w in zip(*s))
    diff = a[:, None, :] - b[None, :, :]
    return torch.exp(-torch.einsum("ijk,kl,ijl->ij", diff, s, diff))


def tessel_k(name, s, backend="interpreter"):
    if name == "gaussian":
        return GaussianKernel(s, backend=backend)
    if name == "cauchy":
        return CauchyKernel(s, backend=backend)
    if name == "sum":
        return SumOfGaussians(s[0], s[1], backend=backend)
    return AnisotropicGaussian(s, backend=backend)


def params(name):
    if name in ("gaussian", "cauchy"):
        return torch.tensor(0.6, dtype=F64, requires_grad=True)
    if name == "sum":
        return ([torch.tensor(0.3, dtype=F64, requires_grad=True), 0.9], [0.5, 1.0])
    m = torch.tensor([[3.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 2.0]], dtype=F64)
    return m.requires_grad_()


def leaves(s):
    """The tensors of a kernel's parameters that require grad."""
    flat = s if isinstance(s, torch.Tensor) else [v for part in s for v in part]
    flat = [flat] if isinstance(flat, torch.Tensor) else flat
    return [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]


def dense_field(name, s, state):
    q, p = state[0], state[1]
    with torch.enable_grad():
        qq = q if q.requires_grad else q.detach().requires_grad_()
        h = 0.5 * (dense_k(name, qq, qq, s) * (p @ p.T)).sum()
        gq, = torch.autograd.grad(h, qq, create_graph=True)
    out = (dense_k(name, q, q, s) @ p, -gq)
    return out if len(state) == 2 else out + (dense_k(name, state[2], q, s) @ p,)


def dense_shoot(name, s, state, n_steps, integrator):
    """Euler, Ralston or RK4 written out with the dense fields (the reference trajectory)."""
    dt = 1.0 / n_steps
    f = lambda st: dense_field(name, s, st)  # noqa: E731
    axpy = lambda st, k, h: tuple(a + h * b for a, b in zip(st, k))  # noqa: E731
    for _ in range(n_steps):
        if integrator == "euler":
            state = axpy(state, f(state), dt)
        elif integrator == "ralston":
            k1 = f(state)
            k2 = f(axpy(state, k1, 2 * dt / 3))
            state = tuple(a + dt * (b / 4 + 3 * c / 4) for a, b, c in zip(state, k1, k2))
        else:
            k1 = f(state)
            k2 = f(axpy(state, k1, dt / 2))
            k3 = f(axpy(state, k2, dt / 2))
            k4 = f(axpy(state, k3, dt))
            state = tuple(a + dt / 6 * (b + 2 * c + 2 * d + e)
                          for a, b, c, d, e in zip(state, k1, k2, k3, k4))
    return state


def cloud(n, seed, d=3, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return scale * torch.rand(n, d, dtype=F64, generator=g)


def close(got, want, tol=TOL):
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


@pytest.mark.parametrize("name", ["gaussian", "cauchy", "sum", "anisotropic"])
def test_hamiltonian_and_fields_equal_dense_autograd(name):
    s = params(name)
    q, p = cloud(20, 1), cloud(20, 2) - 0.5
    k = tessel_k(name, s)
    want_h = 0.5 * (dense_k(name, q, q, s) * (p @ p.T)).sum()
    close([k.hamiltonian(q, p)], [want_h])
    x = cloud(7, 3)
    close(LDDMM(k).field((q, p, x)), dense_field(name, s, (q, p, x)))
    # The widths' gradients (a learned kernel) through H.
    ts = leaves(s)
    close(torch.autograd.grad(k.hamiltonian(q, p), ts), torch.autograd.grad(want_h, ts))


@pytest.mark.parametrize("integrator", ["euler", "ralston", "rk4"])
@pytest.mark.parametrize("name", ["gaussian", "sum"])
def test_shooting_and_its_gradients_equal_dense_autograd(name, integrator):
    s = params(name)
    q0 = cloud(15, 4).requires_grad_()
    p0 = (0.4 * (cloud(15, 5) - 0.5)).requires_grad_()
    x = cloud(6, 6).requires_grad_()
    model = LDDMM(tessel_k(name, s), n_steps=4, integrator=integrator)
    got = model.shoot(q0, p0, x)
    want = dense_shoot(name, s, (q0, p0, x), 4, integrator)
    close(got, want)
    ts = [q0, p0, x] + leaves(s)

    def loss(st):
        return (st[0] ** 2).sum() + (st[2] ** 3).sum() + (st[1] * st[0]).sum()

    close(torch.autograd.grad(loss(got), ts), torch.autograd.grad(loss(want), ts))


@pytest.mark.parametrize("name", ["gaussian", "cauchy"])
def test_second_derivatives_of_shooting_equal_dense_autograd(name):
    # A Hessian-vector product in p0 (what Newton-type registration and uncertainty need).
    s = params(name)
    q0, p0 = cloud(10, 7), (0.4 * (cloud(10, 8) - 0.5)).requires_grad_()
    v = cloud(10, 9) - 0.5
    target = cloud(10, 10)

    def hvp(shoot):
        q1 = shoot()[0]
        g, = torch.autograd.grad(((q1 - target) ** 2).sum(), p0, create_graph=True)
        return torch.autograd.grad((g * v).sum(), [p0, s])

    model = LDDMM(tessel_k(name, s), n_steps=3, integrator="ralston")
    close(hvp(lambda: model.shoot(q0, p0)),
          hvp(lambda: dense_shoot(name, s, (q0, p0), 3, "ralston")), tol=1e-10)


def test_checkpointed_shooting_equals_plain_shooting():
    s = torch.tensor(0.5, dtype=F64, requires_grad=True)
    q0, p0 = cloud(12, 11), (0.3 * (cloud(12, 12) - 0.5)).requires_grad_()
    k = GaussianKernel(s, backend="interpreter")
    ts = [p0, s]
    plain = LDDMM(k, n_steps=12, integrator="rk4").shoot(q0, p0)
    ckpt = LDDMM(k, n_steps=12, integrator="rk4", snapshots=3).shoot(q0, p0)
    close(ckpt, plain, tol=0)
    close(torch.autograd.grad(ckpt[0].square().sum(), ts),
          torch.autograd.grad(plain[0].square().sum(), ts), tol=1e-13)


def test_integrators_converge_at_their_orders_and_conserve_energy():
    # Errors against RK4 with 256 steps: halving dt divides them by 2 (Euler), 4 (Ralston,
    # reversible Heun) or 16 (RK4); the Hamiltonian is a constant of the exact flow.
    k = GaussianKernel(0.5, backend="interpreter")
    q0, p0 = cloud(12, 13), 0.3 * (cloud(12, 14) - 0.5)
    ref = LDDMM(k, 256, "rk4").shoot(q0, p0)[0]
    order = {"euler": 1, "ralston": 2, "reversible": 2, "rk4": 4}
    for integrator, p in order.items():
        e = [float((LDDMM(k, n, integrator).shoot(q0, p0)[0] - ref).abs().max()) for n in (8, 16)]
        assert 2 ** p * 0.7 < e[0] / e[1] < 2 ** p * 1.5, (integrator, e)
    q1, p1 = LDDMM(k, 32, "rk4").shoot(q0, p0)
    h0 = float(k.hamiltonian(q0, p0))
    assert abs(float(k.hamiltonian(q1, p1)) - h0) < 1e-6 * h0


def test_reversible_shooting_gradient_converges_to_the_exact_one():
    k = GaussianKernel(0.5, backend="interpreter")
    q0, p0 = cloud(10, 15), (0.3 * (cloud(10, 16) - 0.5)).requires_grad_()
    g_ref, = torch.autograd.grad(LDDMM(k, 128, "rk4").shoot(q0, p0)[0].square().sum(), p0)
    errs = []
    for n in (8, 16):
        q1 = LDDMM(k, n, "reversible").shoot(q0, p0)[0]
        g, = torch.autograd.grad(q1.square().sum(), p0)
        errs.append(float((g - g_ref).abs().max()))
    assert 2.8 < errs[0] / errs[1] < 6, errs


def test_deform_moves_a_shape_by_its_vertices_or_by_control_points():
    k = GaussianKernel(0.4, backend="interpreter")
    t = torch.linspace(0, 6.28, 25, dtype=F64)[:-1]
    curve = Curve.polyline(torch.stack((t.cos(), t.sin()), 1), closed=True)
    p0 = 0.2 * torch.stack((t.cos(), 0 * t), 1)
    model = LDDMM(k, n_steps=5)
    moved = model.deform(curve, p0)
    assert isinstance(moved, Curve) and torch.equal(moved.edges, curve.edges)
    close([moved.points], [model.shoot(curve.points, p0)[0]], tol=0)
    # Control points elsewhere: the vertices follow the flow they generate.
    ctrl = curve.points[::3] * 1.1
    moved = model.deform(curve, p0[::3], control_points=ctrl)
    close([moved.points], [model.shoot(ctrl, p0[::3], curve.points)[2]], tol=0)


def test_compiled_reductions_equal_the_interpreters():
    s = torch.tensor(0.6, dtype=F64)
    q, p = cloud(30, 17), cloud(30, 18) - 0.5
    a = LDDMM(GaussianKernel(s), n_steps=2).shoot(q, p)
    b = LDDMM(GaussianKernel(s, backend="interpreter"), n_steps=2).shoot(q, p)
    close(a, b, tol=1e-12)


def dense_normalized_h(s, q, p, mu, nits):
    k = dense_k("gaussian", q, q, s)
    lam = torch.ones_like(mu)
    for _ in range(nits):
        lam = (lam / (k @ (lam * mu))).sqrt()
    lp = lam * p
    return 0.5 * (lp * (k @ lp)).sum()


def test_normalized_hamiltonian_shooting_equals_dense_autograd():
    # H(q, p) = 1/2 <l p, K (l p)>, l from nits symmetric Sinkhorn iterations against mu:
    # differentiated through the iterations, to second order (the field is dH, its shooting's
    # gradient needs d2H).
    s = torch.tensor(0.5, dtype=F64, requires_grad=True)
    q0 = cloud(12, 19, d=2).requires_grad_()
    p0 = (0.05 * (cloud(12, 20, d=2) - 0.5)).requires_grad_()
    mu = torch.linspace(0.5, 1.5, 12, dtype=F64)
    mu = mu / mu.sum()
    model = NormalizedLDDMM(GaussianKernel(s, backend="interpreter"), mu=mu, nits=3, n_steps=3)
    assert float(model.energy(q0, p0).detach()) == pytest.approx(
        float(dense_normalized_h(s, q0, p0, mu[:, None], 3).detach()), rel=1e-12)

    def dense_step(state, dt):
        def f(st):
            h = dense_normalized_h(s, st[0], st[1], mu[:, None], 3)
            gq, gp = torch.autograd.grad(h, (st[0], st[1]), create_graph=True)
            return gp, -gq
        k1 = f(state)
        k2 = f(tuple(a + 2 * dt / 3 * b for a, b in zip(state, k1)))
        return tuple(a + dt * (b / 4 + 3 * c / 4) for a, b, c in zip(state, k1, k2))

    want = (q0, p0)
    for _ in range(3):
        want = dense_step(want, 1 / 3)
    got = model.shoot(q0, p0)
    close(got, want, tol=1e-10)
    ts = [q0, p0, s]
    close(torch.autograd.grad(got[0].square().sum() + got[1].sum(), ts),
          torch.autograd.grad(want[0].square().sum() + want[1].sum(), ts), tol=1e-9)


@pytest.mark.parametrize("nits", [1, 2, 40])
def test_normalized_flow_carries_other_points_with_the_control_points(nits):
    # One velocity field moves every point: a point that starts on a control point follows it
    # at any nits, not only at the normalization's fixed point.
    model = NormalizedLDDMM(GaussianKernel(0.5, backend="interpreter"), nits=nits, n_steps=3)
    q0, p0 = cloud(15, 21, d=2), 0.2 * (cloud(15, 22, d=2) - 0.5)
    q1, _, x1 = model.shoot(q0, p0, q0.clone())
    assert float((q1 - q0).abs().max()) > 1e-2
    close([x1], [q1], tol=1e-12)
    if nits == 40:
        # At the fixed point, lambda(z) = 1 / K(z, q)(l mu): velocities average the momenta.
        k, lam = GaussianKernel(0.5, backend="interpreter"), model.normalization(q0)
        mu = torch.full((15, 1), 1 / 15, dtype=F64)
        assert float((lam * k(q0, q0, lam * mu) - 1).abs().max()) < 1e-9
        z = cloud(7, 23, d=2)
        close([model.velocity(z, q0, p0)], [k(z, q0, lam * p0) / k(z, q0, lam * mu)], tol=1e-9)


def dense_normalized_velocity(s, z, q, p, mu, nits):
    """lambda(z) K(z, q)(l p), lambda(z) the iterations at z against q's iterates."""
    kqq, kzq = dense_k("gaussian", q, q, s), dense_k("gaussian", z, q, s)
    lam, lz = torch.ones_like(mu), torch.ones_like(z[:, :1])
    for _ in range(nits):
        lz = (lz / (kzq @ (lam * mu))).sqrt()
        lam = (lam / (kqq @ (lam * mu))).sqrt()
    return lz * (kzq @ (lam * p))


def test_normalized_transport_of_other_points_equals_dense_autograd():
    s, nits, mu = 0.5, 2, torch.full((10, 1), 0.1, dtype=F64)
    q0 = cloud(10, 24, d=2).requires_grad_()
    p0 = (0.2 * (cloud(10, 25, d=2) - 0.5)).requires_grad_()
    x0 = cloud(6, 26, d=2).requires_grad_()
    model = NormalizedLDDMM(GaussianKernel(s, backend="interpreter"), nits=nits, n_steps=2,
                            integrator="euler")
    want = (q0, p0, x0)
    for _ in range(2):
        h = dense_normalized_h(s, want[0], want[1], mu, nits)
        gq, gp = torch.autograd.grad(h, want[:2], create_graph=True)
        v = dense_normalized_velocity(s, want[2], want[0], want[1], mu, nits)
        want = tuple(a + 0.5 * b for a, b in zip(want, (gp, -gq, v)))
    got = model.shoot(q0, p0, x0)
    close(got, want, tol=1e-10)
    ts = [q0, p0, x0]
    close(torch.autograd.grad(got[2].square().sum(), ts),
          torch.autograd.grad(want[2].square().sum(), ts), tol=1e-9)


def test_bad_input_is_a_clear_error():
    k = GaussianKernel(0.5)
    with pytest.raises(ValueError, match="scale must be finite and > 0"):
        GaussianKernel(-1.0)
    with pytest.raises(ValueError, match="backend must be one of"):
        CauchyKernel(1.0, backend="gpu")
    with pytest.raises(ValueError, match="positive definite"):
        AnisotropicGaussian(torch.tensor([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(ValueError, match="one weight per scale"):
        SumOfGaussians([0.1, 0.2], [1.0])
    with pytest.raises(ValueError, match="integrator must be one of"):
        LDDMM(k, integrator="leapfrog")
    with pytest.raises(ValueError, match="n_steps must be an integer >= 1"):
        LDDMM(k, n_steps=0)
    with pytest.raises(ValueError, match="snapshots is for the explicit integrators"):
        LDDMM(k, integrator="reversible", snapshots=2)
    with pytest.raises(TypeError, match="kernel must be a tessel.shapes Kernel"):
        LDDMM("gaussian")
    q = cloud(4, 0)
    with pytest.raises(ValueError, match="one momentum per control point"):
        LDDMM(k).shoot(q, q[:3])
    with pytest.raises(ValueError, match="points have dimension 2"):
        LDDMM(k).shoot(q, q, q[:, :2])
    with pytest.raises(ValueError, match="float32 on cpu but q0 torch.float64"):
        LDDMM(k).shoot(q, q.float())
    with pytest.raises(ValueError, match="is for dimension 2 but the points have dimension 3"):
        AnisotropicGaussian(torch.eye(2, dtype=F64)).hamiltonian(q, q)
    with pytest.raises(TypeError, match="shape must be a PointCloud, Curve or Mesh"):
        LDDMM(k).deform(q, q)
    assert "Mesh" in repr(Mesh(cloud(3, 1), torch.tensor([[0, 1, 2]])))
    with pytest.raises(ValueError, match="nits must be an integer >= 1"):
        NormalizedLDDMM(k, nits=0)
    with pytest.raises(ValueError, match="mu must be finite and > 0"):
        NormalizedLDDMM(k, mu=torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="mu has 2 masses but there are 4 control points"):
        NormalizedLDDMM(k, mu=torch.tensor([1.0, 1.0], dtype=F64)).energy(q, q)


def test_decimate_keeps_the_surface_with_fewer_vertices():
    fine = Mesh.icosphere(4)
    coarse = fine.decimate(0.25)
    assert 100 < coarse.points.shape[0] < fine.points.shape[0] // 4
    # Vertex clustering moves vertices by at most a cell's diagonal: the area shrinks a little
    # (merged vertices sit inside the sphere) and stays within 10 %.
    assert 0.9 * float(fine.area) < float(coarse.area) <= float(fine.area)
    assert bool(((coarse.centers * coarse.normals).sum(1) > 0).all())  # still outward
    with pytest.raises(ValueError, match="merges every face away"):
        fine.decimate(10.0)
