"""scikit-learn's estimator API over tessel.gp: GaussianProcessRegressor (fit, predict with
return_std or return_cov, sample_y, score, get_params / set_params) and NystromKernelRidge, for
pipelines, grid searches and code written for scikit-learn's GaussianProcessRegressor and
KernelRidge."""
import copy
import numbers

import numpy as np
import torch
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .kernels import RBF, Kernel, Scale
from .model import ExactGP
from .ridge import NystromRidge

__all__ = ["GaussianProcessRegressor", "NystromKernelRidge"]

_DTYPES = {"float64": torch.float64, "float32": torch.float32}


_NO_Y = object()


def _validate(est, X, y=_NO_Y, reset=True, multi_output=False):
    """scikit-learn's input validation (its name moved in 1.6); y=None is its "y required"."""
    try:
        from sklearn.utils.validation import validate_data
    except ImportError:  # scikit-learn < 1.6
        def validate_data(est, *args, **kw):
            return est._validate_data(*args, **kw)
    if y is _NO_Y:
        return validate_data(est, X, reset=reset, dtype=np.float64)
    return validate_data(est, X, y, reset=reset, dtype=np.float64, y_numeric=True,
                         multi_output=multi_output)


class GaussianProcessRegressor(RegressorMixin, BaseEstimator):
    """Exact GP regression with scikit-learn's estimator API, on tessel.gp.ExactGP.

    Like scikit-learn's GaussianProcessRegressor, but the hyperparameters are fitted by
    tessel's BBMM (O(n) memory) above `exact_max` points and by dense Cholesky below, and the
    noise is a learned hyperparameter unless fixed.

    Parameters
    ----------
    kernel : tessel.gp.Kernel, optional
        The covariance; copied at fit (`kernel_` is the fitted copy). Default: Scale(RBF()).
    noise : float or array-like
        The initial noise variance, learned unless fixed_noise; or (n,) known per-point
        variances (scikit-learn's array `alpha`), fixed. In the units of the standardised
        targets when normalize_y.
    fixed_noise : bool, optional
        Keep the noise at its value (default: False for one number, True for per-point ones).
    mean : {"constant", "zero"}
        A learned constant mean, or none.
    normalize_y : bool
        Standardise the targets before fitting (default True, unlike scikit-learn: the learned
        mean and output scale make it a change of units only, and it keeps the noise floor and
        the optimiser's steps on the scale of the data).
    optimizer : {"lbfgs", "adam"} or None
        How the hyperparameters are fitted (ExactGP.fit); None keeps them.
    max_iter : int
        The optimiser's iterations.
    mode : {"auto", "exact", "bbmm"}
        See ExactGP; "auto" is exact up to `exact_max` points.
    exact_max : int
    probes, rank, tol
        BBMM's probe vectors, preconditioner rank and CG tolerance (ExactGP).
    random_state : int, RandomState or None
        Seeds BBMM's probes and sample_y.
    dtype : {"float64", "float32"}
        The kernel's precision (float32 halves memory and time; sums still accumulate well).
    progress : bool, optional
        ExactGP.fit's progress lines (None: after 3 s).

    Attributes
    ----------
    gp_ : ExactGP
    kernel_ : Kernel
    history_ : list of dict
    n_iter_ : int
        The optimiser's iterations.
    log_marginal_likelihood_value_ : float
        At the fitted hyperparameters (an estimate in BBMM mode), of the standardised targets
        when normalize_y.
    X_train_, y_train_ : ndarray
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from tessel.gp import GaussianProcessRegressor
    >>> X = np.linspace(0, 1, 30)[:, None]
    >>> reg = GaussianProcessRegressor(max_iter=20).fit(X, np.sin(6 * X[:, 0]))
    >>> mean, std = reg.predict(X[:2], return_std=True)
    >>> reg.score(X, np.sin(6 * X[:, 0])) > 0.99
    True
    """

    def __init__(self, kernel=None, *, noise=0.1, fixed_noise=None, mean="constant",
                 normalize_y=True, optimizer="lbfgs", max_iter=100, mode="auto",
                 exact_max=4000, probes=10, rank=15, tol=1e-4, random_state=0,
                 dtype="float64", progress=None):
        self.kernel = kernel
        self.noise = noise
        self.fixed_noise = fixed_noise
        self.mean = mean
        self.normalize_y = normalize_y
        self.optimizer = optimizer
        self.max_iter = max_iter
        self.mode = mode
        self.exact_max = exact_max
        self.probes = probes
        self.rank = rank
        self.tol = tol
        self.random_state = random_state
        self.dtype = dtype
        self.progress = progress

    def _seed(self):
        return int(check_random_state(self.random_state).randint(2**31 - 1))

    def fit(self, X, y):
        """Fits the hyperparameters to (X, y); returns self."""
        who = "GaussianProcessRegressor.fit"
        X, y = _validate(self, X, y)
        if self.dtype not in _DTYPES:
            raise ValueError(f"{who}: dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")
        if self.kernel is not None and not isinstance(self.kernel, Kernel):
            raise TypeError(f"{who}: kernel must be a tessel.gp kernel, got "
                            f"{type(self.kernel).__name__} (scikit-learn's kernels are not "
                            "formulas tessel can reduce)")
        if self.optimizer not in ("lbfgs", "adam", None):
            raise ValueError(f"{who}: optimizer must be 'lbfgs', 'adam' or None, got "
                             f"{self.optimizer!r}")
        self.X_train_, self.y_train_ = X.copy(), y.copy()
        self._y_mean, self._y_std = 0.0, 1.0
        if self.normalize_y:
            self._y_mean = float(y.mean())
            std = float(y.std())
            self._y_std = std if std > 0 else 1.0  # constant targets: only the mean is learned
        target = torch.tensor((y - self._y_mean) / self._y_std)
        noise = self.noise
        if not isinstance(noise, numbers.Number):
            noise = torch.as_tensor(np.asarray(noise, dtype=np.float64))
        kernel = copy.deepcopy(self.kernel) if self.kernel is not None else Scale(RBF())
        self.gp_ = ExactGP(torch.tensor(X, dtype=_DTYPES[self.dtype]), target, kernel,
                           noise=noise, mean=self.mean, fixed_noise=self.fixed_noise,
                           exact_max=self.exact_max)
        self.kernel_ = self.gp_.kernel
        seed = self._seed()
        opts = dict(mode=self.mode, probes=self.probes, rank=self.rank, seed=seed, tol=self.tol)
        self.history_ = []
        if self.optimizer is not None and any(p.requires_grad for p in self.gp_.parameters()):
            self.history_ = self.gp_.fit(optimizer=self.optimizer, max_iter=self.max_iter,
                                         progress=self.progress, **opts)
        self.n_iter_ = max(len(self.history_) - 1, 0)  # the last row is where the fit ended
        with torch.no_grad():
            self.log_marginal_likelihood_value_ = float(
                self.gp_.log_marginal_likelihood(**opts))
        return self

    def predict(self, X, return_std=False, return_cov=False):
        """The posterior mean at X, with its standard deviation or covariance on request (of
        the latent f, as scikit-learn's, whose WhiteKernel noise is part of the kernel)."""
        if return_std and return_cov:
            raise RuntimeError("GaussianProcessRegressor.predict: at most one of return_std "
                               "or return_cov can be requested")
        check_is_fitted(self)
        X = _validate(self, X, reset=False)
        xt = torch.tensor(X, dtype=_DTYPES[self.dtype])
        mode = dict(mode=self.mode, rank=max(self.rank, 1))
        if return_cov:
            mean = self.gp_.predict(xt, return_var=False, **mode)
            cov = self.gp_.predict_covariance(xt, **mode).numpy() * self._y_std ** 2
            return mean.numpy() * self._y_std + self._y_mean, cov
        if return_std:
            mean, var = self.gp_.predict(xt, **mode)
            return (mean.numpy() * self._y_std + self._y_mean,
                    np.sqrt(var.numpy()) * self._y_std)
        return self.gp_.predict(xt, return_var=False, **mode).numpy() * self._y_std + \
            self._y_mean

    def sample_y(self, X, n_samples=1, random_state=0):
        """Joint posterior samples of f at X, (m, n_samples): the mean plus the posterior
        covariance's square root times standard normals (O(n m + m^2) memory)."""
        mean, cov = self.predict(X, return_cov=True)
        rng = check_random_state(random_state)
        return rng.multivariate_normal(mean, cov, n_samples).T


