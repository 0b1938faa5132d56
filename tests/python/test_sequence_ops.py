"""BSpline, SoftDTW_SqDist and DifferenceMatrix: values and gradients against recursions written in
torch (float64, differentiated by torch's autograd), finite differences and real pykeops 2.3."""
import pathlib

import numpy as np
import pytest
import torch

from tessel import torch as ttorch
from tessel.compat.pykeops.torch import LazyTensor as KeOpsLazyTensor
from tessel.torch import Genred

F64 = torch.float64
ROOT = pathlib.Path(__file__).resolve().parents[2]


def bspline_torch(t, x, k):
    """Textbook Cox-de Boor: t (M, K) knots, x (N,) points -> (N, M, K - k - 1)."""
    t, x = t[None, :, :], x[:, None]
    K = t.shape[-1]
    b = [((t[..., j] <= x) & (x < t[..., j + 1])).to(F64) for j in range(K - 1)]
    for p in range(1, k + 1):
        nxt = []
        for i in range(K - 1 - p):
            lo, hi = t[..., i + p] > t[..., i], t[..., i + p + 1] > t[..., i + 1]
            left = (x - t[..., i]) / torch.where(lo, t[..., i + p] - t[..., i], torch.ones(()))
            right = (t[..., i + p + 1] - x) / torch.where(
                hi, t[..., i + p + 1] - t[..., i + 1], torch.ones(()))
            nxt.append(torch.where(lo, left * b[i], torch.zeros(())) +
                       torch.where(hi, right * b[i + 1], torch.zeros(())))
        b = nxt
    return torch.stack(b, -1)


def softdtw_torch(x, y, gamma):
    """Soft-DTW by its definition, one pair of series: x (n,), y (m,), gamma a 0-d tensor."""
    n, m = len(x), len(y)
    r = {}
    for i in range(n):
        for j in range(m):
            c = (x[i] - y[j]) ** 2
            if i and j:
                a = torch.stack([r[i - 1, j - 1], r[i - 1, j], r[i, j - 1]])
                c = c - gamma * torch.logsumexp(-a / gamma, 0)
            elif i:
                c = c + r[i - 1, j]
            elif j:
                c = c + r[i, j - 1]
            r[i, j] = c
    return r[n - 1, m - 1]


def grads(out, inputs):
    """d out.sum() / d inputs, zeros for inputs it does not depend on."""
    if not out.requires_grad:
        return [torch.zeros_like(v) for v in inputs]
    gs = torch.autograd.grad(out.sum(), inputs, allow_unused=True)
    return [torch.zeros_like(v) if g is None else g for g, v in zip(gs, inputs)]


def sorted_knots(rng, m, k_count, coincident=False):
    base = np.arange(k_count, dtype=float)
    if coincident:
        base = np.array([0, 1, 1, 2, 3, 3, 3, 4][:k_count], dtype=float)
        return torch.tensor(np.tile(base, (m, 1)) + rng.uniform(-0.5, 0.5, (m, 1)), dtype=F64)
    return torch.tensor(base + rng.uniform(-0.3, 0.3, (m, k_count)), dtype=F64)


def lazy_bspline_sum(t, x, b, k):
    """sum_j <BSpline(t_j, x_i, k), b_j> through tessel's LazyTensor."""
    T = ttorch.LazyTensor(t[None, :, :])
    X = ttorch.LazyTensor(x[:, None, None])
    B = ttorch.LazyTensor(b[None, :, :])
    return (T.bspline(X, k) * B).sum(-1).sum(1).view(-1)


@pytest.mark.parametrize("k", [0, 1, 2, 3])
@pytest.mark.parametrize("coincident", [False, True])
def test_bspline_values_and_gradients(k, coincident):
    rng = np.random.default_rng(k + 10 * coincident)
    K, M, N = 8, 5, 40
    t = sorted_knots(rng, M, K, coincident).requires_grad_()
    x = torch.tensor(rng.uniform(-1.5, 8.5, N), dtype=F64)
    # points on knots and outside the range too
    x[:5] = t.detach()[0, :5]
    x[5], x[6] = -3.0, 20.0
    x.requires_grad_()
    b = torch.tensor(rng.standard_normal((M, K - k - 1)), dtype=F64)
    got = lazy_bspline_sum(t, x, b, k)
    want = (bspline_torch(t, x, k) * b[None]).sum(-1).sum(1)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # gradients away from the knots, where the basis is smooth (and with distinct knots for t)
    away = (x.detach()[:, None, None] - t.detach()[None]).abs().amin((1, 2)) > 1e-3
    gx, gt = grads(got, (x, t))
    rx, rt = grads(want, (x, t))
    torch.testing.assert_close(gx[away], rx[away], rtol=1e-10, atol=1e-10)
    if k == 0:
        assert not gx.any() and not gt.any()
    if not coincident and bool(away.all()):
        torch.testing.assert_close(gt, rt, rtol=1e-10, atol=1e-10)


