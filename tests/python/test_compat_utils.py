"""pykeops.numpy.utils / pykeops.torch.utils on tessel.compat, against real pykeops 2.3's modules."""
import importlib
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

os.environ.setdefault("PYKEOPS_VERBOSE", "0")

from tessel.compat.pykeops.numpy import utils as tnu  # noqa: E402
from tessel.compat.pykeops.torch import utils as ttu  # noqa: E402

try:  # the reference: real pykeops's helper modules (importing them compiles nothing)
    import pykeops.numpy.utils as rnu
    import pykeops.torch.utils as rtu
except ImportError:
    rnu = rtu = None
needs_pykeops = pytest.mark.skipif(rnu is None, reason="pykeops is not installed")

KERNELS = ["gaussian", "laplacian", "cauchy", "inverse_multiquadric"]


def _public(module):
    return {n for n in dir(module) if not n.startswith("_")}


@needs_pykeops
@pytest.mark.parametrize("ours, theirs, tools", [(tnu, rnu, "numpytools"),
                                                 (ttu, rtu, "torchtools")])
def test_every_public_name_of_pykeops_utils_is_provided(ours, theirs, tools):
    # Module-level names pykeops defines there (not those it merely imports, like np or Genred).
    own = {n for n in _public(theirs) if not isinstance(getattr(theirs, n), type(np))
           and getattr(getattr(theirs, n), "__module__", theirs.__name__) == theirs.__name__}
    assert own - _public(ours) == set()
    assert _public(getattr(theirs, tools)) - _public(getattr(ours, tools)) == set()


def _xy(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((7, 3)), rng.standard_normal((5, 3))


@needs_pykeops
@pytest.mark.parametrize("fn", ["np_kernel", "log_np_kernel", "grad_np_kernel"])
@pytest.mark.parametrize("kernel", KERNELS)
def test_numpy_kernels_match_pykeops(fn, kernel):
    x, y = _xy()
    np.testing.assert_allclose(getattr(tnu, fn)(x, y, 0.7, kernel),
                               getattr(rnu, fn)(x, y, 0.7, kernel), rtol=1e-13, atol=1e-14)


@needs_pykeops
@pytest.mark.parametrize("kernel", ["binet", "linear", "gaussian_unoriented",
                                    "gaussian_oriented"])
def test_numpy_sphere_kernels_match_pykeops(kernel):
    a, b = _xy(1)
    a, b = a / np.linalg.norm(a, axis=1, keepdims=True), b / np.linalg.norm(b, axis=1,
                                                                            keepdims=True)
    np.testing.assert_allclose(tnu.np_kernel_sphere(a, b, 0.9, kernel),
                               rnu.np_kernel_sphere(a, b, 0.9, kernel), rtol=1e-13)


@needs_pykeops
def test_numpy_helpers_match_pykeops():
    x, y = _xy(2)
    for fn in ("squared_distances", "differences"):
        np.testing.assert_array_equal(getattr(tnu, fn)(x, y), getattr(rnu, fn)(x, y))
    m = np.random.default_rng(3).standard_normal((6, 4)) * 50
    for axis in (0, 1):
        np.testing.assert_allclose(tnu.log_sum_exp(m, axis), rnu.log_sum_exp(m, axis),
                                   rtol=1e-14)
    q, p = np.random.rand(7, 2), np.random.rand(5, 2)
    A = rnu.grad_np_kernel(x, y, 0.8, "gaussian")
    got, want = tnu.chain_rules(q, x, y, A, p), rnu.chain_rules(q, x, y, A, p)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-6)


@needs_pykeops
@pytest.mark.parametrize("kernel", KERNELS)
def test_torch_kernels_match_pykeops(kernel):
    x, y = map(torch.from_numpy, _xy(4))
    torch.testing.assert_close(ttu.torch_kernel(x, y, 0.6, kernel),
                               rtu.torch_kernel(x, y, 0.6, kernel), rtol=1e-13, atol=1e-14)
    torch.testing.assert_close(ttu.squared_distances(x, y), rtu.squared_distances(x, y),
                               rtol=0, atol=0)


def test_unknown_kernel_names_the_function_and_the_choices():
    x, y = _xy()
    with pytest.raises(ValueError, match="np_kernel: kernel must be one of .*'cauchy'"):
        tnu.np_kernel(x, y, 1.0, "cauchyy")
    with pytest.raises(ValueError, match="torch_kernel: kernel must be one of"):
        ttu.torch_kernel(torch.from_numpy(x), torch.from_numpy(y), 1.0, "gauss")


