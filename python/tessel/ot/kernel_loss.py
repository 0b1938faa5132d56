"""The kernel losses of SamplesLoss ("gaussian", "laplacian", "energy"): half the squared kernel
norm of a - b, with each kernel product a tessel reduction (LazyTensor, memory O(N + M)).

The loss differentiates both sides of its self-interactions K(x, x) a, so its second
derivatives (Hessian-vector products) are exact too. The potentials mirror GeomLoss's graph: the
second x and a of K(x, x) a as constants, their gradient counted twice (the exact gradient of the
quadratic form for a symmetric kernel).
"""
import torch

from ..torch import LazyTensor
from ._potentials import bounding_diameter

KERNELS = ("gaussian", "laplacian", "energy")


def _double_grad(t):
    """t, whose gradient counts twice (t + t - t, exact in floating point)."""
    return 2 * t - t.detach()


# Past this t = |x-y|^2 / 2 blur^2 (Gaussian) or |x-y| / blur (Laplacian) over the clouds, the
# kernel is handled as 1 - q(t), q(t) = 1 - exp(-t) by its Taylor series (degree _Q_DEGREE, error
# t^10 / 10! < 3e-17 t): k = exp(-t) rounds to 1 - t, and the norm, a difference of sums of
# k ~ 1, lost everything past blur ~ 1e8 (0.0 in float64, -2e9 in float32 at blur 1e8).
_WIDE_T = 0.1
_Q_DEGREE = 9


def _exponent(name, blur, d2):
    return d2 / (2 * blur ** 2) if name == "gaussian" else d2.sqrt() / blur


def _one_minus_exp(t):
    """1 - exp(-t) = t - t^2 / 2 + ... by Horner, for 0 <= t <= _WIDE_T (no rounding of 1)."""
    q = 1.0
    for k in range(_Q_DEGREE, 1, -1):
        q = 1 - t * q / k
    return t * q


def _kernel_product(name, blur, u, v, w, wide=False):
    """(K(u, v) w)_i = sum_j k(u_i, v_j) w_j for u (N, D), v (M, D), w (M,); wide: the product
    with 1 - k instead (see _WIDE_T)."""
    # Categories by axis, not by shape: a one-point cloud's (1, 1, D) would read as a parameter.
    ui, vj = LazyTensor(u, axis=0), LazyTensor(v, axis=1)
    wj = LazyTensor(w[:, None], axis=1)
    d2 = ((ui - vj) ** 2).sum(-1)
    if wide:
        k = _one_minus_exp(_exponent(name, blur, d2))
    elif name == "energy":
        k = -d2.sqrt()
    else:
        k = (-_exponent(name, blur, d2)).exp()
    return (k * wj).sum(1).view(-1)


def is_wide(name, blur, diameter):
    """Whether the kernel is 1 - q(t) with t <= _WIDE_T for every pair (see _WIDE_T); diameter:
    the clouds' bounding box (None if the points coincide)."""
    if name not in ("gaussian", "laplacian"):
        return False
    d = diameter or 0.0
    return (d * d / (2 * blur * blur) if name == "gaussian" else d / blur) <= _WIDE_T


def _dense_product(kernel, blur, u, v, w):
    """(K(u, v) w)_i with K the (1, N, M) matrix of a kernel function of dense tensors, called as
    GeomLoss's tensorized backend calls it."""
    k = kernel(u[None], v[None], blur=blur, use_keops=False, ranges=None)
    want = (1, u.shape[0], v.shape[0])
    if not isinstance(k, torch.Tensor) or tuple(k.shape) != want:
        raise ValueError(f"tessel.ot.SamplesLoss: the kernel function returned "
                         f"{tuple(getattr(k, 'shape', ())) or type(k).__name__} for clouds of "
                         f"shapes {tuple(u[None].shape)} and {tuple(v[None].shape)}; expected a "
                         f"tensor of shape {want}")
    return (k[0] @ w[:, None])[:, 0]


def kernel_loss(name, blur, a, x, b, y, potentials, kernel=None):
    """Batched (B, N) / (B, N, D) inputs: the (B,) losses, or the potentials ((B, N), (B, M)).
    kernel: None (the named kernel, reductions) or a function of dense tensors."""
    wide = kernel is None and is_wide(name, blur, bounding_diameter(x, y))
    if kernel is None:
        def product(u, v, w):
            return _kernel_product(name, blur, u, v, w, wide)
    else:
        def product(u, v, w):
            return _dense_product(kernel, blur, u, v, w)
    # With wide kernels `product` is Q w, Q = 1 - K: K w = sum(w) - Q w, exactly, and the
    # constants of the norm gather into (mass_a - mass_b)^2 / 2.
    sign = -1 if wide else 1
    values, fs, gs = [], [], []
    for k in range(x.shape[0]):
        ak, xk, bk, yk = a[k], x[k], b[k], y[k]
        # In float64: float32 sums would round the masses' difference, which is the value here.
        dm = (ak.double().sum() - bk.double().sum()).to(ak.dtype) if wide else 0
        if potentials:
            a_x = product(_double_grad(xk), xk.detach(), ak.detach())
            b_y = product(_double_grad(yk), yk.detach(), bk.detach())
            b_x = product(xk, yk, bk)
            a_y = product(yk, xk, ak)
            fs.append(dm + sign * (a_x - b_x))
            gs.append(-dm + sign * (b_y - a_y))
        else:
            # Both sides of each self-interaction differentiable: the same gradient as
            # GeomLoss's doubled one-sided form, and the second derivatives too (the one-sided
            # form drops the cross terms d^2 k(x_i, x_j) / dx_i dx_j from a Hessian).
            a_x, b_y = product(xk, xk, ak), product(yk, yk, bk)
            values.append(0.5 * dm * dm + sign * (0.5 * (ak * a_x).sum() + 0.5 * (bk * b_y).sum()
                                                  - (ak * product(xk, yk, bk)).sum()))
    if potentials:
        return torch.stack(fs), torch.stack(gs)
    return torch.stack(values)
