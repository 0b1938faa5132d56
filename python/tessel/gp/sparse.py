"""Sparse GP regression on M inducing points (Titsias's variational bound: GPflow's SGPR, GPyTorch's
InducingPointKernel): a fit to a million points in O(M^2 + chunk M) memory, the kernel between the
points and the inducing points made one chunk of rows at a time and never kept."""
import math

import torch

from ._data import GPData
from ._problem import refuse_second_order, row_blocks
from .fit import fit_model
from .love import _digest, cached

__all__ = ["SparseGP"]

_MODES = ("auto", "sgpr")


def _noise_weights(model):
    """(s, v, log_det): the noise precision is s * v_i with s a differentiable scalar (1 / noise,
    or 1 for per-point noise) and v fixed weights (1, or 1 / noise_i), and the log-determinant of
    the noise covariance."""
    noise = model.noise
    n = model.n_data
    if noise.numel() == 1:
        s = 1.0 / noise.reshape(())
        return s, None, n * torch.log(noise.reshape(()))
    v = 1.0 / noise
    return torch.ones((), dtype=torch.float64, device=noise.device), v, torch.log(noise).sum()


def _chunks(model, chunk):
    return row_blocks(model.n_data, model.inducing.shape[0], chunk)


def _kxz(model, rows):
    return model.kernel.dense(model.x[rows].to(torch.float64), model.inducing)


@torch.no_grad()
def _accumulate(model, chunk, v):
    """phi = K_ZX V K_XZ, ky = K_ZX V y, k1 = K_ZX V 1 and the scalars of y (V = diag(v)), summed
    over chunks of rows in float64."""
    m = model.inducing.shape[0]
    opts = dict(dtype=torch.float64, device=model.x.device)
    phi, ky, k1 = torch.zeros(m, m, **opts), torch.zeros(m, **opts), torch.zeros(m, **opts)
    for rows in _chunks(model, chunk):
        k = _kxz(model, rows)
        w = k if v is None else k * v[rows, None]
        phi += w.T @ k
        ky += w.T @ model.y[rows]
        k1 += w.sum(0)
    y, ones = model.y, torch.ones_like(model.y)
    vv = ones if v is None else v
    return phi, ky, k1, (vv * y * y).sum(), (vv * y).sum(), vv.sum()


def _factors(model, phi_v, ky_v, k1_v, s, who):
    """L = chol(K_ZZ + jitter), L_B = chol(I + L^-1 Phi L^-T) and c = L_B^-1 L^-1 psi, with
    Phi = s phi_v and psi = s (ky_v - mean k1_v): differentiable in all of them."""
    kzz = model.kernel.dense(model.inducing, model.inducing)
    m = kzz.shape[0]
    eye = torch.eye(m, dtype=torch.float64, device=kzz.device)
    jitter = model.jitter * kzz.diagonal().mean().detach().clamp_min(1e-300)
    chol, info = torch.linalg.cholesky_ex(kzz + jitter * eye)
    if int(info) != 0:
        raise ValueError(f"{who}: the inducing points' kernel matrix is not positive definite "
                         f"(leading minor {int(info)}) with jitter {model.jitter:g}: raise jitter "
                         "or use fewer inducing points")
    a = torch.linalg.solve_triangular(chol, s * phi_v, upper=False)
    a = torch.linalg.solve_triangular(chol, a.T, upper=False)  # L^-1 Phi L^-T (symmetric)
    a = 0.5 * (a + a.T)
    chol_b, info = torch.linalg.cholesky_ex(a + eye)
    if int(info) != 0:
        raise ValueError(f"{who}: I + L^-1 K_ZX K_XZ L^-T / noise is not positive definite: the "
                         "noise is too small for float64 at this jitter; raise noise_min or jitter")
    psi = s * (ky_v - model._mean() * k1_v)
    c = torch.linalg.solve_triangular(chol_b, torch.linalg.solve_triangular(
        chol, psi[:, None], upper=False), upper=False)[:, 0]
    return chol, chol_b, c, a


