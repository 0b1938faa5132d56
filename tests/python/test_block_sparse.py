"""Block-sparse reductions (KeOps `ranges`) from NumPy and PyTorch, gradients included."""
import numpy as np
import pytest
import torch

from tessel.numpy import Genred as NGenred
from tessel.torch import Genred as TGenred

FORMULA, ALIASES = "Exp(-SqDist(X,Y))*B", ["X = Vi(2)", "Y = Vj(2)", "B = Vj(1)"]


def pattern(n, m, rng):
    """Random clusters of rows and columns with a random keep mask, in both KeOps layouts."""
    ci = np.unique(np.r_[0, rng.integers(1, n, 4), n])
    cj = np.unique(np.r_[0, rng.integers(1, m, 5), m])
    keep = rng.random((len(ci) - 1, len(cj) - 1)) < 0.6
    def layout(c_out, c_in, k):
        ranges = np.stack([c_out[:-1], c_out[1:]], 1)
        red = [[c_in[b], c_in[b + 1]] for a in range(len(c_out) - 1) for b in range(len(c_in) - 1) if k[a, b]]
        slices = np.cumsum(k.sum(1))
        return ranges, slices, np.array(red, dtype=np.int64).reshape(-1, 2)
    ri, si, rj_red = layout(ci, cj, keep)
    rj, sj, ri_red = layout(cj, ci, keep.T)
    mask = np.zeros((n, m))
    for a in range(len(ci) - 1):
        for b in range(len(cj) - 1):
            mask[ci[a]:ci[a + 1], cj[b]:cj[b + 1]] = keep[a, b]
    return (ri, si, rj_red, rj, sj, ri_red), mask


@pytest.mark.parametrize("axis", [0, 1])
def test_numpy_block_sparse_equals_masked_dense(axis):
    rng = np.random.default_rng(axis)
    n, m = 37, 45
    ranges, mask = pattern(n, m, rng)
    x, y = rng.random((n, 2)), rng.random((m, 2))
    k = np.exp(-((x[:, None] - y[None]) ** 2).sum(-1)) * mask
    if axis == 1:
        b = rng.random((m, 1))
        want = k @ b
        got = NGenred(FORMULA, ALIASES, axis=1)(x, y, b, ranges=ranges)
    else:  # reduce over i: the roles of the variables are swapped, so are the ranges
        b = rng.random((n, 1))
        want = k.T @ b
        got = NGenred("Exp(-SqDist(X,Y))*B", ["X = Vi(2)", "Y = Vj(2)", "B = Vi(1)"], axis=0)(
            x, y, b, ranges=ranges)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_torch_block_sparse_gradients():
    rng = np.random.default_rng(5)
    n, m = 23, 31
    ranges, mask = pattern(n, m, rng)
    ranges = tuple(torch.from_numpy(np.asarray(r)) for r in ranges)
    x = torch.rand(n, 2, dtype=torch.float64, requires_grad=True)
    y = torch.rand(m, 2, dtype=torch.float64, requires_grad=True)
    b = torch.rand(m, 1, dtype=torch.float64, requires_grad=True)
    g = TGenred(FORMULA, ALIASES)
    dense = (torch.exp(-((x[:, None] - y[None]) ** 2).sum(-1)) * torch.from_numpy(mask)) @ b
    torch.testing.assert_close(g(x, y, b, ranges=ranges), dense, rtol=1e-12, atol=1e-14)
    assert torch.autograd.gradcheck(lambda *a: g(*a, ranges=ranges), (x, y, b))
    assert torch.autograd.gradgradcheck(lambda *a: g(*a, ranges=ranges), (x, y, b))


def test_bad_ranges():
    x, y, b = np.random.rand(5, 2), np.random.rand(6, 2), np.random.rand(6, 1)
    with pytest.raises(ValueError, match="6 arrays"):
        NGenred(FORMULA, ALIASES)(x, y, b, ranges=(np.array([[0, 5]]),))
    bad = (np.array([[0, 5]]), np.array([1]), np.array([[0, 7]]), np.array([[0, 6]]), np.array([1]),
           np.array([[0, 5]]))
    with pytest.raises(ValueError, match="redranges_j"):
        NGenred(FORMULA, ALIASES)(x, y, b, ranges=bad)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (or a CPU-only PyTorch)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_block_sparse_on_cuda_equals_cpu(dtype):
    """Ranges on CUDA tensors (ranges themselves on the GPU, as GeomLoss passes them): values and
    gradients of a Sum and a LogSumExp equal the CPU's, over clusters spanning several CUDA blocks
    and tiles."""
    rng = np.random.default_rng(6)
    n, m = 700, 900
    ranges, _ = pattern(n, m, rng)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-11, atol=1e-13)
    for formula, op in ((FORMULA, "Sum"), ("B - SqDist(X,Y)", "LogSumExp")):
        g = TGenred(formula, ALIASES, reduction_op=op)
        outs = []
        for device in ("cpu", "cuda"):
            rg = tuple(torch.from_numpy(np.asarray(r)).to(device) for r in ranges)
            x = torch.rand(n, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
            y = torch.rand(m, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
            b = torch.rand(m, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
            x, y, b = (t.to(device=device, dtype=dtype).requires_grad_() for t in (x, y, b))
            v = g(x, y, b, ranges=rg)
            grads = torch.autograd.grad((v * v).sum(), (x, y, b))
            assert v.device.type == device
            outs.append([t.detach().cpu() for t in (v,) + grads])
        for got, want in zip(outs[1], outs[0]):
            torch.testing.assert_close(got, want, **tol)
