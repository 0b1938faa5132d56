"""Second derivatives of tessel.ot's |x - y|^2 / 2 losses on a few kernels (tessel.ot._plan): the
plan's products and the softmin against dense float64 autograd, the losses against the generic
reductions (the same cost given as a formula), and how many kernels a cold HVP compiles."""
import glob
import json
import os
import subprocess
import sys

import pytest
import torch

from tessel.ot import SamplesLoss
from tessel.ot._plan import plan_matvec, softmin

# What the count test runs in a fresh process with an empty kernel cache.
_COLD_HVP = """
import glob, json, os, torch
from tessel.ot import SamplesLoss
g = torch.Generator().manual_seed(0)
x = 0.3 * torch.randn(40, 3, generator=g, dtype=torch.float64)
y = 0.3 * torch.randn(50, 3, generator=g, dtype=torch.float64) + 0.2
v = torch.randn(40, 3, generator=g, dtype=torch.float64)
counts = {}
for mode in ("unrolled", "implicit"):
    loss = SamplesLoss("sinkhorn", p=2, blur=0.05, gradient=mode)
    torch.autograd.functional.hvp(lambda t: loss(t, y), x, v)
    counts[mode] = len(glob.glob(os.path.join(os.environ["TESSEL_CACHE_DIR"], "kernels", "*",
                                              "*.so")))
print(json.dumps(counts))
"""


def _clouds(n=7, m=9, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = 0.5 * torch.randn(n, 3, generator=g, dtype=torch.float64)
    y = 0.5 * torch.randn(m, 3, generator=g, dtype=torch.float64)
    return x, y, g


def _dense_kernel(x, y, u, h, eps):
    c = ((x[:, None] - y[None]) ** 2).sum(-1) / 2
    return torch.exp(u[:, None] + h[None] - c / eps)


def _check_two_orders(got, want, args, w):
    """The first derivatives of <got, w> and <want, w> in args, then the derivatives of the sum
    of their squares (second order): float64 rounding apart."""
    grads = torch.autograd.grad((got * w).sum(), args, create_graph=True)
    dense = torch.autograd.grad((want * w).sum(), args, create_graph=True)
    for a, b in zip(grads, dense):
        torch.testing.assert_close(a, b, rtol=1e-11, atol=1e-13)
    s, t = sum((d ** 2).sum() for d in grads), sum((d ** 2).sum() for d in dense)
    for a, b in zip(torch.autograd.grad(s, args), torch.autograd.grad(t, args)):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_plan_matvec_and_its_derivatives_match_dense_autograd():
    x, y, g = _clouds()
    eps = 0.3
    u = torch.randn(7, generator=g, dtype=torch.float64)
    h = torch.randn(9, generator=g, dtype=torch.float64)
    v = torch.randn(9, 2, generator=g, dtype=torch.float64)
    args = [t.clone().requires_grad_() for t in (x, y, u, h, v)]
    got = plan_matvec(*args, eps)
    want = _dense_kernel(*args[:4], eps) @ args[4]
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)
    _check_two_orders(got, want, args, torch.randn(7, 2, generator=g, dtype=torch.float64))


def test_softmin_second_derivatives_match_dense_autograd():
    x, y, g = _clouds(seed=1)
    eps = 0.2
    h = torch.randn(9, generator=g, dtype=torch.float64)
    args = [t.clone().requires_grad_() for t in (x, y, h)]
    got = softmin(*args, eps)
    c = ((args[0][:, None] - args[1][None]) ** 2).sum(-1) / 2
    want = -eps * torch.logsumexp(args[2][None] - c / eps, 1)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)
    _check_two_orders(got, want, args, torch.randn(7, generator=g, dtype=torch.float64))


@pytest.mark.parametrize("mode", ["unrolled", "implicit"])
@pytest.mark.parametrize("reach", [None, 0.5])
def test_hvp_matches_the_generic_reductions(mode, reach, monkeypatch):
    """The built-in cost (the few kernels, compiled) against the same cost as a formula string
    (the generic reductions and their symbolic derivatives, in the interpreter: compiled, their
    150-odd kernels took a minute): the same function, to float64 rounding."""
    g = torch.Generator().manual_seed(2)
    x = 0.3 * torch.randn(30, 3, generator=g, dtype=torch.float64)
    y = 0.3 * torch.randn(40, 3, generator=g, dtype=torch.float64) + 0.2
    v = torch.randn(30, 3, generator=g, dtype=torch.float64)
    out = []
    for cost in (None, "SqDist(X,Y) / IntCst(2)"):
        if cost is not None:
            monkeypatch.setenv("TESSEL_CXX", "tessel-test-no-compiler")
        loss = SamplesLoss("sinkhorn", p=2, blur=0.05, reach=reach, gradient=mode, cost=cost)
        out.append(torch.autograd.functional.hvp(lambda t: loss(t, y), x, v))
    (value, hvp), (value_ref, hvp_ref) = out
    torch.testing.assert_close(value, value_ref, rtol=1e-12, atol=0)
    # The implicit HVP solves with CG to a relative 1e-11 (its float64 tolerance).
    torch.testing.assert_close(hvp, hvp_ref, rtol=1e-9, atol=1e-9 * float(hvp_ref.abs().max()))


def test_cold_hvp_compiles_few_kernels(tmp_path):
    """A cold HVP of the unrolled loss then of the implicit one compiles a bounded set of kernels
    (each eps and each derivative compiled its own before: over 1500 and over 180)."""
    env = dict(os.environ, TESSEL_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", _COLD_HVP], env=env, capture_output=True,
                         text=True, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    # unrolled: the softmin's LogSumExp and the plan products of widths 4, 12 and 16 for the
    # first and second derivatives; implicit adds widths 1, 3 and 9, and its CG's own kernels.
    assert counts["unrolled"] <= 8, counts
    assert counts["implicit"] - counts["unrolled"] <= 8, counts
    assert not glob.glob(str(tmp_path / "cache" / "kernels" / "*" / "*.tmp-*"))
