"""NystromRidge's generalised cross-validation score, exact and differentiable in the kernel's
hyperparameters and in lam, made one chunk of rows at a time in O(M^2 + chunk M) memory, so that
the hyperparameters are descended rather than searched."""
import math

import torch

from ._problem import refuse_second_order, row_blocks

__all__ = ["GCVObjective"]


def _whitener(kernel, centres, eps, who):
    """L with L L^T = K_MM + jitter I: the core's jitter rule (M times the points' rounding
    level, times 100 until K_MM factors), differentiable in the kernel's hyperparameters."""
    kmm = kernel.dense(centres, centres)
    m = kmm.shape[0]
    mean_diag = kmm.diagonal().mean().detach()
    if not (math.isfinite(float(mean_diag)) and float(mean_diag) > 0):
        raise ValueError(f"{who}: the kernel's diagonal at the centres is {float(mean_diag)}; "
                         "expected a positive definite kernel")
    eye = torch.eye(m, dtype=kmm.dtype, device=kmm.device)
    jitter = m * eps
    while True:
        chol, info = torch.linalg.cholesky_ex(kmm + jitter * mean_diag * eye)
        if int(info) == 0:
            return chol
        if jitter >= 1e-4:
            raise ValueError(f"{who}: K_MM is not positive definite even with a jitter of "
                             f"{jitter:g} times its mean diagonal: the centres repeat, or the "
                             "kernel is degenerate")
        jitter *= 100


def _whitened_rows(kernel, x, centres, chol):
    """W = K_XC L^-T for these rows: the whitened features, never K_XC^T K_XC itself, whose
    product with L^-1 on both sides would multiply its rounding by cond(K_MM)."""
    k = kernel.dense(x.to(chol.dtype), centres)
    return torch.linalg.solve_triangular(chol, k.T, upper=False).T


def _score(gram, c, yy, lam, n):
    """n |y - H y|^2 / (n - tr H)^2 from B = W^T W, c = W^T y and |y|^2, H = W (B + lam n I)^-1
    W^T: with R R^T = B + lam n I and u = R^-1 c, |y - H y|^2 = |y|^2 - |u|^2 - lam n |R^-T u|^2
    and tr H = M - lam n |R^-1|_F^2. Returns the score and tr H."""
    m = gram.shape[0]
    shift = lam * n
    eye = torch.eye(m, dtype=gram.dtype, device=gram.device)
    r, info = torch.linalg.cholesky_ex(0.5 * (gram + gram.T) + shift * eye)
    if int(info) != 0:
        raise ValueError("B + lam n I is not positive definite: lam is too small for float64")
    u = torch.linalg.solve_triangular(r, c, upper=False)
    beta = torch.linalg.solve_triangular(r.T, u, upper=True)
    r_inv = torch.linalg.solve_triangular(r, eye, upper=False)
    trace = m - shift * (r_inv * r_inv).sum()
    rss = (yy - (u * u).sum() - shift * (beta * beta).sum()).clamp_min(0)
    return n * rss / (n - trace) ** 2, trace


@torch.no_grad()
def _sums(obj):
    """B = W^T W and c = W^T y summed over chunks of rows."""
    chol = _whitener(obj.kernel, obj.centres, obj.eps, obj.who)
    m = chol.shape[0]
    gram = torch.zeros(m, m, dtype=chol.dtype, device=chol.device)
    c = torch.zeros(m, obj.y.shape[1], dtype=chol.dtype, device=chol.device)
    for rows in row_blocks(obj.n_data, m, obj.chunk):
        w = _whitened_rows(obj.kernel, obj.x[rows], obj.centres, chol)
        gram += w.T @ w
        c += w.T @ obj.y[rows]
    return gram, c


def _checked_score(obj, gram, c):
    try:
        score, trace = _score(gram, c, (obj.y * obj.y).sum(), obj.lam(), obj.n_data)
    except ValueError as e:
        raise ValueError(f"{obj.who}: {e} (lam = {float(obj.lam()):g})") from e
    obj.trace_ = float(trace)
    return score


