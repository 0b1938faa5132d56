"""Exact GP regression: the log marginal likelihood and its gradient (dense Cholesky or BBMM on
the core) and predictions (mean, per-point variances), with Gaussian noise and a zero or constant
mean."""
import math

import numpy as np
import torch

from .. import _core
from ._problem import _numpy64, _Problem, refuse_second_order
from .fit import fit_model
from ._data import GPData
from . import _torch_bbmm
from .love import love_variances, love_variances_on_device, predictive_weights
from .samples import posterior_samples

__all__ = ["ExactGP"]

_MODES = ("auto", "exact", "bbmm")


class _BBMM(torch.autograd.Function):
    """log p(y) by the core's BBMM, its gradient for theta, the noise and y (no dK matrix)."""

    @staticmethod
    def forward(ctx, theta, noise, y, prob, opts, stats):
        grad_theta = np.zeros(prob.params[0].shape, dtype=prob.params[0].dtype)
        out = _core.gp_log_marginal_likelihood(
            prob.formula, prob.params, prob.x, _numpy64(y), _numpy64(noise), [2], [grad_theta],
            **opts)
        value, quad, logdet, logdet_p, samples, alpha, grad_noise, rank, cg = out
        if stats is not None:
            stats.update(value=value, quad=quad, logdet=logdet, logdet_precond=logdet_p,
                         logdet_samples=list(samples), rank=rank, cg=cg)
        ctx.save_for_backward(
            torch.as_tensor(grad_theta, dtype=theta.dtype),
            torch.as_tensor(np.asarray(grad_noise), dtype=noise.dtype),
            torch.as_tensor(-alpha, dtype=y.dtype))
        return torch.as_tensor(value, dtype=torch.float64)

    @staticmethod
    def backward(ctx, g):
        refuse_second_order("ExactGP.log_marginal_likelihood")
        gt, gn, gy = ctx.saved_tensors
        return g * gt, g * gn, g * gy, None, None, None


