"""pytest plugin (-p pykeops_suite_plugin) that runs pykeops's own test files on tessel.compat.

The test files are those of the installed pykeops package; they import `pykeops` at module
level, so tessel.compat.install() runs here, before collection. Their helper modules
pykeops.numpy.utils / pykeops.torch.utils (NumPy and torch reference kernels that the layer does
not provide) are read from the installed pykeops as well, and resolve their own `pykeops` imports
to tessel's layer. Each test's outcome (its id relative to the suite folder, the rootdir) is
written as one JSON line to $TESSEL_PYKEOPS_OUTCOMES.
"""
import importlib.abc
import importlib.util
import json
import os
import sys

_HELPERS = ("pykeops.numpy.utils", "pykeops.torch.utils")


class _InstalledHelpers(importlib.abc.MetaPathFinder):
    """Finds the helper modules in the installed pykeops package (its directory is given)."""

    def __init__(self, root):
        self.root = root

    def find_spec(self, name, path=None, target=None):
        if name not in _HELPERS:
            return None
        file = os.path.join(self.root, *name.split(".")[1:]) + ".py"
        return importlib.util.spec_from_file_location(name, file) if os.path.exists(file) else None


def pytest_configure(config):
    spec = importlib.util.find_spec("pykeops")  # the installed package, before install()
    root = os.path.dirname(spec.origin)
    import tessel.compat
    tessel.compat.install()
    sys.meta_path.insert(0, _InstalledHelpers(root))


def pytest_runtest_logreport(report):
    path = os.environ.get("TESSEL_PYKEOPS_OUTCOMES")
    if not path:
        return
    # One line per phase that decides the outcome: a failing setup or teardown, or the call.
    if report.when == "call" or report.outcome != "passed":
        with open(path, "a") as f:
            f.write(json.dumps({"test": report.nodeid, "when": report.when,
                                "outcome": report.outcome,
                                "message": _first_line(report)}) + "\n")


def pytest_collectreport(report):
    path = os.environ.get("TESSEL_PYKEOPS_OUTCOMES")
    if path and report.failed:
        with open(path, "a") as f:
            f.write(json.dumps({"test": report.nodeid, "when": "collect",
                                "outcome": "failed", "message": _first_line(report)}) + "\n")


def _first_line(report):
    if report.passed:
        return ""
    text = getattr(report, "longreprtext", "") or str(report.longrepr)
    lines = [ln for ln in text.splitlines() if ln.startswith("E ")]
    if lines:
        return lines[0][1:].strip()[:300]
    tail = text.strip().splitlines()
    return tail[-1][:300] if tail else ""
