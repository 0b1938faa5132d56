"""The BBMM log marginal likelihood of tessel.gp.ExactGP in PyTorch, on the points' device:
the core's algorithm (src/algos/gp_precond.cpp, gp_cg.cpp, gp_mll.cpp) with the kernel products
as tessel.torch.Genred reductions, for points on a GPU (the core's GP functions take host
arrays) and, through `Rows`, for points sharded over processes (tessel.distributed.ExactGP).

A pivoted partial Cholesky preconditioner, batched preconditioned CG on y and the probes with
each column's Lanczos coefficients, stochastic Lanczos quadrature for log det, and GPyTorch's
variance-reduced trace estimate for the gradient, returned as a tensor whose backward gives the
estimator's gradient in every hyperparameter.
"""
import math

import torch

from ._problem import refuse_second_order

_BLOCK = 32  # columns per kernel product where a width would otherwise vary with the data

__all__ = ["Rows", "Preconditioner", "pcg", "log_marginal_likelihood", "solve", "predict",
           "variances", "love_root", "love_variances"]


class Rows:
    """The training rows one process holds (here: all of them) and what the algorithm asks of
    them: global sums, every process's candidate rows, and products K V with the kernel's
    formula. tessel.distributed's subclass spreads them over ranks."""

    who = "ExactGP"

    def __init__(self, model):
        self.model = model
        self.n, self.offset = model.x.shape[0], 0
        self.text, self.aliases, self.theta = model.kernel.formula(model.x.shape[1])

    def allsum(self, t):
        """The sum of t over the processes (one here)."""
        return t.detach().to(torch.float64)

    def gather(self, t):
        """Every process's rows of t, concatenated (this one's here)."""
        return t.detach().to(torch.float64)

    def reduction(self, m):
        """A Genred of the kernel times an m-column j-variable V, kept by the model."""
        from .. import torch as tt
        key = (self.text, tuple(self.aliases), m)
        cache = self.model.__dict__.setdefault("_genreds", {})
        if key not in cache:
            cache[key] = tt.Genred(f"({self.text})*V", list(self.aliases) + [f"V = Vj(3,{m})"],
                                   axis=1)
        return cache[key]

    def product(self, v, theta=None, points=None):
        """K(points, x) V for this process's rows v (n, m) of V, float64 (points: x)."""
        x = self.model.x
        th = (self.theta.detach() if theta is None else theta).to(x.dtype)
        p = x if points is None else points
        return self.reduction(v.shape[1])(p, x, th, v.to(x.dtype)).to(torch.float64)


class Preconditioner:
    """P = L L^T + D from a rank-k pivoted partial Cholesky over every rank's rows (greedy on
    the largest remaining diagonal, ties to the lowest global row), with its Woodbury solve."""

    def __init__(self, rows, noise, rank):
        model = rows.model
        sh = rows
        x = model.x
        xd = x.detach().to(torch.float64)
        with torch.no_grad():
            resid = model.kernel.diag(x).detach().to(torch.float64).reshape(-1).clone()
        self.d = noise
        trace = float(rows.allsum(resid.sum()))
        cols = []
        index = torch.arange(x.shape[0], dtype=torch.float64, device=x.device) + sh.offset
        for k in range(min(rank, sh.n)):
            # Each rank's best candidate: (value, global row, point, its row of L so far).
            lrow = torch.stack(cols, 1) if cols else None
            if x.shape[0]:
                i = int(torch.argmax(resid))
                parts = [resid[i:i + 1], index[i:i + 1], xd[i]] + ([lrow[i]] if cols else [])
                cand = torch.cat(parts)[None]
            else:
                cand = torch.full((1, 2 + xd.shape[1] + k), -math.inf, dtype=torch.float64,
                                  device=x.device)
            every = rows.gather(cand)
            best = int(torch.argmax(every[:, 0]))  # the first of equal values: lowest row
            value = float(every[best, 0])
            if not value > 1e-12 * trace:  # the kernel's rank is reached (as the core stops)
                break
            point = every[best, 2:2 + xd.shape[1]].to(x.dtype)[None]
            lp = every[best, 2 + xd.shape[1]:]
            with torch.no_grad():
                col = model.kernel.dense(x, point).detach().to(torch.float64)[:, 0]
            if cols:
                col = col - lrow @ lp.to(col.device)
            col = col / math.sqrt(value)
            resid = (resid - col * col).clamp_min(0)
            cols.append(col)
        self.l = torch.stack(cols, 1) if cols else torch.zeros(x.shape[0], 0, dtype=torch.float64,
                                                               device=x.device)
        self.rank = self.l.shape[1]
        dl = self.l / self.d[:, None]
        core = torch.eye(self.rank, dtype=torch.float64, device=x.device) + rows.allsum(self.l.T @ dl)
        self.chol = torch.linalg.cholesky(core)
        self.logdet = float(2 * torch.log(torch.diagonal(self.chol)).sum() +
                            rows.allsum(torch.log(self.d).sum()))
        self.rows = rows

    def solve(self, v):
        """P^-1 v for this rank's rows v (n_r, m)."""
        dv = v / self.d[:, None]
        if not self.rank:
            return dv
        w = torch.cholesky_solve(self.rows.allsum(self.l.T @ dv), self.chol)
        return dv - (self.l / self.d[:, None]) @ w

    def sample(self, sh, seed, t):
        """z ~ N(0, P), (n_r, t): L e + D^1/2 f, e and f drawn for the global rows."""
        gen = torch.Generator().manual_seed(seed)
        # On the host, whatever the device: the same seed gives the same probes everywhere.
        e = torch.randn(self.rank, t, generator=gen, dtype=torch.float64).to(self.l.device)
        f = torch.randn(sh.n, t, generator=gen, dtype=torch.float64)
        f = f[sh.offset:sh.offset + sh.model.x.shape[0]].to(self.l.device)
        return self.l @ e + self.d.sqrt()[:, None] * f


