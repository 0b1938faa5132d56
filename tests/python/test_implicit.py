"""Implicitly differentiated solvers (tessel.loops.implicit): values, gradients, memory and errors."""
import os
import warnings

import pytest
import torch

from tessel.torch import ConvergenceError, cg_solve, fixed_point
from tessel.loops.memory import run_isolated
from tessel.torch import Vi, Vj

F64 = torch.float64
TIGHT = dict(rtol=1e-8, atol=1e-8)


def spd(n, seed=0, shift=1.0):
    g = torch.Generator().manual_seed(seed)
    m = torch.randn(n, n, dtype=F64, generator=g)
    return m @ m.T / n + shift * torch.eye(n, dtype=F64)


def rand(*shape, seed=1, grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, dtype=F64, generator=g).requires_grad_(grad)


def sym(a):
    return 0.5 * (a + a.T)


def assert_grads(got, ref, **tol):
    for a, c in zip(got, ref):
        torch.testing.assert_close(a, c, **(tol or TIGHT))


# ---- cg_solve ------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [None, 3])
def test_cg_matches_linalg_solve_values_and_gradients(k):
    a = spd(12).requires_grad_()
    b = rand(12, *(() if k is None else (k,)), grad=True)
    w = rand(*b.shape, seed=2)
    stats = {}
    x = cg_solve(lambda v: sym(a) @ v, b, tol=1e-12, stats=stats)
    ref = torch.linalg.solve(sym(a), b)
    torch.testing.assert_close(x, ref, **TIGHT)
    assert stats["converged"] and 1 <= stats["iterations"] <= 12
    got = torch.autograd.grad((w * x).sum(), (a, b))
    assert_grads(got, torch.autograd.grad((w * ref).sum(), (a, b)))
    assert stats["backward_converged"] and stats["backward_iterations"] >= 1
    if k is not None:
        assert isinstance(stats["residual"], list) and len(stats["residual"]) == k


def test_cg_columns_are_independent_right_hand_sides():
    a = spd(20, shift=0.05)
    evec = torch.linalg.eigh(a)[1][:, 0]
    b = torch.stack([evec, torch.zeros(20, dtype=F64), rand(20), 1e6 * rand(20, seed=3)], 1)
    x = cg_solve(lambda v: a @ v, b, tol=1e-11)
    for j in range(4):  # each column as accurate as if solved alone
        torch.testing.assert_close(x[:, j], cg_solve(lambda v: a @ v, b[:, j], tol=1e-11),
                                   rtol=1e-9, atol=1e-9 * float(b[:, j].norm()))
    torch.testing.assert_close(x, torch.linalg.solve(a, b), rtol=1e-9, atol=1e-3)
    assert torch.all(x[:, 1] == 0)


def test_cg_closure_params_get_gradients_without_being_listed():
    # A(theta) = L L^T + diag(exp(s)); only b is passed, L and s are found through matvec.
    lo, s, b = rand(8, 8, grad=True), rand(8, seed=4, grad=True), rand(8, seed=5, grad=True)

    def mat():
        return lo @ lo.T + torch.diag(s.exp())

    x = cg_solve(lambda v: mat() @ v, b, tol=1e-13)
    ref = torch.linalg.solve(mat(), b)
    loss, loss_ref = (x ** 3).sum(), (ref ** 3).sum()
    assert_grads(torch.autograd.grad(loss, (lo, s, b)),
                 torch.autograd.grad(loss_ref, (lo, s, b)))


def test_cg_gradcheck_and_gradgradcheck():
    a, b = spd(5).requires_grad_(), rand(5, 2, grad=True)

    def solve(a, b):
        return cg_solve(lambda v: sym(a) @ v, b, tol=1e-13)

    assert torch.autograd.gradcheck(solve, (a, b))
    assert torch.autograd.gradgradcheck(solve, (a, b))


def test_cg_second_derivatives_match_dense():
    a, b = spd(6).requires_grad_(), rand(6, grad=True)

    def grads(solve):
        x = solve(sym(a), b)
        ga, gb = torch.autograd.grad((x * x.sin()).sum(), (a, b), create_graph=True)
        return torch.autograd.grad((ga ** 2).sum() + (gb ** 3).sum(), (a, b))

    assert_grads(grads(lambda m, r: cg_solve(lambda v: m @ v, r, tol=1e-13)),
                 grads(torch.linalg.solve), rtol=1e-7, atol=1e-7)


