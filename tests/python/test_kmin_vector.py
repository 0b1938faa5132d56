"""KMin / ArgKMin / KMin_ArgKMin of formulas of dim D > 1: each component keeps its own K best,
as KeOps does (Genred: column k * D + c; LazyTensor and the pykeops layer: shape (N, K, D)),
against a dense torch sort per component, with gradients against autograd of the dense version."""
import numpy as np
import pytest
import torch

from tessel.torch import Genred, LazyTensor
import tessel.compat.pykeops.torch as pk
import tessel.compat.pykeops.numpy as pkn

N, M = 11, 17
BACKENDS = ["interpreter", "compiled"]


def data(dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(N, 3, generator=g, dtype=torch.float64).to(dtype),
            torch.randn(M, 3, generator=g, dtype=torch.float64).to(dtype))


def dense_f(x, y, d):
    """F_ij of dim d: (x_i - y_j)^2 per coordinate (d = 3) or x_i0 - y_j0 (d = 1). In float32 an
    entry differs from the kernels' by at most two roundings (the interpreter works in float64),
    far below the gaps between the entries of these fixed random points, so the indices
    compare exactly."""
    diff = x[:, None, :] - y[None, :, :]
    return diff ** 2 if d == 3 else diff[..., :1]


def dense_kmin(F, K):
    """(values, indices) of shape (N, K, D): per component, a stable sort (ties to the lowest
    index), values gathered so that autograd flows to the selected entries."""
    idx = torch.sort(F.detach(), dim=1, stable=True).indices[:, :K]
    return torch.gather(F, 1, idx), idx


def lazy_f(x, y, d):
    """dense_f as a LazyTensor."""
    if d == 3:
        return (LazyTensor(x[:, None, :]) - LazyTensor(y[None, :, :])) ** 2
    return LazyTensor(x[:, None, :1]) - LazyTensor(y[None, :, :1])


def tol(dtype):
    return dict(rtol=1e-12, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("K", [1, 4])
@pytest.mark.parametrize("d", [1, 3])
def test_lazytensor_kmin_argkmin_and_gradients(d, K, dtype, backend):
    x, y = data(dtype)
    want_v, want_i = dense_kmin(dense_f(x, y, d), K)
    shape = (N, K) if d == 1 else (N, K, d)
    F = lazy_f(x, y, d)
    v = F.Kmin(K, dim=1, backend=backend)
    i = F.argKmin(K, dim=1, backend=backend)
    v2, i2 = F.Kmin_argKmin(K, dim=1, backend=backend)
    for got in (v, i, v2, i2):
        assert got.shape == shape
    for got in (i, i2):
        assert got.dtype == torch.int64
        assert torch.equal(got, want_i.reshape(shape))
    for got in (v, v2):
        torch.testing.assert_close(got, want_v.reshape(shape), **tol(dtype))
    # Gradients: each component's cotangent reaches the j that attained it.
    xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
    out = lazy_f(xr, yr, d).Kmin(K, dim=1, backend=backend)
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    got = torch.autograd.grad((out * w.to(dtype)).sum(), [xr, yr])
    xd, yd = x.double().requires_grad_(), y.double().requires_grad_()
    ref, _ = dense_kmin(dense_f(xd, yd, d), K)
    want = torch.autograd.grad((ref.reshape(shape) * w).sum(), [xd, yd])
    for g, r in zip(got, want):
        torch.testing.assert_close(g.double(), r, **tol(dtype))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("axis", [0, 1])
def test_genred_layout_is_keops_columns(axis, dtype, backend):
    x, y = data(dtype)
    K = 3
    g = Genred("Square(X - Y)", ["X = Vi(3)", "Y = Vj(3)"], reduction_op="KMin_ArgKMin",
               axis=axis, opt_arg=K)
    v, i = g(x, y, backend=backend)
    F = dense_f(x, y, 3)
    want_v, want_i = dense_kmin(F if axis == 1 else F.transpose(0, 1), K)
    rows = N if axis == 1 else M
    # Column k * D + c holds component c's k-th best, as KeOps's KMin_Reduction writes it.
    assert v.shape == i.shape == (rows, K * 3)
    assert torch.equal(i, want_i.reshape(rows, K * 3))
    torch.testing.assert_close(v, want_v.reshape(rows, K * 3), **tol(dtype))
    torch.testing.assert_close(v[:, 1 * 3 + 2], want_v[:, 1, 2], **tol(dtype))


def test_genred_gradient_through_argkmin_pair_and_second_order():
    x, y = data(torch.float64)
    xr, yr = x.clone().requires_grad_(), y.clone().requires_grad_()
    g = Genred("Square(X - Y) * Elem(X, 0)", ["X = Vi(3)", "Y = Vj(3)"], reduction_op="KMin",
               axis=1, opt_arg=2)
    out = g(xr, yr)
    w = torch.randn(out.shape, dtype=torch.float64)
    gx, = torch.autograd.grad((out * w).sum(), [xr], create_graph=True)
    hx, = torch.autograd.grad((gx ** 2).sum(), [xr])
    xd, yd = x.clone().requires_grad_(), y.clone().requires_grad_()
    F = dense_f(xd, yd, 3) * xd[:, None, :1]
    ref, _ = dense_kmin(F, 2)
    rgx, = torch.autograd.grad((ref.reshape(N, 6) * w).sum(), [xd], create_graph=True)
    rhx, = torch.autograd.grad((rgx ** 2).sum(), [xd])
    torch.testing.assert_close(gx, rgx, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(hx, rhx, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("K", [1, 3])
def test_pykeops_layer_shapes_n_k_d(K):
    x, y = data(torch.float64)
    want_v, want_i = dense_kmin(dense_f(x, y, 3), K)
    d_ij = (pk.LazyTensor(x[:, None, :]) - pk.LazyTensor(y[None, :, :])) ** 2
    v, i = d_ij.Kmin_argKmin(K, dim=1)
    assert v.shape == (N, K, 3) and torch.equal(i, want_i)
    torch.testing.assert_close(v, want_v, rtol=1e-12, atol=1e-12)
    g = pkn.Genred("Square(X - Y)", ["X = Vi(3)", "Y = Vj(3)"], reduction_op="ArgKMin", axis=1,
                   opt_arg=K)
    got = g(x.numpy(), y.numpy())
    assert got.shape == (N, K, 3)
    np.testing.assert_array_equal(got, want_i.numpy())
