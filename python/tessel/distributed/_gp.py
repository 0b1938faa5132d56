"""Exact GP regression with the training points sharded over ranks: the BBMM log marginal
likelihood and its gradient, every kernel product a tessel.distributed.Genred Sum reduction
around the ring, every vector held as each rank's rows.

The algorithm is the core's (src/algos/gp_precond.cpp, gp_cg.cpp, gp_mll.cpp) on sharded
vectors: a pivoted partial Cholesky whose pivots are chosen over all ranks, batched
preconditioned CG on y and the probes with each column's Lanczos coefficients, stochastic
Lanczos quadrature for log det, and GPyTorch's variance-reduced trace estimate for the gradient.
Global sums are gathered and added in rank order, so every rank takes the same branches and
gets the same bits. The probes are drawn over the global rows, so that a sharding changes
nothing but rounding.
"""
import math

import torch
import torch.distributed as dist

from ..gp import ExactGP as _ExactGP
from ._genred import Genred
from ._ring import Ring, check_group

__all__ = ["ExactGP"]

_WHO = "tessel.distributed.ExactGP"


def _allsum(ring, t):
    """The sum over ranks of t (any shape), added in rank order: the same bits on every rank."""
    mine = t.detach().to(torch.float64).cpu().contiguous()
    every = [torch.empty_like(mine) for _ in range(ring.size)]
    dist.all_gather(every, mine, group=ring.group)
    total = every[0].clone()
    for e in every[1:]:
        total += e
    return total


def _gather_rows(ring, t):
    """Every rank's rows of t (n_r, k), concatenated in rank order, on every rank (for small k
    only: the pivots' candidates)."""
    mine = t.detach().to(torch.float64).cpu().contiguous()
    every = [torch.empty_like(mine) for _ in range(ring.size)]
    dist.all_gather(every, mine, group=ring.group)
    return torch.cat(every)


class _Sharded:
    """The points of one call: this rank's rows, the row counts and offsets, the kernel's
    formula and its products with m columns (one Genred per m, kept by the model)."""

    def __init__(self, model, ring):
        self.model, self.ring = model, ring
        x = model.x
        counts = _gather_rows(ring, torch.tensor([[x.shape[0]]], dtype=torch.float64))
        self.counts = [int(c) for c in counts[:, 0].tolist()]
        self.n = sum(self.counts)
        self.offset = sum(self.counts[:ring.rank])
        text, aliases, theta = model.kernel.formula(x.shape[1])
        self.text, self.aliases, self.theta = text, aliases, theta

    def product(self, v, theta=None):
        """This rank's rows of K V for its rows v (n_r, m) of V, float64."""
        m = v.shape[1]
        key = (self.text, tuple(self.aliases), m)
        cache = self.model.__dict__.setdefault("_genreds", {})
        if key not in cache:
            cache[key] = Genred(f"({self.text})*V", list(self.aliases) + [f"V = Vj(3,{m})"],
                                group=self.ring.group)
        x = self.model.x
        th = (self.theta.detach() if theta is None else theta).to(x.dtype)
        return cache[key](x, x, th, v.to(x.dtype)).to(torch.float64)


class _Preconditioner:
    """P = L L^T + D from a rank-k pivoted partial Cholesky over every rank's rows (greedy on
    the largest remaining diagonal, ties to the lowest global row), with its Woodbury solve."""

    def __init__(self, sh, noise, rank):
        model, ring = sh.model, sh.ring
        x = model.x
        xd = x.detach().to(torch.float64)
        with torch.no_grad():
            resid = model.kernel.diag(x).detach().to(torch.float64).reshape(-1).clone()
        self.d = noise
        trace = float(_allsum(ring, resid.sum()))
        cols = []
        rows = torch.arange(x.shape[0], dtype=torch.float64) + sh.offset
        for k in range(min(rank, sh.n)):
            # Each rank's best candidate: (value, global row, point, its row of L so far).
            lrow = torch.stack(cols, 1) if cols else torch.zeros(x.shape[0], 0,
                                                                 dtype=torch.float64)
            if x.shape[0]:
                i = int(torch.argmax(resid))
                cand = torch.cat([resid[i:i + 1], rows[i:i + 1], xd[i], lrow[i]])[None]
            else:
                cand = torch.full((1, 2 + xd.shape[1] + k), -math.inf, dtype=torch.float64)
            every = _gather_rows(ring, cand)
            best = int(torch.argmax(every[:, 0]))  # the first of equal values: lowest row
            value = float(every[best, 0])
            if not value > 1e-12 * trace:  # the kernel's rank is reached (as the core stops)
                break
            point = every[best, 2:2 + xd.shape[1]].to(x.dtype)[None]
            lp = every[best, 2 + xd.shape[1]:]
            with torch.no_grad():
                col = model.kernel.dense(x, point).detach().to(torch.float64)[:, 0]
            col = (col - lrow @ lp) / math.sqrt(value)
            resid = (resid - col * col).clamp_min(0)
            cols.append(col)
        self.l = torch.stack(cols, 1) if cols else torch.zeros(x.shape[0], 0,
                                                               dtype=torch.float64)
        self.rank = self.l.shape[1]
        dl = self.l / self.d[:, None]
        core = torch.eye(self.rank, dtype=torch.float64) + _allsum(ring, self.l.T @ dl)
        self.chol = torch.linalg.cholesky(core)
        self.logdet = float(2 * torch.log(torch.diagonal(self.chol)).sum() +
                            _allsum(ring, torch.log(self.d).sum()))
        self.ring = ring

    def solve(self, v):
        """P^-1 v for this rank's rows v (n_r, m)."""
        dv = v / self.d[:, None]
        if not self.rank:
            return dv
        w = torch.cholesky_solve(_allsum(self.ring, self.l.T @ dv), self.chol)
        return dv - (self.l / self.d[:, None]) @ w

    def sample(self, sh, seed, t):
        """z ~ N(0, P), (n_r, t): L e + D^1/2 f, e and f drawn for the global rows."""
        gen = torch.Generator().manual_seed(seed)
        e = torch.randn(self.rank, t, generator=gen, dtype=torch.float64)
        f = torch.randn(sh.n, t, generator=gen, dtype=torch.float64)
        f = f[sh.offset:sh.offset + sh.model.x.shape[0]]
        return self.l @ e + self.d.sqrt()[:, None] * f


