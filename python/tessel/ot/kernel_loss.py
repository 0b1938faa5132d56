"""The kernel losses of SamplesLoss ("gaussian", "laplacian", "energy"): half the squared kernel
norm of a - b, with each kernel product a tessel reduction (LazyTensor, memory O(N + M)).

The loss differentiates both sides of its self-interactions K(x, x) a, so its second
derivatives (Hessian-vector products) are exact too. The potentials mirror GeomLoss's graph: the
second x and a of K(x, x) a as constants, their gradient counted twice (the exact gradient of the
quadratic form for a symmetric kernel).
"""
import torch

from ..torch import LazyTensor

KERNELS = ("gaussian", "laplacian", "energy")


def _double_grad(t):
    """t, whose gradient counts twice (t + t - t, exact in floating point)."""
    return 2 * t - t.detach()


def _kernel_product(name, blur, u, v, w):
    """(K(u, v) w)_i = sum_j k(u_i, v_j) w_j for u (N, D), v (M, D), w (M,)."""
    # Categories by axis, not by shape: a one-point cloud's (1, 1, D) would read as a parameter.
    ui, vj = LazyTensor(u, axis=0), LazyTensor(v, axis=1)
    wj = LazyTensor(w[:, None], axis=1)
    d2 = ((ui - vj) ** 2).sum(-1)
    if name == "gaussian":
        k = (-d2 / (2 * blur ** 2)).exp()
    elif name == "laplacian":
        k = (-d2.sqrt() / blur).exp()
    else:  # energy
        k = -d2.sqrt()
    return (k * wj).sum(1).view(-1)


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
    if kernel is None:
        def product(u, v, w):
            return _kernel_product(name, blur, u, v, w)
    else:
        def product(u, v, w):
            return _dense_product(kernel, blur, u, v, w)
    values, fs, gs = [], [], []
    for k in range(x.shape[0]):
        ak, xk, bk, yk = a[k], x[k], b[k], y[k]
        if potentials:
            a_x = product(_double_grad(xk), xk.detach(), ak.detach())
            b_y = product(_double_grad(yk), yk.detach(), bk.detach())
            b_x = product(xk, yk, bk)
            a_y = product(yk, xk, ak)
            fs.append(a_x - b_x)
            gs.append(b_y - a_y)
        else:
            # Both sides of each self-interaction differentiable: the same gradient as
            # GeomLoss's doubled one-sided form, and the second derivatives too (the one-sided
            # form drops the cross terms d^2 k(x_i, x_j) / dx_i dx_j from a Hessian).
            a_x, b_y = product(xk, xk, ak), product(yk, yk, bk)
            values.append(0.5 * (ak * a_x).sum() + 0.5 * (bk * b_y).sum()
                          - (ak * product(xk, yk, bk)).sum())
    if potentials:
        return torch.stack(fs), torch.stack(gs)
    return torch.stack(values)
