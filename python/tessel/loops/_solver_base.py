"""What the implicit solvers share: the convergence error, argument checks and the policy for
a solver that runs out of iterations."""
import math
import numbers
import warnings

_POLICIES = ("raise", "warn", "ignore")


class ConvergenceError(RuntimeError):
    """An iterative solver stopped at `maxiter` before meeting its tolerance."""


# ---- shared helpers ------------------------------------------------------------------------------
def _check_number(who, name, v, *, minimum=0.0):
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) \
            or v < minimum:
        raise ValueError(f"{who}: {name} must be a finite number >= {minimum:g}; got {v!r}")
    return float(v)


def _check_int(who, name, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise ValueError(f"{who}: {name} must be an integer >= 1; got {v!r}")
    return int(v)


def _check_policy(who, v):
    if v not in _POLICIES:
        raise ValueError(f"{who}: on_nonconvergence must be one of {_POLICIES}; got {v!r}")
    return v


def _check_stats(who, v):
    if v is not None and not isinstance(v, dict):
        raise TypeError(f"{who}: stats must be a dict (filled in place) or None")
    return v


def _nonconvergence(policy, msg, stacklevel):
    if policy == "raise":
        raise ConvergenceError(msg)
    if policy == "warn":
        warnings.warn(msg, RuntimeWarning, stacklevel=stacklevel + 1)