def _log_quadrature(alphas, betas, weight):
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


def _pcg(sh, pre, b, tol, maxiter):
    """Batched preconditioned CG on (K + D) X = B, this rank's rows b (n_r, m); each column stops
    on its own (|r| <= tol |b|). Returns X, the columns' Lanczos coefficients and a report."""
    ring, m = sh.ring, b.shape[1]
    x = torch.zeros_like(b)
    r = b.clone()
    z = pre.solve(r)
    p = z.clone()
    sums = _allsum(ring, torch.stack([(r * z).sum(0), (b * b).sum(0)]))
    rz, bnorm = sums[0], sums[1].sqrt()
    weight = rz.clone()
    active = bnorm > 0
    alphas, betas = [[] for _ in range(m)], [[] for _ in range(m)]
    iters = [0] * m
    it = 0
    while bool(active.any()) and it < maxiter:
        ap = sh.product(p) + pre.d[:, None] * p
        pap = _allsum(ring, (p * ap).sum(0))
        if bool((active & ~(pap > 0)).any()):
            raise ValueError(f"{_WHO}: CG broke down at iteration {it + 1} (p^T (K + D) p <= 0): "
                             "K + noise is not positive definite; give a larger noise")
        step = torch.where(active, rz / torch.where(active, pap, torch.ones_like(pap)),
                           torch.zeros_like(rz))
        x += p * step
        r -= ap * step
        z = pre.solve(r)
        sums = _allsum(ring, torch.stack([(r * z).sum(0), (r * r).sum(0)]))
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
    rel = _allsum(ring, (res * res).sum(0)).sqrt() / torch.where(bnorm > 0, bnorm,
                                                                   torch.ones_like(bnorm))
    # The quadrature uses the coefficients up to the last accepted step (its beta is not used).
    quads = [_log_quadrature(alphas[c], betas[c], float(weight[c])) for c in range(m)]
    converged = (~active).tolist()  # each column's recurrence residual met tol
    report = dict(iterations=it, column_iterations=iters, residuals=rel.tolist(),
                  converged=converged,
                  summary=f"{m} columns, {it} iterations, max relative residual "
                          f"{float(rel.max()):.3g}")
    return x, quads, report