@needs_pykeops
def test_numpytools_behave_as_pykeops():
    ours, theirs = tnu.numpytools, rnu.numpytools
    a = np.arange(12.0).reshape(3, 4)
    for name, args in [("transpose", (a,)), ("permute", (a, 1, 0)), ("contiguous", (a.T,)),
                       ("numpy", (a,)), ("tile", (a, (2, 1))), ("view", (a, (4, 3))),
                       ("long", (a,)), ("eq", (a, a)), ("copy", (a,)),
                       ("solve", (np.eye(3) * 2, a)), ("zeros", ((2, 3), "float32")),
                       ("eye", (3, "float64")), ("array", ([1, 2], "float32")),
                       ("view_as_complex", (a,)), ("view_as_real", (a.view("complex128"),))]:
        got, want = getattr(ours, name)(*args), getattr(theirs, name)(*args)
        assert got.dtype == want.dtype and got.shape == want.shape, name
        np.testing.assert_array_equal(got, want, err_msg=name)
    for name, args in [("size", (a,)), ("dtype", (a,)), ("dtypename", (a.dtype,)),
                       ("is_tensor", (a,)), ("is_tensor", ([1],)), ("device", (a,)),
                       ("device_type_index", (a,)), ("device_dict", (a,)),
                       ("get_pointer", (a,)), ("detect_complex", ([1.0, 2j],)),
                       ("detect_complex", (a,)), ("detect_complex", (a.view("complex128"),)),
                       ("detect_complex", (3.0,))]:
        assert getattr(ours, name)(*args) == getattr(theirs, name)(*args), name
    assert ours.rand(2, 3, "float32").dtype == np.float32
    assert ours.empty((2, 3), "float64").shape == (2, 3)


@needs_pykeops
def test_torchtools_behave_as_pykeops():
    ours, theirs = ttu.torchtools, rtu.torchtools
    a = torch.arange(12.0, dtype=torch.float64).reshape(3, 4)
    for name, args in [("transpose", (a,)), ("permute", (a, 1, 0)), ("contiguous", (a.t(),)),
                       ("tile", (a, 2, 1)), ("view", (a, (4, 3))), ("long", (a,)),
                       ("eq", (a, a)), ("copy", (a,)), ("arraysum", (a,)), ("arraysum", (a, 1)),
                       ("solve", (torch.eye(3, dtype=a.dtype) * 2, a)),
                       ("zeros", ((2, 3), torch.float32, "cpu")),
                       ("eye", (3, torch.float64, "cpu")), ("array", ([1, 2], "int32", "cpu")),
                       ("view_as_complex", (a,)),
                       ("view_as_real", (torch.view_as_complex(a.view(3, 2, 2)),))]:
        got, want = getattr(ours, name)(*args), getattr(theirs, name)(*args)
        assert got.dtype == want.dtype and got.shape == want.shape, name
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=name)
    for name, args in [("size", (a,)), ("dtype", (a,)), ("dtype", (1.5,)),
                       ("dtypename", (torch.float16,)), ("dtypename", (int,)),
                       ("is_tensor", (a,)), ("device", (a,)), ("device", (1.0,)),
                       ("device_type_index", (a,)), ("device_type_index", (1.0,)),
                       ("get_pointer", (a,)), ("pointer", (a,)), ("numpy", (a,)),
                       ("detect_complex", ([1.0, 2j],)), ("detect_complex", (a,))]:
        got, want = getattr(ours, name)(*args), getattr(theirs, name)(*args)
        assert np.array_equal(got, want) if name == "numpy" else got == want, name
    with pytest.raises(ValueError, match="incompatible with KeOps"):
        ours.dtypename(torch.int8)
    with pytest.raises(ValueError, match="incompatible with KeOps"):
        ours.array([1], "bool", "cpu")


def test_tools_run_tessel_reductions():
    # Backend-generic pykeops code: a Gaussian kernel sum written once against the tools.
    x, y = _xy(5)
    b = np.random.default_rng(6).standard_normal((5, 2))
    want = np.exp(-tnu.squared_distances(x, y)) @ b
    for tools, make in [(tnu.numpytools, lambda v: v), (ttu.torchtools, torch.from_numpy)]:
        g = tools.Genred("Exp(-SqDist(x,y))*b", ["x = Vi(3)", "y = Vj(3)", "b = Vj(2)"],
                         reduction_op="Sum", axis=1)
        got = g(make(x), make(y), make(b))
        assert tools.is_tensor(got)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)
        assert tools.swap_axes.__module__.startswith("tessel.")


# After install(), pykeops code importing the helpers gets tessel's (in a fresh interpreter, so
# this session's sys.modules are left as they are).
_SCRIPT = """
import tessel.compat
tessel.compat.install()
import pykeops.numpy.utils as nu, pykeops.torch.utils as tu
from pykeops.numpy.utils import numpytools
from pykeops.torch.utils import torchtools, torch_kernel
assert nu.__name__ == "tessel.compat.pykeops.numpy.utils", nu.__name__
assert tu.__name__ == "tessel.compat.pykeops.torch.utils", tu.__name__
assert numpytools.Genred.__module__.startswith("tessel."), numpytools.Genred.__module__
import geomloss  # GeomLoss imports pykeops's modules when present
print("ok")
"""


def test_install_serves_the_utils_modules():
    pytest.importorskip("geomloss")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    run = subprocess.run([sys.executable, "-c", _SCRIPT], env=env, capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]
    assert importlib.import_module("tessel.compat").installed() is False