def log_quadrature(alphas, betas, weight):
    """weight * e1^T log(T) e1 of the Lanczos tridiagonal of one CG column (its step sizes and
    direction updates)."""
    k = len(alphas)
    if k == 0:
        return 0.0
    t = torch.zeros(k, k, dtype=torch.float64)
    for j in range(k):
        t[j, j] = 1 / alphas[j] + (betas[j - 1] / alphas[j - 1] if j else 0.0)
        if j + 1 < k:
            t[j, j + 1] = t[j + 1, j] = math.sqrt(betas[j]) / alphas[j]
    lam, q = torch.linalg.eigh(t)
    return float(weight * (q[0] ** 2 * torch.log(lam)).sum())


def pcg(rows, pre, b, tol, maxiter):
    """Batched preconditioned CG on (K + D) X = B, this rank's rows b (n_r, m); each column stops
    on its own (|r| <= tol |b|). Returns X, the columns' Lanczos coefficients and a report."""
    m = b.shape[1]
    sh = rows
    x = torch.zeros_like(b)
    r = b.clone()
    z = pre.solve(r)
    p = z.clone()
    sums = rows.allsum(torch.stack([(r * z).sum(0), (b * b).sum(0)]))
    rz, bnorm = sums[0], sums[1].sqrt()
    weight = rz.clone()
    active = bnorm > 0
    alphas, betas = [[] for _ in range(m)], [[] for _ in range(m)]
    iters = [0] * m
    it = 0
    while bool(active.any()) and it < maxiter:
        ap = sh.product(p) + pre.d[:, None] * p
        pap = rows.allsum((p * ap).sum(0))
        if bool((active & ~(pap > 0)).any()):
            raise ValueError(f"{rows.who}: CG broke down at iteration {it + 1} (p^T (K + D) p <= 0): "
                             "K + noise is not positive definite; give a larger noise")
        step = torch.where(active, rz / torch.where(active, pap, torch.ones_like(pap)),
                           torch.zeros_like(rz))
        x += p * step
        r -= ap * step
        z = pre.solve(r)
        sums = rows.allsum(torch.stack([(r * z).sum(0), (r * r).sum(0)]))
        rz_new, rnorm = sums[0], sums[1].sqrt()
        beta = torch.where(active, rz_new / torch.where(active, rz, torch.ones_like(rz)),
                           torch.zeros_like(rz))
        it += 1
        for c in range(m):
            if active[c]:
                alphas[c].append(float(step[c]))
                betas[c].append(float(beta[c]))
                iters[c] += 1
        active = active & (rnorm > tol * bnorm)
        p = z + p * beta
        rz = rz_new
    res = b - sh.product(x) - pre.d[:, None] * x
    rel = rows.allsum((res * res).sum(0)).sqrt() / torch.where(bnorm > 0, bnorm,
                                                                   torch.ones_like(bnorm))
    # The quadrature uses the coefficients up to the last accepted step (its beta is not used).
    quads = [log_quadrature(alphas[c], betas[c], float(weight[c])) for c in range(m)]
    converged = (~active).tolist()  # each column's recurrence residual met tol
    report = dict(iterations=it, column_iterations=iters, residuals=rel.tolist(),
                  converged=converged, summary=_summary(m, it, rel.tolist()))
    return x, quads, report