def test_bspline_knot_gradients_and_second_order_by_finite_differences():
    rng = np.random.default_rng(3)
    t = sorted_knots(rng, 3, 7).requires_grad_()
    x = torch.tensor([0.37, 2.61, 4.05, 5.5], dtype=F64, requires_grad=True)
    b = torch.tensor(rng.standard_normal((3, 4)), dtype=F64)
    f = lambda t, x: lazy_bspline_sum(t, x, b, 2)  # noqa: E731
    assert torch.autograd.gradcheck(f, (t, x))
    assert torch.autograd.gradgradcheck(f, (t, x))


def test_bspline_errors():
    t = ttorch.LazyTensor(torch.zeros(1, 4, 5, dtype=F64))
    x = ttorch.LazyTensor(torch.zeros(3, 1, 1, dtype=F64))
    with pytest.raises(ValueError, match=r"LazyTensor.bspline: BSpline: order 4 needs at least 6"):
        t.bspline(x, 4)
    with pytest.raises(ValueError, match="order must be >= 0"):
        t.bspline(x, -1)
    with pytest.raises(ValueError, match=r"sampling point x \(argument 2\) must have dim 1"):
        t.bspline(t, 1)
    with pytest.raises(TypeError, match="order k must be an int"):
        t.bspline(x, 1.5)


def lazy_softdtw_sum(x, y, gamma):
    X = ttorch.LazyTensor(x[:, None, :])
    Y = ttorch.LazyTensor(y[None, :, :])
    return X.softdtw_sqdist(Y, ttorch.LazyTensor(gamma)).sum(1).view(-1)


def softdtw_ref_sum(x, y, gamma):
    return torch.stack([sum(softdtw_torch(x[i], y[j], gamma[0]) for j in range(len(y)))
                        for i in range(len(x))])


@pytest.mark.parametrize("n,m,gamma", [(4, 3, 0.7), (1, 5, 0.3), (5, 1, 1.5), (1, 1, 0.5),
                                       (6, 6, 1e-3), (3, 4, 20.0)])
def test_softdtw_values_and_gradients(n, m, gamma):
    rng = np.random.default_rng(n * 10 + m)
    x = torch.tensor(rng.standard_normal((4, n)), dtype=F64, requires_grad=True)
    y = torch.tensor(rng.standard_normal((5, m)), dtype=F64, requires_grad=True)
    g = torch.tensor([gamma], dtype=F64, requires_grad=True)
    got, want = lazy_softdtw_sum(x, y, g), softdtw_ref_sum(x, y, g)
    torch.testing.assert_close(got, want, rtol=1e-11, atol=1e-11)
    w = torch.tensor(rng.standard_normal(4), dtype=F64)
    tol = 1e-9 if gamma > 0.01 else 1e-7  # d/dgamma grows like 1/gamma
    for a, b in zip(grads(got * w, (x, y, g)), grads(want * w, (x, y, g))):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def test_softdtw_identical_series_and_equal_values():
    x = torch.tensor([[0.5, -1.0, -1.0, 2.0], [1.0, 1.0, 1.0, 1.0]], dtype=F64, requires_grad=True)
    y = x.detach().clone().requires_grad_()
    g = torch.tensor([0.1], dtype=F64, requires_grad=True)
    got, want = lazy_softdtw_sum(x, y, g), softdtw_ref_sum(x, y, g)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads(got, (x, y, g)), grads(want, (x, y, g))):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)
    # hard DTW in the limit: identical series align at cost 0 (minus gamma's entropy term)
    tiny = torch.tensor([1e-6], dtype=F64)
    hard = lazy_softdtw_sum(x.detach(), y.detach(), tiny)
    torch.testing.assert_close(hard, softdtw_ref_sum(x.detach(), y.detach(), tiny))
    assert bool(torch.isfinite(hard).all())


