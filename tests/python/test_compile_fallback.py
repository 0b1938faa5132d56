"""backend='auto' never waits on a compile that is too large or too slow: it warns once and the
interpreter answers; backend='compiled' reports the time limit."""
import os
import stat
import time

import numpy as np
import pytest

from tessel.numpy import Genred

ALIASES = ["X=Vi(1)", "Y=Vj(1)"]


def _inputs():
    rng = np.random.default_rng(0)
    return rng.random((5, 1)), rng.random((7, 1))


def _hanging_compiler(tmp_path):
    cc = tmp_path / "hanging-cc"
    cc.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo hanging-cc 1.0; exit 0; fi\n'
                  'exec sleep 60\n')
    cc.chmod(cc.stat().st_mode | stat.S_IXUSR)
    return str(cc)


def test_too_large_formula_warns_once_and_matches_the_interpreter():
    f = "+".join(f"Exp(-{k + 1.25}*SqDist(X,Y))" for k in range(3000))
    x, y = _inputs()
    with pytest.warns(RuntimeWarning, match="too large to compile quickly"):
        got = Genred(f, ALIASES)(x, y)
    want = Genred(f, ALIASES, backend="interpreter")(x, y)
    np.testing.assert_array_equal(got, want)


def test_compile_time_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSEL_CXX", _hanging_compiler(tmp_path))
    monkeypatch.setenv("TESSEL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TESSEL_COMPILE_TIMEOUT", "0.5")
    f = "Exp(-1.4375*SqDist(X,Y))"
    x, y = _inputs()
    t0 = time.time()
    with pytest.warns(RuntimeWarning, match="TESSEL_COMPILE_TIMEOUT"):
        got = Genred(f, ALIASES)(x, y)
    assert time.time() - t0 < 10
    np.testing.assert_array_equal(got, Genred(f, ALIASES, backend="interpreter")(x, y))
    with pytest.raises(ValueError, match="stopped after 0.5 s.*TESSEL_COMPILE_TIMEOUT"):
        Genred(f, ALIASES, backend="compiled")(x, y)
    assert not [n for _, _, names in os.walk(tmp_path / "cache") for n in names if ".tmp-" in n]
