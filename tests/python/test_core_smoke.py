"""The extension module itself: parse, Reduction, evaluate and evaluate_into on NumPy and torch."""
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


def test_evaluate_into_torch_strided_zero_copy():
    f = tessel.parse("Exp(-SqDist(X,Y))*B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)"])
    r = tessel.Reduction("Sum", f)
    x = torch.rand(3, 9, dtype=torch.float64).t()  # non-contiguous view
    y, b = torch.rand(5, 3, dtype=torch.float64), torch.rand(5, 1, dtype=torch.float64)
    out = torch.empty(9, 1, dtype=torch.float64)
    _core.evaluate_into(r, [x, y, b], [out])
    ref = gauss_dense(x.numpy(), y.numpy(), b.numpy(), 1.0)
    np.testing.assert_allclose(out.numpy(), ref, rtol=1e-12)


def test_errors_are_value_errors_naming_the_input():
    r = tessel.Reduction("Sum", tessel.parse("SqDist(X,Y)", ["X = Vi(3)", "Y = Vj(3)"]))
    with pytest.raises(ValueError, match="input 1"):
        _core.evaluate(r, [np.zeros((4, 3)), np.zeros((5, 2))])
    with pytest.raises(ValueError, match="column"):
        tessel.parse("Exp(X", ["X = Vi(3)"])