def _bound(model, phi_v, ky_v, k1_v, yy_v, y1_v, n_v, who):
    """Titsias's bound from the accumulated sums, differentiable in the sums and every
    hyperparameter (through K_ZZ, the noise, the mean and the kernel's diagonal)."""
    s, v, log_det_noise = _noise_weights(model)
    chol, chol_b, c, a = _factors(model, phi_v, ky_v, k1_v, s, who)
    mu = model._mean()
    quad = s * (yy_v - 2 * mu * y1_v + mu * mu * n_v) - c @ c
    diag = model.kernel.diag(model.x.to(torch.float64))
    trace_k = s * (diag.sum() if v is None else (v * diag).sum())
    n = model.n_data
    log_det_b = 2 * torch.log(chol_b.diagonal()).sum()
    return (-0.5 * (n * math.log(2 * math.pi) + log_det_noise + log_det_b + quad)
            - 0.5 * (trace_k - a.diagonal().sum())).reshape(())


class _Bound(torch.autograd.Function):
    """The bound's value, and its gradient by a second pass over the chunks: the sums' gradients
    G (M x M) and g (M) make d bound / d K_XZ = V (K_XZ (G + G^T) + y g_y^T + 1 g_1^T) chunk by
    chunk, so the (n, M) kernel block and its derivatives are never all kept."""

    @staticmethod
    def forward(ctx, model, chunk, who, *params):
        _, v, _ = _noise_weights(model)
        sums = _accumulate(model, chunk, v)
        leaves = [t.detach().requires_grad_() for t in sums[:3]]
        with torch.enable_grad():
            value = _bound(model, *leaves, *sums[3:], who)
            grads = torch.autograd.grad(value, leaves + list(params), allow_unused=True)
        ctx.model, ctx.chunk, ctx.v = model, chunk, v
        ctx.grads = grads
        ctx.params = params
        return value.detach()

    @staticmethod
    def backward(ctx, g):
        refuse_second_order("SparseGP.log_marginal_likelihood")
        model, v = ctx.model, ctx.v
        g_phi, g_ky, g_k1 = ctx.grads[:3]
        total = [t.clone() if t is not None else torch.zeros_like(p)
                 for t, p in zip(ctx.grads[3:], ctx.params)]
        h = g_phi + g_phi.T
        with torch.enable_grad():
            for rows in _chunks(model, ctx.chunk):
                k = _kxz(model, rows)
                w = k.detach() @ h + model.y[rows, None] * g_ky + g_k1
                if v is not None:
                    w = w * v[rows, None]
                part = torch.autograd.grad((k * w).sum(), ctx.params, allow_unused=True)
                for t, d in zip(total, part):
                    if d is not None:
                        t += d
        return (None, None, None) + tuple(g * t for t in total)


