"""Compatibility layers for code written against other libraries; `install()` serves pykeops."""
import importlib
import sys

__all__ = ["install", "uninstall", "installed"]

_saved = None  # the sys.modules entries under "pykeops" that install() replaced


def _modules():
    """{name under which code imports it: module} for the pykeops layer."""
    pk = importlib.import_module(f"{__name__}.pykeops")
    from .pykeops import _lazytensor
    mods = {"pykeops": pk, "pykeops.config": pk.config,
            "pykeops.common": _lazytensor, "pykeops.common.lazy_tensor": _lazytensor}
    front = ["numpy"]
    if pk.config.torch_found:
        front.append("torch")
    for name in front:
        m = importlib.import_module(f"{__name__}.pykeops.{name}")
        base = f"pykeops.{name}"
        mods[base] = m
        # The paths pykeops code imports from: the package, its cluster helpers and the modules
        # that define Genred, generic_*, KernelSolve and LazyTensor in pykeops.
        for sub in ("generic", "generic.generic_red", "generic.generic_ops", "operations",
                    "lazytensor", "lazytensor.LazyTensor"):
            mods[f"{base}.{sub}"] = m
        mods[f"{base}.cluster"] = m.cluster
        mods[f"{base}.utils"] = importlib.import_module(f"{__name__}.pykeops.{name}.utils")
        for sub in ("grid_cluster", "matrix", "utils"):
            mods[f"{base}.cluster.{sub}"] = m.cluster
    return mods


def install():
    """Make ``import pykeops`` load tessel's pykeops layer, so pykeops code runs unmodified.

    After ``install()``, ``import pykeops`` and its submodules (``pykeops.torch``,
    ``pykeops.numpy``, their ``cluster`` and ``utils`` modules, ``pykeops.config``,
    ``pykeops.common.lazy_tensor`` ...) give :mod:`tessel.compat.pykeops`: the pykeops 2.3 API
    (Genred, KernelSolve, LazyTensor, Vi, Vj, Pm, ...) whose reductions tessel compiles and runs.
    A script written for pykeops then needs one extra line at its top, and no KeOps install or
    CUDA toolkit. Modules of a real pykeops imported before are set aside, and :func:`uninstall`
    puts them back; modules that had already imported pykeops keep what they imported, so call
    ``install()`` before the code that imports pykeops. Calling it twice is harmless.

    Returns
    -------
    module
        :mod:`tessel.compat.pykeops`, the module that ``import pykeops`` now gives.

    See Also
    --------
    uninstall : Give ``import pykeops`` back to what it was.
    installed : Whether ``import pykeops`` gives tessel's layer.

    Examples
    --------
    >>> import numpy as np
    >>> import tessel.compat
    >>> _ = tessel.compat.install()
    >>> import pykeops
    >>> from pykeops.numpy import LazyTensor
    >>> pykeops.__name__
    'tessel.compat.pykeops'
    >>> x = np.arange(6.0).reshape(3, 2)
    >>> D = ((LazyTensor(x[:, None, :]) - LazyTensor(x[None, :, :])) ** 2).sum(-1)
    >>> D.sum(axis=1).ravel().tolist()  # sum_j |x_i - x_j|^2
    [40.0, 16.0, 40.0]
    >>> tessel.compat.uninstall()
    """
    global _saved
    mods = _modules()
    if _saved is None:
        _saved = {k: v for k, v in sys.modules.items()
                  if k == "pykeops" or k.startswith("pykeops.")}
        for k in _saved:
            del sys.modules[k]
    sys.modules.update(mods)
    return mods["pykeops"]


def uninstall():
    """Undo :func:`install`: ``import pykeops`` gives what it gave before.

    The ``pykeops`` entries of ``sys.modules`` that :func:`install` made are removed and those it
    set aside (a real pykeops imported before) are restored; nothing happens when the layer is not
    installed. Modules that imported tessel's layer meanwhile keep it.

    See Also
    --------
    install : Make ``import pykeops`` load tessel's layer.

    Examples
    --------
    >>> import tessel.compat
    >>> _ = tessel.compat.install()
    >>> tessel.compat.installed()
    True
    >>> tessel.compat.uninstall()
    >>> tessel.compat.installed()
    False
    """
    global _saved
    if _saved is None:
        return
    for k in [k for k in sys.modules if k == "pykeops" or k.startswith("pykeops.")]:
        del sys.modules[k]
    sys.modules.update(_saved)
    _saved = None


def installed():
    """Say whether ``import pykeops`` gives tessel's layer.

    Code that runs on both KeOps and tessel can branch on it, for instance to skip a KeOps-only
    option or to report which library computed its results.

    Returns
    -------
    bool
        True between :func:`install` and :func:`uninstall`, False otherwise (including when a
        real pykeops is imported).

    Examples
    --------
    >>> import tessel.compat
    >>> tessel.compat.installed()
    False
    >>> _ = tessel.compat.install()
    >>> tessel.compat.installed()
    True
    >>> tessel.compat.uninstall()
    """
    m = sys.modules.get("pykeops")
    return m is not None and m.__name__ == f"{__name__}.pykeops"
