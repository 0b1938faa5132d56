"""Nyström kernel ridge regression (Falkon-style) on tessel's kernel reductions: M centres, CG
preconditioned by the Cholesky factors of K_MM, several outputs at once, O(n) memory per output."""
import numbers
import warnings

import numpy as np
import torch

from .. import _core
from ._data import _as_tensor
from ._ridge_gcv import GCVObjective
from .fit import fit_model
from .kernels import Kernel

__all__ = ["NystromRidge"]


class NystromRidge:
    """Kernel ridge regression restricted to M centres (Nyström), solved as Falkon does.

    f(x) = K(x, C) alpha, alpha minimising |K_nM alpha - y|^2 / n + lam alpha^T K_MM alpha:
    (K_nM^T K_nM + lam n K_MM) alpha = K_nM^T y, solved by CG preconditioned with T = chol(K_MM)
    and chol(T T^T / M + lam I) in the core, each iteration one product with K_nM and one with
    its transpose over every output at once. With the centres equal to the training points it
    is exact kernel ridge regression (scikit-learn's KernelRidge with alpha = lam n).

    Parameters
    ----------
    kernel : Kernel
        A tessel.gp kernel (its hyperparameters are read, not fitted).
    centres : int or array-like
        M, the number of training points drawn (uniformly, without replacement) as centres, or
        the (M, d) centres themselves.
    lam : float
        The ridge penalty, > 0.
    tol : float
        CG's relative residual per output (of the preconditioned system). float64 reaches about
        1e-8 when K_MM is ill-conditioned (close centres, small lam), float32 about 1e-3 to 1e-2:
        a warning says when CG stopped short of tol.
    maxiter : int
        CG's iteration limit (0: min(max(3 M, 100), 1000)).
    seed : int
        Draws the centres.

    Raises
    ------
    TypeError
        For a kernel that is not a tessel.gp kernel, or points that are not float32/float64.
    ValueError
        For lam <= 0, and at fit for shapes that do not match or non-finite data.

    Warns
    -----
    RuntimeWarning
        At fit, when CG did not reach tol.

    Attributes
    ----------
    centres_ : torch.Tensor
    alpha_ : torch.Tensor
        (M,) or (M, k) coefficients.
    report_ : dict
        CG's report (iterations, residuals, converged) and the jitter K_MM needed.

    Examples
    --------
    >>> import torch
    >>> from tessel.gp import NystromRidge, RBF
    >>> x = torch.rand(500, 2, dtype=torch.float64)
    >>> model = NystromRidge(RBF(0.3), centres=100, lam=1e-6).fit(x, torch.sin(5 * x[:, 0]))
    >>> float((model.predict(x) - torch.sin(5 * x[:, 0])).abs().max()) < 1e-2
    True
    """

    def __init__(self, kernel, centres=1000, lam=1e-6, tol=1e-6, maxiter=0, seed=0):
        who = "NystromRidge"
        if not isinstance(kernel, Kernel):
            raise TypeError(f"{who}: kernel must be a tessel.gp kernel, got "
                            f"{type(kernel).__name__}")
        # Any real scalar: a numpy float32 from a grid, a 0-d tensor.
        scalar = isinstance(lam, numbers.Real) and not isinstance(lam, bool) or \
            (torch.is_tensor(lam) and lam.numel() == 1)
        if not (scalar and np.isfinite(float(lam)) and float(lam) > 0):
            raise ValueError(f"{who}: lam must be a finite number > 0, got {lam!r}")
        self.kernel, self.centres, self.lam = kernel, centres, float(lam)
        self.tol, self.maxiter, self.seed = tol, maxiter, seed

    def _prepare(self, x, who, empty=False):
        x = _as_tensor(x)
        if x.dtype not in (torch.float32, torch.float64):
            raise TypeError(f"{who}: x must be float32 or float64, got {x.dtype}")
        if x.dim() != 2 or (x.shape[0] == 0 and not empty):
            raise ValueError(f"{who}: x must be (n, d) with n >= 1, got shape {tuple(x.shape)}")
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{who}: x holds a NaN or an infinity")
        return x.detach()

    def _formula(self, d, dtype):
        """The kernel's formula and its parameters in the points' dtype (the core's rule)."""
        text, aliases, theta = self.kernel.formula(d)
        np_dtype = np.float32 if dtype == torch.float32 else np.float64
        return _core.parse(text, aliases), [np.ascontiguousarray(
            theta.detach().cpu().numpy().astype(np_dtype))]

    def _centres(self, x, who):
        """The centres: M of the points drawn with `seed`, or the given ones, checked."""
        if isinstance(self.centres, (int, np.integer)) and not isinstance(self.centres, bool):
            m = int(self.centres)
            if m < 1:
                raise ValueError(f"{who}: centres must be >= 1, got {m}")
            g = torch.Generator().manual_seed(self.seed)
            pick = torch.randperm(x.shape[0], generator=g)[:min(m, x.shape[0])]
            return x[pick.sort().values]
        c = torch.as_tensor(self.centres).to(x.dtype)
        if c.dim() != 2 or c.shape[1] != x.shape[1]:
            raise ValueError(f"{who}: centres must be (M, {x.shape[1]}), got shape "
                             f"{tuple(c.shape)}")
        if not bool(torch.isfinite(c).all()):
            raise ValueError(f"{who}: centres hold a NaN or an infinity")
        return c.detach()

    def _targets(self, x, y, who):
        y = torch.as_tensor(y, dtype=torch.float64)
        if y.dim() not in (1, 2) or y.shape[0] != x.shape[0]:
            raise ValueError(f"{who}: y must be ({x.shape[0]},) or ({x.shape[0]}, k), got shape "
                             f"{tuple(y.shape)}")
        if not bool(torch.isfinite(y).all()):
            raise ValueError(f"{who}: y holds a NaN or an infinity")
        return y

    def fit(self, x, y):
        """Solves for the coefficients; returns self."""
        who = "NystromRidge.fit"
        x = self._prepare(x, who)
        y = self._targets(x, y, who)
        c = self._centres(x, who)
        f, params = self._formula(x.shape[1], x.dtype)
        cols = 1 if y.dim() == 1 else y.shape[1]
        xs = np.ascontiguousarray(x.cpu().numpy())
        cs = np.ascontiguousarray(c.detach().cpu().numpy())
        alpha, report, jitter = _core.nystrom_krr(
            f, params, xs, cs, np.ascontiguousarray(y.reshape(-1).numpy()), cols, self.lam,
            self.tol, self.maxiter)
        report["jitter"] = jitter
        if not all(report["converged"]):
            # float32 kernel values (rounded to 6e-8) times the large, alternating coefficients
            # an ill-conditioned K_MM gives: the residual stalls well above a float64 tol.
            warnings.warn(f"{who}: CG did not converge ({report['summary']}); the predictions "
                          "are as accurate as that residual: use float64 points, a larger lam, "
                          "or a looser tol", RuntimeWarning, stacklevel=2)
        self.centres_, self.report_ = c.detach(), report
        alpha = torch.as_tensor(alpha)
        self.alpha_ = alpha[:, 0] if y.dim() == 1 else alpha
        return self

    def gcv(self, x, y, probes=16, seed=0):
        """The generalised cross-validation score n |y - H y|^2 / (n - tr H)^2 of these
        hyperparameters (kernel, lam, centres), H the hat matrix, for choosing them by a search.

        tr H is Hutchinson's estimate z^T H z over `probes` Rademacher vectors, each solved as
        one more output of the same CG (so the score costs one fit with 1 + probes outputs); the
        returned standard error is the estimate's. Fits the model on (x, y) as a side effect.

        Parameters
        ----------
        x, y : torch.Tensor
            As for fit (y of one output).
        probes : int
            Hutchinson's probe vectors.
        seed : int
            Draws them.

        Returns
        -------
        tuple of float
            (score, its standard error from the trace's estimate).

        Examples
        --------
        >>> import torch
        >>> from tessel.gp import NystromRidge, RBF
        >>> x = torch.rand(300, 1, dtype=torch.float64)
        >>> y = torch.sin(6 * x[:, 0]) + 0.1 * torch.randn(300, dtype=torch.float64)
        >>> scores = {lam: NystromRidge(RBF(0.2), centres=50, lam=lam).gcv(x, y)[0]
        ...           for lam in (1e-6, 1e-1)}
        >>> scores[1e-6] < scores[1e-1]
        True
        """
        who = "NystromRidge.gcv"
        if isinstance(probes, bool) or not isinstance(probes, int) or probes < 2:
            raise ValueError(f"{who}: probes must be an integer >= 2, got {probes!r}")
        y = torch.as_tensor(y, dtype=torch.float64)
        if y.dim() != 1:
            raise ValueError(f"{who}: y must be (n,) (one output), got shape {tuple(y.shape)}")
        n = y.shape[0]
        g = torch.Generator().manual_seed(seed)
        z = torch.randint(0, 2, (n, probes), generator=g, dtype=torch.float64) * 2 - 1
        self.fit(x, torch.cat([y[:, None], z], 1))
        h = self.predict(x)  # H [y, z]
        quad = (z * h[:, 1:]).sum(0)  # z^T H z, each an unbiased estimate of tr H
        trace, trace_se = float(quad.mean()), float(quad.std() / probes ** 0.5)
        rss = float(((y - h[:, 0]) ** 2).sum())
        score = n * rss / (n - trace) ** 2
        # d score / d trace = 2 score / (n - trace): the trace's error carried to the score.
        return score, 2 * score / (n - trace) * trace_se

    def tune(self, x, y, optimizer="lbfgs", max_iter=50, lr=None, learn_lam=True, chunk=None,
             gtol=1e-5, ftol=1e-9, progress=None, callback=None):
        """Learns the kernel's hyperparameters (and lam) by descending the exact generalised
        cross-validation score, then fits the coefficients with them; returns self.

        The score, n |y - H y|^2 / (n - tr H)^2 summed over the outputs, is computed exactly on
        the M centres: the whitened features K_XC L^-T (L L^T = K_MM + jitter, the core's
        jitter) are made one chunk of rows at a time and summed into an M x M matrix, so an
        evaluation costs O(n M^2) in float64 products and O(M^2 + chunk M) memory, and its
        gradient in every hyperparameter a second pass over the chunks. The kernel's parameters
        are updated in place (as a GPyTorch model's are); lam is learned as log lam. The centres
        stay where they are.

        Parameters
        ----------
        x, y : torch.Tensor
            As for fit (several outputs share the hyperparameters).
        optimizer, max_iter, lr, gtol, ftol, progress, callback
            As ExactGP.fit: L-BFGS with a strong Wolfe line search or Adam, progress lines on
            stderr after a few seconds (or on request), a callback that may stop the fit.
        learn_lam : bool
            Learn lam with the kernel's hyperparameters, or keep it.
        chunk : int, optional
            Rows per block (default: 2^19 / M).

        Returns
        -------
        NystromRidge
            self, fitted, with `history_` (loss: the score over y's mean square at each
            iteration, so that the stopping tests do not depend on y's units; grad_norm,
            seconds) and `gcv_` (the exact score at the end, in y's units squared).

        Raises
        ------
        ValueError
            As fit, for a bad chunk, or when K_MM does not factor or the loss goes non-finite.

        Examples
        --------
        >>> import torch
        >>> from tessel.gp import NystromRidge, RBF
        >>> x = torch.rand(400, 1, dtype=torch.float64)
        >>> y = torch.sin(6 * x[:, 0]) + 0.1 * torch.randn(400, dtype=torch.float64)
        >>> model = NystromRidge(RBF(1.0), centres=40, lam=1e-2).tune(x, y, max_iter=20)
        >>> model.history_[-1]["loss"] < model.history_[0]["loss"], model.lam < 1e-2
        (True, True)
        """
        who = "NystromRidge.tune"
        if not (chunk is None or (isinstance(chunk, int) and not isinstance(chunk, bool)
                                  and chunk >= 1)):
            raise ValueError(f"{who}: chunk must be None or an int >= 1, got {chunk!r}")
        if not isinstance(learn_lam, bool):
            raise ValueError(f"{who}: learn_lam must be a bool, got {learn_lam!r}")
        x = self._prepare(x, who)
        y = self._targets(x, y, who)
        c = self._centres(x, who)
        objective = GCVObjective(self.kernel, x, y, c, self.lam, learn_lam, chunk, who)
        history = fit_model(objective, optimizer=optimizer, max_iter=max_iter, lr=lr, gtol=gtol,
                            ftol=ftol, progress=progress, callback=callback, who=who)
        if learn_lam:
            self.lam = float(objective.lam())
        self.history_, self.gcv_ = history, history[-1]["loss"] * objective.scale
        return self.fit(x, y)  # the same centres: the same seed's draw, or the given ones

    def predict(self, x):
        """f at the points x: (m,) or (m, k) like y."""
        who = "NystromRidge.predict"
        if not hasattr(self, "alpha_"):
            raise RuntimeError(f"{who}: call fit first")
        x = self._prepare(x, who, empty=True).to(self.centres_.dtype)
        if x.shape[1] != self.centres_.shape[1]:
            raise ValueError(f"{who}: x must be (m, {self.centres_.shape[1]}), got shape "
                             f"{tuple(x.shape)}")
        a = self.alpha_.reshape(self.alpha_.shape[0], -1)
        if x.shape[0] == 0:  # the core refuses empty arrays
            out = torch.zeros(0, a.shape[1], dtype=torch.float64)
            return out[:, 0] if self.alpha_.dim() == 1 else out
        f, params = self._formula(x.shape[1], x.dtype)
        out = _core.gp_kernel_product(f, params, np.ascontiguousarray(x.cpu().numpy()),
                                      np.ascontiguousarray(self.centres_.cpu().numpy()),
                                      np.ascontiguousarray(a.numpy()), a.shape[1])
        out = torch.as_tensor(out)
        return out[:, 0] if self.alpha_.dim() == 1 else out
