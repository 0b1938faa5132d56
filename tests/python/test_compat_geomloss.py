"""Unmodified GeomLoss on tessel.compat.install(): online = tensorized, multiscale = pykeops's."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

# Runs in a fresh interpreter: GeomLoss binds pykeops when it is imported, and install() must
# come first without changing this test session's sys.modules. argv[1]: "tessel" (install the
# layer; online vs tensorized, and multiscale) or "pykeops" (the real one; multiscale only).
SCRIPT = r'''
import json, sys
import torch

mode = sys.argv[1]
calls = [0]
if mode == "tessel":
    import tessel.compat
    tessel.compat.install()
    from tessel import torch as ttorch
    _call = ttorch.Genred.__call__

    def counting_call(self, *args, **kwargs):
        calls[0] += 1
        return _call(self, *args, **kwargs)

    ttorch.Genred.__call__ = counting_call
import pykeops

# GeomLoss's online softmin passes torch.Tensor([1 / eps]), a tensor of the *default* dtype, to
# KeOps: with float32 (the default default) 1/eps is rounded to float32 and "online" differs from
# "tensorized" by ~1e-8 relative whatever the backend. float64 by default keeps them comparable.
torch.set_default_dtype(torch.float64)
import geomloss
from geomloss import SamplesLoss
import geomloss._legacy.kernel_samples as ks
import geomloss._legacy.sinkhorn_samples as ss

out = dict(pykeops=pykeops.__name__, keops_available=[ss.keops_available, ks.keops_available],
           generic_logsumexp=ss.generic_logsumexp.__module__,
           lazytensor=ks.LazyTensor.__module__, cases=[], multiscale={})


def run(name, backend, a0, x0, b0, y0, **kw):
    x, y, a, b = (t.clone().requires_grad_() for t in (x0, y0, a0, b0))
    before = calls[0]
    L = SamplesLoss(name, backend=backend, **kw)(a, x, b, y)
    grads = torch.autograd.grad(L.sum(), [x, a, y, b])
    return calls[0] - before, [L.detach()] + list(grads)


def data(B, N, M, D):
    shape = lambda n: (n,) if B is None else (B, n)  # batched: GeomLoss's LazyTensor softmin
    x0, y0 = torch.rand(*shape(N), D), torch.rand(*shape(M), D) + 0.1
    a0, b0 = torch.rand(*shape(N)) + 0.2, torch.rand(*shape(M)) + 0.2
    return a0 / a0.sum(-1, keepdim=True), x0, b0 / b0.sum(-1, keepdim=True), y0


torch.manual_seed(0)
if mode == "tessel":
    for D, B in ((2, None), (3, None), (2, 3)):
        args = data(B, 200, 300, D)
        for name, kw in (("sinkhorn", dict(p=2, blur=0.05)), ("gaussian", dict(blur=0.5))):
            n_on, on = run(name, "online", *args, **kw)
            n_te, te = run(name, "tensorized", *args, **kw)
            errs = [float((o - t).norm() / t.norm()) for o, t in zip(on, te)]
            out["cases"].append(dict(D=D, B=B, loss=name, errors=errs, value=float(on[0].min()),
                                     calls_online=n_on, calls_tensorized=n_te))
    # Multiscale with every block kept: block-sparse ranges that cover the whole matrix.
    args = data(None, 200, 300, 2)
    n_ms, ms = run("gaussian", "multiscale", *args, blur=0.1, truncate=1e6)
    _, te = run("gaussian", "tensorized", *args, blur=0.1)
    out["full_ranges"] = dict(calls=n_ms, errors=[float((o - t).norm() / t.norm())
                                                  for o, t in zip(ms, te)])

# Multiscale with truncation: block-sparse reductions on pruned cluster pairs.
torch.manual_seed(1)
args = data(None, 400, 500, 2)
# (Sinkhorn only: each reduction is one more compilation for pykeops; the LazyTensor `.ranges`
# path of the kernel losses is checked above, on all blocks, and in test_compat_pykeops.py.)
_, ms = run("sinkhorn", "multiscale", *args, p=2, blur=0.01, truncate=3, cluster_scale=0.1)
_, te = run("sinkhorn", "tensorized", *args, p=2, blur=0.01)
out["multiscale"]["sinkhorn"] = dict(values=[v.reshape(-1).tolist() for v in ms],
                                     tensorized=float(te[0]))
print("RESULT " + json.dumps(out))
'''


def _run(mode):
    import tessel  # the package under test: the subprocess must import the same one
    root = os.path.dirname(os.path.dirname(os.path.abspath(tessel.__file__)))
    env = dict(os.environ, PYKEOPS_VERBOSE="0", PYTHONPATH=os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True,
                          env=env, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


@pytest.fixture(scope="module")
def on_tessel():
    if importlib.util.find_spec("geomloss") is None:
        pytest.skip("geomloss is not installed")
    return _run("tessel")


def test_geomloss_imports_tessel(on_tessel):
    assert on_tessel["pykeops"] == "tessel.compat.pykeops"
    assert on_tessel["keops_available"] == [True, True]
    assert on_tessel["generic_logsumexp"].startswith("tessel.compat.pykeops")
    assert on_tessel["lazytensor"].startswith("tessel.compat.pykeops")


@pytest.mark.parametrize("D, B", [(2, None), (3, None), (2, 3)])
@pytest.mark.parametrize("loss", ["sinkhorn", "gaussian"])
def test_online_equals_tensorized(on_tessel, D, B, loss):
    (case,) = [c for c in on_tessel["cases"] if c["D"] == D and c["B"] == B and c["loss"] == loss]
    # The online run went through tessel's reductions; the tensorized one did not.
    assert case["calls_online"] > 0 and case["calls_tensorized"] == 0
    assert case["value"] > 0
    # Loss value, then gradients with respect to x, the weights a, y and the weights b.
    for err in case["errors"]:
        assert err < 1e-8, case


def test_multiscale_with_all_blocks_equals_tensorized(on_tessel):
    case = on_tessel["full_ranges"]
    assert case["calls"] > 0
    for err in case["errors"]:
        assert err < 1e-10, case


def test_multiscale_truncated_matches_pykeops(on_tessel):
    """Block-sparse reductions (ranges from the cluster helpers, gradients through the transposed
    ranges) in GeomLoss's multiscale backend: the same numbers as with the real pykeops."""
    ours = on_tessel["multiscale"]
    for name, case in ours.items():
        # Truncation did prune: the loss is close to, but not equal to, the dense one.
        value = case["values"][0][0]
        assert 1e-6 < abs(value - case["tensorized"]) / case["tensorized"] < 0.1, (name, case)
    try:
        import pykeops.torch  # noqa: F401
    except ImportError:
        return  # no reference: the checks above stand alone
    ref = _run("pykeops")
    assert ref["pykeops"] == "pykeops"
    for name, case in ours.items():
        for o, r in zip(case["values"], ref["multiscale"][name]["values"]):
            o, r = np.array(o), np.array(r)
            assert np.linalg.norm(o - r) <= 1e-10 * np.linalg.norm(r), name
