"""float16 and bfloat16 arrays: reductions run on float32 copies and their results are rounded
once to the half dtype, so they equal the float32 reduction of the same values, rounded; the
gradients come back in the half dtype; NumPy float16 too; clear errors for mixed dtypes."""
import numpy as np
import pytest
import torch

import tessel.numpy as tn
from tessel.torch import Genred, LazyTensor

HALF = [torch.float16, torch.bfloat16]
FORMULA, ALIASES = "Exp(-SqDist(X,Y))*B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(2)"]


def clouds(dtype, n=90, m=110, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.rand(n, 3, generator=g), torch.rand(m, 3, generator=g)
    b = torch.rand(m, 2, generator=g)
    return tuple(t.to(dtype) for t in (x, y, b))


def ulp(t, dtype):
    """The spacing of `dtype` at |t| (float32 tensor)."""
    mant = 10 if dtype == torch.float16 else 7
    e = torch.floor(torch.log2(t.abs().clamp_min(torch.finfo(dtype).tiny)))
    return torch.exp2(e - mant)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("op", ["Sum", "LogSumExp", "Min", "ArgMin"])
def test_genred_equals_float32_rounded_once(dtype, op):
    x, y, b = clouds(dtype)
    formula = FORMULA if op == "Sum" else "-SqDist(X,Y)*IntCst(4)"
    aliases = ALIASES if op == "Sum" else ALIASES[:2]
    args = (x, y, b) if op == "Sum" else (x, y)
    got = Genred(formula, aliases, reduction_op=op)(*args)
    want = Genred(formula, aliases, reduction_op=op)(*(t.float() for t in args))
    if op == "ArgMin":
        assert got.dtype == torch.int64
        assert torch.equal(got, want)
    else:
        assert got.dtype == dtype
        assert torch.equal(got, want.to(dtype))


@pytest.mark.parametrize("dtype", HALF)
def test_gradients_in_the_half_dtype_within_one_rounding(dtype):
    x, y, b = (t.requires_grad_() for t in clouds(dtype, seed=1))
    x32, y32, b32 = (t.detach().float().requires_grad_() for t in (x, y, b))
    g = Genred(FORMULA, ALIASES)
    w = torch.rand(90, 2).to(dtype)
    got = torch.autograd.grad((g(x, y, b) * w).sum(), (x, y, b))
    want = torch.autograd.grad((g(x32, y32, b32) * w.float()).sum(), (x32, y32, b32))
    for name, a, r in zip("xyb", got, want):
        assert a.dtype == dtype, name
        # One rounding of the float32 gradient, plus the cotangent's and products' float32 error.
        err = (a.float() - r).abs()
        assert bool((err <= ulp(r, dtype) + 1e-5 * r.abs().max()).all()), name


@pytest.mark.parametrize("dtype", HALF)
def test_lazytensor_reductions(dtype):
    x, y, b = clouds(dtype, seed=2)
    X, Y = LazyTensor(x[:, None, :]), LazyTensor(y[None, :, :])
    D = ((X - Y) ** 2).sum(-1)
    assert (-D).logsumexp(1).dtype == dtype
    assert D.argmin(1).dtype == torch.int64
    x32, y32, b32 = (t.float() for t in (x, y, b))
    K32 = (-((LazyTensor(x32[:, None, :]) - LazyTensor(y32[None, :, :])) ** 2).sum(-1)).exp()
    assert torch.equal((-D).exp() @ b, (K32 @ b32).to(dtype))


def test_numpy_float16():
    x, y, b = (t.numpy().astype(np.float16) for t in clouds(torch.float32, seed=3))
    g = tn.Genred(FORMULA, ALIASES)
    got = g(x, y, b)
    assert got.dtype == np.float16
    want = g(x.astype(np.float32), y.astype(np.float32), b.astype(np.float32))
    np.testing.assert_array_equal(got, want.astype(np.float16))


def test_overflow_is_infinity_as_float16_says():
    x = torch.zeros(3, 3, dtype=torch.float16)
    y = torch.zeros(70000, 3, dtype=torch.float16)
    b = torch.ones(70000, 2, dtype=torch.float16)
    out = Genred(FORMULA, ALIASES)(x, y, b)  # 70000 > 65504, the largest float16
    assert torch.isinf(out).all()
    out_bf = Genred(FORMULA, ALIASES)(x.bfloat16(), y.bfloat16(), b.bfloat16())
    assert torch.equal(out_bf.float(), torch.full((3, 2), 70144.0))  # 70000 rounded to bfloat16


def test_mixed_dtypes_are_clear_errors():
    x, y, b = clouds(torch.float16)
    with pytest.raises(TypeError, match="all arguments must share one dtype|share one dtype"):
        Genred(FORMULA, ALIASES)(x, y.float(), b)
    with pytest.raises(TypeError, match="float16"):
        tn.Genred(FORMULA, ALIASES)(x.numpy(), y.float().numpy(), b.numpy())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (or a CPU-only PyTorch)")
@pytest.mark.parametrize("dtype", HALF)
def test_cuda_half_equals_cpu_half(dtype):
    x, y, b = clouds(dtype, seed=4)
    g = Genred(FORMULA, ALIASES)
    cpu = g(x, y, b)
    gpu = g(x.cuda(), y.cuda(), b.cuda())
    assert gpu.device.type == "cuda" and gpu.dtype == dtype
    # Both round the float32 result once; the GPU's float32 exp differs from the CPU's by a few
    # float32 ulps, which can move a result across a half rounding boundary: one half ulp.
    assert bool(((gpu.cpu().float() - cpu.float()).abs() <= ulp(cpu.float(), dtype)).all())
