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

from ..._docstrings import fill
from ... import __version__ as _tessel_version
from . import config
from . import config as pykeopsconfig  # noqa: F401  (the name pykeops uses internally)

#: The pykeops API version this layer mirrors (code that checks ``pykeops.__version__`` sees a
#: pykeops 2.3); tessel's own version is :data:`tessel_version`.
__version__ = "2.3"
#: The version of tessel that runs the reductions (``tessel.__version__``).
tessel_version = _tessel_version
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
    """Set pykeops's ``verbose`` flag (kept for pykeops code; tessel prints no build log).

    pykeops prints its compilation steps when verbose; tessel compiles quietly whatever the flag,
    so this only sets ``pykeops.verbose``, which code may read back.

    Parameters
    ----------
    val : bool
        The new value of ``verbose`` (any object, read as its truth value).

    Raises
    ------
    ValueError
        If ``val`` has no truth value (a NumPy array or tensor of several elements).

    Examples
    --------
    >>> import tessel.compat.pykeops as pykeops
    >>> pykeops.set_verbose(False)
    >>> pykeops.verbose
    False
    >>> pykeops.set_verbose(True)
    """
    global verbose
    verbose = bool(val)


def get_build_folder():
    """Return the folder of compiled kernels: tessel's kernel cache, pykeops's build folder.

    Each formula is compiled once per machine into this folder (``TESSEL_CACHE_DIR`` when it is
    set, else a folder in the user's cache) and loaded from there by later runs.

    Returns
    -------
    str
        The absolute path of tessel's kernel cache.

    Examples
    --------
    >>> import os
    >>> import tessel.compat.pykeops as pykeops
    >>> os.path.isabs(pykeops.get_build_folder())
    True
    """
    return config.get_build_folder()


def set_build_folder(path=None):
    """Accept pykeops's call to keep the build folder; refuse to move it.

    Unlike pykeops, which can switch build folders at run time, tessel reads its kernel cache
    folder from the ``TESSEL_CACHE_DIR`` environment variable when it starts: set that variable
    before the first reduction instead. Asking for the current folder (or for the default, with
    no argument) is accepted and does nothing, so pykeops code that merely restores it runs.

    Parameters
    ----------
    path : str or os.PathLike, optional
        The folder wanted; None (the default) or :func:`get_build_folder`'s value keep it.

    Raises
    ------
    NotImplementedError
        If ``path`` names another folder than the current kernel cache.

    Examples
    --------
    >>> import tessel.compat.pykeops as pykeops
    >>> pykeops.set_build_folder(pykeops.get_build_folder())  # the current one: accepted
    >>> pykeops.set_build_folder("elsewhere")
    Traceback (most recent call last):
    ...
    NotImplementedError: set_build_folder: tessel's kernel cache folder is set by the ...
    """
    if path is None or str(path) == get_build_folder():
        return
    raise NotImplementedError("set_build_folder: tessel's kernel cache folder is set by the "
                              "TESSEL_CACHE_DIR environment variable before the first reduction")


def clean_pykeops(recompile_jit_binaries=True):
    """Forget the reductions that LazyTensors built in this process.

    pykeops deletes its build folder here; tessel keeps its on-disk kernel cache, which is keyed
    by formula, compiler and flags and so never goes stale (``tessel cache clear`` empties it).
    What is forgotten is the in-process table of reductions behind LazyTensor expressions: the
    next reduction builds its reduction again (and loads its kernel from the disk cache).

    Parameters
    ----------
    recompile_jit_binaries : bool, default True
        Accepted for pykeops's signature and ignored: tessel has no separate JIT binaries.

    Raises
    ------
    TypeError
        Only if called with more than one argument: any value of ``recompile_jit_binaries`` is
        accepted.

    Examples
    --------
    >>> import tessel.compat.pykeops as pykeops
    >>> pykeops.clean_pykeops()
    """
    from . import _lazytensor
    _lazytensor.clear_caches()


