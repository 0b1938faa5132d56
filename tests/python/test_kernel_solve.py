"""KernelSolve / LazyTensor.solve on the core CG: solutions, implicit gradients to any order, reports, errors."""
import warnings

import numpy as np
import pytest
import torch

import tessel.numpy as tn
import tessel.torch as tt
from tessel.torch import KernelSolve, Vi, Vj

F64 = torch.float64
FORMULA = "Exp(-G*SqDist(X,Y))*B"
ALIASES = ["X = Vi(2)", "Y = Vj(2)", "B = Vj(3)", "G = Pm(1)"]


def problem(n=80, dtype=F64):
    x = torch.rand(n, 2, dtype=dtype)
    b = torch.randn(n, 3, dtype=dtype)
    g = torch.tensor([4.0], dtype=dtype)
    return x, b, g


def dense_solve(x, b, g, alpha):
    K = torch.exp(-g * ((x[:, None] - x[None]) ** 2).sum(-1))
    return torch.linalg.solve(K + alpha * torch.eye(len(x), dtype=x.dtype), b)


def test_torch_solution_matches_dense_and_reports():
    x, b, g = problem()
    stats = {}
    out = KernelSolve(FORMULA, ALIASES, "B")(x, x, b, g, alpha=0.1, tol=1e-12, stats=stats)
    torch.testing.assert_close(out, dense_solve(x, b, g, 0.1), rtol=1e-9, atol=1e-9)
    assert stats["converged"] and stats["residual"] < 1e-12 and stats["iterations"] > 5


@pytest.mark.parametrize("unknown", ["B", 2, "Var(2,3,1)"])
def test_unknown_by_name_index_or_var(unknown):
    x, b, g = problem(30)
    out = KernelSolve(FORMULA, ALIASES, unknown)(x, x, b, g, alpha=0.5, tol=1e-12)
    torch.testing.assert_close(out, dense_solve(x, b, g, 0.5), rtol=1e-9, atol=1e-9)


