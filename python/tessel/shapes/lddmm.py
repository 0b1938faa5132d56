"""LDDMM: geodesic shooting of momenta on control points, and the transport of shapes along it.

The deformation is the flow of the geodesic equations of H(q, p) = 1/2 sum_ij k(q_i, q_j)
<p_i, p_j> from (q0, p0) over t in [0, 1]:
    dq/dt = dH/dp = K(q, q) p,    dp/dt = -dH/dq,    dx/dt = K(x, q) p (any other points),
each right-hand side one tessel reduction (`Kernel.field`). Integrators: "euler", "ralston"
(RK2 with weights 1/4, 3/4: KeOps's LDDMM tutorial), "rk4", and "reversible" (reversible Heun:
its backward rebuilds the trajectory instead of storing it, so memory does not grow with the
steps). `snapshots=s` runs the explicit integrators in tessel's checkpoint_loop: at most s states
kept for the backward (Revolve), recomputing the others. Everything is differentiable in p0, q0,
the transported points and the kernel's parameters, to any order with the explicit integrators.
"""
import torch

from ..loops import checkpoint_loop, odeint_reversible
from ._shape import PointCloud, check_finite
from .kernels import Kernel

INTEGRATORS = ("euler", "ralston", "rk4", "reversible")


def _axpy(state, k, h):
    return tuple(s + h * d for s, d in zip(state, k))


class LDDMM:
    """Geodesic shooting of the kernel Hamiltonian H(q, p) = 1/2 sum_ij k(q_i, q_j) <p_i, p_j>.

    ``shoot(q0, p0)`` integrates the geodesic equations in ``n_steps`` steps; ``deform(shape,
    p0)`` moves any shape (or points) along the flow; ``energy(q0, p0)`` is H. Every step is a
    few tessel reductions, so memory is O(N) per step (and O(snapshots N) with ``snapshots``).

    Parameters
    ----------
    kernel : Kernel
        The deformation kernel (GaussianKernel, CauchyKernel...).
    n_steps : int, default 10
        Integration steps from t = 0 to 1.
    integrator : {"euler", "ralston", "rk4", "reversible"}
        The scheme ("reversible": memory flat in steps, odeint_reversible).
    snapshots : int, optional
        None (plain autograd through every step) or the states checkpoint_loop may keep
        (explicit integrators only).

    Raises
    ------
    ValueError
        A kernel that is not a Kernel, n_steps < 1, an unknown integrator, or snapshots with the
        reversible integrator.

    Examples
    --------
    >>> import torch
    >>> from tessel.shapes import LDDMM, GaussianKernel
    >>> model = LDDMM(GaussianKernel(1.0), n_steps=10)
    >>> q0 = torch.zeros(1, 2, dtype=torch.float64)
    >>> p0 = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    >>> q1, p1 = model.shoot(q0, p0)      # one point, k(q, q) = 1: it moves by p0
    >>> [round(v, 12) for v in q1[0].tolist()]
    [1.0, 0.0]
    """

    def __init__(self, kernel, n_steps=10, integrator="ralston", snapshots=None):
        if not isinstance(kernel, Kernel):
            raise TypeError("tessel.shapes.LDDMM: kernel must be a tessel.shapes Kernel (e.g. "
                            f"GaussianKernel(scale)), got {type(kernel).__name__}")
        if isinstance(n_steps, bool) or not isinstance(n_steps, int) or n_steps < 1:
            raise ValueError(f"tessel.shapes.LDDMM: n_steps must be an integer >= 1, got "
                             f"{n_steps!r}")
        if integrator not in INTEGRATORS:
            raise ValueError(f"tessel.shapes.LDDMM: integrator must be one of {INTEGRATORS}, "
                             f"got {integrator!r}")
        if snapshots is not None:
            if integrator == "reversible":
                raise ValueError("tessel.shapes.LDDMM: snapshots is for the explicit "
                                 "integrators; the reversible one stores no states already")
            if isinstance(snapshots, bool) or not isinstance(snapshots, int) or snapshots < 1:
                raise ValueError(f"tessel.shapes.LDDMM: snapshots must be an integer >= 1 or "
                                 f"None, got {snapshots!r}")
        self.kernel, self.n_steps, self.integrator = kernel, n_steps, integrator
        self.snapshots = snapshots

    def __repr__(self):
        extra = "" if self.snapshots is None else f", snapshots={self.snapshots}"
        return (f"LDDMM({self.kernel!r}, n_steps={self.n_steps}, "
                f"integrator={self.integrator!r}{extra})")

    def velocity(self, z, q, p):
        """v(z) = K(z, q) p: the velocity that momenta p on control points q give points z."""
        return self.kernel(z, q, p)

    def field(self, state):
        """The right-hand side at state = (q, p) or (q, p, x)."""
        q, p = state[0], state[1]
        dq, dp = self.kernel.field(q, p)
        if len(state) == 2:
            return dq, dp
        return dq, dp, self.velocity(state[2], q, p)

    def _step(self, state, dt):
        f = self.field
        if self.integrator == "euler":
            return _axpy(state, f(state), dt)
        if self.integrator == "ralston":
            k1 = f(state)
            k2 = f(_axpy(state, k1, 2 * dt / 3))
            return tuple(s + dt * (a / 4 + 3 * b / 4) for s, a, b in zip(state, k1, k2))
        k1 = f(state)
        k2 = f(_axpy(state, k1, dt / 2))
        k3 = f(_axpy(state, k2, dt / 2))
        k4 = f(_axpy(state, k3, dt))
        return tuple(s + dt / 6 * (a + 2 * b + 2 * c + d)
                     for s, a, b, c, d in zip(state, k1, k2, k3, k4))

    def shoot(self, q0, p0, points=None):
        """(q1, p1) at t = 1 from control points q0 (N, D) and momenta p0 (N, D); with `points`
        (M, D), also where the flow takes them: (q1, p1, x1)."""
        _check_state(type(self).__name__ + ".shoot", q0, p0, points)
        state = (q0, p0) if points is None else (q0, p0, points)
        dt = 1.0 / self.n_steps
        if self.integrator == "reversible":
            t = torch.tensor([0.0, 1.0], dtype=q0.dtype, device=q0.device)
            out = odeint_reversible(lambda _t, y: self.field(y), state, t,
                                    steps_per_interval=self.n_steps)
            return tuple(y[-1] for y in out)
        if self.snapshots is not None:
            return checkpoint_loop(lambda s, _k: self._step(s, dt), state, self.n_steps,
                                   self.snapshots)
        for _ in range(self.n_steps):
            state = self._step(state, dt)
        return state

    def energy(self, q0, p0):
        """The deformation's energy H(q0, p0), constant along the geodesic."""
        _check_state(type(self).__name__ + ".energy", q0, p0, None)
        return self.kernel.hamiltonian(q0, p0)

    def deform(self, shape, p0, control_points=None):
        """`shape` moved by the flow of momenta p0 on control_points (default: the shape's
        vertices, which then move as the control points do)."""
        if not isinstance(shape, PointCloud):
            raise TypeError("tessel.shapes.LDDMM.deform: shape must be a PointCloud, Curve or "
                            f"Mesh, got {type(shape).__name__}")
        if control_points is None:
            q1 = self.shoot(shape.points, p0)[0]
            return shape.with_points(q1)
        return shape.with_points(self.shoot(control_points, p0, shape.points)[2])


