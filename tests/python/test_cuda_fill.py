"""Small problems fill the GPU: at n = 1e4 on a 132-SM device every reduction family, gradients
included, launches at least 8 warps per SM (the inner index is split and the partial results
combined), with the results of the CPU.

The launches are read from the stand-in driver's launch log, so these tests run on CUDA tensors
faked over the stand-in (TESSEL_FAKE_CUDA=1, tests/python/fake_cuda.py), whose device has the
H200's 132 SMs; they are skipped elsewhere (a real GPU has no launch log to read).
"""
import ctypes
import json
import os

import pytest
import torch

import tessel.torch as tt

pytestmark = pytest.mark.skipif(os.environ.get("TESSEL_FAKE_CUDA") != "1",
                                reason="reads the stand-in driver's launch log (TESSEL_FAKE_CUDA=1)")

N = 10_000
WARPS_PER_SM = 8
ALIASES = ["X = Vi(3)", "Y = Vj(3)", "B = Vj(2)", "G = Pm(1)"]
CASES = {
    "Sum": ("Exp(-G * SqDist(X, Y)) * B", {}),
    "Min_ArgMin": ("SqDist(X, Y) + Elem(B, 0)", {}),
    "ArgKMin": ("SqDist(X, Y)", {"opt_arg": 5}),
    "LogSumExp": ("-G * SqDist(X, Y)", {}),
    "SumSoftMaxWeight": ("-G * SqDist(X, Y)", {"formula2": "B"}),
}


def _driver():
    lib = ctypes.CDLL(os.environ["TESSEL_LIBCUDA"])
    lib.tessel_standin_launches.restype = ctypes.c_char_p
    return lib


def _sm_count(lib):
    n = ctypes.c_int()
    assert lib.cuDeviceGetAttribute(ctypes.byref(n), 16, 0) == 0  # MULTIPROCESSOR_COUNT
    return n.value


def _reduction_launches(lib):
    """The reduction kernels launched since the last reset (not the combine passes)."""
    lines = lib.tessel_standin_launches().decode().splitlines()
    return [e for e in map(json.loads, lines) if e["kernel"] == "tessel_kernel"]


def _data(seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(N, 3, generator=g), torch.rand(N, 3, generator=g),
            torch.rand(N, 2, generator=g) + 0.1, torch.tensor([20.0])]


@pytest.mark.parametrize("name", list(CASES))
def test_every_family_fills_the_gpu_at_ten_thousand_points(name):
    lib = _driver()
    want_warps = WARPS_PER_SM * _sm_count(lib)
    formula, kw = CASES[name]
    red = tt.Genred(formula, ALIASES, reduction_op=name, **kw)
    host = _data(1)
    want = red(*host)
    lib.tessel_standin_reset_log()
    # The Sum's and LogSumExp's gradients: their derivative reductions are the Sum and softmax
    # families' (SumSoftMaxWeight's gradient is LogSumExp's kind again).
    dev = [t.cuda().requires_grad_(k == 0 and name in ("Sum", "LogSumExp"))
           for k, t in enumerate(host)]
    got = red(*dev)
    grad_launches = []
    if dev[0].requires_grad:
        launches = _reduction_launches(lib)
        lib.tessel_standin_reset_log()
        torch.autograd.grad((got * torch.linspace(0, 1, got.numel()).cuda().view_as(got)).sum(),
                            dev[0])
        grad_launches = _reduction_launches(lib)
    else:
        launches = _reduction_launches(lib)
    assert launches, "no reduction kernel was launched"
    for e in launches + grad_launches:
        warps = e["grid"][0] * e["grid"][1] * e["grid"][2] * e["block"][0] // 32
        assert warps >= want_warps, e
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple)
                    else (want,)):
        g = g.detach().cpu()
        if g.dtype.is_floating_point:
            # float32 sums of 1e4 terms in another order: a few units of 1e-4 of the largest
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5 * w.abs().max().item())
        else:
            assert (g == w).float().mean() > 0.999  # ties of float32 distances may differ