def test_numpy_solution_and_gradient():
    x, b, g = problem()
    ks = tn.KernelSolve(FORMULA, ALIASES, "B")
    xn, bn, gn = x.numpy(), b.numpy(), g.numpy()
    out = ks(xn, xn, bn, gn, alpha=0.1, tol=1e-12)
    np.testing.assert_allclose(out, dense_solve(x, b, g, 0.1).numpy(), rtol=1e-9, atol=1e-9)
    w = np.random.randn(*out.shape)
    grads = ks.gradient(xn, xn, bn, gn, x=out, grad_x=w, alpha=0.1, tol=1e-12)
    xr, br, gr = (t.clone().requires_grad_() for t in (x, b, g))
    ar = torch.tensor(0.1, dtype=F64, requires_grad=True)
    ref = torch.autograd.grad((dense_solve(xr, br, gr, ar) * torch.from_numpy(w)).sum(),
                              [xr, br, gr, ar])
    np.testing.assert_allclose(grads[2], ref[1].numpy(), rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(grads[3], ref[2].numpy(), rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(grads[0] + grads[1], ref[0].numpy(), rtol=1e-8, atol=1e-9)
    assert abs(grads["alpha"] - float(ref[3])) < 1e-8 * (1 + abs(float(ref[3])))


def test_torch_gradients_equal_dense_autograd():
    x, b, g = problem()
    x.requires_grad_()
    b.requires_grad_()
    g.requires_grad_()
    alpha = torch.tensor(0.2, dtype=F64, requires_grad=True)
    w = torch.randn(len(x), 3, dtype=F64)
    got = torch.autograd.grad((KernelSolve(FORMULA, ALIASES, "B")(x, x, b, g, alpha=alpha,
                                                                  tol=1e-13) * w).sum(),
                              [x, b, g, alpha])
    ref = torch.autograd.grad((dense_solve(x, b, g, alpha) * w).sum(), [x, b, g, alpha])
    for a, r in zip(got, ref):
        torch.testing.assert_close(a, r, rtol=1e-8, atol=1e-9)


def test_gradcheck_and_gradgradcheck():
    x, b, g = problem(25)
    alpha = torch.tensor(0.3, dtype=F64)
    ks = KernelSolve(FORMULA, ALIASES, "B")
    args = [t.clone().requires_grad_() for t in (x, b, g, alpha)]

    def f(x, b, g, a):
        return ks(x, x, b, g, alpha=a, tol=1e-13)

    assert torch.autograd.gradcheck(f, args)
    assert torch.autograd.gradgradcheck(f, args)


def test_third_derivative_matches_dense():
    x, b, g = problem(20)
    x.requires_grad_()
    ks = KernelSolve(FORMULA, ALIASES, "B")

    def third(solve):
        y = solve(x)
        (g1,) = torch.autograd.grad((y ** 2).sum(), x, create_graph=True)
        (g2,) = torch.autograd.grad((g1 ** 2).sum(), x, create_graph=True)
        (g3,) = torch.autograd.grad(g2.sin().sum(), x)
        return g3

    got = third(lambda x: ks(x, x, b, g, alpha=0.5, tol=1e-14))
    ref = third(lambda x: dense_solve(x, b, g, 0.5))
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=1e-8)


def test_float32_converges_to_its_accuracy():
    """A float32 solve reaches what float32 can: the residual of A x computed in float32 has a
    floor of about u |A| |x| <= u |A| |b| / alpha (u = 2^-24), so tol is set a few times above it.
    "converged" must then hold, and mean what it says: the reported residual is the true one,
    within the same floor of the float64 one, and the error in x follows from |A^-1| <= 1/alpha."""
    x, b, g = problem(200, torch.float32)
    alpha = 0.1
    xd, bd = x.double(), b.double()
    A = torch.exp(-4 * ((xd[:, None] - xd[None]) ** 2).sum(-1)) + alpha * torch.eye(len(x), dtype=F64)
    floor = 2.0**-24 * torch.linalg.matrix_norm(A, 2).item() / alpha
    tol = 8 * floor
    stats = {}
    out = KernelSolve(FORMULA, ALIASES, "B")(x, x, b, g, alpha=alpha, tol=tol, stats=stats)
    assert stats["converged"] and stats["residual"] <= tol
    r64 = (bd - A @ out.double()).norm().item()
    assert r64 <= (tol + floor) * bd.norm().item()
    ref = dense_solve(xd, bd, g.double(), alpha)
    assert (out.double() - ref).norm().item() <= r64 / alpha * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_converged_means_the_true_residual_met_tol(seed):
    """At the default float32 tol (1e-5, near float32's floor here) the recurrence's residual can
    claim convergence the true residual does not reach (an AVX2 machine did): "converged" and
    the reported residual agree with each other at every SIMD level, with a warning if not."""
    torch.manual_seed(seed)
    x, b, g = problem(200, torch.float32)
    stats = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        KernelSolve(FORMULA, ALIASES, "B")(x, x, b, g, alpha=0.1, stats=stats)
    assert stats["converged"] == (stats["residual"] <= 1e-5)


def test_lazytensor_solve_torch_and_numpy():
    x, b, g = problem(120)
    x.requires_grad_()
    bv = b[:, 0].clone()
    K = (-4 * ((Vi(x) - Vj(x)) ** 2).sum()).exp()
    out = K.solve(bv, alpha=0.1, tol=1e-12)
    ref = dense_solve(x, bv[:, None], g, 0.1)[:, 0]
    assert out.shape == bv.shape
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(torch.autograd.grad(out.sum(), x)[0],
                               torch.autograd.grad(ref.sum(), x)[0], rtol=1e-8, atol=1e-9)
    xn = x.detach().numpy()
    Kn = (-4 * ((tn.Vi(xn) - tn.Vj(xn)) ** 2).sum()).exp()
    np.testing.assert_allclose(Kn.solve(b.numpy(), alpha=0.1, tol=1e-12),
                               dense_solve(x.detach(), b, g, 0.1).numpy(), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("form", ["grid_i", "vi", "grid_j"])
def test_lazytensor_solve_with_lazytensor_b(form):
    """pykeops's form K.solve(LazyTensor(b[:, None, :]), alpha=a): b an i-variable (sum over j)
    or a j-variable (sum over i, K^T x = b); the result is (M, E) with gradients in x, b and a."""
    x, b, g = problem(60)
    x.requires_grad_()
    b.requires_grad_()
    alpha = torch.tensor(0.3, dtype=F64, requires_grad=True)
    K = (-4 * ((tt.LazyTensor(x[:, None, :]) - tt.LazyTensor(x[None, :, :])) ** 2).sum(-1)).exp()
    bl = {"grid_i": lambda: tt.LazyTensor(b[:, None, :]), "vi": lambda: Vi(b),
          "grid_j": lambda: tt.LazyTensor(b[None, :, :])}[form]()
    out = K.solve(bl, alpha=alpha, tol=1e-12)
    ref = dense_solve(x, b, g, alpha)
    assert out.shape == b.shape
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-9)
    w = torch.randn_like(ref)
    got = torch.autograd.grad((out * w).sum(), [x, b, alpha])
    want = torch.autograd.grad((ref * w).sum(), [x, b, alpha])
    for a, e in zip(got, want):
        torch.testing.assert_close(a, e, rtol=1e-8, atol=1e-9)
    xn, bn = x.detach().numpy(), b.detach().numpy()
    Kn = (-4 * ((tn.LazyTensor(xn[:, None, :]) - tn.LazyTensor(xn[None, :, :])) ** 2).sum(-1)).exp()
    bnl = tn.LazyTensor(bn[:, None, :]) if form != "grid_j" else tn.LazyTensor(bn[None, :, :])
    np.testing.assert_allclose(Kn.solve(bnl, alpha=0.3, tol=1e-12),
                               dense_solve(x.detach(), b.detach(), g, 0.3).numpy(), rtol=1e-9,
                               atol=1e-9)


def test_saved_memory_does_not_grow_with_iterations():
    """What autograd keeps for backward is the inputs and x, whatever the iteration count."""
    x, b, g = problem(150)
    b.requires_grad_()
    ks = KernelSolve(FORMULA, ALIASES, "B")

    def saved_bytes(alpha, tol):
        total = [0]

        def pack(t):
            total[0] += t.numel() * t.element_size()
            return t

        stats = {}
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            ks(x, x, b, g, alpha=alpha, tol=tol, stats=stats)
        return total[0], stats["iterations"]

    few_bytes, few = saved_bytes(10.0, 1e-3)
    many_bytes, many = saved_bytes(1e-4, 1e-12)
    assert many > 10 * few
    assert many_bytes == few_bytes


def test_nonconvergence_warn_raise_ignore():
    x, b, g = problem(60)
    ks = KernelSolve(FORMULA, ALIASES, "B")
    with pytest.warns(RuntimeWarning, match=r"did not converge after 2 iterations: relative "
                                            r"residual"):
        ks(x, x, b, g, alpha=1e-3, maxiter=2)
    with pytest.raises(ValueError, match="no convergence after 2 iterations: relative residual"):
        ks(x, x, b, g, alpha=1e-3, maxiter=2, on_nonconvergence="raise")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats = {}
        ks(x, x, b, g, alpha=1e-3, maxiter=2, on_nonconvergence="ignore", stats=stats)
        assert not stats["converged"] and stats["iterations"] == 2


def test_bad_input_errors():
    x, b, g = problem(20)
    with pytest.raises(ValueError, match="not linear"):
        KernelSolve("Exp(-G*SqDist(X,Y))*B*B", ALIASES, "B")(x, x, b, g)
    with pytest.raises(ValueError, match="not linear"):
        KernelSolve("Exp(-G*SqDist(X,Y))*B+1", ALIASES, "B")(x, x, b, g)
    with pytest.raises(ValueError, match="must be a j-variable"):
        KernelSolve("Exp(-G*SqDist(X,Y))*X", ALIASES, "X")
    with pytest.raises(ValueError, match="'Z' is neither one of the alias names"):
        KernelSolve(FORMULA, ALIASES, "Z")
    with pytest.raises(ValueError, match="does not occur"):
        KernelSolve("Exp(-G*SqDist(X,Y))*B", ALIASES + ["C = Vj(3)"], "C")
    ks = KernelSolve(FORMULA, ALIASES, "B")
    with pytest.raises(ValueError, match="alpha must be"):
        ks(x, x, b, g, alpha=-1.0)
    with pytest.raises(ValueError, match="tol must be"):
        ks(x, x, b, g, tol=-1.0)
    with pytest.raises(ValueError, match="maxiter"):
        ks(x, x, b, g, maxiter=0)
    with pytest.raises(ValueError, match="on_nonconvergence"):
        ks(x, x, b, g, on_nonconvergence="maybe")
    with pytest.raises(ValueError, match="expected 4 arguments"):
        ks(x, x, b)
    with pytest.raises(TypeError, match="dtype"):
        ks(x, x, b.float(), g)
    with pytest.raises(ValueError, match="square"):
        ks(x[:10], x, b, g)
    with pytest.raises(ValueError, match="positive definite"):
        KernelSolve("-Exp(-G*SqDist(X,Y))*B", ALIASES, "B")(x, x, b, g)
    with pytest.raises(ValueError, match="dim 1"):
        (Vi(x) - Vj(x)).solve(b[:, 0])


def test_float_ranges_and_indices_are_refused_not_truncated():
    """Indices given as floats (ranges, wrt) were truncated by int(); they are TypeErrors naming
    the function and the argument."""
    x, b, g = problem(6)
    ks = tn.KernelSolve(FORMULA, ALIASES, "B")
    xn, bn, gn = x.numpy(), b.numpy(), g.numpy()
    full = np.array([[0, 6]])
    ranges = (full, np.array([1]), np.array([[0.5, 5.9]]), full, np.array([1]), full)
    with pytest.raises(TypeError, match=r"KernelSolve: ranges\[2\] \(redranges_j\) must hold "
                                        "integers.*got dtype float64"):
        ks(xn, xn, bn, gn, alpha=0.1, ranges=ranges)
    with pytest.raises(TypeError, match=r"KernelSolve: ranges must be a tuple of 6 integer"):
        KernelSolve(FORMULA, ALIASES, "B")(x, x, b, g, alpha=0.1, ranges=5)
    out = ks(xn, xn, bn, gn, alpha=0.1)
    with pytest.raises(TypeError, match=r"KernelSolve.gradient: wrt\[0\] \(a variable index\) "
                                        "must be an integer, got float 2.5"):
        ks.gradient(xn, xn, bn, gn, x=out, grad_x=out, wrt=[2.5], alpha=0.1)


def test_exported_from_front_ends():
    assert tt.KernelSolve is KernelSolve
    assert "KernelSolve" in tt.__all__ and "KernelSolve" in tn.__all__


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (or a CPU-only PyTorch)")
@pytest.mark.parametrize("create_graph", [False, True])
def test_cuda_tensors_solve_and_differentiate_on_their_device(create_graph):
    """The products and CG's steps run on the GPU; solution and gradients come back
    on the device and equal the CPU's, first order and under create_graph."""
    x, b, g = problem()
    w = torch.randn(len(x), 3, dtype=F64)
    outs = []
    for device in ("cpu", "cuda"):
        xd, bd, gd = (t.to(device).requires_grad_() for t in (x, b, g))
        alpha = torch.tensor(0.2, dtype=F64, device=device, requires_grad=True)
        sol = KernelSolve(FORMULA, ALIASES, "B")(xd, xd, bd, gd, alpha=alpha, tol=1e-13)
        assert sol.device.type == device
        grads = torch.autograd.grad((sol * w.to(device)).sum(), [xd, bd, gd, alpha],
                                    create_graph=create_graph)
        assert all(t.device.type == device for t in grads)
        outs.append([t.detach().cpu() for t in (sol,) + grads])
    for got, want in zip(outs[1], outs[0]):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
