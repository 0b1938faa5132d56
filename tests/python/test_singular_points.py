"""Kernels on coincident points (K(X, X)): finite gradients, equal to pykeops 2.3's and to a dense
float64 reference with the same convention (Rsqrt(0) = 0: a Norm2's gradient is 0 at 0), through
tessel.torch Genred and LazyTensor, and GeomLoss's online backend through tessel.compat."""
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from tessel.torch import Genred, LazyTensor

F64 = torch.float64
S3 = math.sqrt(3.0)

try:  # the reference; it compiles each new formula with g++ on first use (slow): two here
    import pykeops.torch as rk
except ImportError:
    rk = None

# Laplace, Matern 3/2, energy distance, Sqrt(SqDist): one formula, one pykeops compilation.
KERNELS = ["Exp(-Norm2(X-Y))", "(IntCst(1) + S*Norm2(X-Y)) * Exp(-S*Norm2(X-Y))", "-Norm2(X-Y)",
           "Sqrt(SqDist(X,Y))"]
FORMULA = "Concat(Concat(Concat({}, {}), {}), {}) * B".format(*KERNELS)
ALIASES = ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)", "S = Pm(1)"]


class _SafeNorm(torch.autograd.Function):
    """|d| with the gradient d / |d| taken as 0 where d = 0: the convention under test."""

    @staticmethod
    def forward(ctx, d):
        r = d.norm(dim=-1, keepdim=True)
        ctx.save_for_backward(d, r)
        return r

    @staticmethod
    def backward(ctx, g):
        d, r = ctx.saved_tensors
        return g * torch.where(r > 0, d / torch.where(r > 0, r, torch.ones_like(r)),
                               torch.zeros_like(d))


def dense(x, y, b, s):
    r = _SafeNorm.apply(x[:, None, :] - y[None, :, :])
    ks = [torch.exp(-r), (1 + s * r) * torch.exp(-s * r), -r, r]
    return (torch.cat(ks, -1) * b[None, :, :]).sum(1)


def data(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 3, generator=g, dtype=F64)
    x[1] = x[0]  # a duplicated point: coincident pairs off the diagonal too
    b = torch.rand(n, 1, generator=g, dtype=F64) + 0.5
    cot = torch.randn(n, 4, generator=g, dtype=F64)
    return x, b, torch.tensor([S3], dtype=F64), cot


def value_and_grads(fn, x0, b0, cot):
    x, b = x0.clone().requires_grad_(), b0.clone().requires_grad_()
    out = fn(x, b)
    return [out.detach()] + list(torch.autograd.grad(out, [x, b], cot))


def check(ours, ref, rtol=1e-10, atol=1e-12):
    for o, r in zip(ours, ref):
        assert torch.isfinite(o).all(), o
        torch.testing.assert_close(o, r, rtol=rtol, atol=atol)


def test_genred_kernels_on_coincident_points():
    x, b, s, cot = data()
    g = Genred(FORMULA, ALIASES, reduction_op="Sum", axis=1)
    ours = value_and_grads(lambda x, b: g(x, x, b, s), x, b, cot)
    check(ours, value_and_grads(lambda x, b: dense(x, x, b, s), x, b, cot))
    # Before Rsqrt(0) = 0 every coincident pair made the x gradient NaN.
    assert ours[1].abs().sum() > 0


def test_lazytensor_kernels_and_second_derivative():
    x0, b0, s, cot = data(seed=1)
    x = x0.clone().requires_grad_()
    xi, xj = LazyTensor(x[:, None, :]), LazyTensor(x[None, :, :])
    r = (xi - xj).norm2()
    ks = [(-r).exp(), (1 + S3 * r) * (-S3 * r).exp(), -r, xi.sqdist(xj).sqrt()]
    out = torch.cat([(k * LazyTensor(b0[None, :, :])).sum(1) for k in ks], -1)
    (gx,) = torch.autograd.grad(out, [x], cot, create_graph=True)
    ref = value_and_grads(lambda x, b: dense(x, x, b, s), x0, b0, cot)
    check([out.detach(), gx.detach()], ref[:2])
    # A second derivative through the same convention: finite (0 on the coincident pairs).
    (hv,) = torch.autograd.grad(gx, [x], torch.ones_like(gx))
    assert torch.isfinite(hv).all()


@pytest.mark.skipif(rk is None, reason="pykeops is not installed")
def test_same_as_pykeops():
    x, b, s, cot = data(n=25, seed=2)
    try:
        real = rk.Genred(FORMULA, ALIASES, reduction_op="Sum", axis=1)
        want = value_and_grads(lambda x, b: real(x, x, b, s, backend="CPU"), x, b, cot)
    except Exception as e:  # no compiler or headers for pykeops on this machine
        pytest.skip(f"pykeops could not compile: {type(e).__name__}: {e}")
    ours = Genred(FORMULA, ALIASES, reduction_op="Sum", axis=1)
    check(value_and_grads(lambda x, b: ours(x, x, b, s), x, b, cot), want)


# GeomLoss in a fresh interpreter (it binds pykeops at import): online (tessel) vs tensorized on
# point clouds that share points; p=1 Sinkhorn and the energy distance go through Norm2 at 0.
SCRIPT = r'''
import json, torch
import tessel.compat
tessel.compat.install()
torch.set_default_dtype(torch.float64)
from geomloss import SamplesLoss
torch.manual_seed(0)
x0, y0 = torch.rand(60, 2), torch.rand(50, 2)
y0[:20] = x0[:20]  # shared support
a0, b0 = torch.rand(60) + 0.2, torch.rand(50) + 0.2
a0, b0 = a0 / a0.sum(), b0 / b0.sum()
out = {}
for name, kw in (("sinkhorn", dict(p=1, blur=0.05)), ("energy", {})):
    res = {}
    for backend in ("online", "tensorized"):
        x, y, a, b = (t.clone().requires_grad_() for t in (x0, y0, a0, b0))
        L = SamplesLoss(name, backend=backend, **kw)(a, x, b, y)
        res[backend] = [v.tolist() for v in [L] + list(torch.autograd.grad(L, [x, a, y, b]))]
    out[name] = res
print("RESULT " + json.dumps(out))
'''


@pytest.fixture(scope="module")
def geomloss_runs():
    if importlib.util.find_spec("geomloss") is None:
        pytest.skip("geomloss is not installed")
    import tessel
    root = os.path.dirname(os.path.dirname(os.path.abspath(tessel.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env,
                          timeout=600)
    lines = [s for s in proc.stdout.splitlines() if s.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.mark.parametrize("loss", ["sinkhorn", "energy"])
def test_geomloss_online_gradients_finite_and_equal_tensorized(geomloss_runs, loss):
    on, te = (geomloss_runs[loss][k] for k in ("online", "tensorized"))
    for k, (o, t) in enumerate(zip(on, te)):  # loss, then d/dx, d/da, d/dy, d/db
        o, t = torch.tensor(o), torch.tensor(t)
        assert torch.isfinite(o).all(), (loss, k)
        # tensorized clamps squared distances at 1e-8: its cost is sqrt(1e-8) = 1e-4, not 0, on
        # the shared points, which moves every output by at most about that much
        torch.testing.assert_close(o, t, rtol=0, atol=1e-4)
