"""CUDA tensors through the PyTorch front end against the interpreter: every reduction, gradients.

Each case reduces CUDA tensors (the kernels tessel generates for the GPU) and the same data in
float64 on the host through the interpreter, the reference. Sizes span several thread blocks with
ragged ends, so that tiling, the tail of the last block and the final combine are all exercised.
float64 on the GPU must agree to the rounding of a few hundred terms; float32 is held to the sum
error bound of tests/python/dense.py. Skipped without a CUDA device.
"""
import os

import pytest
import torch

import tessel.torch as tt
from tessel import _core

from dense import sum_error_bound

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device (or a CPU-only PyTorch)")

F64 = torch.float64
N, M, K = 300, 517, 4  # beyond one 256-thread block on each axis, neither a multiple of it
ALIASES = ["X = Vi(2)", "Y = Vj(2)", "B = Vj(3)", "S = Pm(1)"]
SCALAR_F = "Sin(S * (X | Y)) - S * SqDist(X, Y) * Sum(B)"
VECTOR_F = "Sin(S * (X - Y)) * Elem(B, 0)"
ROWS = [r for r in _core.reduction_table() if r["by_name"]]
GRAD_ROWS = [r for r in ROWS if r["grad"] != "none"]
# float64 on both sides: the sums differ by their order only, |error| <= M u sum|terms| with
# |terms| <= 2 (sin, distances of points in [-1, 1]^2 times weights below 1, S < 1.5): 1e-10 holds
# with a margin of ten for M = 517 and for the derivative reductions' few more operations.
TOL64 = 1e-10
# On CUDA tensors faked over the stand-in driver (TESSEL_FAKE_CUDA=1) the kernels run in a CPU
# emulator, one thread per CUDA thread: the two large cases keep their shape at a tenth of it.
FAKE = os.environ.get("TESSEL_FAKE_CUDA") == "1"


def data(seed=0, device="cpu", dtype=F64, batch=()):
    g = torch.Generator().manual_seed(seed)
    out = [torch.rand(*batch, N, 2, generator=g, dtype=F64) * 2 - 1,
           torch.rand(*batch, M, 2, generator=g, dtype=F64) * 2 - 1,
           torch.rand(*batch, M, 3, generator=g, dtype=F64) * 0.8 + 0.2,
           torch.rand(*batch, 1, generator=g, dtype=F64) + 0.5]
    return [t.to(device=device, dtype=dtype) for t in out]


def make(row, backend="auto", axis=1):
    scalar = row["scalar_formula"] or row["family"] == "softmax"
    kw = dict(formula2="B") if row["weight"] == "required" else {}
    if row["uses_k"]:
        kw["opt_arg"] = K
    return tt.Genred(SCALAR_F if scalar else VECTOR_F, ALIASES, reduction_op=row["name"],
                     axis=axis, backend=backend, **kw)


def as_list(out):
    return list(out) if isinstance(out, tuple) else [out]


def close(got, want, tol=TOL64):
    got = got.detach().cpu()
    want = want.detach()
    if not want.dtype.is_floating_point:
        assert torch.equal(got, want)
        return
    got = got.to(F64)
    assert torch.isfinite(got).all() == torch.isfinite(want).all()
    err = (got - want).abs().max().item()
    assert err <= tol * (1 + want.abs().max().item()), err


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("row", ROWS, ids=[r["name"] for r in ROWS])
def test_every_reduction_on_cuda_tensors_matches_the_interpreter(row, axis):
    host = data()
    dev = [t.cuda() for t in host]
    want = as_list(make(row, "interpreter", axis)(*host))
    got = as_list(make(row, axis=axis)(*dev))
    assert all(g.device.type == "cuda" for g in got)
    for g, w in zip(got, want):
        close(g, w)


@pytest.mark.parametrize("row", GRAD_ROWS, ids=[r["name"] for r in GRAD_ROWS])
def test_first_and_second_derivatives_on_cuda_match_the_interpreter(row):
    """The gradient in every input (create_graph, so the derivative reductions run on the GPU),
    then the gradient of its square norm in X: gradients of second order."""
    results = []
    for device, backend in (("cpu", "interpreter"), ("cuda", "auto")):
        args = [t.requires_grad_() for t in data(1, device)]
        out = as_list(make(row, backend)(*args))[0]
        w = torch.linspace(-1, 1, out.numel(), dtype=F64, device=device).view_as(out)
        grads = torch.autograd.grad((out * w).sum(), args, create_graph=True)
        (gxx,) = torch.autograd.grad(sum((g * g).sum() for g in grads), args[0])
        assert all(g.device.type == device for g in grads + (gxx,))
        results.append([out, *grads, gxx])
    for g, w in zip(results[1], results[0]):
        close(g, w, 1e-9)