class ExactGP(_ExactGP):
    """tessel.gp.ExactGP with the training rows sharded over the ranks of a process group.

    Each rank passes its own rows of x and y (and of per-point noise); shards may be uneven.
    ``log_marginal_likelihood`` is the BBMM estimate of the global log p(y), as tessel.gp's BBMM
    mode computes it (pivoted-Cholesky preconditioner of `rank`, batched preconditioned CG on y
    and `probes` probes, stochastic Lanczos quadrature, the variance-reduced gradient), with
    every product K V a tessel.distributed.Genred around the ring and every vector held as the
    ranks' rows: a rank's memory is O(n_r (probes + rank)). It is collective, and so is its
    backward: every rank gets the same value and, in every hyperparameter, the gradient of the
    global log p(y). ``fit`` therefore runs the same optimiser on every rank, in step.

    Parameters
    ----------
    x, y, kernel, noise, mean, fixed_noise, noise_min
        As for tessel.gp.ExactGP, x and y (and per-point noise) holding this rank's rows.
    group : torch.distributed.ProcessGroup, optional
        The ranks that share the rows; None (the default) is the world.

    Raises
    ------
    NotImplementedError
        For mode="exact", and for predictions (not sharded yet: load the fitted state_dict into
        a tessel.gp.ExactGP that holds every row).

    Examples
    --------
    A one-rank gloo group, so that the example runs alone (under ``torchrun``, each process
    runs the same lines with its own rows and ``dist.init_process_group("gloo")``):

    >>> import torch
    >>> import torch.distributed as dist
    >>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    >>> from tessel.distributed import ExactGP
    >>> from tessel.gp import Matern, Scale
    >>> x = torch.rand(200, 2, dtype=torch.float64)   # this rank's rows
    >>> gp = ExactGP(x, torch.sin(4 * x[:, 0]), Scale(Matern(nu=2.5)), noise=0.1)
    >>> lml = gp.log_marginal_likelihood(probes=8, rank=10)
    >>> lml.backward()                                 # collective, like the value
    >>> bool(torch.isfinite(gp.raw_noise.grad).all())
    True
    >>> dist.destroy_process_group()
    """

    def __init__(self, x, y, kernel, noise=0.1, mean="constant", fixed_noise=None,
                 noise_min=1e-4, group=None):
        super().__init__(x, y, kernel, noise=noise, mean=mean, fixed_noise=fixed_noise,
                         exact_max=0, noise_min=noise_min)
        self.group = check_group(_WHO, group)
        self._genreds = {}

    @property
    def n_data(self):
        """The number of training rows over every rank (collective)."""
        ring = Ring.of(self.group, _WHO)
        return int(_allsum(ring, torch.tensor(float(self.x.shape[0]))))

    def _mode(self, mode, who):
        if mode in ("auto", "bbmm"):
            return "bbmm"
        if mode == "exact":
            raise NotImplementedError(f"{who}: mode='exact' is not sharded (it needs the dense "
                                      "K); the distributed likelihood is BBMM")
        raise ValueError(f"{who}: mode must be 'auto' or 'bbmm', got {mode!r}")

    def log_marginal_likelihood(self, mode="auto", probes=10, rank=15, seed=0, tol=1e-4,
                                maxiter=0, stats=None):
        """The global log p(y) by BBMM over the ranks, differentiable in every hyperparameter
        (collectively); the arguments as tessel.gp.ExactGP.log_marginal_likelihood's."""
        who = f"{_WHO}.log_marginal_likelihood"
        self._mode(mode, who)
        if int(probes) != probes or probes < 1:
            raise ValueError(f"{who}: probes must be an integer >= 1, got {probes!r}")
        if int(rank) != rank or rank < 0:
            raise ValueError(f"{who}: rank must be an integer >= 0, got {rank!r}")
        ring = Ring.of(self.group, who)
        sh = _Sharded(self, ring)
        noise = self.noise
        nd = noise.detach().to(torch.float64).expand(self.x.shape[0]).clone()
        if not bool(_allsum(ring, (nd <= 0).sum().to(torch.float64)) == 0):
            raise ValueError(f"{who}: the noise must be > 0 on every row (the preconditioner "
                             "divides by it)")
        t = int(probes)
        pre = _Preconditioner(sh, nd, int(rank))
        c = self._mean()
        r = (self.y - c).detach()
        z = pre.sample(sh, int(seed), t)
        rhs = torch.cat([r[:, None], z], 1)
        maxiter = int(maxiter) or min(max(2 * sh.n, 10), 1000)
        sol, quads, report = _pcg(sh, pre, rhs, float(tol), maxiter)
        alpha, u = sol[:, 0], sol[:, 1:]
        quad = float(_allsum(ring, (r * alpha).sum()))
        samples = [pre.logdet + q for q in quads[1:]]
        logdet = sum(samples) / t
        value = -0.5 * (quad + logdet + sh.n * math.log(2 * math.pi))
        pz = pre.solve(z)
        # d value / d D_i and the bilinear form whose kernel gradient is the likelihood's.
        gd = 0.5 * alpha * alpha - 0.5 * (u * pz).sum(1) / t
        a = torch.cat([0.5 * alpha[:, None], -0.5 * u / t], 1)
        b = torch.cat([alpha[:, None], pz], 1)
        if stats is not None:
            stats.update(value=value, quad=quad, logdet=logdet, logdet_precond=pre.logdet,
                         logdet_samples=samples, rank=pre.rank, cg=report)
        out = torch.tensor(value, dtype=torch.float64)
        if torch.is_grad_enabled() and sh.theta.requires_grad:
            bil = (a * sh.product(b, theta=sh.theta)).sum()  # this rank's part; collective grad
            out = out + (bil - bil.detach())
        if noise.requires_grad:
            g = _allsum(ring, gd.sum()) if noise.numel() == 1 else gd
            out = out + (g * (noise - noise.detach())).sum()
        if self.mean_constant is not None and torch.is_grad_enabled():
            gc = _allsum(ring, alpha.sum())
            out = out + gc * (self.mean_constant - self.mean_constant.detach()).sum()
        return out

    def _not_sharded(self, name):
        raise NotImplementedError(
            f"{_WHO}.{name}: predictions are not sharded yet; load this model's state_dict into "
            "a tessel.gp.ExactGP holding every row (the hyperparameters are the same on every "
            "rank)")

    def predict(self, *args, **kwargs):
        """Not sharded yet (raises NotImplementedError)."""
        self._not_sharded("predict")

    def predict_covariance(self, *args, **kwargs):
        """Not sharded yet (raises NotImplementedError)."""
        self._not_sharded("predict_covariance")

    def sample(self, *args, **kwargs):
        """Not sharded yet (raises NotImplementedError)."""
        self._not_sharded("sample")