class SparseGP(GPData):
    """Sparse GP regression on M inducing points Z (Titsias, "Variational learning of inducing
    variables in sparse Gaussian processes", 2009; GPflow's SGPR, GPyTorch's SGPR example).

    The objective is Titsias's lower bound on log p(y): log N(y | mean, Q + noise) -
    tr(K - Q) / (2 noise) with Q = K_XZ K_ZZ^-1 K_ZX. It is never above the exact log p(y), equals
    it when Z holds the training points (up to the jitter), and rises towards it as M grows;
    the inducing points are learned with the hyperparameters (or fixed). One evaluation with its
    gradient costs O(n M^2) in dense float64 products and O(M^2 + chunk M) memory: the (n, M)
    kernel block is made one chunk of rows at a time, twice (value, then gradient) and never
    kept, so n = 1e6 points fit in well under 1 GB. Predictions are the bound's optimal
    posterior (mean and per-point variances).

    Parameters
    ----------
    x, y, kernel, noise, mean, fixed_noise, noise_min
        As ExactGP; a fixed noise must be > 0 (the bound needs one).
    inducing : int or torch.Tensor
        M, the number of inducing points, drawn without replacement from x (with `seed`), or
        their (M, d) initial positions.
    learn_inducing : bool
        Fit Z with the hyperparameters (GPflow's and GPyTorch's default) or keep it.
    jitter : float
        Added to K_ZZ's diagonal, relative to its mean (1e-6: the bound is then below log p(y)
        by about n * jitter * k(x, x) / (2 noise) at most, where Z = X).
    chunk : int, optional
        Rows of x per block (default: 2^19 / M, a 4 MB block: its gradient's autograd graph
        holds some ten of them).
    seed : int
        The draw of the inducing points.

    Raises
    ------
    ValueError
        As ExactGP; for a bad `inducing` (M < 1, M > n, wrong shape, non-finite), a noise of 0,
        a bad jitter or chunk.

    Examples
    --------
    >>> import torch
    >>> from tessel.gp import SparseGP, Matern, Scale
    >>> x = torch.rand(500, 2, dtype=torch.float64)
    >>> gp = SparseGP(x, torch.sin(6 * x[:, 0]), Scale(Matern(nu=2.5)), inducing=20)
    >>> history = gp.fit(max_iter=5)
    >>> mean, var = gp.predict(x[:3])
    >>> mean.shape, bool((var > 0).all())
    (torch.Size([3]), True)
    """

    def __init__(self, x, y, kernel, inducing=512, noise=0.1, mean="constant", fixed_noise=None,
                 noise_min=1e-4, learn_inducing=True, jitter=1e-6, chunk=None, seed=0):
        who = "SparseGP"
        super().__init__(x, y, kernel, noise, mean, fixed_noise, noise_min, who)
        if not bool((self.noise > 0).all()):
            raise ValueError(f"{who}: the noise must be > 0 (Titsias's bound divides by it), got "
                             f"{self.noise.reshape(-1)[:4].tolist()}")
        for name, val, ok, expected in (
                ("jitter", jitter, lambda t: isinstance(t, (int, float)) and 0 <= t < 1,
                 "a number in [0, 1)"),
                ("chunk", chunk, lambda t: t is None or (isinstance(t, int) and t >= 1),
                 "None or an int >= 1"),
                ("learn_inducing", learn_inducing, lambda t: isinstance(t, bool), "a bool")):
            if not ok(val):
                raise ValueError(f"{who}: {name} must be {expected}, got {val!r}")
        self.jitter, self.chunk = float(jitter), chunk
        z = self._initial_inducing(inducing, seed, who)
        if learn_inducing:
            self.inducing = torch.nn.Parameter(z)
        else:
            self.register_buffer("inducing", z)

    def _initial_inducing(self, inducing, seed, who):
        n, d = self.x.shape
        if isinstance(inducing, bool) or not isinstance(inducing, (int, torch.Tensor)):
            raise ValueError(f"{who}: inducing must be an int or an (M, {d}) tensor, got "
                             f"{type(inducing).__name__}")
        if isinstance(inducing, int):
            if not 1 <= inducing <= n:
                raise ValueError(f"{who}: inducing must be between 1 and n = {n} points, got "
                                 f"{inducing}")
            gen = torch.Generator().manual_seed(seed)
            rows = torch.randperm(n, generator=gen)[:inducing].to(self.x.device)
            return self.x[rows].detach().to(torch.float64).clone()
        z = inducing.detach().to(device=self.x.device, dtype=torch.float64).clone()
        if z.dim() != 2 or z.shape[1] != d or z.shape[0] < 1:
            raise ValueError(f"{who}: inducing must be (M, {d}) with M >= 1, got shape "
                             f"{tuple(z.shape)}")
        if not bool(torch.isfinite(z).all()):
            raise ValueError(f"{who}: inducing holds a NaN or an infinity")
        return z

    def _mode(self, mode, who):
        if mode not in _MODES:
            raise ValueError(f"{who}: mode must be one of {_MODES}, got {mode!r}")
        return "sgpr"

    def log_marginal_likelihood(self, mode="auto", stats=None, seed=0):
        """Titsias's lower bound on log p(y) (the ELBO), differentiable in every hyperparameter
        and in the inducing points; ExactGP's name, so that the same code fits either model.

        Parameters
        ----------
        mode : {"auto", "sgpr"}
            One method; accepted for ExactGP's signature.
        stats : dict, optional
            Filled with M and the chunk size.
        seed : int
            Unused (the bound is deterministic); ExactGP's signature.

        Returns
        -------
        torch.Tensor
            A float64 scalar, <= the exact log p(y).

        Examples
        --------
        >>> import torch
        >>> from tessel.gp import ExactGP, SparseGP, RBF
        >>> x = torch.linspace(0, 1, 50, dtype=torch.float64)[:, None]
        >>> y = torch.sin(6 * x[:, 0])
        >>> bound = SparseGP(x, y, RBF(0.2), inducing=10).log_marginal_likelihood()
        >>> bool(bound <= ExactGP(x, y, RBF(0.2)).log_marginal_likelihood(mode="exact"))
        True
        """
        who = "SparseGP.log_marginal_likelihood"
        self._mode(mode, who)
        if stats is not None:
            stats.update(inducing=self.inducing.shape[0], chunk=next(_chunks(self, self.chunk)))
        params = [p for p in self.parameters() if p.requires_grad]
        if not torch.is_grad_enabled() or not params:
            _, v, _ = _noise_weights(self)
            return _bound(self, *_accumulate(self, self.chunk, v), who)
        return _Bound.apply(self, self.chunk, who, *params)

    elbo = log_marginal_likelihood

    def fit(self, optimizer="lbfgs", max_iter=100, lr=None, gtol=1e-5, ftol=1e-9, progress=None,
            callback=None):
        """Fits the hyperparameters and the inducing points by maximising the bound (see
        ExactGP.fit for the optimisers, the history and the progress lines).

        Returns
        -------
        list of dict
            One row per iteration: iteration, loss (-bound / n), grad_norm, seconds.
        """
        return fit_model(self, optimizer=optimizer, max_iter=max_iter, lr=lr, gtol=gtol,
                         ftol=ftol, progress=progress, callback=callback, who="SparseGP.fit")

    def _posterior(self, who):
        """(L, L_B, c) at the current hyperparameters, kept until they, the kernel's formula,
        the points or the targets change."""
        key = (_digest(*[p.detach().cpu().numpy() for p in self.parameters()],
                       self.inducing.detach().cpu().numpy(), self.x.detach().cpu().numpy(),
                       self.y.detach().cpu().numpy(), self.noise.detach().cpu().numpy()),
               self.x.shape, repr(self.kernel.formula(self.x.shape[1])[:2]))

        def make():
            s, v, _ = _noise_weights(self)
            phi, ky, k1 = _accumulate(self, self.chunk, v)[:3]
            chol, chol_b, c, _ = _factors(self, phi, ky, k1, s, who)
            return chol, chol_b, c

        return cached(self, "_sparse_posterior", key, make)

    @torch.no_grad()
    def predict(self, x_test, return_var=True, include_noise=False, chunk=4096):
        """The posterior mean and per-point variances at x_test (the bound's optimal q(f)).

        Parameters
        ----------
        x_test : torch.Tensor
            (m, d) points.
        return_var : bool
            Also the variances.
        include_noise : bool
            Variances of new observations (+ noise; per-point noise has no value at new
            points, so it is refused there).
        chunk : int
            Test points per block.

        Returns
        -------
        torch.Tensor or tuple
            mean (m,), and var (m,) when return_var, float64.

        Examples
        --------
        >>> import torch
        >>> from tessel.gp import SparseGP, RBF
        >>> x = torch.rand(40, 1, dtype=torch.float64)
        >>> mean = SparseGP(x, x[:, 0], RBF(), inducing=8).predict(x[:2], return_var=False)
        >>> mean.shape
        torch.Size([2])
        """
        who = "SparseGP.predict"
        xt = self._test_points(x_test, who).to(torch.float64)
        if include_noise and self.noise.numel() > 1:
            raise ValueError(f"{who}: include_noise=True needs one noise level; this model has "
                             "per-point noise")
        chol, chol_b, c = self._posterior(who)
        weights = torch.linalg.solve_triangular(chol.T, torch.linalg.solve_triangular(
            chol_b.T, c[:, None], upper=True), upper=True)[:, 0]
        means, variances = [], []
        for lo in range(0, xt.shape[0], chunk):
            k = self.kernel.dense(self.inducing, xt[lo:lo + chunk])
            means.append(self._mean() + k.T @ weights)
            if return_var:
                a = torch.linalg.solve_triangular(chol, k, upper=False)
                b = torch.linalg.solve_triangular(chol_b, a, upper=False)
                var = self.kernel.diag(xt[lo:lo + chunk]) - (a * a).sum(0) + (b * b).sum(0)
                variances.append(var.clamp_min(0))
        mean = torch.cat(means) if means else torch.zeros(0, dtype=torch.float64)
        if not return_var:
            return mean
        var = torch.cat(variances) if variances else torch.zeros(0, dtype=torch.float64)
        return mean, var + self.noise.reshape(()) if include_noise else var
