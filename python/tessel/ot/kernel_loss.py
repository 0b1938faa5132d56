"""The kernel losses of SamplesLoss ("gaussian", "laplacian", "energy"): half the squared kernel
norm of a - b, with each kernel product a tessel reduction (LazyTensor, memory O(N + M)).

The autograd graph mirrors GeomLoss's: the self-interaction products K(x, x) a see the second
x and a as constants and count their gradient twice (the exact gradient of the quadratic form for
a symmetric kernel), and so do the potentials.
"""
import torch

from ..torch import LazyTensor

KERNELS = ("gaussian", "laplacian", "energy")


def _double_grad(t):
    """t, whose gradient counts twice (t + t - t, exact in floating point)."""
    return 2 * t - t.detach()


def _kernel_product(name, blur, u, v, w):
    """(K(u, v) w)_i = sum_j k(u_i, v_j) w_j for u (N, D), v (M, D), w (M,)."""
    ui, vj = LazyTensor(u[:, None, :]), LazyTensor(v[None, :, :])
    wj = LazyTensor(w[None, :, None])
    d2 = ((ui - vj) ** 2).sum(-1)
    if name == "gaussian":
        k = (-d2 / (2 * blur ** 2)).exp()
    elif name == "laplacian":
        k = (-d2.sqrt() / blur).exp()
    else:  # energy
        k = -d2.sqrt()
    return (k * wj).sum(1).view(-1)


def kernel_loss(name, blur, a, x, b, y, potentials):
    """Batched (B, N) / (B, N, D) inputs: the (B,) losses, or the potentials ((B, N), (B, M))."""
    values, fs, gs = [], [], []
    for k in range(x.shape[0]):
        ak, xk, bk, yk = a[k], x[k], b[k], y[k]
        a_x = _kernel_product(name, blur, _double_grad(xk), xk.detach(), ak.detach())
        b_y = _kernel_product(name, blur, _double_grad(yk), yk.detach(), bk.detach())
        b_x = _kernel_product(name, blur, xk, yk, bk)
        if potentials:
            a_y = _kernel_product(name, blur, yk, xk, ak)
            fs.append(a_x - b_x)
            gs.append(b_y - a_y)
        else:
            values.append(0.5 * (_double_grad(ak) * a_x).sum()
                          + 0.5 * (_double_grad(bk) * b_y).sum() - (ak * b_x).sum())
    if potentials:
        return torch.stack(fs), torch.stack(gs)
    return torch.stack(values)