class ExactGP(GPData):
    """Exact GP regression y = f(x) + e, f ~ GP(mean, k), e ~ N(0, noise) (GPyTorch's ExactGP
    with a Gaussian likelihood, or scikit-learn's GaussianProcessRegressor).

    Two modes compute the log marginal likelihood log p(y) and its gradient in every
    hyperparameter: "exact" (dense float64 Cholesky in PyTorch, O(n^2) memory: small n and tests)
    and "bbmm" (the core's pivoted-Cholesky preconditioner, batched CG on y and `probes` probe
    vectors, stochastic Lanczos quadrature and the variance-reduced trace estimate, as GPyTorch;
    O(n) memory; the gradient comes from the kernel reduction's own gradient). "auto" takes
    exact up to `exact_max` points.

    Parameters
    ----------
    x : torch.Tensor
        (n, d) training inputs, float32 or float64.
    y : torch.Tensor
        (n,) targets.
    kernel : Kernel
        The covariance (tessel.gp kernels).
    noise : float or torch.Tensor
        The initial noise variance (> 0; 0 with fixed_noise=True means noiseless), or (n,)
        known per-point variances (GPyTorch's FixedNoiseGaussianLikelihood, scikit-learn's
        array `alpha`), which stay fixed.
    mean : {"constant", "zero"}
        A learned constant mean (initialised at 0), or none.
    fixed_noise : bool, optional
        Keep the noise at its value (no parameter). Default: False for one number, True for
        per-point variances.
    exact_max : int
        The largest n for which "auto" uses the exact mode.
    noise_min : float
        A learned noise is noise_min + softplus(raw) (GPyTorch's default floor, 1e-4): without
        one, noiseless data drive the noise to 0 and K + noise to singular. Standardise y, or
        lower it, when the targets' scale is far below 1.

    Raises
    ------
    ValueError
        For shapes that do not match, non-finite data, a bad noise or mean.
    TypeError
        For half-precision inputs or a kernel that is not a tessel.gp kernel.

    Examples
    --------
    >>> import torch
    >>> from tessel.gp import ExactGP, RBF, Scale
    >>> x = torch.linspace(0, 1, 20, dtype=torch.float64)[:, None]
    >>> gp = ExactGP(x, torch.sin(6 * x[:, 0]), Scale(RBF(lengthscale=0.3)), noise=0.01)
    >>> lml = gp.log_marginal_likelihood(mode="exact")
    >>> lml.backward()
    >>> mean, var = gp.predict(x[:3], mode="exact")
    >>> mean.shape, bool((var >= 0).all())
    (torch.Size([3]), True)
    """

    def __init__(self, x, y, kernel, noise=0.1, mean="constant", fixed_noise=None,
                 exact_max=4000, noise_min=1e-4):
        super().__init__(x, y, kernel, noise, mean, fixed_noise, noise_min, "ExactGP")
        self.exact_max = exact_max

    def _mode(self, mode, who):
        if mode not in _MODES:
            raise ValueError(f"{who}: mode must be one of {_MODES}, got {mode!r}")
        if mode == "auto":
            return "exact" if self.x.shape[0] <= self.exact_max else "bbmm"
        return mode

    def log_marginal_likelihood(self, mode="auto", probes=10, rank=15, seed=0, tol=1e-4,
                                maxiter=0, stats=None):
        """log p(y), differentiable in every hyperparameter (kernel, noise, mean).

        Parameters
        ----------
        mode : {"auto", "exact", "bbmm"}
            See the class.
        probes : int
            BBMM: probe vectors for the log-determinant and the trace.
        rank : int
            BBMM: the pivoted-Cholesky preconditioner's rank.
        seed : int
            BBMM: the probes' seed (the estimate is random; fix it for reproducibility).
        tol : float
            BBMM: CG's relative residual per column.
        maxiter : int
            BBMM: CG's iteration limit (0: min(2 n, 1000)).
        stats : dict, optional
            BBMM: filled with the log-determinant's parts and samples, the preconditioner's
            rank and CG's report (iterations, residuals, converged).

        Returns
        -------
        torch.Tensor
            A float64 scalar.

        Raises
        ------
        ValueError
            For a singular K + noise (duplicate points with zero noise, a degenerate kernel).

        Examples
        --------
        >>> import torch
        >>> from tessel.gp import ExactGP, Matern
        >>> x = torch.rand(30, 2, dtype=torch.float64)
        >>> gp = ExactGP(x, x[:, 0], Matern(nu=1.5))
        >>> float(gp.log_marginal_likelihood(mode="exact")) < 0
        True
        """
        mode = self._mode(mode, "ExactGP.log_marginal_likelihood")
        r = self.y - self._mean()
        if mode == "exact":
            return self._exact_lml(r)
        if self.x.device.type != "cpu":  # the core's GP functions take host arrays
            return _torch_bbmm.log_marginal_likelihood(self, _torch_bbmm.Rows(self), probes, rank,
                                                       seed, tol, maxiter, stats,
                                                       "ExactGP.log_marginal_likelihood")
        prob = _Problem(self.kernel, self.x)
        noise = self.noise
        opts = dict(probes=probes, rank=rank, seed=seed, tol=tol, maxiter=maxiter)
        return _BBMM.apply(prob.theta, noise, r, prob, opts, stats)

    def fit(self, optimizer="lbfgs", max_iter=100, lr=None, mode="auto", probes=10, rank=15,
            seed=0, tol=1e-4, cg_maxiter=0, gtol=1e-5, ftol=1e-9, progress=None, callback=None):
        """Fits every hyperparameter (kernel, noise, mean) by maximising log p(y).

        The loss is -log p(y) / n (GPyTorch's scale). L-BFGS (strong Wolfe line search) sees one
        BBMM objective, its probes fixed by `seed`; Adam draws fresh probes every step.

        Parameters
        ----------
        optimizer : {"lbfgs", "adam"}
        max_iter : int
            Iterations (L-BFGS: each with its line search's evaluations; Adam: steps).
        lr : float, optional
            The step size (default 1 for L-BFGS, 0.1 for Adam).
        mode, probes, rank, seed, tol
            As in `log_marginal_likelihood`.
        cg_maxiter : int
            BBMM: CG's iteration limit (0: min(2 n, 1000)).
        gtol : float
            Stop once the gradient's norm is at most this.
        ftol : float
            L-BFGS: stop once an iteration changes the loss by at most ftol * max(1, |loss|).
        progress : bool, optional
            True: a line on stderr every iteration; False: none; None: lines once 3 s have
            passed, then every 5 s.
        callback : callable, optional
            Called with each history row; returning True stops the fit.

        Returns
        -------
        list of dict
            The history (also kept as `history_`): one row per iteration at the point it
            started from, and a last row where the fit ended, with "iteration", "loss",
            "grad_norm", "cg_iterations" (BBMM; summed over the iteration's evaluations) and
            "seconds".

        Raises
        ------
        FloatingPointError
            When the loss or its gradient goes non-finite (the message names the iteration and
            the hyperparameters).
        ValueError
            For bad options, or a model with nothing to fit.

        Warns
        -----
        RuntimeWarning
            When CG did not converge in some evaluation (the first one is named).

        Examples
        --------
        >>> import torch
        >>> from tessel.gp import ExactGP, RBF, Scale
        >>> x = torch.linspace(0, 1, 40, dtype=torch.float64)[:, None]
        >>> gp = ExactGP(x, torch.sin(6 * x[:, 0]), Scale(RBF()), noise=0.1)
        >>> history = gp.fit(max_iter=30, mode="exact")
        >>> history[-1]["loss"] < history[0]["loss"]
        True
        """
        return fit_model(self, optimizer=optimizer, max_iter=max_iter, lr=lr, mode=mode,
                         probes=probes, rank=rank, seed=seed, tol=tol, cg_maxiter=cg_maxiter,
                         gtol=gtol, ftol=ftol, progress=progress, callback=callback)

    def _exact_cholesky(self, who):
        x = self.x.to(torch.float64)
        # As the core: a singular K (equal points without noise) named, not rounded away.
        noiseless = torch.nonzero((self.noise == 0).expand(x.shape[0]))[:, 0]
        if noiseless.numel() > 1:
            _, inverse, counts = torch.unique(x[noiseless], dim=0, return_inverse=True,
                                              return_counts=True)
            if bool((counts > 1).any()):
                group = int(torch.nonzero(counts > 1)[0])
                a, b = noiseless[torch.nonzero(inverse == group)[:2, 0]].tolist()
                raise ValueError(f"{who}: points {a} and {b} are equal and the noise is 0 there: "
                                 "K + noise is singular; give a positive noise or remove "
                                 "duplicates")
        k = self.kernel.dense(x, x) + self.noise.to(torch.float64) * torch.eye(
            x.shape[0], dtype=torch.float64, device=x.device)
        chol, info = torch.linalg.cholesky_ex(k)
        if not bool(torch.isfinite(chol.diagonal()).all()):  # LAPACKs differ on NaN input
            raise ValueError(f"{who}: K + noise holds a NaN or an infinity (a non-finite "
                             "hyperparameter or noise)")
        if int(info) != 0:
            raise ValueError(f"{who}: K + noise is not positive definite (leading minor "
                             f"{int(info)}): duplicate points with zero noise, or a degenerate "
                             "kernel; give a positive noise")
        return chol

    def _exact_lml(self, r):
        chol = self._exact_cholesky("ExactGP.log_marginal_likelihood")
        alpha = torch.cholesky_solve(r[:, None], chol)[:, 0]
        n = r.shape[0]
        return -0.5 * (r @ alpha) - torch.log(torch.diagonal(chol)).sum() - \
            0.5 * n * math.log(2 * math.pi)

    @torch.no_grad()
    def predict(self, x_test, mode="auto", return_var=True, include_noise=False, rank=15,
                tol=1e-8, chunk=32, stats=None, love_rank=100, love_check=0, seed=0):
        """The posterior mean and per-point variances at x_test.

        Parameters
        ----------
        x_test : torch.Tensor
            (m, d) test inputs.
        mode : {"auto", "exact", "bbmm", "love"}
            "exact": dense Cholesky; "bbmm": batched preconditioned CG on the core, O(n) memory
            (the variances by solves of `chunk` test points at a time, exact to CG's tol);
            "love": the mean as "bbmm", the variances by LOVE (Pleiss et al. 2018, GPyTorch's
            fast_pred_var): `love_rank` Lanczos steps on K + noise from a random start (`seed`)
            give a root R (n, love_rank), kept on the model until the hyperparameters change,
            with (K + noise)^-1 ~ R R^T; then every test point's variance costs a product with
            love_rank columns, not a solve. Its error: R R^T is the Galerkin approximation of
            (K + noise)^-1 on the Lanczos space, so LOVE's variances are never below the exact
            ones (to rounding) and come down to them as love_rank grows; `love_check` measures
            the excess at that many test points.
        return_var : bool
            Also return the variances.
        include_noise : bool
            Add the noise variance (the variance of a new observation, not of f).
        rank : int
            BBMM: the preconditioner's rank.
        tol : float
            BBMM: CG's relative residual.
        chunk : int
            BBMM: test points per batched solve. A last, smaller block is solved padded with
            zero columns to a power of two: a product kernel is compiled per column count, so
            any number of test points needs only a few.
        stats : dict, optional
            BBMM and LOVE: filled with the CG reports of the mean's solve and the variances'
            solves; LOVE: "love_rank" (Lanczos steps taken) and, with love_check, "love_check"
            (the points checked, their exact variances, LOVE's excess and its maximum).
        love_rank : int
            LOVE: the Lanczos steps (GPyTorch's max_root_decomposition_size, 100); memory
            n * love_rank doubles.
        love_check : int
            LOVE: test points (spread over x_test) whose variances are also solved exactly.
        seed : int
            LOVE: the Lanczos start.

        Returns
        -------
        torch.Tensor or tuple of torch.Tensor
            The mean (m,), and the variances (m,) when return_var.

        Raises
        ------
        ValueError
            For test points of another dimension or non-finite ones.

        Examples
        --------
        >>> import torch
        >>> from tessel.gp import ExactGP, RBF
        >>> x = torch.linspace(0, 1, 10, dtype=torch.float64)[:, None]
        >>> gp = ExactGP(x, x[:, 0], RBF(), noise=1e-3, mean="zero")
        >>> mean, var = gp.predict(torch.tensor([[0.5]], dtype=torch.float64), mode="exact")
        >>> round(float(mean), 2), float(var) < 1e-3
        (0.5, True)
        """
        who = "ExactGP.predict"
        xt = self._test_points(x_test, who)
        if include_noise and self.noise.numel() > 1:
            raise ValueError(f"{who}: include_noise with per-point noise: the test points' noise "
                             "is not known; add it to the variances yourself")
        if mode not in _MODES + ("love",):
            raise ValueError(f"{who}: mode must be one of {_MODES + ('love',)}, got {mode!r}")
        love = mode == "love"
        mode = "bbmm" if love else self._mode(mode, who)
        if xt.shape[0] == 0:  # every mode: nothing to predict (the core refuses empty arrays)
            empty = torch.zeros(0, dtype=torch.float64, device=self.x.device)
            return (empty, empty.clone()) if return_var else empty
        c = self._mean().detach()
        r = self.y - c
        if mode == "exact":
            mean, var = self._exact_predict(xt.to(torch.float64), r, return_var)
        elif self.x.device.type != "cpu":
            xd = xt.to(self.x.dtype)
            mean, var = _torch_bbmm.predict(self, _torch_bbmm.Rows(self), xd, r,
                                            return_var and not love, rank, tol, chunk, stats)
            if return_var and love:
                var = love_variances_on_device(self, xd, love_rank, seed, love_check, rank, tol,
                                               stats)
        else:
            mean = self._bbmm_mean(xt.to(self.x.dtype), r, rank, tol, stats)
            if not return_var:
                var = None
            elif love:
                pt = np.ascontiguousarray(xt.detach().to(self.x.dtype).cpu().numpy())
                var = love_variances(self, pt, love_rank, seed, love_check, rank, tol, stats)
            else:
                var = self._bbmm_variances(xt.to(self.x.dtype), rank, tol, chunk, stats)
        mean = mean + c
        if not return_var:
            return mean
        if include_noise:
            var = var + self.noise.detach().to(torch.float64)
        return mean, var

    def sample(self, x_test, samples=1, features=2048, seed=0, mode="auto", rank=15, tol=1e-6):
        """Joint posterior samples of f at x_test, (m, samples), in O((n + m) samples) memory.

        The pathwise (Matheron) update of a prior draw: random Fourier features for the
        stationary kernels (RBF, Matérn, rational quadratic, periodic, spectral mixture), exact
        features for Linear and Polynomial, combined through Scale, sums and products (a
        product's frequencies are sums of its factors', its exact features a tensor product),
        moved to the posterior by one batched solve with `samples` columns (exact to CG's tol).
        The prior draw's covariance is the kernel's to a relative error of about
        sqrt(2 / features) per entry; the samples are exact in their mean. See
        tessel.gp.samples. On a GPU the draw's random numbers come from the host's generator
        (the same seed gives the same functions on either device) and the solve and products
        run on the device.

        Parameters
        ----------
        x_test : torch.Tensor
            (m, d) points.
        samples : int
            Functions drawn.
        features : int
            Random Fourier features per stationary kernel.
        seed : int
            Fixes the draw.
        mode, rank, tol
            As in predict ("exact": dense Cholesky; "bbmm": CG on the core).

        Returns
        -------
        torch.Tensor
            (m, samples) float64.

        Raises
        ------
        NotImplementedError
            For kernels without a feature draw: a kernel class defined outside tessel.gp,
            Periodic(distance="euclidean") for d > 1 (not positive definite), a product of
            Linear and Polynomial factors with more exact features (monomials) than
            max(features, d + 1), or more than 64 of them beside a stationary factor;
            predict_covariance gives joint samples at a few points.

        Examples
        --------
        >>> import torch
        >>> from tessel.gp import ExactGP, RBF
        >>> x = torch.linspace(0, 1, 20, dtype=torch.float64)[:, None]
        >>> gp = ExactGP(x, torch.sin(6 * x[:, 0]), RBF(0.2), noise=1e-3)
        >>> gp.sample(x[:4], samples=3).shape
        torch.Size([4, 3])
        """
        return posterior_samples(self, x_test, samples, features, seed, mode, rank, tol)

    @torch.no_grad()
    def predict_covariance(self, x_test, mode="auto", rank=15, tol=1e-8):
        """The posterior covariance of f at x_test, an (m, m) matrix.

        Exact mode: dense Cholesky. BBMM mode: one batched CG solve with the m columns of
        K(x, x_test), O(n m) memory.

        Examples
        --------
        >>> import torch
        >>> from tessel.gp import ExactGP, RBF
        >>> x = torch.linspace(0, 1, 10, dtype=torch.float64)[:, None]
        >>> gp = ExactGP(x, x[:, 0], RBF(), noise=1e-3)
        >>> cov = gp.predict_covariance(x[:4], mode="exact")
        >>> cov.shape, bool(torch.allclose(cov, cov.T))
        (torch.Size([4, 4]), True)
        """
        who = "ExactGP.predict_covariance"
        xt = self._test_points(x_test, who)
        xt = xt.to(torch.float64)
        x = self.x.to(torch.float64)
        prior = self.kernel.dense(xt, xt).detach()
        if self._mode(mode, who) == "exact":
            chol = self._exact_cholesky(who)
            v = torch.linalg.solve_triangular(chol, self.kernel.dense(x, xt).detach(), upper=False)
            cov = prior - v.T @ v
        elif self.x.device.type != "cpu":
            ks = self.kernel.dense(x, xt).detach()
            sol, _ = _torch_bbmm.solve(self, _torch_bbmm.Rows(self), ks, rank, tol)
            cov = prior - ks.T @ sol
        else:
            ks = self.kernel.dense(x, xt).detach()
            prob = _Problem(self.kernel, self.x)
            sol, _ = _core.gp_solve(prob.formula, prob.params, prob.x, _numpy64(self.noise),
                                    _numpy64(ks).reshape(-1), ks.shape[1], rank, tol)
            cov = prior - ks.T @ torch.as_tensor(sol)
        return 0.5 * (cov + cov.T)  # symmetric to rounding, as a covariance must be

    def _exact_predict(self, xt, r, return_var):
        chol = self._exact_cholesky("ExactGP.predict")
        x = self.x.to(torch.float64)
        ks = self.kernel.dense(xt, x)
        mean = ks @ torch.cholesky_solve(r[:, None], chol)[:, 0]
        if not return_var:
            return mean, None
        v = torch.linalg.solve_triangular(chol, ks.T, upper=False)
        return mean, (self.kernel.diag(xt) - (v * v).sum(0)).clamp_min(0)

    def _bbmm_mean(self, xt, r, rank, tol, stats):
        prob, alpha = predictive_weights(self, r, rank, tol, stats)
        pt = np.ascontiguousarray(xt.detach().cpu().numpy())
        mean = _core.gp_kernel_product(prob.formula, prob.params, pt, prob.x, alpha, 1)[:, 0]
        return torch.as_tensor(mean)

    def _bbmm_variances(self, xt, rank, tol, chunk, stats):
        prob = _Problem(self.kernel, self.x)
        pt = np.ascontiguousarray(xt.detach().cpu().numpy())
        var, vrep = _core.gp_predictive_variance(prob.formula, prob.params, prob.x,
                                                 _numpy64(self.noise), pt, rank, tol, chunk=chunk)
        if stats is not None:
            stats["variance_solves"] = vrep
        return torch.as_tensor(var)