def _check_state(who, q0, p0, points):
    def fail(msg):
        raise ValueError(f"tessel.shapes.{who}: {msg}")
    named = (("q0", q0), ("p0", p0)) + ((("points", points),) if points is not None else ())
    for name, t in named:
        if not isinstance(t, torch.Tensor) or t.dim() != 2 or not t.dtype.is_floating_point:
            fail(f"{name} must be a floating (N, D) tensor, got "
                 f"{getattr(t, 'shape', type(t).__name__)}")
    if p0.shape != q0.shape:
        fail(f"p0 has shape {tuple(p0.shape)} but q0 {tuple(q0.shape)}; expected one momentum "
             "per control point")
    if points is not None and points.shape[1] != q0.shape[1]:
        fail(f"points have dimension {points.shape[1]} but the control points {q0.shape[1]}")
    for name, t in named[1:]:
        if t.device != q0.device or t.dtype != q0.dtype:
            fail(f"{name} is {t.dtype} on {t.device} but q0 {q0.dtype} on {q0.device}; expected "
                 "the same")
    # A non-finite start makes a NaN flow, which no later check can trace back to its cause.
    for name, t in named:
        check_finite(who, name, t)


class NormalizedLDDMM(LDDMM):
    """LDDMM with the normalized Hamiltonian of the kernel normalization talk.

    ``H(q, p) = 1/2 <l * p, K(q, q) (l * p)>`` with ``l = Lambda(q, mu)``: the kernel matrix
    scaled symmetrically, Delta(l) K Delta(l), so that its rows against the measure
    mu = sum_i mu_i delta_{q_i} carried by the control points sum to 1: l solves
    l * K(q, q) (l * mu) = 1 (the symmetric Sinkhorn theorem), reached by ``nits`` iterations
    l <- sqrt(l / K(q, q)(l * mu)) from l = 1 (2 are often enough). Every point z, control point
    or not, moves with one velocity field v(z) = lambda(z) K(z, q)(l * p), lambda(z) the same
    iterations run at z (``velocity``), so lambda(q_i) = l_i and a point that starts on a control
    point follows it; at the fixed point lambda(z) = 1 / K(z, q)(l * mu) and velocities are
    weighted averages of the momenta p_i / mu_i.
    Derivatives are exact through the iterations (autograd's of H), so each step costs a few
    times plain LDDMM's.

    Parameters
    ----------
    kernel : Kernel
        The deformation kernel.
    mu : (N,) tensor, optional
        Positive masses on the control points (default 1 / N each).
    nits : int, default 2
        Normalization iterations, >= 1.
    n_steps, integrator, snapshots
        As LDDMM's.

    Raises
    ------
    ValueError
        nits < 1, non-positive masses, or LDDMM's errors.

    Examples
    --------
    >>> import torch
    >>> from tessel.shapes import NormalizedLDDMM, GaussianKernel
    >>> model = NormalizedLDDMM(GaussianKernel(1.0), nits=3, n_steps=5)
    >>> q0 = torch.rand(6, 2, dtype=torch.float64)
    >>> q1, p1 = model.shoot(q0, torch.zeros_like(q0))
    >>> bool(torch.equal(q1, q0))          # no momentum, no motion
    True
    """

    def __init__(self, kernel, mu=None, nits=2, n_steps=10, integrator="ralston",
                 snapshots=None):
        super().__init__(kernel, n_steps=n_steps, integrator=integrator, snapshots=snapshots)
        if isinstance(nits, bool) or not isinstance(nits, int) or nits < 1:
            raise ValueError(f"tessel.shapes.NormalizedLDDMM: nits must be an integer >= 1, got "
                             f"{nits!r}")
        if mu is not None:
            if not isinstance(mu, torch.Tensor) or mu.dim() != 1:
                raise ValueError("tessel.shapes.NormalizedLDDMM: mu must be an (N,) tensor of "
                                 "masses on the control points")
            if not bool((mu.detach() > 0).all() & torch.isfinite(mu.detach()).all()):
                raise ValueError("tessel.shapes.NormalizedLDDMM: mu must be finite and > 0")
        self.mu, self.nits = mu, nits

    def __repr__(self):
        return super().__repr__().replace("LDDMM(", "NormalizedLDDMM(", 1)[:-1] + \
            f", nits={self.nits})"

    def _mu(self, q):
        if self.mu is None:
            return torch.full((q.shape[0], 1), 1.0 / q.shape[0], dtype=q.dtype, device=q.device)
        if self.mu.shape[0] != q.shape[0]:
            raise ValueError(f"tessel.shapes.NormalizedLDDMM: mu has {self.mu.shape[0]} masses "
                             f"but there are {q.shape[0]} control points")
        return self.mu.to(dtype=q.dtype, device=q.device)[:, None]

    def hamiltonian(self, q, p, lam=None):
        """H(q, p), with l = Lambda(q, mu) unless given."""
        lp = (self.normalization(q) if lam is None else lam) * p
        return 0.5 * (lp * self.kernel(q, q, lp)).sum()

    def energy(self, q0, p0):
        _check_state(type(self).__name__ + ".energy", q0, p0, None)
        return self.hamiltonian(q0, p0)

    def iterates(self, q):
        """[l_0 = 1, l_1, ..., l_nits] (each (N, 1)): the normalization's iterates at q."""
        mu = self._mu(q)
        out = [torch.ones_like(mu)]
        for _ in range(self.nits):
            out.append((out[-1] / self.kernel(q, q, out[-1] * mu)).sqrt())
        return out

    def normalization(self, q):
        """l = Lambda(q, mu), (N, 1): nits symmetric Sinkhorn iterations from 1."""
        return self.iterates(q)[-1]

    def velocity(self, z, q, p, iterates=None):
        """v(z) = lambda(z) K(z, q)(l p) at points z (M, D), from control points q and momenta p.

        lambda(z) runs the normalization's iterations at z against the control points' iterates
        l_k (`iterates`, computed from q unless given): lambda_{k+1}(z) = sqrt(lambda_k(z) /
        K(z, q)(l_k mu)) from 1, so lambda(q_i) = l_i and v(q_i) = l_i K(q_i, q)(l p) = dH/dp_i,
        the control points' own velocity: one field moves every point."""
        its = self.iterates(q) if iterates is None else iterates
        mu = self._mu(q)
        lam = torch.ones_like(z[:, :1])
        for lk in its[:-1]:
            lam = (lam / self.kernel(z, q, lk * mu)).sqrt()
        return lam * self.kernel(z, q, its[-1] * p)

    def field(self, state):
        q, p = state[0], state[1]
        with torch.enable_grad():
            # Without an outer graph through q (no_grad shooting, or momenta alone), q is a leaf
            # of this graph only.
            qg = q if q.requires_grad else q.detach().requires_grad_()
            its = self.iterates(qg)
            (dh_dq,) = torch.autograd.grad(self.hamiltonian(qg, p, its[-1]), qg,
                                           create_graph=q.requires_grad or p.requires_grad)
        if not q.requires_grad:
            its = [lk.detach() for lk in its]
        if not (q.requires_grad or p.requires_grad):
            dh_dq = dh_dq.detach()
        # dH/dp = l K(q, q)(l p) is v(q): the velocity field's value at the control points
        # (iterated there, lambda(q) = l exactly).
        lam = its[-1]
        dh_dp = lam * self.kernel(q, q, lam * p)
        if len(state) == 2:
            return dh_dp, -dh_dq
        return dh_dp, -dh_dq, self.velocity(state[2], q, p, its)