def test_softdtw_second_order_by_finite_differences():
    rng = np.random.default_rng(5)
    x = torch.tensor(rng.standard_normal((2, 3)), dtype=F64, requires_grad=True)
    y = torch.tensor(rng.standard_normal((3, 2)), dtype=F64, requires_grad=True)
    g = torch.tensor([0.6], dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(lazy_softdtw_sum, (x, y, g))
    assert torch.autograd.gradgradcheck(lazy_softdtw_sum, (x, y, g))


def test_softdtw_errors():
    X = ttorch.LazyTensor(torch.zeros(3, 1, 4, dtype=F64))
    Y = ttorch.LazyTensor(torch.zeros(1, 2, 3, dtype=F64))
    with pytest.raises(ValueError, match=r"gamma \(argument 3\) must have dim 1"):
        X.softdtw_sqdist(Y, Y)
    big = ttorch.LazyTensor(torch.zeros(1, 2, 200, dtype=F64))
    with pytest.raises(ValueError, match="unrolled"):
        big.softdtw_sqdist(big, 1.0)


def test_difference_matrix():
    rng = np.random.default_rng(7)
    x = torch.tensor(rng.standard_normal((6, 3)), dtype=F64, requires_grad=True)
    y = torch.tensor(rng.standard_normal((4, 2)), dtype=F64, requires_grad=True)
    X, Y = ttorch.LazyTensor(x[:, None, :]), ttorch.LazyTensor(y[None, :, :])
    D = X.difference_matrix(Y)
    got = (D.exp()).sum(1)
    want = (x[:, None, :, None] - y[None, :, None, :]).reshape(6, 4, 6).exp().sum(1)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, b in zip(torch.autograd.grad(got.sum(), (x, y)), torch.autograd.grad(want.sum(), (x, y))):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_compat_lazytensor_methods_and_genred_text():
    rng = np.random.default_rng(9)
    t, x = sorted_knots(rng, 3, 6), torch.tensor(rng.uniform(0, 5, 7), dtype=F64)
    T, X = KeOpsLazyTensor(t[None]), KeOpsLazyTensor(x[:, None, None])
    got = T.bspline(X, 2).sum(1)
    torch.testing.assert_close(got, bspline_torch(t, x, 2).sum(1), rtol=1e-12, atol=1e-12)
    a = torch.tensor(rng.standard_normal((5, 4)), dtype=F64)
    A, B = KeOpsLazyTensor(a[:, None, :]), KeOpsLazyTensor(a[None, :3, :3])
    torch.testing.assert_close(A.softdtw_sqdist(B, 0.5).sum(1).view(-1),
                               softdtw_ref_sum(a, a[:3, :3], torch.tensor([0.5], dtype=F64)))
    torch.testing.assert_close(A.difference_matrix(B).sum(1)[:, 0], 3 * a[:, 0] - a[:3, 0].sum())
    # The KeOps text, as pykeops writes it, and its printing back
    g = Genred("SoftDTW_SqDist(X, Y, G) + Sum(BSpline(T, Z, 1)) + Sum(DifferenceMatrix(X, Y))",
               ["X = Vi(3)", "Y = Vj(2)", "G = Pm(1)", "T = Pm(4)", "Z = Vi(1)"], axis=1)
    xs, ys = torch.randn(4, 3, dtype=F64), torch.randn(5, 2, dtype=F64)
    gm, tk, zs = torch.tensor([0.4], dtype=F64), torch.tensor([0., 1., 2., 3.], dtype=F64), \
        torch.rand(4, 1, dtype=F64) * 3
    out = g(xs, ys, gm, tk, zs).view(-1)
    want = torch.stack([
        sum(softdtw_torch(xs[i], ys[j], gm[0]) for j in range(5)) +
        5 * bspline_torch(tk[None], zs[i], 1).sum() +
        sum((xs[i][:, None] - ys[j][None, :]).sum() for j in range(5)) for i in range(4)])
    torch.testing.assert_close(out, want, rtol=1e-11, atol=1e-11)


def _real_pykeops():
    try:
        import pykeops
        pykeops.set_verbose(False)
        pykeops.set_build_folder(str(ROOT / "build" / "pykeops-cache"))
        from pykeops.torch import Genred as KGenred
        if KGenred.__module__.startswith("tessel"):
            pytest.skip("pykeops resolves to tessel's drop-in here")
        one = torch.ones(2, 1, dtype=F64)
        KGenred("Var(0,1,0)*Var(1,1,1)", [], axis=1)(one, one, backend="CPU")
    except Exception as e:  # noqa: BLE001: no pykeops, or it cannot compile here
        pytest.skip(f"pykeops cannot run here: {e}")
    return KGenred


def test_against_real_pykeops():
    """keopscore 2.3 itself, for BSpline: it builds only float32 kernels of it (its x and ratios
    are C floats). Its SoftDTW_SqDist is not compared: on this CPU pykeops 2.3 returns values above
    the hard DTW for random series (7.62 for a pair whose hard DTW is 7.37 and soft-DTW 7.35),
    which a soft minimum cannot give; the tests above compare with the definition instead."""
    KGenred = _real_pykeops()
    rng = np.random.default_rng(11)
    t = sorted_knots(rng, 1, 7)[0]
    z = torch.tensor(rng.uniform(-0.5, 6.5, (9, 1)), dtype=F64)
    w = torch.tensor(rng.standard_normal((1, 4)), dtype=F64)
    text, aliases = "BSpline(T, Z, 2) * W", ["T = Pm(7)", "Z = Vi(1)", "W = Vj(4)"]
    args32 = [v.float() for v in (t, z, w)]  # keopscore 2.3 cannot build BSpline in float64
    want = KGenred(text, aliases, axis=1)(*args32, backend="CPU")
    got = Genred(text, aliases, axis=1)(*args32)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
