"""tessel.ot on CUDA tensors: the same values, potentials, plans and gradients (every gradient
mode) as on the CPU, results on the inputs' device, and clear errors for what does not run there.
The GPU tests skip without a usable GPU (scripts/gpu_check.sh runs this file on one); the branch
CUDA points take is also run with CPU tensors, on every machine."""
import os

import pytest
import torch

import tessel
from tessel.ot import SamplesLoss, solve_sample

from ot_cases import weighted_clouds

needs_gpu = pytest.mark.skipif(
    not (torch.cuda.is_available() and tessel.cuda_available()),
    reason="no usable CUDA GPU (for tessel or PyTorch)")

CASES = [dict(), dict(reach=0.5), dict(reach=0.4, debias=False), dict(p=1, blur=0.1)]


def _grads(loss, a, x, b, y, device):
    ts = [t.to(device).requires_grad_() for t in (a, x, b, y)]
    value = loss(*ts)
    grads = torch.autograd.grad(value, ts)
    return value.detach().cpu(), [g.cpu() for g in grads], [g.device for g in grads]


@needs_gpu
@pytest.mark.parametrize("gradient", ["envelope", "implicit", "unrolled"])
@pytest.mark.parametrize("case", CASES)
def test_samples_loss_on_cuda_equals_cpu_float64(case, gradient):
    a, x, b, y = weighted_clouds(150, 130, d=3, seed=4)
    # blur 0.1 unless the case sets its own (the p = 1 case does)
    loss = SamplesLoss("sinkhorn", gradient=gradient,
                       snapshots=3 if gradient == "unrolled" else None, **{"blur": 0.1, **case})
    v_cpu, g_cpu, _ = _grads(loss, a, x, b, y, "cpu")
    v_gpu, g_gpu, devices = _grads(loss, a, x, b, y, "cuda")
    assert all(d.type == "cuda" for d in devices)
    assert torch.allclose(v_gpu, v_cpu, rtol=1e-9, atol=1e-12)
    for name, gg, gc in zip("axby", g_gpu, g_cpu):
        assert torch.allclose(gg, gc, rtol=1e-8, atol=1e-11), name


@needs_gpu
def test_samples_loss_float32_on_cuda_is_within_float32_error():
    a, x, b, y = weighted_clouds(400, 300, d=3, seed=5)
    loss = SamplesLoss("sinkhorn", blur=0.05)
    v64, g64, _ = _grads(loss, a, x, b, y, "cpu")
    v32, g32, _ = _grads(loss, *(t.float() for t in (a, x, b, y)), "cuda")
    # The float32 kernels use the GPU's approximate exp2 (2 ulp): a relative error of order 1e-6
    # per term, amplified by 1/eps in the potentials.
    assert abs(float(v32) - float(v64)) <= 1e-4 * abs(float(v64)) + 1e-6
    for name, gg, gc in zip("axby", g32, g64):
        assert float((gg.double() - gc).abs().max()) <= 2e-3 * float(gc.abs().max()), name


@needs_gpu
def test_solve_sample_plan_and_potentials_stay_on_the_device():
    a, x, b, y = weighted_clouds(120, 90, d=2, seed=6)
    cpu = solve_sample(a, x, b, y, blur=0.1, tol=1e-10)
    gpu = solve_sample(a.cuda(), x.cuda(), b.cuda(), y.cuda(), blur=0.1, tol=1e-10)
    assert gpu.converged and cpu.converged
    assert gpu.f.device.type == "cuda" and gpu.g.device.type == "cuda"
    assert torch.allclose(gpu.f.cpu(), cpu.f, rtol=1e-9, atol=1e-12)
    v = torch.linspace(-1, 1, 90, dtype=torch.float64)
    pv = gpu.plan @ v.cuda()
    assert pv.device.type == "cuda"
    assert torch.allclose(pv.cpu(), cpu.plan @ v, rtol=1e-8, atol=1e-13)
    assert torch.allclose(gpu.marginals[0].cpu(), a, atol=1e-9)


@needs_gpu
@pytest.mark.parametrize("case", [dict(), dict(reach=0.5)])
def test_multiscale_on_cuda_equals_cpu(case):
    """Clusters, coarse solve and block-sparse iterations on the GPU: the CPU's values and
    gradients (the same clusters: farthest-point sampling is deterministic)."""
    # (on CUDA tensors faked over the stand-in, whose kernels run in a CPU emulator: a third)
    n, m = (200, 170) if os.environ.get("TESSEL_FAKE_CUDA") == "1" else (600, 500)
    a, x, b, y = weighted_clouds(n, m, d=3, seed=10)
    loss = SamplesLoss("sinkhorn", blur=0.05, backend="multiscale", **case)
    v_cpu, g_cpu, _ = _grads(loss, a, x, b, y, "cpu")
    v_gpu, g_gpu, devices = _grads(loss, a, x, b, y, "cuda")
    assert all(d.type == "cuda" for d in devices)
    assert torch.allclose(v_gpu, v_cpu, rtol=1e-9, atol=1e-12)
    for name, gg, gc in zip("xy", g_gpu[1::2], g_cpu[1::2]):
        assert torch.allclose(gg, gc, rtol=1e-8, atol=1e-11), name


@needs_gpu
def test_errors_name_what_does_not_run_on_cuda():
    a, x, b, y = weighted_clouds(50, 40, d=3, seed=7)
    with pytest.raises(ValueError, match="y is on cpu but x on cuda:0"):
        SamplesLoss("sinkhorn")(x.cuda(), y)
    bad = x.clone()
    bad[3, 1] = float("nan")
    with pytest.raises(ValueError, match="x has a non-finite coordinate"):
        SamplesLoss("sinkhorn")(bad.cuda(), y.cuda())


@pytest.fixture
def gpu_branch(monkeypatch):
    """CPU tensors through the branch CUDA points take (diameter measured in torch, weights sent
    to the host), so that its logic is checked on every machine."""
    from tessel.ot import _potentials
    monkeypatch.setattr(_potentials, "_on_gpu", lambda x, y: True)


@pytest.mark.parametrize("case", [dict(), dict(reach=0.5), dict(diameter=3.0),
                                  dict(backend="multiscale", blur=0.05)])
def test_the_gpu_branch_equals_the_host_loop(case, request):
    """The online loop, and the multiscale solver's coarse solve, through the CUDA branch."""
    a, x, b, y = weighted_clouds(200, 150, d=3, seed=8)
    loss = SamplesLoss("sinkhorn", **dict(dict(blur=0.1), **case))
    v_host, g_host, _ = _grads(loss, a, x, b, y, "cpu")
    request.getfixturevalue("gpu_branch")
    v_branch, g_branch, _ = _grads(loss, a, x, b, y, "cpu")
    assert torch.allclose(v_branch, v_host, rtol=1e-12, atol=0)
    for name, gb, gh in zip("axby", g_branch, g_host):
        assert torch.allclose(gb, gh, rtol=1e-10, atol=1e-14), name


def test_the_gpu_branch_checks_the_points_on_their_device(gpu_branch):
    a, x, b, y = weighted_clouds(20, 15, d=2, seed=9)
    y[4, 0] = float("inf")
    with pytest.raises(ValueError, match="y has a non-finite coordinate"):
        SamplesLoss("sinkhorn")(x, y)
