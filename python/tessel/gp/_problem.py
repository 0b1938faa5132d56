"""What the core's GP calls take from a model: float64 vectors, and a kernel's formula with its
parameters packed in the points' dtype; and the guard of the gradients computed as numbers."""
import numpy as np
import torch

from .. import _core


def _numpy64(t):
    return np.ascontiguousarray(t.detach().cpu().numpy(), dtype=np.float64)


class _Problem:
    """The kernel's formula and packed parameters for one call on the core."""

    def __init__(self, kernel, x):
        text, aliases, theta = kernel.formula(x.shape[1])
        self.formula = _core.parse(text, aliases)
        self.signature = repr((text, aliases))  # which kernel, beside its parameters' values
        self.theta = theta
        self.dtype = x.dtype
        self.x = np.ascontiguousarray(x.detach().cpu().numpy())
        np_dtype = self.x.dtype
        self.params = [np.ascontiguousarray(_numpy64(theta).astype(np_dtype))]


def refuse_second_order(who):
    """Called first in the backward of a likelihood whose gradient is computed as numbers (CG's
    estimator, the chunked pass): PyTorch runs a backward in grad mode only for create_graph=True,
    whose second derivative would miss every term through those numbers. An error, not a wrong
    Hessian."""
    if torch.is_grad_enabled():
        raise RuntimeError(f"{who}: second derivatives (create_graph=True) of this likelihood "
                           "are not available: its gradient is computed, not a differentiable "
                           "graph")


def row_blocks(n, m, chunk):
    """Slices of n rows, `chunk` at a time (default 2^19 / m: a 4 MB float64 block of an
    (n, m) kernel matrix), for the models that make such a block chunk by chunk."""
    step = chunk or max(1, (1 << 19) // max(1, m))
    for lo in range(0, n, step):
        yield slice(lo, min(n, lo + step))
