"""The pykeops 2.x API on tessel: `tessel.compat.install()` makes `import pykeops` load it.

It can also be imported directly: `import tessel.compat.pykeops as pykeops`. Submodules: torch
and numpy (Genred, generic_sum / generic_logsumexp / generic_argmin / generic_argkmin,
KernelSolve, LazyTensor, Vi, Vj, Pm, their cluster helpers and utils: numpytools / torchtools and
dense reference kernels), config.
Reductions run on tessel's CPU backend, or on its CUDA backend for CUDA tensors and the "GPU*"
backends (block-sparse `ranges` included, without batch dims).
Options are read by tessel's core with pykeops's spellings; the few pykeops options tessel
accepts and ignores (dtype, enable_chunks, use_fast_math, ...) are listed with the reason for each
by `tessel._core.ignored_options()`.
"""
import importlib

from ... import __version__ as tessel_version
from . import config
from . import config as pykeopsconfig  # noqa: F401  (the name pykeops uses internally)

__version__ = "2.3"   # the pykeops API this layer mirrors; tessel's own is `tessel_version`
verbose = True
default_device_id = 0
numpy_found, torch_found = config.numpy_found, config.torch_found

__all__ = ["config", "__version__", "tessel_version", "set_verbose", "get_build_folder",
           "set_build_folder", "clean_pykeops", "check_health", "show_cuda_status",
           "test_numpy_bindings", "test_torch_bindings"]


def __getattr__(name):
    # `import pykeops; pykeops.torch.LazyTensor` works in pykeops: load the front ends on demand.
    if name in ("torch", "numpy"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def set_verbose(val):
    global verbose
    verbose = bool(val)


def get_build_folder():
    return config.get_build_folder()


def set_build_folder(path=None):
    """tessel reads its kernel cache folder from TESSEL_CACHE_DIR when it starts; it cannot be
    moved from Python afterwards."""
    if path is None or str(path) == get_build_folder():
        return
    raise NotImplementedError("set_build_folder: tessel's kernel cache folder is set by the "
                              "TESSEL_CACHE_DIR environment variable before the first reduction")


def clean_pykeops(recompile_jit_binaries=True):
    """Forgets the reductions built in this process (tessel's on-disk kernel cache is kept: see
    `tessel cache clear`)."""
    from . import _lazytensor
    _lazytensor.clear_caches()


def show_cuda_status(force_print=False):
    print("tessel CUDA: " + importlib.import_module("tessel._core").cuda_status())


def check_health():
    print(f"pykeops API {__version__} on tessel {tessel_version}: CPU SIMD "
          f"{importlib.import_module('tessel').simd_level()}, kernel cache "
          f"{get_build_folder()}")
    show_cuda_status()
    for name in ("numpy", "torch"):
        if getattr(config, f"{name}_found"):
            globals()[f"test_{name}_bindings"]()


def _check(np_module, make, to_numpy):
    import numpy as np
    x, y = np.arange(6.0).reshape(3, 2) / 6, np.arange(8.0).reshape(4, 2) / 8
    g = np_module.Genred("SqDist(x,y)", ["x = Vi(2)", "y = Vj(2)"], axis=1)
    res = to_numpy(g(make(x), make(y)))
    ref = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1).sum(1, keepdims=True)
    return np.allclose(res, ref)


def test_numpy_bindings():
    from . import numpy as pknp
    ok = _check(pknp, lambda a: a, lambda a: a)
    print("pyKeOps (tessel) with numpy bindings is " + ("working!" if ok else "NOT working"))
    return ok


def test_torch_bindings():
    import torch
    from . import torch as pkt
    ok = _check(pkt, torch.from_numpy, lambda a: a.numpy())
    print("pyKeOps (tessel) with torch bindings is " + ("working!" if ok else "NOT working"))
    return ok