def solve(model, rows, b, rank, tol, maxiter=0):
    """(K + noise)^-1 b for this process's rows b (n, m), by preconditioned CG. The
    preconditioner is built once per `rows` (one call of the model: the same hyperparameters)
    and rank, not once per block of test points."""
    kept = rows.__dict__.setdefault("_preconditioners", {})
    if rank not in kept:
        nd = model.noise.detach().to(torch.float64).to(b.device).expand(model.x.shape[0]).clone()
        kept[rank] = Preconditioner(rows, nd, int(rank))
    pre = kept[rank]
    maxiter = int(maxiter) or min(max(2 * rows.n, 10), 1000)
    x, _, report = pcg(rows, pre, b, float(tol), maxiter)
    return x, report


def log_marginal_likelihood(model, rows, probes, rank, seed, tol, maxiter, stats, who):
    """The BBMM estimate of log p(y) over every process's rows, as a float64 tensor whose
    backward gives the estimator's gradient in the kernel's parameters, the noise and the mean
    (every process gets the global value and gradient)."""
    if int(probes) != probes or probes < 1:
        raise ValueError(f"{who}: probes must be an integer >= 1, got {probes!r}")
    if int(rank) != rank or rank < 0:
        raise ValueError(f"{who}: rank must be an integer >= 0, got {rank!r}")
    noise = model.noise
    dev = model.x.device
    nd = noise.detach().to(torch.float64).to(dev).expand(model.x.shape[0]).clone()
    if not bool(rows.allsum((nd <= 0).sum().to(torch.float64)) == 0):
        raise ValueError(f"{who}: the noise must be > 0 on every row (the preconditioner "
                         "divides by it)")
    t = int(probes)
    pre = Preconditioner(rows, nd, int(rank))
    c = model._mean()
    r = (model.y - c).detach().to(dev)
    z = pre.sample(rows, int(seed), t)
    rhs = torch.cat([r[:, None], z], 1)
    maxiter = int(maxiter) or min(max(2 * rows.n, 10), 1000)
    sol, quads, report = pcg(rows, pre, rhs, float(tol), maxiter)
    alpha, u = sol[:, 0], sol[:, 1:]
    quad = float(rows.allsum((r * alpha).sum()))
    samples = [pre.logdet + q for q in quads[1:]]
    logdet = sum(samples) / t
    value = -0.5 * (quad + logdet + rows.n * math.log(2 * math.pi))
    pz = pre.solve(z)
    # d value / d D_i and the bilinear form whose kernel gradient is the likelihood's.
    gd = 0.5 * alpha * alpha - 0.5 * (u * pz).sum(1) / t
    a = torch.cat([0.5 * alpha[:, None], -0.5 * u / t], 1)
    b = torch.cat([alpha[:, None], pz], 1)
    if stats is not None:
        stats.update(value=value, quad=quad, logdet=logdet, logdet_precond=pre.logdet,
                     logdet_samples=samples, rank=pre.rank, cg=report)
    out = torch.tensor(value, dtype=torch.float64)
    if torch.is_grad_enabled() and rows.theta.requires_grad:
        bil = (a * rows.product(b, theta=rows.theta)).sum()  # this process's part
        out = out + (bil - bil.detach()).cpu()
    if noise.requires_grad:
        g = rows.allsum(gd.sum()) if noise.numel() == 1 else gd
        out = out + (g.to(noise.device) * (noise - noise.detach())).sum().cpu()
    if model.mean_constant is not None and torch.is_grad_enabled():
        gc = rows.allsum(alpha.sum()).to(model.mean_constant.device)
        out = out + (gc * (model.mean_constant - model.mean_constant.detach())).sum().cpu()
    return _FirstOrder.apply(out) if out.requires_grad else out


