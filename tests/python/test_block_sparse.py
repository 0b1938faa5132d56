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
    # float32: the two devices sum up to m positive terms in other orders, each within m u of
    # the exact sum (u = 2^-24), and the gradients of v^2 carry that twice
    tol = (dict(rtol=4 * m * 2.0**-24, atol=1e-6) if dtype == torch.float32
           else dict(rtol=1e-11, atol=1e-13))
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


def _full(n, m, make):
    """Ranges that keep the one block [0, n) x [0, m), each array made by make(list)."""
    return (make([[0, n]]), make([1]), make([[0, m]]), make([[0, m]]), make([1]), make([[0, n]]))


@pytest.mark.parametrize("lib", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_ranges_are_refused_not_truncated(lib, dtype):
    """[[0.5, 5.9]] was truncated by int() to [0, 5), silently dropping j = 5: only integer
    ranges are read, a float dtype is a TypeError naming the function, ranges and the dtype."""
    x, y, b = np.random.rand(5, 2), np.random.rand(6, 2), np.random.rand(6, 1)
    if lib == "numpy":
        g, args, make = NGenred(FORMULA, ALIASES), (x, y, b), np.array
        bad = np.array([[0.5, 5.9]], dtype=dtype)
    else:
        g, args, make = TGenred(FORMULA, ALIASES), tuple(map(torch.from_numpy, (x, y, b))), torch.tensor
        bad = torch.tensor([[0.5, 5.9]], dtype=getattr(torch, dtype))
    ranges = list(_full(5, 6, make))
    ranges[2] = bad
    with pytest.raises(TypeError, match=rf"Genred: ranges\[2\] \(redranges_j\) must hold "
                                        rf"integers .*got dtype {dtype}"):
        g(*args, ranges=tuple(ranges))


@pytest.mark.parametrize("make", [lambda v: np.array(v, dtype=np.int32), np.array,
                                  lambda v: torch.tensor(v, dtype=torch.int32), torch.tensor,
                                  lambda v: v],
                         ids=["np-int32", "np-int64", "torch-int32", "torch-int64", "python-ints"])
def test_integer_ranges_of_any_integer_type(make):
    x, y, b = np.random.rand(5, 2), np.random.rand(6, 2), np.random.rand(6, 1)
    g = NGenred(FORMULA, ALIASES)
    np.testing.assert_allclose(g(x, y, b, ranges=_full(5, 6, make)), g(x, y, b), rtol=1e-13)


@pytest.mark.parametrize("ranges, error, match", [
    (5, TypeError, r"Genred: ranges must be a tuple of 6 integer arrays \(ranges_i, slices_i, "
                   r"redranges_j, ranges_j, slices_j, redranges_i\).*got int"),
    ("abc", TypeError, "Genred: ranges must be a tuple of 6 integer arrays.*got str"),
    (_full(5, 6, np.array)[:3] + (None,) + _full(5, 6, np.array)[4:], TypeError,
     r"Genred: ranges\[3\] \(ranges_j\) must be an integer array, got NoneType"),
    (_full(5, 6, np.array)[:4] + ("abc",) + _full(5, 6, np.array)[5:], TypeError,
     r"Genred: ranges\[4\] \(slices_j\) must be an integer array, got str"),
    ((np.array([0, 5]),) + _full(5, 6, np.array)[1:], ValueError,
     r"Genred: ranges\[0\] \(ranges_i\) must have shape \(n, 2\).*got shape \(2,\)"),
    (_full(5, 6, np.array)[:1] + (np.array([[1]]),) + _full(5, 6, np.array)[2:], ValueError,
     r"Genred: ranges\[1\] \(slices_i\) must be 1-D.*got shape \(1, 1\)"),
    (_full(5, 6, np.array)[:2] + (np.array([[-1, 6]]),) + _full(5, 6, np.array)[3:], ValueError,
     "redranges_j"),
    (_full(5, 6, np.array)[:2] + (np.array([[True, False]]),) + _full(5, 6, np.array)[3:],
     TypeError, "got dtype bool"),
])
def test_malformed_ranges_name_function_argument_and_expectation(ranges, error, match):
    x, y, b = np.random.rand(5, 2), np.random.rand(6, 2), np.random.rand(6, 1)
    with pytest.raises(error, match=match):
        NGenred(FORMULA, ALIASES)(x, y, b, ranges=ranges)
