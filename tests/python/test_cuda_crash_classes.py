"""The five classes of call that crashed the process on the first real GPU (SIGSEGV in host code):
gradients of LogSumExp and of SumSoftMaxWeight, batch dimensions, block-sparse ranges, and the
unrolled tessel.ot gradient, each on CUDA tensors against the same call on the CPU in float64;
and one step of a tessel.shapes registration (LDDMM shooting and a varifold attachment).

They run on a real GPU (scripts/gpu_check.sh runs them first, under AddressSanitizer and
compute-sanitizer) and, without one, on CUDA tensors faked over the stand-in driver
(TESSEL_FAKE_CUDA=1, tests/python/fake_cuda.py), where the CUDA backend's host code runs for real
and the kernels in the stand-in's CPU emulator. Skipped where neither is there.
"""
import numpy as np
import pytest
import torch

import tessel
import tessel.torch as tt

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and tessel.cuda_available()),
    reason="no CUDA device for tessel (nor the stand-in driver: TESSEL_FAKE_CUDA=1)")

F64 = torch.float64
ALIASES = ["X = Vi(2)", "Y = Vj(2)", "B = Vj(3)", "S = Pm(1)"]
# float64 on both sides, sums of a few hundred terms of size <= 4 in another order, and their
# derivatives: 1e-10 relative holds with a margin.
TOL = 1e-10


def data(seed, n=70, m=90, batch=()):
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(*batch, n, 2, generator=g, dtype=F64) * 2 - 1,
            torch.rand(*batch, m, 2, generator=g, dtype=F64) * 2 - 1,
            torch.rand(*batch, m, 3, generator=g, dtype=F64) * 0.8 + 0.2,
            torch.rand(*batch, 1, generator=g, dtype=F64) + 0.5]


def close(got, want, tol=TOL):
    got, want = got.detach().cpu(), want.detach().cpu()
    assert got.shape == want.shape
    err = (got - want).abs().max().item()
    assert err <= tol * (1 + want.abs().max().item()), err


def both_devices(fn, host, order=2):
    """fn(*tensors) on the CPU and on CUDA: the value, its gradient in every input and, for
    order 2, the gradient of the gradients' square norm in the first input."""
    results = []
    for device in ("cpu", "cuda"):
        args = [t.to(device).requires_grad_() for t in host]
        out = fn(*args)
        w = torch.linspace(-1, 1, out.numel(), dtype=F64).to(device).view_as(out)
        grads = torch.autograd.grad((out * w).sum(), args, create_graph=order > 1)
        res = [out, *grads]
        if order > 1:
            res += torch.autograd.grad(sum((g * g).sum() for g in grads), args[0])
        assert all(r.device.type == device for r in res[1:]), [r.device for r in res]
        results.append(res)
    for got, want in zip(results[1], results[0]):
        close(got, want)


def test_logsumexp_gradients_on_cuda():
    red = tt.Genred("-S * SqDist(X, Y) + Sin(Elem(B, 0))", ALIASES, reduction_op="LogSumExp")
    both_devices(red, data(1))


def test_sumsoftmaxweight_gradients_on_cuda():
    red = tt.Genred("-S * SqDist(X, Y)", ALIASES, reduction_op="SumSoftMaxWeight",
                    formula2="B")
    both_devices(red, data(2))


@pytest.mark.parametrize("name", ["Sum", "LogSumExp"])
def test_batch_dimensions_on_cuda(name):
    formula = "Exp(-S * SqDist(X, Y)) * B" if name == "Sum" else "-S * SqDist(X, Y)"
    red = tt.Genred(formula, ALIASES, reduction_op=name)
    both_devices(red, data(3, n=40, m=50, batch=(2, 3)))


def test_block_sparse_ranges_on_cuda():
    n, m = 70, 90
    ci, cj = np.array([0, 20, 45, 70]), np.array([0, 30, 60, 90])
    keep = np.array([[1, 0, 1], [0, 1, 1], [1, 1, 0]], dtype=bool)

    def layout(c_out, c_in, k):
        ranges = np.stack([c_out[:-1], c_out[1:]], 1)
        red = [[c_in[b], c_in[b + 1]] for a in range(len(c_out) - 1)
               for b in range(len(c_in) - 1) if k[a, b]]
        return ranges, np.cumsum(k.sum(1)), np.array(red, dtype=np.int64).reshape(-1, 2)

    ranges = tuple(torch.from_numpy(np.asarray(r, dtype=np.int64))
                   for r in (*layout(ci, cj, keep), *layout(cj, ci, keep.T)))
    red = tt.Genred("Exp(-S * SqDist(X, Y)) * B", ALIASES)
    both_devices(lambda *a: red(*a, ranges=ranges), data(4, n, m))


def test_unrolled_ot_gradient_on_cuda():
    from tessel.ot import SamplesLoss

    g = torch.Generator().manual_seed(5)
    x = torch.rand(60, 3, generator=g, dtype=F64)
    y = torch.rand(50, 3, generator=g, dtype=F64) + 0.2
    loss = SamplesLoss("sinkhorn", blur=0.1, gradient="unrolled", snapshots=3)
    both_devices(loss, [x, y], order=1)


def test_lddmm_registration_step_on_cuda():
    """One step of a surface registration: shoot the control points and the mesh's vertices,
    compare with the target through a varifold; the loss and its gradient in the momenta."""
    from tessel.shapes import GaussianKernel, LDDMM, Mesh, Varifold

    source = Mesh.icosphere(1).to(F64)
    target = source.with_points(source.points * torch.tensor([1.2, 0.9, 1.0], dtype=F64))
    g = torch.Generator().manual_seed(6)
    p0 = 0.1 * torch.randn(source.points.shape, generator=g, dtype=F64)
    model = LDDMM(GaussianKernel(0.5), n_steps=3)
    attach = Varifold(0.4)

    def step(q, p, tq):
        q_end, _, x_end = model.shoot(q, p, q)
        return (attach(source.with_points(x_end), target.with_points(tq))
                + 0.1 * model.kernel.hamiltonian(q, p))[None]

    both_devices(step, [source.points, p0, target.points], order=1)
