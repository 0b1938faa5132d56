"""pytest plugin (-p pykeops_suite_plugin) that runs pykeops's own test files on tessel.compat.

The test files are those of the installed pykeops package; they import `pykeops` at module
level, so tessel.compat.install() runs here, before collection (their helper modules
pykeops.numpy.utils / pykeops.torch.utils are the layer's too). Each test's outcome (its id
relative to the suite folder, the rootdir) is written as one JSON line to
$TESSEL_PYKEOPS_OUTCOMES.
"""
import json
import os


def pytest_configure(config):
    import tessel.compat
    tessel.compat.install()


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
