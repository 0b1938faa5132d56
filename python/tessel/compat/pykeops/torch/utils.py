"""pykeops.torch.utils on tessel: `torchtools` (backend-generic tensor tools) and dense torch kernels.

Code written for pykeops imports these to stay generic over NumPy / torch and to build dense
references; the tools' Genred, KernelSolve and swap_axes are tessel's.
"""
import torch

from .. import _utils
from . import Genred, KernelSolve
from .cluster import swap_axes as _swap_axes

__all__ = sorted(["torchtools", "squared_distances", "torch_kernel", "is_on_device",
                  "torchsolve"])

_DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
                int: int, list: "float32"}
_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
           "int32": torch.int32, "int64": torch.int64}


def is_on_device(x):
    return x.is_cuda


def torchsolve(A, B):
    """Solution X of A X = B."""
    return torch.linalg.solve(A, B)


class torchtools:
    """The array operations pykeops's generic code needs, on torch tensors (any device)."""

    copy = torch.clone
    exp = torch.exp
    log = torch.log
    norm = torch.norm
    Genred, KernelSolve, swap_axes = Genred, KernelSolve, _swap_axes  # tessel's
    arraytype = torch.Tensor
    float_types = [float]
    detect_complex = staticmethod(_utils.complex_detector(torch.Tensor, torch.is_complex))

    eq = staticmethod(torch.eq)
    transpose = staticmethod(lambda x: x.t())
    permute = staticmethod(lambda x, *dims: x.permute(*dims))
    contiguous = staticmethod(lambda x: x.contiguous())
    solve = staticmethod(lambda A, b: torchsolve(A, b).contiguous())
    long = staticmethod(lambda x: x.long())
    size = staticmethod(lambda x: x.numel())
    tile = staticmethod(torch.Tensor.repeat)
    numpy = staticmethod(lambda x: x.detach().cpu().numpy())
    view = staticmethod(lambda x, s: x.view(s))
    is_tensor = staticmethod(lambda x: isinstance(x, torch.Tensor))
    get_pointer = staticmethod(lambda x: x.data_ptr())
    pointer = staticmethod(lambda x: x.data.data_ptr())

    @staticmethod
    def arraysum(x, axis=None):
        return x.sum() if axis is None else x.sum(dim=axis)

    @staticmethod
    def dtype(x):
        """x.dtype, or the Python type of a non-tensor (a float, a list)."""
        return getattr(x, "dtype", type(x))

    @staticmethod
    def view_as_complex(x):
        """(..., 2n) reals read as (..., n) complex numbers, without a copy."""
        return torch.view_as_complex(x.view(*x.shape[:-1], x.shape[-1] // 2, 2))

    @staticmethod
    def view_as_real(x):
        r = torch.view_as_real(x)
        return r.view(*r.shape[:-2], 2 * r.shape[-2])

    @staticmethod
    def dtypename(dtype):
        if dtype not in _DTYPE_NAMES:
            raise ValueError(f"[KeOps] {dtype} data type incompatible with KeOps.")
        return _DTYPE_NAMES[dtype]

    @staticmethod
    def rand(m, n, dtype, device):
        return torch.rand(m, n, dtype=dtype, device=device)

    @staticmethod
    def randn(m, n, dtype, device):
        return torch.randn(m, n, dtype=dtype, device=device)

    @staticmethod
    def zeros(shape, dtype, device, requires_grad=False):
        return torch.zeros(*shape, dtype=dtype, device=device, requires_grad=requires_grad)

    @staticmethod
    def empty(shape, dtype, device, requires_grad=False):
        return torch.empty(*shape, dtype=dtype, device=device, requires_grad=requires_grad)

    @staticmethod
    def eye(n, dtype, device):
        return torch.eye(n, dtype=dtype, device=device)

    @staticmethod
    def array(x, dtype, device):
        if dtype not in _DTYPES:
            raise ValueError(f"[KeOps] data type {dtype} is incompatible with KeOps.")
        return torch.tensor(x, dtype=_DTYPES[dtype], device=device)

    @staticmethod
    def device(x):
        return x.device if isinstance(x, torch.Tensor) else None

    @staticmethod
    def device_type_index(x):
        if not isinstance(x, torch.Tensor):
            return None, None
        return x.device.type, x.device.index


squared_distances = _utils.squared_distances


def torch_kernel(x, y, s, kernel):
    """The dense (N, M) kernel matrix: 'gaussian', 'laplacian', 'cauchy' or
    'inverse_multiquadric' with scale s."""
    return _utils.kernel(torch, "torch_kernel", x, y, s, kernel)
