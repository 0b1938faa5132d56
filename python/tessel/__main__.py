"""`tessel doctor` for a pip install: what this machine offers, as the C++ command prints it.

`pip install .` installs the Python package without the C++ `tessel` command, so the package
brings its own entry point (`tessel doctor`, or `python -m tessel doctor`) with the same checks:
the compiler, one test kernel compiled and compared with the interpreter, the SIMD level, the
threads, the kernel cache and the GPU.
"""
import argparse
import os
import sys
import tempfile
import time

from . import _core


def _row(label, text):
    print(f"{label:<10} {text}")


def _kernel_check():
    """Compiles one tiny Gaussian sum in a throw-away cache and compares it with the interpreter:
    a broken toolchain shows here, not at a user's first real call. Returns (ok, line)."""
    import numpy as np

    from .numpy import Genred

    if not _core.compiler()[0]:
        return True, "skipped: no usable compiler"
    x = (0.1 * (np.arange(12) % 7)).reshape(4, 3).astype(np.float32)
    y = (0.13 * (np.arange(15) % 5)).reshape(5, 3).astype(np.float32)
    b = (1.0 + np.arange(5)).reshape(5, 1).astype(np.float32)
    saved = os.environ.get("TESSEL_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="tessel-doctor-") as tmp:
        os.environ["TESSEL_CACHE_DIR"] = tmp
        try:
            gauss = Genred("Exp(-SqDist(X,Y)) * B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)"])
            start = time.perf_counter()
            got = gauss(x, y, b, backend="compiled")
            seconds = time.perf_counter() - start
            want = gauss(x, y, b, backend="interpreter")
        except (RuntimeError, ValueError) as e:
            return False, f"FAILED: {e}"
        finally:
            if saved is None:
                os.environ.pop("TESSEL_CACHE_DIR", None)
            else:
                os.environ["TESSEL_CACHE_DIR"] = saved
    err = float(np.max(np.abs(got - want) / np.abs(want)))
    if err < 1e-5:
        return True, f"compiled and ran a test kernel in {seconds:.2f} s (matches the interpreter)"
    return False, f"the compiled test kernel disagrees with the interpreter (relative error {err})"


def _cache_line():
    path = _core.cache_dir()
    if not os.path.isdir(path):
        return f"{path} (empty; created on first use)"
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)
    line = f"{path}: {size / 2**20:.1f} MiB on disk"
    if not os.access(path, os.W_OK):
        line += "; NOT WRITABLE: set TESSEL_CACHE_DIR to a writable folder"
    return line


def doctor(quick=False):
    """Prints the diagnosis; returns 1 only when a compiled kernel gives a wrong result."""
    from . import __version__

    print(f"tessel {__version__} (Python package)")
    usable, path, version, problem = _core.compiler()
    _row("compiler", f"ok: {path} ({version})" if usable else
         f"NOT USABLE: {problem}. Reductions still run on the built-in interpreter, only slower.")
    ok = True
    if not quick:
        ok, line = _kernel_check()
        _row("kernel", line)
    lowered = " (lowered by TESSEL_SIMD)" if os.environ.get("TESSEL_SIMD") else ""
    _row("SIMD", _core.simd_level() + lowered)
    from_env = " (from TESSEL_NUM_THREADS)" if os.environ.get("TESSEL_NUM_THREADS") else ""
    _row("threads", f"{_core.num_threads()}{from_env}")
    _row("cache", _cache_line())
    _row("GPU", _core.cuda_status())
    return 0 if ok else 1


def main(argv=None):
    parser = argparse.ArgumentParser(prog="tessel", description="tessel's machine check.")
    sub = parser.add_subparsers(dest="command", required=True)
    doc = sub.add_parser("doctor", help="what this machine offers: compiler, SIMD, cache, GPU")
    doc.add_argument("--quick", action="store_true", help="skip compiling a test kernel")
    args = parser.parse_args(argv)
    return doctor(quick=args.quick)


if __name__ == "__main__":
    sys.exit(main())