class NystromKernelRidge(RegressorMixin, BaseEstimator):
    """Kernel ridge regression on M centres (tessel.gp.NystromRidge) with scikit-learn's
    estimator API, its hyperparameters optionally learned by generalised cross-validation.

    The kernel's hyperparameters and lam are learned by default (as GaussianProcessRegressor's
    are), by descending the exact generalised cross-validation score (NystromRidge.tune). With
    `centres` at least the number of training points and `optimizer=None` it is
    scikit-learn's KernelRidge with `alpha = lam * n` (and a tessel kernel); with fewer centres
    it is Falkon's Nyström estimator, O(n M) work per CG iteration and O(n) memory.

    Parameters
    ----------
    kernel : tessel.gp.Kernel, optional
        Copied at fit (`kernel_` is the fitted copy). Default: RBF().
    lam : float
        The ridge penalty per point, > 0 (learned when `optimizer` is set).
    centres : int
        M, drawn from the training points with `random_state`.
    optimizer : {"lbfgs", "adam"} or None
        Learn the kernel's hyperparameters and lam by descending the exact GCV score, or keep
        them (scikit-learn's KernelRidge keeps them).
    max_iter : int
        The optimiser's iterations.
    tol : float
        CG's relative residual.
    random_state : int, RandomState or None
        Draws the centres.
    dtype : {"float64", "float32"}
        The kernel's precision.
    progress : bool, optional
        The optimiser's progress lines (None: after 3 s).

    Attributes
    ----------
    ridge_ : NystromRidge
    kernel_ : Kernel
    lam_ : float
    history_ : list of dict
        The optimiser's rows (empty without one).
    gcv_ : float or None
        The exact GCV score where the optimiser ended.
    n_iter_ : int
        The optimiser's iterations, or CG's without an optimiser.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from tessel.gp import NystromKernelRidge
    >>> X = np.linspace(0, 1, 200)[:, None]
    >>> y = np.sin(6 * X[:, 0])
    >>> reg = NystromKernelRidge(centres=50, max_iter=20).fit(X, y)
    >>> reg.score(X, y) > 0.99
    True
    """

    def __init__(self, kernel=None, *, lam=1e-6, centres=1000, optimizer="lbfgs", max_iter=50,
                 tol=1e-6, random_state=0, dtype="float64", progress=None):
        self.kernel = kernel
        self.lam = lam
        self.centres = centres
        self.optimizer = optimizer
        self.max_iter = max_iter
        self.tol = tol
        self.random_state = random_state
        self.dtype = dtype
        self.progress = progress

    def fit(self, X, y):
        """Fits the coefficients (and, with an optimizer, the hyperparameters); returns self."""
        who = "NystromKernelRidge.fit"
        X, y = _validate(self, X, y, multi_output=True)
        if self.dtype not in _DTYPES:
            raise ValueError(f"{who}: dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")
        if self.kernel is not None and not isinstance(self.kernel, Kernel):
            raise TypeError(f"{who}: kernel must be a tessel.gp kernel, got "
                            f"{type(self.kernel).__name__}")
        if self.optimizer not in ("lbfgs", "adam", None):
            raise ValueError(f"{who}: optimizer must be 'lbfgs', 'adam' or None, got "
                             f"{self.optimizer!r}")
        if isinstance(self.centres, bool) or not isinstance(self.centres, numbers.Integral) \
                or self.centres < 1:
            raise ValueError(f"{who}: centres must be an int >= 1, got {self.centres!r}")
        kernel = copy.deepcopy(self.kernel) if self.kernel is not None else RBF()
        seed = int(check_random_state(self.random_state).randint(2**31 - 1))
        self.ridge_ = NystromRidge(kernel, centres=int(self.centres), lam=self.lam, tol=self.tol,
                                   seed=seed)
        x, target = torch.tensor(X, dtype=_DTYPES[self.dtype]), torch.tensor(y)
        self.history_, self.gcv_ = [], None
        if self.optimizer is not None:
            self.ridge_.tune(x, target, optimizer=self.optimizer, max_iter=self.max_iter,
                             progress=self.progress)
            self.history_, self.gcv_ = self.ridge_.history_, self.ridge_.gcv_
            self.n_iter_ = max(len(self.history_) - 1, 1)  # the last row is where it ended
        else:
            self.ridge_.fit(x, target)
            self.n_iter_ = max(int(self.ridge_.report_["iterations"]), 1)
        self.kernel_, self.lam_ = kernel, self.ridge_.lam
        return self

    def predict(self, X):
        """f at X: (m,) or (m, k) like the training targets."""
        check_is_fitted(self)
        X = _validate(self, X, reset=False)
        return self.ridge_.predict(torch.tensor(X, dtype=_DTYPES[self.dtype])).numpy()

    def _more_tags(self):  # scikit-learn < 1.6
        return {"multioutput": True}

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags
