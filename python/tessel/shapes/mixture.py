"""Gaussian mixtures fitted to (weighted) point clouds by EM on tessel's reductions.

Each EM iteration is two reductions over the N x K pairs of points and components, neither of
which stores that matrix (memory O(N + K D^2)):
- a LogSumExp over the components, per point: the log-density log sum_k w_k N(x_i; m_k, S_k);
- a Sum over the points, per component, of the responsibilities r_ik times (1, x_i, x_i x_i^T):
  the masses, first and second moments from which the M-step's weights, means and covariances
  follow (D^2 + D + 1 numbers per component).
A component whose mass vanishes keeps its previous parameters (with weight ~0) instead of
producing a singular covariance. `log_likelihood` is differentiable (in the points and in
parameters given as tensors): the mixture can serve as a loss (seed 003's "Gaussian mixture
fitting" and the KeOps documentation's anisotropic-kernel example).
"""
import functools
import math

import torch

from ..torch import Genred

_WHO = "tessel.shapes.GaussianMixture"


@functools.lru_cache(maxsize=32)
def _reductions(dim):
    """(log-density LogSumExp over k, moments Sum over i) for points in dimension dim."""
    d2 = dim * dim
    aliases = [f"X = Vi({dim})", f"M = Vj({dim})", f"P = Vj({d2})", "C = Vj(1)"]
    expo = "C - WeightedSqDist(P, X, M) / IntCst(2)"
    logdens = Genred(expo, aliases, reduction_op="LogSumExp", axis=1)
    moments = Genred(f"Exp({expo} - L) * W * Concat(IntCst(1), Concat(X, TensorProd(X, X)))",
                     aliases + ["L = Vi(1)", "W = Vi(1)"], reduction_op="Sum", axis=0)
    return logdens, moments