class _FirstOrder(torch.autograd.Function):
    """The identity, first in every backward: the surrogate terms above carry the estimator's
    gradient, not its Hessian, so a second derivative is an error rather than a wrong number."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        refuse_second_order("the BBMM log marginal likelihood")
        return g


@torch.no_grad()
def predict(model, rows, xt, r, return_var, rank, tol, chunk, stats):
    """The posterior mean at xt (m, d) and, with return_var, the latent variances (variances())."""
    alpha, rep = solve(model, rows, r[:, None].to(torch.float64), rank, tol)
    mean = rows.product(alpha, points=xt)[:, 0]
    if stats is not None:
        stats["mean_solve"] = rep
    return mean, (variances(model, rows, xt, rank, tol, chunk, stats) if return_var else None)


@torch.no_grad()
def variances(model, rows, xt, rank, tol, chunk, stats):
    """The latent variances at xt by solves of `chunk` test points at a time, exact to CG's
    tol; O(n chunk) memory."""
    var = model.kernel.diag(xt).detach().to(torch.float64).reshape(-1).clone()
    reports = []
    for s in range(0, xt.shape[0], chunk):
        kp = model.kernel.dense(model.x, xt[s:s + chunk]).detach().to(torch.float64)
        # Each column count compiles its own product kernel: a last, partial block goes padded
        # with zero columns (CG leaves them at 0) to a power of two, as in the core.
        w = kp.shape[1]
        cols = min(1 << (w - 1).bit_length(), chunk)
        sol, rep = solve(model, rows, torch.nn.functional.pad(kp, (0, cols - w)), rank, tol)
        reports.append(_first_columns(rep, w))
        var[s:s + chunk] -= (kp * sol[:, :w]).sum(0)
    if stats is not None:
        stats["variance_solves"] = reports
    # Rounding can take a variance that is ~0 below 0; the latent variance is >= 0.
    return var.clamp_min(0)


def _first_columns(report, w):
    """pcg's report for its first w columns (the others padding)."""
    out = dict(report)
    for key in ("column_iterations", "residuals", "converged"):
        out[key] = report[key][:w]
    out["summary"] = _summary(w, report["iterations"], out["residuals"])
    return out


def _summary(columns, iterations, residuals):
    return (f"{columns} columns, {iterations} iterations, max relative residual "
            f"{max(residuals):.3g}")


@torch.no_grad()
def love_root(model, rows, love_rank, seed):
    """LOVE's root R (n, steps) with (K + noise)^-1 ~ R R^T = Q T^-1 Q^T from `love_rank`
    Lanczos steps on K + noise (full reorthogonalisation, a seeded random start), as the core's
    gp_love_root computes it."""
    x = model.x
    n, k = x.shape[0], min(int(love_rank), x.shape[0])
    d = model.noise.detach().to(torch.float64).to(x.device).expand(n)
    gen = torch.Generator().manual_seed(int(seed))
    v = torch.randn(n, generator=gen, dtype=torch.float64).to(x.device)
    v = v / v.norm()
    q = torch.zeros(n, k, dtype=torch.float64, device=x.device)
    alphas, betas = [], []
    for j in range(k):
        q[:, j] = v
        w = rows.product(v[:, None])[:, 0] + d * v
        alphas.append(float(w @ v))
        if not math.isfinite(alphas[-1]):
            raise ValueError(f"{rows.who}: K-hat v is not finite at Lanczos step {j}: the "
                             "kernel's hyperparameters or the points overflow")
        if j + 1 == k:
            break
        for _ in range(2):  # classical Gram-Schmidt twice keeps Q orthonormal to rounding
            w = w - q[:, :j + 1] @ (q[:, :j + 1].T @ w)
        b = float(w.norm())
        if not b > 1e-12 * max(abs(a) for a in alphas):  # an invariant Krylov space
            break
        betas.append(b)
        v = w / b
    steps = len(alphas)
    t = torch.diag(torch.tensor(alphas, dtype=torch.float64))
    if betas:
        off = torch.tensor(betas[:steps - 1], dtype=torch.float64)
        t = t + torch.diag(off, 1) + torch.diag(off, -1)
    l, info = torch.linalg.cholesky_ex(t)
    if int(info) != 0:
        raise ValueError(f"{rows.who}: the Lanczos matrix is not positive definite: K-hat is "
                         "singular to rounding (zero noise on close points?); give a larger noise")
    return torch.linalg.solve_triangular(l.to(x.device), q[:, :steps].T, upper=False).T


@torch.no_grad()
def love_variances(model, rows, xt, root):
    """k(p, p) - |R^T k_p|^2 at the test points xt: products with R's columns in blocks of 32,
    the last zero-padded, as in the core (R's width is the Lanczos steps taken, and each width
    would compile a product kernel of its own)."""
    var = model.kernel.diag(xt).detach().to(torch.float64).reshape(-1)
    for b in range(0, root.shape[1], _BLOCK):
        part = root[:, b:b + _BLOCK]
        kr = rows.product(torch.nn.functional.pad(part, (0, _BLOCK - part.shape[1])), points=xt)
        var = var - (kr * kr).sum(1)
    return var.clamp_min(0)