@pytest.mark.parametrize("name", ["Sum", "LogSumExp", "ArgKMin"])
def test_batch_dims_and_strided_cuda_inputs(name):
    row = next(r for r in ROWS if r["name"] == name)
    host = data(2, batch=(2, 3))
    want = as_list(make(row, "interpreter")(*host))
    # transposed then transposed back: the same values with strides the GPU path must honour
    dev = [t.cuda().transpose(-1, -2).contiguous().transpose(-1, -2) for t in host]
    got = as_list(make(row)(*dev))
    for g, w in zip(got, want):
        assert g.shape == w.shape
        close(g, w)


def test_float32_sums_on_cuda_stay_within_the_sum_error_bound():
    """A Gaussian sum over 50,000 j in float32 (many blocks of j per i) against float64."""
    n, m = (200, 50_000) if FAKE else (2000, 50_000)
    g = torch.Generator().manual_seed(3)
    x, y = torch.rand(n, 3, generator=g, dtype=F64), torch.rand(m, 3, generator=g, dtype=F64)
    b = torch.rand(m, 1, generator=g, dtype=F64)
    s = torch.tensor([2.0], dtype=F64)
    red = tt.Genred("Exp(-S*SqDist(X,Y)) * B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)", "S = Pm(1)"])
    terms = torch.exp(-s * torch.cdist(x, y) ** 2) * b.T
    want = terms.sum(1, keepdim=True)
    got = red(*(t.float().cuda() for t in (x, y, b, s))).double().cpu()
    # inputs rounded to float32 too: their error enters the terms (|d term / d input| <= 8)
    bound = torch.tensor([sum_error_bound(m, float(a), float(v)) for a, v in
                          zip(terms.abs().sum(1), want[:, 0])], dtype=F64)[:, None]
    bound += 8 * 6e-8 * terms.abs().sum(1, keepdim=True)
    assert ((got - want).abs() <= bound).all(), ((got - want).abs() / bound).max()


def test_reductions_on_a_side_stream_wait_for_its_pending_work():
    """Inputs written by a kernel still running on a side stream: the reduction, called under
    that stream, must run after it (tessel launches on PyTorch's current stream)."""
    row = next(r for r in ROWS if r["name"] == "Sum")
    host = data(4)
    want = make(row, "interpreter")(*host)
    red = make(row)
    side = torch.cuda.Stream()
    side_n = 512 if FAKE else 4096
    big = torch.rand(side_n, side_n, device="cuda", dtype=torch.float32)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        dev = [torch.zeros_like(t, device="cuda") for t in host]
        for _ in range(8):  # keeps the side stream busy well past the copies' issue
            big = big @ big / side_n
        for d, h in zip(dev, host):
            d.copy_(h.cuda(non_blocking=True) + 0 * big[0, 0].double())
        out = red(*dev)
    side.synchronize()
    close(out, want)


def test_lazytensor_and_kernel_solve_on_cuda():
    host = data(5)
    x, y, b, s = [t.cuda() for t in host]
    from tessel.lazytensor import LazyTensor
    xi, yj, bj = LazyTensor(x[:, None, :]), LazyTensor(y[None, :, :]), LazyTensor(b[None])
    got = ((-(xi - yj).sqnorm2() * s).exp() * bj).sum(1)
    want = torch.exp(-torch.cdist(host[0], host[1]) ** 2 * host[3]) @ host[2]
    close(got, want)
    # (alpha I + K) u = b for a Gaussian kernel on the i points, solved on the device
    red = tt.KernelSolve("Exp(-S*SqDist(X,Y)) * B", ["X = Vi(2)", "Y = Vj(2)", "B = Vj(3)",
                                                     "S = Pm(1)"], "B", axis=1)
    bi = torch.rand(N, 3, dtype=F64, generator=torch.Generator().manual_seed(6))
    u = red(x, x, bi.cuda(), s, alpha=0.5, tol=1e-10)
    assert u.device.type == "cuda"
    kx = torch.exp(-torch.cdist(host[0], host[0]) ** 2 * host[3])
    residual = (0.5 * u.cpu() + kx @ u.cpu() - bi).norm() / bi.norm()
    assert residual <= 1e-9, residual