class _GCV(torch.autograd.Function):
    """The score, and its gradient by a second pass over the chunks: with G and g the score's
    gradients in B and c, d score / d W = W (G + G^T) + y g^T row by row, carried back through
    the kernel's rows and L (L's share summed over the chunks, then taken back through K_MM
    once)."""

    @staticmethod
    def forward(ctx, obj, *params):
        gram, c = _sums(obj)
        leaves = [gram.requires_grad_(), c.requires_grad_()]
        with torch.enable_grad():
            score = _checked_score(obj, *leaves)
            grads = torch.autograd.grad(score, leaves + list(params), allow_unused=True)
        ctx.obj, ctx.params, ctx.grads = obj, params, grads
        return score.detach()

    @staticmethod
    def backward(ctx, g):
        refuse_second_order("NystromRidge.tune")
        obj, params = ctx.obj, ctx.params
        g_gram, g_c = ctx.grads[:2]
        total = [t.clone() if t is not None else torch.zeros_like(p)
                 for t, p in zip(ctx.grads[2:], params)]
        h = g_gram + g_gram.T
        with torch.enable_grad():
            chol = _whitener(obj.kernel, obj.centres, obj.eps, obj.who)
            leaf = chol.detach().requires_grad_()
            g_chol = torch.zeros_like(leaf)
            for rows in row_blocks(obj.n_data, leaf.shape[0], obj.chunk):
                w = _whitened_rows(obj.kernel, obj.x[rows], obj.centres, leaf)
                w_bar = w.detach() @ h + obj.y[rows] @ g_c.T
                part = torch.autograd.grad((w * w_bar).sum(), [leaf] + list(params),
                                           allow_unused=True)
                g_chol += part[0]
                for t, d in zip(total, part[1:]):
                    if d is not None:
                        t += d
            part = torch.autograd.grad(chol, params, grad_outputs=g_chol, allow_unused=True)
            for t, d in zip(total, part):
                if d is not None:
                    t += d
        return (None,) + tuple(g * t for t in total)


class GCVObjective(torch.nn.Module):
    """The score as a model that tessel.gp's fit loop descends: the kernel's parameters and
    log lam are its parameters, and its 'log marginal likelihood' is -n * score / scale, so that
    the loop's loss, -lml / n, is the score over y's mean square (`scale`): a number without
    units, so that the loop's absolute stopping tests (gtol, ftol) act alike whatever y's
    units (the score's minimiser does not depend on them)."""

    def __init__(self, kernel, x, y, centres, lam, learn_lam, chunk, who):
        super().__init__()
        self.kernel, self.who, self.chunk = kernel, who, chunk
        self.x, self.centres = x, centres.to(torch.float64)
        self.y = y.to(torch.float64).reshape(y.shape[0], -1)
        self.n_data = x.shape[0]
        mean_square = float((self.y * self.y).mean())
        self.scale = mean_square if mean_square > 0 else 1.0
        self.eps = 1e-7 if x.dtype == torch.float32 else 1e-14
        raw = torch.tensor(math.log(lam), dtype=torch.float64)
        if learn_lam:
            self.log_lam = torch.nn.Parameter(raw)
        else:
            self.register_buffer("log_lam", raw)
        self.trace_ = None

    def lam(self):
        return torch.exp(self.log_lam)

    def _mode(self, mode, who):
        return "exact"

    def score(self):
        params = [p for p in self.parameters() if p.requires_grad]
        if not torch.is_grad_enabled() or not params:
            with torch.no_grad():
                return _checked_score(self, *_sums(self))
        return _GCV.apply(self, *params)

    def log_marginal_likelihood(self, mode="exact", stats=None, seed=0):
        return -self.n_data * self.score() / self.scale