class GaussianMixture:
    """A mixture of `n_components` Gaussians with full covariances, fitted by EM.

    Each E-step is a LogSumExp reduction over the components and each M-step sums over the
    points, so memory is O(N + K D^2). After ``fit``: ``means_`` (K, D), ``covariances_``
    (K, D, D), ``weights_`` (K,), ``n_iter_`` (EM steps), ``history_`` (the mean log-likelihood of
    the start and after each step, nondecreasing up to rounding), ``converged_``;
    ``score_samples``, ``log_likelihood`` and ``sample`` use them.

    Parameters
    ----------
    n_components : int
        K, >= 1.
    reg : float, default 1e-6
        Added to each covariance's diagonal, relative to the data's mean variance (keeps the
        covariances invertible on degenerate data).
    max_iter : int, default 200
        The most EM steps.
    tol : float, default 1e-7
        EM stops when the mean log-likelihood (per unit of weight) rises by less than tol.
    seed : int, default 0
        The k-means++ seeding's generator.
    backend : str, default "auto"
        As Genred's.

    Raises
    ------
    ValueError
        n_components < 1, a negative reg or tol, max_iter < 1.

    Examples
    --------
    >>> import torch
    >>> from tessel.shapes import GaussianMixture
    >>> g = torch.Generator().manual_seed(0)
    >>> pts = torch.cat([torch.randn(300, 2, generator=g, dtype=torch.float64) - 4,
    ...                  torch.randn(200, 2, generator=g, dtype=torch.float64) + 4])
    >>> gmm = GaussianMixture(2).fit(pts)
    >>> sorted(round(w, 1) for w in gmm.weights_.tolist())
    [0.4, 0.6]
    """

    def __init__(self, n_components, reg=1e-6, max_iter=200, tol=1e-7, seed=0,
                 backend="auto"):
        if isinstance(n_components, bool) or not isinstance(n_components, int) or \
                n_components < 1:
            raise ValueError(f"{_WHO}: n_components must be an integer >= 1, got "
                             f"{n_components!r}")
        if not (reg >= 0 and math.isfinite(reg)):
            raise ValueError(f"{_WHO}: reg must be finite and >= 0, got {reg}")
        if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
            raise ValueError(f"{_WHO}: max_iter must be an integer >= 1, got {max_iter!r}")
        self.n_components, self.reg, self.max_iter, self.tol = n_components, reg, max_iter, tol
        self.seed, self.backend = seed, backend

    # -- the model's terms -------------------------------------------------------------------
    def _terms(self, means, covariances, weights):
        """(M, P flattened, C): the precisions and log-constants log w_k + 1/2 log det P_k -
        D/2 log(2 pi) of the components."""
        d = means.shape[1]
        chol = torch.linalg.cholesky(covariances)
        prec = torch.cholesky_inverse(chol)
        logdet_cov = 2 * torch.log(torch.diagonal(chol, dim1=1, dim2=2)).sum(1)
        c = torch.log(weights) - 0.5 * logdet_cov - 0.5 * d * math.log(2 * math.pi)
        return means, prec.reshape(means.shape[0], d * d), c[:, None]

    def _logdens(self, x, terms):
        return _reductions(x.shape[1])[0](x, *terms, backend=self.backend)

    def score_samples(self, x):
        """log p(x_i) under the fitted mixture, (N,)."""
        self._check_fitted()
        x = _check_points("score_samples", x, self.means_.shape[1])
        terms = self._terms(self.means_.to(x), self.covariances_.to(x), self.weights_.to(x))
        return self._logdens(x, terms)[:, 0]

    def log_likelihood(self, x, weights=None):
        """sum_i w_i log p(x_i) / sum_i w_i (differentiable in x and in tensors with grad
        among the fitted parameters)."""
        w = _weights(x, weights)
        return (self.score_samples(x) * w).sum() / w.sum()

    # -- fitting -----------------------------------------------------------------------------
    def _seed_means(self, x, w):
        """k-means++: each new mean drawn with probability ~ weight x squared distance to the
        nearest mean already chosen."""
        g = torch.Generator(device="cpu").manual_seed(self.seed)
        first = int(torch.multinomial(w.cpu(), 1, generator=g))
        chosen = [first]
        d2 = ((x - x[first]) ** 2).sum(1)
        for _ in range(1, self.n_components):
            p = (w * d2).cpu()
            nxt = int(torch.multinomial(p if float(p.sum()) > 0 else w.cpu(), 1, generator=g))
            chosen.append(nxt)
            d2 = torch.minimum(d2, ((x - x[nxt]) ** 2).sum(1))
        return x[chosen].clone()

    def fit(self, points, weights=None, means=None):
        """Fits the mixture to points (N, D) with optional weights (N,) >= 0 (default 1), from
        `means` (K, D) if given, else k-means++ seeds; returns self."""
        x = _check_points("fit", points).detach()
        w = _weights(x, weights).detach()
        n, d, k = x.shape[0], x.shape[1], self.n_components
        if k > int((w > 0).sum()):
            raise ValueError(f"{_WHO}.fit: {k} components for {int((w > 0).sum())} points of "
                             "positive weight; expected at most one component per point")
        total = w.sum()
        mean = (w[:, None] * x).sum(0) / total
        var = ((w[:, None] * (x - mean) ** 2).sum(0) / total)
        jitter = self.reg * float(var.mean()) if float(var.mean()) > 0 else self.reg
        eye = torch.eye(d, dtype=x.dtype, device=x.device)
        m = self._seed_means(x, w) if means is None else means.detach().to(x).clone()
        if m.shape != (k, d):
            raise ValueError(f"{_WHO}.fit: means has shape {tuple(m.shape)}; expected ({k}, {d})")
        cov = (torch.diag(var) + jitter * eye).expand(k, d, d).clone()
        wk = torch.full((k,), 1.0 / k, dtype=x.dtype, device=x.device)
        moments = _reductions(d)[1]
        history, converged, steps = [], False, 0
        while True:
            terms = self._terms(m, cov, wk)
            lse = self._logdens(x, terms)
            history.append(float((lse[:, 0] * w).sum() / total))
            if len(history) > 1 and history[-1] - history[-2] <= self.tol * abs(history[-1]):
                converged = True
                break
            if steps == self.max_iter:
                break
            steps += 1
            s = moments(x, *terms, lse, w[:, None], backend=self.backend)
            mass, s1, s2 = s[:, 0], s[:, 1:1 + d], s[:, 1 + d:].reshape(k, d, d)
            alive = mass > 1e-10 * total
            safe = torch.where(alive, mass, torch.ones_like(mass))[:, None]
            new_m = s1 / safe
            new_cov = s2 / safe[:, :, None] - new_m[:, :, None] * new_m[:, None, :] + jitter * eye
            new_cov = (new_cov + new_cov.transpose(1, 2)) / 2
            m = torch.where(alive[:, None], new_m, m)
            cov = torch.where(alive[:, None, None], new_cov, cov)
            wk = torch.clamp(mass / total, min=torch.finfo(x.dtype).tiny)
        self.means_, self.covariances_, self.weights_ = m, cov, wk
        self.history_, self.n_iter_, self.converged_ = history, steps, converged
        return self

    def sample(self, n, generator=None):
        """n points drawn from the fitted mixture, (n, D)."""
        self._check_fitted()
        comp = torch.multinomial(self.weights_.cpu(), n, replacement=True, generator=generator)
        comp = comp.to(self.means_.device)
        z = torch.randn(n, self.means_.shape[1], dtype=self.means_.dtype, generator=generator)
        chol = torch.linalg.cholesky(self.covariances_)
        return self.means_[comp] + (chol[comp] @ z.to(self.means_.device)[:, :, None])[:, :, 0]

    def _check_fitted(self):
        if not hasattr(self, "means_"):
            raise RuntimeError(f"{_WHO}: call fit(points) first")

    def __repr__(self):
        fitted = f", n_iter={self.n_iter_}" if hasattr(self, "n_iter_") else ""
        return f"GaussianMixture(n_components={self.n_components}{fitted})"


def _check_points(who, x, dim=None):
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or x.shape[0] == 0 or \
            not x.dtype.is_floating_point:
        raise ValueError(f"{_WHO}.{who}: points must be a floating (N, D) tensor with N >= 1, "
                         f"got {getattr(x, 'shape', type(x).__name__)}")
    if dim is not None and x.shape[1] != dim:
        raise ValueError(f"{_WHO}.{who}: points have dimension {x.shape[1]} but the mixture "
                         f"{dim}")
    if not bool(torch.isfinite(x.detach()).all()):
        raise ValueError(f"{_WHO}.{who}: points must be finite")
    return x


def _weights(x, weights):
    if weights is None:
        return torch.ones(x.shape[0], dtype=x.dtype, device=x.device)
    if not isinstance(weights, torch.Tensor) or weights.shape != (x.shape[0],):
        raise ValueError(f"{_WHO}: weights must be a tensor of shape ({x.shape[0]},)")
    if not bool((weights.detach() >= 0).all() & torch.isfinite(weights.detach()).all()) or \
            not float(weights.detach().sum()) > 0:
        raise ValueError(f"{_WHO}: weights must be finite, >= 0, with a positive sum")
    return weights.to(x)
