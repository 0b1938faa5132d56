"""The loop tools facing user functions that fail: diverging maps, steps that do not compute the
same twice, fields that return NaN or blow up, loops that never stop, and arguments of the wrong
kind or size. Each must end with an error that says what happened, never a silent value."""
import math
import warnings

import numpy as np
import pytest
import torch

from tessel.torch import ConvergenceError, checkpoint_loop, checkpoint_while, fixed_point
from tessel.torch import odeint_reversible

F64 = torch.float64


# ---- fixed_point: divergence ---------------------------------------------------------------------
DIVERGING = [("affine", lambda x: 2 * x + 1), ("square", lambda x: x * x + 1)]


# Anderson solves the affine map's fixed point (-1) exactly: that one converges.
@pytest.mark.parametrize("name,f,method", [(*DIVERGING[0], "picard"), (*DIVERGING[1], "picard"),
                                           (*DIVERGING[1], "anderson")])
def test_fixed_point_divergence_raises(name, f, method):
    # The squared norm overflowed at 1e154, and inf <= tol * inf passed for convergence.
    x0 = torch.tensor([0.5], dtype=F64)
    with pytest.raises(ConvergenceError, match=r"fixed_point: .*(diverged|no convergence).*"
                                               r"maxiter=5000"):
        fixed_point(f, x0, maxiter=5000, method=method)


@pytest.mark.parametrize("name,f", DIVERGING)
def test_fixed_point_divergence_warns_and_reports(name, f):
    stats = {}
    with pytest.warns(RuntimeWarning, match=r"fixed_point: the iteration diverged: f gave "
                                            r"non-finite values .* tol=1e-08, maxiter=5000"):
        x = fixed_point(f, torch.tensor([0.5], dtype=F64), maxiter=5000,
                        on_nonconvergence="warn", stats=stats)
    assert stats["converged"] is False and stats["iterations"] < 5000
    assert not torch.isfinite(x).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fixed_point(f, torch.tensor([0.5], dtype=F64), maxiter=5000, on_nonconvergence="ignore")


def test_fixed_point_large_finite_solution_converges():
    # A norm above sqrt(float max) must not overflow into a false divergence.
    x = fixed_point(lambda x: 0.5 * x + 1e200, torch.tensor([0.0], dtype=F64), tol=1e-12)
    torch.testing.assert_close(x, torch.tensor([2e200], dtype=F64), rtol=1e-11, atol=0)


def test_fixed_point_nan_map_raises_at_once():
    stats = {}
    with pytest.raises(ConvergenceError, match="diverged.*at iteration 1;"):
        fixed_point(lambda x: x * math.nan, torch.ones(3, dtype=F64), stats=stats)
    assert stats["iterations"] == 1
