"""KeOps's Python formula syntax and LazyTensor.__matmul__'s options, against real pykeops 2.3."""
import os
import re

import numpy as np
import pytest
import torch

os.environ.setdefault("PYKEOPS_VERBOSE", "0")

from tessel import _core  # noqa: E402
from tessel.compat.pykeops import numpy as tn  # noqa: E402
from tessel.compat.pykeops import torch as tk  # noqa: E402

try:  # the reference: real pykeops (CPU), compiling each new formula with g++
    import pykeops.numpy as rn
    import pykeops.torch as rk
except ImportError:
    rn = rk = None
needs_pykeops = pytest.mark.skipif(rn is None, reason="pykeops is not installed")

ALIASES = ["x = Vi(3)", "y = Vj(3)"]
# Trailing commas, spaces, signed integer parameters, IntCst and KeOps's op names, all in one
# formula so that pykeops compiles it once.
PYTHON_FORMULA = ("Sum(Abs(x,) + Pow(x - y, - 2,) * IntCst( 3 ) + Extract(x,0,1,) * "
                  "LessThan(x, y,) + LessOrEqual(y, x) * Pow(y,+3) + Exp(-SqDist( x , y ,)))")


def _xy(seed=0, n=40, m=50):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 3)), rng.standard_normal((m, 3))


def test_python_syntax_parses_to_the_plain_formula():
    plain = ("Sum(Abs(x) + Pow(x - y, -2) * IntCst(3) + Extract(x,0,1) * Less(x, y) + "
             "LessEq(y, x) * Pow(y,3) + Exp(-SqDist(x, y)))")
    ours = _core.parse(PYTHON_FORMULA, ALIASES)
    assert ours == _core.parse(plain, ALIASES)
    # KeOps's spellings are read, the canonical names printed.
    assert "LessThan" not in str(ours) and "Less(" in str(ours)


@needs_pykeops
def test_python_syntax_values_match_pykeops():
    x, y = _xy()
    ours = tn.Genred(PYTHON_FORMULA, ALIASES, reduction_op="Sum", axis=1)(x, y, backend="CPU")
    ref = rn.Genred(PYTHON_FORMULA, ALIASES, reduction_op="Sum", axis=1)(x, y, backend="CPU")
    np.testing.assert_allclose(ours, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("text, message", [
    ("Abs(,x)", "empty argument in 'Abs(...)' at column 4"),
    ("Pow(x,,2)", "empty argument in 'Pow(...)' at column 6"),
    ("Abs(x", "missing ')' closing 'Abs(' at column 0 at column 5"),
    ("Abs(x, y)", "too many arguments: 'Abs' takes 1 argument at column 7"),
    ("SqDist(x,)", "'SqDist' takes 2 arguments, found 1 at column 0"),
])
def test_syntax_errors_point_at_the_problem(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        tn.Genred(text, ALIASES, reduction_op="Sum", axis=1)


def _gauss(mod, x, y):
    xi, yj = mod.LazyTensor(x[:, None, :]), mod.LazyTensor(y[None, :, :])
    return (-((xi - yj) ** 2).sum(2)).exp()


@needs_pykeops
@pytest.mark.parametrize("sum_scheme", ["direct_sum", "block_sum", "kahan_scheme"])
def test_matmul_options_match_pykeops_torch(sum_scheme):
    x, y = (torch.from_numpy(a) for a in _xy(1))
    b = torch.from_numpy(np.random.default_rng(2).standard_normal((50, 2)))
    ref = _gauss(rk, x, y).__matmul__(b, sum_scheme=sum_scheme, backend="CPU", device_id=-1)
    kw = dict(sum_scheme=sum_scheme, backend="CPU", device_id=-1)
    ours = _gauss(tk, x, y).__matmul__(b, **kw)
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)
    out = torch.empty(40, 2, dtype=torch.float64)
    got = tk.LazyTensor.__matmul__(_gauss(tk, x, y), b, out=out, **kw)
    assert got is out
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    # K @ v with v of shape (M,) gives (N,), as in pykeops.
    torch.testing.assert_close(_gauss(tk, x, y).__matmul__(b[:, 0], **kw), ref[:, 0],
                               rtol=1e-10, atol=1e-12)


@needs_pykeops
def test_matmul_out_matches_pykeops_numpy():
    x, y = _xy(3)
    b = np.random.default_rng(4).standard_normal((50, 2))
    ref = _gauss(rn, x, y).__matmul__(b, backend="CPU")
    out = np.empty((40, 2))
    got = _gauss(tn, x, y).__matmul__(b, out=out, backend="CPU", sum_scheme="block_sum")
    assert got is out
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kw, error, message", [
    (dict(sum_scheme="bogus"), ValueError, "LazyTensor.__matmul__: sum_scheme must be one of"),
    (dict(backend="nope"), ValueError, "LazyTensor.__matmul__: invalid backend 'nope'"),
    (dict(device_id="a"), TypeError, "LazyTensor.__matmul__: device_id must be an integer"),
    (dict(use_double_acc="yes"), TypeError, "LazyTensor.__matmul__: use_double_acc"),
    (dict(out=3), TypeError, "LazyTensor.__matmul__: out must be a Tensor"),
    (dict(foo=1), TypeError, "LazyTensor.__matmul__: unexpected keyword argument 'foo'"),
])
def test_matmul_bad_options_name_the_method(kw, error, message):
    x, y = (torch.from_numpy(a) for a in _xy(5))
    with pytest.raises(error, match=re.escape(message)):
        _gauss(tk, x, y).__matmul__(torch.ones(50, 1, dtype=torch.float64), **kw)