def _gauss(x, alpha):
    k = (-Vi(x).sqdist(Vj(x)) / 0.5).exp()
    return lambda v: k @ v + alpha * v


def _gauss_dense(x, alpha):
    k = torch.exp(-((x[:, None] - x[None]) ** 2).sum(-1) / 0.5)
    return k + alpha * torch.eye(len(x), dtype=x.dtype)


def test_cg_tessel_kernel_operator_matches_dense():
    x, b = rand(200, 3, grad=True), rand(200, 2, seed=6, grad=True)
    w = rand(200, 2, seed=7)
    sol = cg_solve(_gauss(x, 0.5), b, tol=1e-12)
    ref = torch.linalg.solve(_gauss_dense(x, 0.5), b)
    torch.testing.assert_close(sol, ref, **TIGHT)
    got = torch.autograd.grad((w * sol).sum(), (x, b))
    assert_grads(got, torch.autograd.grad((w * ref).sum(), (x, b)))


def test_cg_tessel_kernel_gradgradcheck():
    x, b = rand(7, 2, grad=True), rand(7, seed=8, grad=True)
    assert torch.autograd.gradgradcheck(lambda x, b: cg_solve(_gauss(x, 0.3), b, tol=1e-13),
                                        (x, b))


def test_cg_nonconvergence_reports_residual():
    a, b = spd(30, shift=0.01), rand(30)
    with pytest.raises(ConvergenceError, match=r"no convergence after 2 iterations: relative "
                                               r"residual [0-9.e+-]+ > tol 1e-06"):
        cg_solve(lambda v: a @ v, b, maxiter=2)
    with pytest.raises(ConvergenceError, match=r"column \d of 2"):
        cg_solve(lambda v: a @ v, torch.stack([b, b.flip(0)], 1), maxiter=2)
    with pytest.raises(ConvergenceError, match=r"residual [0-9.e+-]+ > atol 1"):
        cg_solve(lambda v: a @ v, 1e3 * b, atol=1.0, maxiter=2)
    stats = {}
    with pytest.warns(RuntimeWarning, match="cg_solve: no convergence after 2"):
        cg_solve(lambda v: a @ v, b, maxiter=2, on_nonconvergence="warn", stats=stats)
    assert stats["iterations"] == 2 and not stats["converged"]
    assert stats["relative_residual"] > 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cg_solve(lambda v: a @ v, b, maxiter=2, on_nonconvergence="ignore")
    # The backward solve follows the same policy and says it is the backward: b is an eigenvector
    # (one iteration), the cotangent is not.
    d = torch.linspace(1.0, 10.0, 30, dtype=F64)
    e0 = torch.zeros(30, dtype=F64).index_fill_(0, torch.tensor([0]), 1.0).requires_grad_()
    x = cg_solve(lambda v: d * v, e0, maxiter=3)
    with pytest.raises(ConvergenceError, match=r"cg_solve \(backward\): no convergence after 3"):
        torch.autograd.grad((x * rand(30)).sum(), e0)


def test_cg_detects_an_operator_that_is_not_positive_definite():
    d = torch.tensor([1.0, 2.0, -3.0, 4.0], dtype=F64)
    with pytest.raises(ValueError, match="not positive definite: p\\^T A p = .* <= 0"):
        cg_solve(lambda v: d * v, torch.ones(4, dtype=F64))
    q = torch.linalg.qr(rand(10, 10))[0]
    indefinite = q @ torch.diag(torch.linspace(-1, 1, 10, dtype=F64)) @ q.T
    with pytest.raises(ValueError, match="not positive definite"):
        cg_solve(lambda v: indefinite @ v, rand(10, 3, seed=9))
    with pytest.raises(ValueError, match="non-finite"):
        cg_solve(lambda v: v * float("nan"), torch.ones(3, dtype=F64))


def test_cg_warm_start_no_grad_and_no_params():
    a, b = spd(40, shift=0.02), rand(40)
    cold, warm = {}, {}
    x = cg_solve(lambda v: a @ v, b, tol=1e-10, stats=cold)
    cg_solve(lambda v: a @ v, b, tol=1e-10, x0=x + 1e-6, stats=warm)
    assert warm["iterations"] < cold["iterations"]
    assert not x.requires_grad  # nothing to differentiate: no graph
    b.requires_grad_()
    with torch.no_grad():
        assert not cg_solve(lambda v: a @ v, b).requires_grad


