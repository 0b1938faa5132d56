"""A tessel.gp kernel as a GPyTorch kernel: GPyTorch's models, likelihoods and marginal
likelihoods unchanged, the kernel's products, diagonal and entries computed by tessel reductions
(O(n) memory), derivatives in the hyperparameters and the points from the kernel's formula.

GPyTorch's own KeOps kernels stop at its preconditioning size (2000 points) in GPyTorch 1.11,
whose preconditioner needs the kernel's diagonal and rows as dense tensors; this operator gives
both, so the preconditioned path runs too.
"""
import gpytorch
import torch
from linear_operator.operators import LinearOperator

from ..torch import Genred
from .kernels import Kernel

__all__ = ["GPyTorchKernel"]


# The widest right-hand side one product takes; wider ones go in blocks of this width.
_BLOCK = 32


class _Reductions:
    """The kernel's formula as tessel reductions for d-dimensional points: the product K V and
    the entries k(a_q, b_q) of paired points (the diagonal and any indexed entries)."""

    _cache = {}

    @classmethod
    def of(cls, text, aliases, width):
        key = (text, tuple(aliases), width)
        if key not in cls._cache:
            x, y, th = aliases
            d = x.split("(")[1].split(",")[1].rstrip(")")
            cls._cache[key] = (
                Genred(f"({text})*V", [x, y, th, f"V = Vj(3,{width})"], reduction_op="Sum",
                       axis=1),
                # Both points as i-variables: one j-row of weight 1 gives k(a_q, b_q) per row.
                Genred(text, [x, f"Y = Vi(1,{d})", th], reduction_op="Sum", axis=1))
        return cls._cache[key]


class _KernelOperator(LinearOperator):
    """K(x1, x2) of a tessel.gp kernel, never formed: products, diagonal and entries reduce."""

    def __init__(self, x1, x2, theta, *, text, aliases):
        super().__init__(x1, x2, theta, text=text, aliases=aliases)
        self.x1, self.x2, self.theta, self.text, self.aliases = x1, x2, theta, text, aliases

    def _size(self):
        return torch.Size([self.x1.shape[-2], self.x2.shape[-2]])

    def _transpose_nonbatch(self):
        return _KernelOperator(self.x2, self.x1, self.theta, text=self.text,
                               aliases=self.aliases)  # tessel.gp's kernels are symmetric

    def _matmul(self, rhs):
        vec = rhs.dim() == 1
        v = rhs[:, None] if vec else rhs
        dt = self.x1.dtype
        theta = self.theta.to(dt)
        v = v.to(dt)
        w = v.shape[-1]
        if w <= _BLOCK:
            product, _ = _Reductions.of(self.text, self.aliases, w)
            out = product(self.x1, self.x2, theta, v.contiguous())
        else:
            # Wider right-hand sides (GPyTorch's dense path multiplies by the identity, n wide)
            # in blocks of one width, the last padded with zero columns: one kernel for every n,
            # where each width would compile its own, slower the wider it is.
            product, _ = _Reductions.of(self.text, self.aliases, _BLOCK)
            pad = -w % _BLOCK
            if pad:
                v = torch.cat([v, v.new_zeros(v.shape[0], pad)], 1)
            out = torch.cat([product(self.x1, self.x2, theta, b.contiguous())
                             for b in v.split(_BLOCK, 1)], 1)[:, :w]
        out = out.to(rhs.dtype)
        return out[:, 0] if vec else out

    def _entries(self, a, b):
        _, pairs = _Reductions.of(self.text, self.aliases, 1)
        dt = self.x1.dtype
        return pairs(a.contiguous(), b.contiguous(), self.theta.to(dt), nj=1)[:, 0]

    def _diagonal(self):
        n = min(self.x1.shape[-2], self.x2.shape[-2])
        return self._entries(self.x1[:n], self.x2[:n])

    def _get_indices(self, row_index, col_index, *batch_indices):
        rows, cols = torch.broadcast_tensors(row_index, col_index)
        out = self._entries(self.x1[rows.reshape(-1)], self.x2[cols.reshape(-1)])
        return out.reshape(rows.shape)

    def _expand_batch(self, batch_shape):
        raise NotImplementedError("GPyTorchKernel: batch dimensions are not supported (one "
                                  "(n, d) set of points per kernel call)")


class GPyTorchKernel(gpytorch.kernels.Kernel):
    """A tessel.gp kernel usable wherever GPyTorch takes a kernel.

    Its hyperparameters are the tessel kernel's (registered as this module's, so GPyTorch's
    optimisers and `model.parameters()` see them); the covariance it returns is a
    linear_operator LinearOperator whose products, diagonal and entries are tessel reductions,
    differentiable in the hyperparameters and the points. Points are (n, d), no batch
    dimensions; `active_dims` works as for any GPyTorch kernel.

    Parameters
    ----------
    kernel : tessel.gp.Kernel
        The covariance, e.g. Scale(Matern(2.5, lengthscale=[1.0] * d)).
    **kwargs
        GPyTorch's Kernel arguments (active_dims, ...).

    Raises
    ------
    TypeError
        For a kernel that is not a tessel.gp kernel.

    Examples
    --------
    >>> import torch, gpytorch
    >>> from tessel.gp import GPyTorchKernel, RBF, Scale
    >>> k = GPyTorchKernel(Scale(RBF(lengthscale=0.5)))
    >>> x = torch.rand(5, 2, dtype=torch.float64)
    >>> bool(torch.allclose(k(x, x).to_dense(), k.kernel.dense(x, x)))
    True
    """

    has_lengthscale = False

    def __init__(self, kernel, **kwargs):
        if not isinstance(kernel, Kernel):
            raise TypeError(f"GPyTorchKernel: kernel must be a tessel.gp kernel, got "
                            f"{type(kernel).__name__}")
        super().__init__(**kwargs)
        self.kernel = kernel

    def forward(self, x1, x2, diag=False, last_dim_is_batch=False, **params):
        who = "GPyTorchKernel"
        if last_dim_is_batch or x1.dim() != 2 or x2.dim() != 2:
            raise NotImplementedError(f"{who}: batch dimensions are not supported, got points "
                                      f"of shapes {tuple(x1.shape)} and {tuple(x2.shape)}")
        text, aliases, theta = self.kernel.formula(x1.shape[-1])
        op = _KernelOperator(x1, x2, theta, text=text, aliases=aliases)
        return op._diagonal() if diag else op
