#!/usr/bin/env python3
"""Lists pykeops 2.3's public API by introspecting the installed pykeops, and checks the table
"pykeops API -> tessel status" of docs/guide/keops.md against it, so that it cannot go stale.

    python3 scripts/pykeops_api.py            # every public name, one a line
    python3 scripts/pykeops_api.py --check    # table rows missing or naming what pykeops lacks

Names are keyed as the table writes them: `pykeops.X` (the package), `pykeops.config.X`,
`X` (in both pykeops.numpy and pykeops.torch), `torch.X` / `numpy.X` (in one only),
`cluster.X` (both cluster modules), `numpy.utils.X`, `torch.utils.X`, `LazyTensor.X` (the class
attributes of both front ends' LazyTensor, operators included) and `ComplexLazyTensor.X` (those
only the complex class has). pykeops.common is pykeops's implementation, not its API.
"""
import argparse
import importlib
import os
import re
import sys
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE = os.path.join(ROOT, "docs", "guide", "keops.md")
BEGIN, END = "<!-- pykeops-api-table -->", "<!-- /pykeops-api-table -->"
# Attributes every class has, which say nothing about pykeops's API.
_CLASS_PLUMBING = {"__dict__", "__module__", "__weakref__", "__doc__"}


def _public(module, own=False):
    """Public names a pykeops module defines or sets: not modules, nor functions and classes from
    outside KeOps (os.path.join in pykeops.config); with `own`, only those of the module itself
    (the utils modules also import Genred, KernelSolve and swap_axes)."""
    out = set()
    for name, obj in vars(module).items():
        if name.startswith("_") or isinstance(obj, types.ModuleType):
            continue
        origin = getattr(obj, "__module__", None) if callable(obj) else None
        if origin is not None and (origin != module.__name__ if own else
                                   not origin.startswith(("pykeops", "keopscore"))):
            continue
        out.add(name)
    return out


def _class_names(cls):
    """A class's public attributes and the operators it defines (dunders object lacks)."""
    return {n for n in dir(cls) if n not in _CLASS_PLUMBING
            and (not n.startswith("_") or (n.startswith("__") and n.endswith("__")
                                           and n not in dir(object)))}


def pykeops_names():
    """The sorted keys of every public name of the installed pykeops (see the module doc)."""
    os.environ.setdefault("PYKEOPS_VERBOSE", "0")
    pk = importlib.import_module("pykeops")
    if "tessel" in pk.__name__ or getattr(pk, "tessel_version", None):
        raise RuntimeError("pykeops_api: `pykeops` is tessel's layer here; call it before "
                           "tessel.compat.install()")
    mods = {k: importlib.import_module(f"pykeops.{k}") for k in
            ("config", "numpy", "torch", "numpy.cluster", "torch.cluster", "numpy.utils",
             "torch.utils")}
    keys = {f"pykeops.{n}" for n in _public(pk)}
    keys |= {f"pykeops.config.{n}" for n in _public(mods["config"])}
    np_names, t_names = _public(mods["numpy"]), _public(mods["torch"])
    keys |= np_names & t_names
    keys |= {f"numpy.{n}" for n in np_names - t_names} | {f"torch.{n}" for n in t_names - np_names}
    keys |= {f"cluster.{n}" for n in _public(mods["numpy.cluster"]) | _public(mods["torch.cluster"])}
    keys |= {f"numpy.utils.{n}" for n in _public(mods["numpy.utils"], own=True)}
    keys |= {f"torch.utils.{n}" for n in _public(mods["torch.utils"], own=True)}
    lt = _class_names(mods["torch"].LazyTensor) | _class_names(mods["numpy"].LazyTensor)
    keys |= {f"LazyTensor.{n}" for n in lt}
    clt = _class_names(mods["torch"].ComplexLazyTensor) - lt
    keys |= {f"ComplexLazyTensor.{n}" for n in clt}
    return sorted(keys)


def readme_names(path=TABLE):
    """{key: status cell} for every backticked name in the first column of the table in docs/guide/keops.md."""
    text = open(path, encoding="utf-8").read()
    if BEGIN not in text or END not in text:
        raise ValueError(f"{path}: no table between {BEGIN} and {END}")
    table = text[text.index(BEGIN):text.index(END)]
    rows = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        for key in re.findall(r"`([^`]+)`", cells[0]):
            if key in rows:
                raise ValueError(f"{path}: `{key}` is listed twice in the pykeops API table")
            rows[key] = cells[1]
    return rows


def check(path=TABLE):
    """(names pykeops has that the table misses, names the table lists that pykeops lacks)."""
    theirs, ours = set(pykeops_names()), set(readme_names(path))
    return sorted(theirs - ours), sorted(ours - theirs)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the table in docs/guide/keops.md")
    args = ap.parse_args(argv)
    if not args.check:
        print("\n".join(pykeops_names()))
        return 0
    missing, extra = check()
    for k in missing:
        print(f"docs/guide/keops.md table misses pykeops's `{k}`")
    for k in extra:
        print(f"docs/guide/keops.md table lists `{k}`, which pykeops 2.3 does not have")
    return 1 if missing or extra else 0


if __name__ == "__main__":
    sys.exit(main())