def _unrolled_cg(mv, b, n):
    x, r = torch.zeros_like(b), b
    p, rs = r, (r * r).sum()
    for _ in range(n):
        ap = mv(p)
        alpha = rs / (p * ap).sum()
        x, r = x + alpha * p, r - alpha * ap
        rs, rs_old = (r * r).sum(), rs
        p = r + rs / rs_old * p
    return x


def _saved_bytes(fn):
    total = [0]

    def pack(t):
        total[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total[0]


def test_cg_saved_tensors_do_not_grow_with_iterations():
    n = 20_000
    d = torch.linspace(0.01, 10.0, n, dtype=F64).requires_grad_()
    b = rand(n, seed=10, grad=True)

    def solve(iters):
        return lambda: cg_solve(lambda v: d * v, b, tol=0.0, maxiter=iters,
                                on_nonconvergence="ignore")

    unrolled = [_saved_bytes(lambda: _unrolled_cg(lambda v: d * v, b, m)) for m in (10, 200)]
    implicit = [_saved_bytes(solve(m)) for m in (10, 200)]
    assert unrolled[1] > 15 * unrolled[0] > 15 * 10 * n * 8
    assert implicit[0] == implicit[1] <= 8 * n * 8


def test_cg_peak_memory_does_not_grow_with_iterations():
    # Forward and backward in a fresh process each, with 4 MB vectors; the cotangent is an
    # eigenvector so that the backward solve is short and the forward's iterations dominate.
    # One thread: under a loaded machine two spinning threads cost far more than they gain.
    setup = """
        import torch
        from tessel.loops.implicit import cg_solve
        n = 500_000
        d = torch.linspace(0.01, 10.0, n, dtype=torch.float64).requires_grad_()
        b = torch.randn(n, dtype=torch.float64, requires_grad=True)
        """
    work = """
        x = cg_solve(lambda v: d * v, b, tol=0.0, maxiter={}, on_nonconvergence="ignore")
        x[0].backward()
        RESULT = float(b.grad[0])
        """
    # A fixed mmap threshold: glibc's adaptive one keeps freed 4 MB temporaries resident, which
    # would measure the allocator's caching rather than what the solve holds.
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    runs = [run_isolated(setup, work.format(m), threads=1, timeout=120, env=env)
            for m in (10, 200)]
    peaks = [r["peak_bytes"] for r in runs]
    assert runs[0]["result"] == pytest.approx(1 / 0.01)
    # An unrolled graph would keep several vectors per iteration: 190 more iterations, >2 GB.
    assert peaks[1] < peaks[0] + 3 * 8 * 500_000, peaks


def test_cg_bad_inputs():
    a = spd(3)

    def mv(v):
        return a @ v

    b = torch.ones(3, dtype=F64)
    cases = [
        (dict(matvec=3), TypeError, "matvec must be callable"),
        (dict(b=[1.0, 2.0]), TypeError, "b must be a torch.Tensor"),
        (dict(b=torch.ones(3, dtype=torch.int64)), TypeError, "floating-point"),
        (dict(b=torch.ones(3, 2, 2, dtype=F64)), ValueError, r"shape \(n,\) or \(n, k\)"),
        (dict(tol=-1.0), ValueError, "tol must be"),
        (dict(atol=float("nan")), ValueError, "atol must be"),
        (dict(maxiter=0), ValueError, "maxiter must be an integer >= 1"),
        (dict(on_nonconvergence="loud"), ValueError, "on_nonconvergence"),
        (dict(x0=torch.ones(4, dtype=F64)), ValueError, "x0 must be"),
        (dict(stats=[]), TypeError, "stats must be a dict"),
        (dict(matvec=lambda v: v[:2]), ValueError, r"matvec returned shape \(2,\)"),
        (dict(matvec=lambda v: v.float()), TypeError, "matvec returned torch.float32"),
        (dict(matvec=lambda v: 1.0), TypeError, "matvec returned a float"),
    ]
    for kw, err, msg in cases:
        kw = dict(dict(matvec=mv, b=b), **kw)
        with pytest.raises(err, match="cg_solve: .*" + msg):
            cg_solve(kw.pop("matvec"), kw.pop("b"), **kw)



def _badly_scaled(n=40, seed=3):
    """An SPD matrix whose diagonal spans six orders of magnitude: plain CG crawls, Jacobi not."""
    s = torch.logspace(-3, 3, n, dtype=F64)
    return s.sqrt()[:, None] * spd(n, seed) * s.sqrt()[None]


@pytest.mark.parametrize("form", ["tensor", "callable"])
@pytest.mark.parametrize("k", [None, 2])
def test_cg_preconditioner_same_solution_and_gradients_fewer_iterations(form, k):
    a = _badly_scaled().requires_grad_()
    b = rand(40, *(() if k is None else (k,)), grad=True)
    w = rand(*b.shape, seed=5)
    inv_diag = 1 / torch.diagonal(a).detach()
    m = inv_diag if form == "tensor" else (
        (lambda v: inv_diag * v) if k is None else (lambda v: inv_diag[:, None] * v))
    plain, pre = {}, {}
    x0 = cg_solve(lambda v: sym(a) @ v, b, tol=1e-13, stats=plain)
    x1 = cg_solve(lambda v: sym(a) @ v, b, tol=1e-13, stats=pre, preconditioner=m)
    ref = torch.linalg.solve(sym(a), b)
    torch.testing.assert_close(x1, ref, rtol=1e-9, atol=1e-9)
    assert pre["iterations"] * 3 < plain["iterations"], (pre, plain)
    got = torch.autograd.grad((w * x1).sum(), (a, b))
    assert pre["backward_iterations"] * 3 < plain["iterations"]
    assert_grads(got, torch.autograd.grad((w * ref).sum(), (a, b)), rtol=1e-8, atol=1e-8)
    assert_grads(torch.autograd.grad((w * x0).sum(), (a, b)), got, rtol=1e-8, atol=1e-8)


def test_cg_preconditioner_second_derivatives():
    a, b = spd(5).requires_grad_(), rand(5, 2, grad=True)
    pre = torch.linspace(0.5, 2.0, 5, dtype=F64)  # any SPD M: the solution stays A^-1 b

    def solve(a, b):
        return cg_solve(lambda v: sym(a) @ v, b, tol=1e-13, preconditioner=pre)

    assert torch.autograd.gradgradcheck(solve, (a, b))


@pytest.mark.parametrize("form", ["tensor", "callable"])
@pytest.mark.parametrize("dtype,c", [(F64, 1e-300), (F64, 1e300), (torch.float32, 1e-30),
                                     (torch.float32, 1e30)])
def test_cg_preconditioner_of_any_scale(form, dtype, c):
    # A valid Jacobi preconditioner of 1e-300 used to be blamed on the operator ("not positive
    # definite": r^T M^-1 r and p^T A p underflowed). CG is invariant to M's scale: the same
    # iterates, to rounding, as with M of unit size.
    a = _badly_scaled(12).to(dtype)
    b = rand(12, 2).to(dtype)
    d = (1 / torch.diagonal(a)) / torch.diagonal(a).reciprocal().max()
    unit, scaled = {}, {}
    m = (lambda s: d * s) if form == "tensor" else (lambda s: (lambda v: (d * s)[:, None] * v))
    x1 = cg_solve(lambda v: a @ v, b, tol=1e-5, stats=unit, preconditioner=m(1.0))
    x2 = cg_solve(lambda v: a @ v, b, tol=1e-5, stats=scaled, preconditioner=m(c))
    assert scaled["iterations"] == unit["iterations"]
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(x2, x1, rtol=1e3 * eps, atol=1e3 * eps * float(x1.abs().max()))


def test_cg_preconditioner_bad_inputs():
    a, b = spd(3), torch.ones(3, dtype=F64)
    cases = [
        (torch.ones(4, dtype=F64), TypeError, r"tensor of shape \(3,\)"),
        (torch.ones(3), TypeError, "b's dtype"),
        ("jacobi", TypeError, "preconditioner must be a callable"),
        (torch.tensor([1.0, -1.0, 1.0], dtype=F64), ValueError, "finite and positive"),
        (torch.tensor([1.0, float("nan"), 1.0], dtype=F64), ValueError, "finite and positive"),
        (lambda v: v[:2], ValueError, r"preconditioner returned shape \(2,\)"),
        (lambda v: -v, ValueError, "preconditioner is not positive definite"),
    ]
    for m, err, msg in cases:
        with pytest.raises(err, match="cg_solve: .*" + msg):
            cg_solve(lambda v: a @ v, b, preconditioner=m)

# ---- fixed_point ---------------------------------------------------------------------------------
def _contraction(n=6, seed=11):
    w = (0.8 * torch.linalg.qr(rand(n, n, seed=seed))[0]).requires_grad_()
    return w, rand(n, seed=seed + 1, grad=True)


def _unrolled(f, x, n):
    for _ in range(n):
        x = f(x)
    return x


@pytest.mark.parametrize("method", ["picard", "anderson"])
def test_fixed_point_tanh_contraction_matches_unrolled(method):
    w, c = _contraction()
    x0, t = torch.zeros(6, dtype=F64), rand(6, seed=13)
    stats = {}
    x = fixed_point(lambda x, w, c: torch.tanh(w @ x + c), x0, (w, c), tol=1e-13, method=method,
                    stats=stats)
    ref = _unrolled(lambda x: torch.tanh(w @ x + c), x0, 300)
    torch.testing.assert_close(x, ref, rtol=1e-11, atol=1e-11)
    g_ref = torch.autograd.grad(((ref - t) ** 2).sum(), (w, c))
    assert_grads(torch.autograd.grad(((x - t) ** 2).sum(), (w, c)), g_ref)
    assert stats["converged"] and stats["backward_converged"]
    # The same tensors reached through the closure instead of params: the same gradients.
    y = fixed_point(lambda x: torch.tanh(w @ x + c), x0, tol=1e-13, method=method)
    assert_grads(torch.autograd.grad(((y - t) ** 2).sum(), (w, c)), g_ref)


def test_fixed_point_anderson_needs_fewer_iterations():
    w, c = _contraction()
    counts = []
    for method in ("picard", "anderson"):
        stats = {}
        fixed_point(lambda x: torch.tanh(w @ x + c), torch.zeros(6, dtype=F64), tol=1e-12,
                    method=method, stats=stats)
        counts.append(stats["iterations"])
    assert counts[1] < counts[0]


def test_fixed_point_gradcheck():
    w, c = _contraction(4)
    assert torch.autograd.gradcheck(
        lambda w, c: fixed_point(lambda x: torch.tanh(w @ x + c), torch.zeros(4, dtype=F64),
                                 tol=1e-14), (w, c))


def _sinkhorn_step(x, logw, eps, lazy):
    """Symmetric Sinkhorn (Feydy et al.): f <- (f + softmin_eps(C, log w + f / eps)) / 2."""
    if lazy:
        def softmin(h):
            c = Vi(x).sqdist(Vj(x)) / 2
            return -eps * (Vj(h[:, None]) - c / eps).logsumexp(axis=1)[:, 0]
    else:
        c = ((x[:, None] - x[None]) ** 2).sum(-1) / 2

        def softmin(h):
            return -eps * torch.logsumexp(h[None, :] - c / eps, dim=1)
    return lambda f: 0.5 * (f + softmin(logw + f / eps))


@pytest.mark.parametrize("lazy,method", [(False, "picard"), (True, "anderson")])
def test_fixed_point_symmetric_sinkhorn_gradient_matches_unrolled(lazy, method):
    x, eps = rand(40, 2, seed=14, grad=True), 0.1
    w = torch.full((40,), 1 / 40, dtype=F64)
    f0 = torch.zeros(40, dtype=F64)
    if lazy:  # the points only through the closure
        f = fixed_point(lambda f: _sinkhorn_step(x, w.log(), eps, True)(f), f0, tol=1e-13,
                        method=method)
    else:
        f = fixed_point(lambda f, x: _sinkhorn_step(x, w.log(), eps, False)(f), f0, (x,),
                        tol=1e-13, method=method)
    ref = _unrolled(_sinkhorn_step(x, w.log(), eps, False), f0, 120)
    torch.testing.assert_close(f, ref, rtol=1e-10, atol=1e-10)
    # OT_eps(w, w) = 2 <w, f> at the fixed point; its gradient moves the points.
    g = torch.autograd.grad(2 * (w * f).sum(), x)[0]
    g_ref = torch.autograd.grad(2 * (w * ref).sum(), x)[0]
    torch.testing.assert_close(g, g_ref, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("method", ["picard", "anderson"])
def test_fixed_point_tuple_state(method):
    w1, c1 = _contraction(5, seed=20)
    w2, c2 = _contraction(3, seed=22)
    m = rand(3, 5, seed=24, grad=True)

    def step(state):
        a, b = state
        return torch.tanh(w1 @ a + 0.3 * m.T @ b + c1), torch.tanh(w2 @ b + 0.3 * m @ a + c2)

    x0 = (torch.zeros(5, dtype=F64), torch.ones(3, dtype=F64))
    a, b = fixed_point(lambda s: step(s), x0, tol=1e-13, method=method)
    ra, rb = _unrolled(step, x0, 400)
    torch.testing.assert_close((a, b), (ra, rb), rtol=1e-11, atol=1e-11)
    inputs = (w1, c1, w2, c2, m)
    assert_grads(torch.autograd.grad((a ** 2).sum() + b.sum(), inputs),
                 torch.autograd.grad((ra ** 2).sum() + rb.sum(), inputs, retain_graph=True))
    # Only one part of the state reaching the loss: the other still enters the adjoint.
    assert_grads(torch.autograd.grad(fixed_point(step, x0, tol=1e-13, method=method)[1].sum(),
                                     (m,)),
                 torch.autograd.grad(rb.sum(), (m,)))


def test_fixed_point_nonconvergence_and_double_backward():
    w, c = _contraction()

    def f(x):
        return torch.tanh(w @ x + c)

    x0 = torch.zeros(6, dtype=F64)
    with pytest.raises(ConvergenceError, match=r"fixed_point: no convergence after 3 "
                                               r"iterations: relative residual .* > tol 1e-08"):
        fixed_point(f, x0, maxiter=3)
    stats = {}
    with pytest.warns(RuntimeWarning, match="no convergence after 3"):
        fixed_point(f, x0, maxiter=3, on_nonconvergence="warn", stats=stats)
    assert stats == dict(iterations=3, residual=stats["residual"], converged=False)
    x = fixed_point(f, x0, backward_maxiter=2)
    with pytest.raises(ConvergenceError, match=r"fixed_point \(backward\): no convergence after 2"):
        torch.autograd.grad(x.sum(), w)
    x = fixed_point(f, x0)
    gw = torch.autograd.grad(x.sum(), w, create_graph=False)[0]
    assert not gw.requires_grad
    x = fixed_point(f, x0)
    with pytest.raises(RuntimeError, match="double backward .*create_graph"):
        torch.autograd.grad(x.sum(), w, create_graph=True)
    with torch.no_grad():
        assert not fixed_point(f, x0).requires_grad


def test_fixed_point_bad_inputs():
    def f(x):
        return 0.5 * x

    x0 = torch.ones(3, dtype=F64)
    cases = [
        (dict(f=None), TypeError, "f must be callable"),
        (dict(x0=torch.ones(3, dtype=torch.int32)), TypeError, "x0 must be a floating-point"),
        (dict(x0=()), TypeError, "x0 must be"),
        (dict(params=x0), TypeError, "params must be a tuple"),
        (dict(tol=-1e-3), ValueError, "tol must be"),
        (dict(maxiter=1.5), ValueError, "maxiter must be an integer"),
        (dict(backward_maxiter=0), ValueError, "backward_maxiter"),
        (dict(method="newton"), ValueError, "method must be one of"),
        (dict(on_nonconvergence=None), ValueError, "on_nonconvergence"),
        (dict(f=lambda x: x[:2]), ValueError, "f must return a tensor laid out as the state"),
        (dict(x0=(x0, x0), f=lambda s: s[0]), ValueError, "f must return a tuple"),
        (dict(x0=(x0, x0.float()), method="anderson"), TypeError, "method='anderson' needs"),
    ]
    for kw, err, msg in cases:
        kw = dict(dict(f=f, x0=x0), **kw)
        with pytest.raises(err, match="fixed_point: " + msg):
            fixed_point(kw.pop("f"), kw.pop("x0"), **kw)
