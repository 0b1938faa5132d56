"""The extension module itself: parse, Reduction, evaluate and Bound on NumPy and torch."""
import os

import numpy as np
import pytest
import torch

import tessel
from tessel import _core


def gauss_dense(x, y, b, g):
    d2 = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    return np.exp(-g * d2) @ b


def test_evaluate_matches_dense_numpy():
    f = tessel.parse("Exp(-G*SqDist(X,Y))*B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(2)", "G = Pm(1)"])
    r = tessel.Reduction("Sum", f)
    x, y, b = np.random.rand(7, 3), np.random.rand(11, 3), np.random.rand(11, 2)
    g = np.array([2.5])
    (out,) = _core.evaluate(r, [x, y, b, g])
    np.testing.assert_allclose(out, gauss_dense(x, y, b, 2.5), rtol=1e-12)


def test_bound_reads_strided_tensors_that_require_grad():
    f = tessel.parse("Exp(-SqDist(X,Y))*B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)"])
    r = tessel.Reduction("Sum", f)
    x = torch.rand(3, 9, dtype=torch.float64).t()  # non-contiguous view
    y, b = torch.rand(5, 3, dtype=torch.float64), torch.rand(5, 1, dtype=torch.float64)
    y.requires_grad_(True)  # read through its memory, no detach
    bound = _core.Bound(r, _core.Settings("test", {}), "test", "torch")
    (out,) = bound([x, y, b])
    ref = gauss_dense(x.numpy(), y.detach().numpy(), b.numpy(), 1.0)
    np.testing.assert_allclose(out, ref, rtol=1e-12)


def test_bound_refuses_views_whose_memory_is_not_their_values():
    r = tessel.Reduction("Sum", tessel.parse("X", ["X = Vi(1)"]))
    bound = _core.Bound(r, _core.Settings("test", {}), "G", "torch")
    x = torch.rand(4, 1, dtype=torch.float64)
    if hasattr(torch, "_neg_view"):
        with pytest.raises(ValueError, match="G: argument 0 is a negative view"):
            bound([torch._neg_view(x)])
    with pytest.raises(ValueError, match="G: argument 0 is a torch.sparse_coo tensor"):
        bound([x.to_sparse()])
    with pytest.raises(TypeError, match="G: argument 0 is a list; expected a torch.Tensor"):
        bound([[1.0]])
    with pytest.raises(TypeError, match="G: argument 1 has dtype torch.float32 but argument 0"):
        bound([x, x.float()])


def test_errors_are_value_errors_naming_the_input():
    r = tessel.Reduction("Sum", tessel.parse("SqDist(X,Y)", ["X = Vi(3)", "Y = Vj(3)"]))
    with pytest.raises(ValueError, match="input 1"):
        _core.evaluate(r, [np.zeros((4, 3)), np.zeros((5, 2))])
    with pytest.raises(ValueError, match="column"):
        tessel.parse("Exp(X", ["X = Vi(3)"])


def test_doctor_compiles_a_kernel_and_names_the_machine(tmp_path):
    """`python -m tessel doctor`: the pip install's machine check, with its test kernel."""
    import subprocess
    import sys

    env = dict(os.environ, TESSEL_CACHE_DIR=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-m", "tessel", "doctor"], capture_output=True,
                         text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    for label in ("compiler", "kernel", "SIMD", "threads", "cache", "GPU"):
        assert f"\n{label}" in out.stdout, out.stdout
    assert "matches the interpreter" in out.stdout or "no usable compiler" in out.stdout
    bad = subprocess.run([sys.executable, "-m", "tessel", "doctr"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert bad.returncode == 2 and "invalid choice" in bad.stderr
