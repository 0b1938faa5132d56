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
    """Makes `import pykeops` (and pykeops.torch, pykeops.numpy, their cluster modules,
    pykeops.config, ...) load tessel.compat.pykeops, so that unmodified pykeops 2.x code runs on
    tessel. Entries of a pykeops imported before are set aside; `uninstall()` puts them back.
    Modules that imported pykeops before install() keep what they imported. Returns the module."""
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
    """Undoes install(): removes the pykeops entries and restores those it replaced."""
    global _saved
    if _saved is None:
        return
    for k in [k for k in sys.modules if k == "pykeops" or k.startswith("pykeops.")]:
        del sys.modules[k]
    sys.modules.update(_saved)
    _saved = None


def installed():
    """Whether `import pykeops` gives tessel's layer."""
    m = sys.modules.get("pykeops")
    return m is not None and m.__name__ == f"{__name__}.pykeops"
