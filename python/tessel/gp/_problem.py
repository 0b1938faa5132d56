"""What the core's GP calls take from a model: float64 vectors, and a kernel's formula with its
parameters packed in the points' dtype."""
import numpy as np

from .. import _core


def _numpy64(t):
    return np.ascontiguousarray(t.detach().cpu().numpy(), dtype=np.float64)


class _Problem:
    """The kernel's formula and packed parameters for one call on the core."""

    def __init__(self, kernel, x):
        text, aliases, theta = kernel.formula(x.shape[1])
        self.formula = _core.parse(text, aliases)
        self.theta = theta
        self.dtype = x.dtype
        self.x = np.ascontiguousarray(x.detach().cpu().numpy())
        np_dtype = self.x.dtype
        self.params = [np.ascontiguousarray(_numpy64(theta).astype(np_dtype))]
