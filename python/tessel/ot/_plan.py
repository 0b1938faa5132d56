"""The Sinkhorn plan's products for the cost |x - y|^2 / 2 as one differentiable primitive, so that
derivatives of any order reuse a handful of compiled kernels.

    plan_matvec(x, y, u, h, V, eps)_i = sum_j exp(u_i + h_j - |x_i - y_j|^2 / (2 eps)) V_j

is one Sum reduction whose kernel depends only on the width of V (eps is a parameter of it). Its
derivatives in every argument are such products again, the transposed one being the same
reduction with the clouds' roles swapped, assembled in torch around them; so are the softmin's
(softmin below). The generic reductions' symbolic derivatives wrote a new kernel for each
derivative of each formula and for each set of inputs that needed one: a Hessian-vector product
of the unrolled or the implicit loss compiled 150 to 180 kernels on a cold cache, each a fraction
of a second of the compiler; these compile six.
"""
import torch

from ..lazytensor import Pm, Vi, Vj


def _kernel(x, y, u, h, eps):
    """exp(u_i + h_j - C_ij / eps) as a LazyTensor, C the cost |x - y|^2 / 2 (as cost_lazy)."""
    return (Vi(u[:, None]) + Vj(h[:, None]) - Vi(x).sqdist(Vj(y)) / 2 / Pm(eps)).exp()


class _PlanMatvec(torch.autograd.Function):
    """plan_matvec with derivatives by plan_matvec itself (any order)."""

    @staticmethod
    def forward(ctx, x, y, u, h, v, eps):
        out = (_kernel(x, y, u, h, eps) * Vj(v)).sum(1)
        ctx.save_for_backward(x, y, u, h, v, out)
        ctx.eps = eps
        return out

    @staticmethod
    def backward(ctx, grad):
        x, y, u, h, v, out = ctx.saved_tensors
        eps, need = ctx.eps, ctx.needs_input_grad
        w, d = v.shape[1], x.shape[1]
        gx = gy = gu = gh = gv = None
        # L = sum_i <G_i, O_i>: with q_ij = K_ij <G_i, V_j>, dL/du_i = sum_j q_ij = <G_i, O_i>,
        # dL/dx_i = -(x_i sum_j q_ij - sum_j q_ij y_j) / eps, the last sum from K (V (x) y).
        if need[0] or need[2]:
            gu = (grad * out).sum(1)
        if need[0]:
            vy = (v[:, :, None] * y[:, None, :]).reshape(y.shape[0], w * d)
            r = plan_matvec(x, y, u, h, vy, eps).reshape(x.shape[0], w, d)
            gx = -(x * gu[:, None] - (grad[:, :, None] * r).sum(1)) / eps
        if need[1] or need[3] or need[4]:
            # One transposed product gives dL/dV_j = sum_i K_ij G_i and sum_i K_ij G_i x_i.
            gg = torch.cat((grad, (grad[:, :, None] * x[:, None, :]).reshape(x.shape[0], w * d)),
                           1)
            t = plan_matvec(y, x, h, u, gg, eps)
            gv, tx = t[:, :w], t[:, w:].reshape(y.shape[0], w, d)
            gh = (v * gv).sum(1)
            gy = ((v[:, :, None] * tx).sum(1) - y * gh[:, None]) / eps
        return (gx if need[0] else None, gy if need[1] else None, gu if need[2] else None,
                gh if need[3] else None, gv if need[4] else None, None)


def plan_matvec(x, y, u, h, v, eps):
    """sum_j exp(u_i + h_j - |x_i - y_j|^2 / (2 eps)) v_j: x (N, D), y (M, D), u (N,), h (M,),
    v (M, w) -> (N, w), differentiable to any order in x, y, u, h and v."""
    return _PlanMatvec.apply(x, y, u, h, v, eps)


class _Softmin(torch.autograd.Function):
    """s_i = -eps log sum_j exp(h_j - |x_i - y_j|^2 / (2 eps)), its derivatives through the
    normalised plan P_ij = exp(s_i / eps + h_j - C_ij / eps) (plan_matvec)."""

    @staticmethod
    def forward(ctx, x, y, h, eps):
        lse = (Vj(h[:, None]) - Vi(x).sqdist(Vj(y)) / 2 / Pm(eps)).logsumexp(1)[:, 0]
        s = -eps * lse
        ctx.save_for_backward(x, y, h, s)
        ctx.eps = eps
        return s

    @staticmethod
    def backward(ctx, grad):
        x, y, h, s = ctx.saved_tensors
        eps, need = ctx.eps, ctx.needs_input_grad
        u = s / eps
        gx = gy = gh = None
        # ds_i/dx_i = sum_j P_ij (x_i - y_j), ds_i/dy_j = P_ij (y_j - x_i), ds_i/dh_j = -eps P_ij;
        # x_i sum_j P_ij is kept (not 1) so that the expression is exact off the fixed point too.
        if need[0]:
            o = plan_matvec(x, y, u, h, torch.cat((torch.ones_like(y[:, :1]), y), 1), eps)
            gx = grad[:, None] * (x * o[:, :1] - o[:, 1:])
        if need[1] or need[2]:
            t = plan_matvec(y, x, h, u, torch.cat((grad[:, None], grad[:, None] * x), 1), eps)
            gh = -eps * t[:, 0]
            gy = t[:, :1] * y - t[:, 1:]
        return (gx if need[0] else None, gy if need[1] else None, gh if need[2] else None, None)


def softmin(x, y, h, eps):
    """-eps log sum_j exp(h_j - |x_i - y_j|^2 / (2 eps)) for x (N, D), y (M, D), h (M,): (N,),
    differentiable to any order."""
    return _Softmin.apply(x, y, h, eps)


class SqDistPlan:
    """The plan pi_ij = exp(u_i + h_j - |x_i - y_j|^2 / (2 eps)), u = log a + f / eps and
    h = log b + g / eps, as the products the Newton steps take (_implicit)."""

    def __init__(self, a, x, b, y, f, g, eps):
        self.x, self.y, self.eps = x, y, eps
        self.u = torch.log(a) + f / eps
        self.h = torch.log(b) + g / eps

    def row_sums(self):
        return plan_matvec(self.x, self.y, self.u, self.h, torch.ones_like(self.y[:, :1]),
                           self.eps)[:, 0]

    def col_sums(self):
        return plan_matvec(self.y, self.x, self.h, self.u, torch.ones_like(self.x[:, :1]),
                           self.eps)[:, 0]

    def matvec(self, w):
        """pi w for w (M,)."""
        return plan_matvec(self.x, self.y, self.u, self.h, w[:, None], self.eps)[:, 0]

    def rmatvec(self, v):
        """pi^T v for v (N,)."""
        return plan_matvec(self.y, self.x, self.h, self.u, v[:, None], self.eps)[:, 0]


class LazyPlan:
    """The same products of a plan given as an (N, M) LazyTensor (any cost formula)."""

    def __init__(self, plan):
        self.plan = plan

    def row_sums(self):
        return self.plan.sum(1)[:, 0]

    def col_sums(self):
        return self.plan.sum(0)[:, 0]

    def matvec(self, w):
        """pi w for w (M,)."""
        return (self.plan @ w[:, None])[:, 0]

    def rmatvec(self, v):
        """pi^T v for v (N,)."""
        return (self.plan.t() @ v[:, None])[:, 0]