def show_cuda_status(force_print=False):
    """Print whether tessel can run reductions on a GPU, and why not if it cannot.

    The line names the CUDA driver and GPUs found, or says what is missing (no driver, no GPU)
    and how to fix it; reductions run on the CPU backend meanwhile.

    Parameters
    ----------
    force_print : bool, default False
        Accepted for pykeops's signature; the status is always printed.

    Raises
    ------
    TypeError
        Only if called with more than one argument: any value of ``force_print`` is accepted.

    Examples
    --------
    >>> import tessel.compat.pykeops as pykeops
    >>> pykeops.show_cuda_status()
    tessel CUDA: ...
    """
    print("tessel CUDA: " + importlib.import_module("tessel._core").cuda_status())


def check_health():
    """Print what the layer runs on and test the NumPy and PyTorch front ends.

    The first line gives the pykeops API version, tessel's version, the CPU's SIMD level and the
    kernel cache folder; the second the CUDA status (:func:`show_cuda_status`); then
    :func:`test_numpy_bindings` and, when PyTorch is installed, :func:`test_torch_bindings` run a
    small reduction each and print whether it matched its dense reference. Unlike pykeops's, it
    deletes no cache and compiles at most one small kernel per front end.

    Examples
    --------
    >>> import tessel.compat.pykeops as pykeops
    >>> pykeops.check_health()
    pykeops API 2.3 on tessel ...: CPU SIMD ..., kernel cache ...
    tessel CUDA: ...
    pyKeOps (tessel) with numpy bindings is working!
    pyKeOps (tessel) with torch bindings is working!
    """
    print(f"pykeops API {__version__} on tessel {tessel_version}: CPU SIMD "
          f"{importlib.import_module('tessel').simd_level()}, kernel cache "
          f"{get_build_folder()}")
    show_cuda_status()
    for name in ("numpy", "torch"):
        if getattr(config, f"{name}_found"):
            globals()[f"test_{name}_bindings"]()


def _check(name):
    """sum_j |x_i - y_j|^2 through pykeops.<name>.Genred on 3 and 4 points in 2-D, against the
    dense NumPy computation; prints pykeops's message and returns whether they matched."""
    import numpy as np
    if name == "torch":
        import torch
        make, to_numpy = torch.from_numpy, lambda a: a.numpy()
    else:
        make = to_numpy = lambda a: a
    front = importlib.import_module(f"{__name__}.{name}")
    x, y = np.arange(6.0).reshape(3, 2) / 6, np.arange(8.0).reshape(4, 2) / 8
    g = front.Genred("SqDist(x,y)", ["x = Vi(2)", "y = Vj(2)"], axis=1)
    res = to_numpy(g(make(x), make(y)))
    ref = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1).sum(1, keepdims=True)
    ok = bool(np.allclose(res, ref))
    print(f"pyKeOps (tessel) with {name} bindings is " + ("working!" if ok else "NOT working"))
    return ok


# The example both checks share, in each one's name.
_CHECK_EXAMPLE = """Examples
--------
>>> import tessel.compat.pykeops as pykeops
>>> pykeops.test_{name}_bindings()
pyKeOps (tessel) with {name} bindings is working!
True"""


@fill(example=_CHECK_EXAMPLE.format(name="numpy"))
def test_numpy_bindings():
    """Run a small Genred on NumPy arrays, compare it with a dense reference, and say so.

    The reduction is ``sum_j |x_i - y_j|^2`` for 3 points x and 4 points y in 2-D, through
    :class:`tessel.compat.pykeops.numpy.Genred`: the kernel is compiled (or loaded from the
    cache) and run as any user reduction would be.

    Returns
    -------
    bool
        True when the result matches the dense NumPy computation.

    {example}
    """
    return _check("numpy")


@fill(example=_CHECK_EXAMPLE.format(name="torch"))
def test_torch_bindings():
    """Run a small Genred on torch tensors, compare it with a dense reference, and say so.

    As :func:`test_numpy_bindings`, through :class:`tessel.compat.pykeops.torch.Genred` on CPU
    tensors.

    Returns
    -------
    bool
        True when the result matches the dense computation.

    Raises
    ------
    ModuleNotFoundError
        If PyTorch is not installed.

    {example}
    """
    return _check("torch")
