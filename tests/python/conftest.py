"""pytest setup: the package under test is the one built in <build>/python (see scripts/test.sh)."""
import atexit
import contextlib
import importlib
import io
import os
import shutil
import sys
import tempfile

import pytest

os.environ.setdefault("TESSEL_NUM_THREADS", "2")
# CUDA tensors faked over the stand-in driver (tests/python/fake_cuda.py): installed before the
# test modules import, so that their GPU checks see a device.
if os.environ.get("TESSEL_FAKE_CUDA") == "1":
    import fake_cuda

    fake_cuda.install()

    @pytest.fixture(autouse=True)
    def _fake_cuda_forgotten():
        """Each test's fake device memory goes back to PyTorch's allocator after it."""
        yield
        fake_cuda.forget()
# Run without scripts/test.sh, the suite still keeps its kernels out of the user's ~/.cache, and
# so does pykeops (the reference of many tests) its modules: beside tessel's kernel cache (not
# in it, whose size and contents tests check).
if not os.environ.get("TESSEL_CACHE_DIR"):
    os.environ["TESSEL_CACHE_DIR"] = tempfile.mkdtemp(prefix="tessel-pytest-cache-")
    atexit.register(shutil.rmtree, os.environ["TESSEL_CACHE_DIR"], True)
    if not os.environ.get("KEOPS_CACHE_FOLDER"):
        os.environ["KEOPS_CACHE_FOLDER"] = tempfile.mkdtemp(prefix="tessel-pytest-pykeops-")
        atexit.register(shutil.rmtree, os.environ["KEOPS_CACHE_FOLDER"], True)
os.environ.setdefault("KEOPS_CACHE_FOLDER", os.path.join(
    os.path.dirname(os.path.abspath(os.environ["TESSEL_CACHE_DIR"])), "pykeops-cache"))


def _pykeops_reference_builds_unoptimised():
    """pykeops is a reference in many tests, at sizes where its run time is nothing and its
    compile time (a pybind11 module per formula, about 5 s at its -O3 -flto) is most of theirs.
    At -O0 without LTO a module compiles in about 3.7 s. The values are the same: pykeops builds
    without -ffast-math or -march, so the optimiser may not change a floating-point operation.
    pykeops's configuration is keopscore's, read when a module is built: set here, before any
    test imports pykeops. Benchmarks run pykeops in processes of their own with its own flags."""
    try:
        # Its import prints a warning when CUDA is absent, which the tests that use it show.
        with contextlib.redirect_stdout(io.StringIO()):
            importlib.import_module("keopscore.config")
    except Exception:  # noqa: BLE001: no keopscore, nothing to set
        return
    config = getattr(sys.modules.get("keopscore.config"), "config", None)
    flags = getattr(config, "cpp_flags", None)
    if isinstance(flags, str) and " -O3" in flags:
        config.cpp_flags = flags.replace(" -O3", " -O0").replace(" -flto=auto", "")


_pykeops_reference_builds_unoptimised()

# What decides where kernels go and how they are built: a test that changes one must restore it.
_WATCHED = ("TESSEL_CACHE_DIR", "TESSEL_SIMD", "TESSEL_CXX", "TESSEL_NUM_THREADS",
            "TESSEL_COMPILE_TIMEOUT", "TESSEL_CACHE_LOCK_TIMEOUT", "XDG_CACHE_HOME", "HOME")


@pytest.fixture(autouse=True)
def _environment_restored():
    before = {k: os.environ.get(k) for k in _WATCHED}
    yield
    changed = {k: (v, os.environ.get(k)) for k, v in before.items() if os.environ.get(k) != v}
    for k, (v, _) in changed.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    if changed:
        pytest.fail(f"the test changed {changed} (before, after) without restoring it "
                    "(use monkeypatch.setenv)")


@pytest.fixture(autouse=True)
def _seed():
    import numpy as np
    import torch

    np.random.seed(0)
    torch.manual_seed(0)


@pytest.fixture
def interpreted(monkeypatch):
    """Kernels run in the interpreter, as on a machine without a C++ compiler: for tests about
    the mathematics of many derivative reductions, whose compilation would cost minutes."""
    monkeypatch.setenv("TESSEL_CXX", "tessel-test-no-compiler")
