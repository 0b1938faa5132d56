"""GP kernels beyond the stationary family of r: periodic, linear, polynomial and spectral
mixture.

Same contract as tessel.gp.kernels: one formula text, a dense PyTorch matrix and an exact
diagonal; positive hyperparameters through softplus.
"""
import math

import torch

from .kernels import Kernel, _points, _positive

__all__ = ["Periodic", "Linear", "Polynomial", "SpectralMixture"]


class Periodic(Kernel):
    """The periodic kernel exp(-2 S / lengthscale^2).

    distance="per_dimension" (the default, GPyTorch's PeriodicKernel): S = sum_d sin^2(pi
    (x_d - y_d) / period), a product of one-dimensional periodic kernels, positive definite in
    any dimension. distance="euclidean" (scikit-learn's ExpSineSquared): S = sin^2(pi |x - y| /
    period), positive definite only for d = 1; for d > 1 its matrix can have negative eigenvalues
    (the noise may or may not hide them). Both agree for d = 1.

    Parameters
    ----------
    lengthscale : float
        > 0.
    period : float
        > 0.
    distance : {"per_dimension", "euclidean"}
        See above.

    Raises
    ------
    ValueError
        For another distance.

    Examples
    --------
    >>> import torch
    >>> from tessel.gp import Periodic
    >>> Periodic(period=1.0).dense(torch.zeros(1, 1), torch.full((1, 1), 3.0))
    tensor([[1.]], dtype=torch.float64, grad_fn=<ExpBackward0>)
    """

    def __init__(self, lengthscale=1.0, period=1.0, distance="per_dimension"):
        super().__init__()
        if distance not in ("per_dimension", "euclidean"):
            raise ValueError(f"Periodic: distance must be 'per_dimension' or 'euclidean', got "
                             f"{distance!r}")
        self.distance = distance
        self._positive_parameter("lengthscale", lengthscale, "Periodic")
        self._positive_parameter("period", period, "Periodic")

    lengthscale = _positive("lengthscale", "The lengthscale (softplus of the raw parameter).")

    period = _positive("period", "The period (softplus of the raw parameter).")

    def _text(self, pack, d):
        ell, per = pack.add(self.lengthscale), pack.add(self.period)
        if self.distance == "euclidean":
            s = f"Square(Sin({math.pi!r}*Sqrt(SqDist(X,Y))/{per}))"
        else:
            s = f"Sum(Square(Sin({math.pi!r}*(X-Y)/{per})))"
        return f"Exp(-IntCst(2)*{s}/Square({ell}))"

    def dense(self, x1, x2):
        """The kernel matrix (n1, n2) in PyTorch (see Kernel.forward)."""
        x1, x2 = _points(x1, x2, "Periodic")
        ell, per = self.lengthscale.to(x1.dtype), self.period.to(x1.dtype)
        if self.distance == "euclidean":
            r2 = ((x1 * x1).sum(1)[:, None] + (x2 * x2).sum(1)[None, :] -
                  2 * x1 @ x2.T).clamp_min(0)
            r = torch.sqrt(torch.where(r2 > 0, r2, torch.ones_like(r2))) * (r2 > 0)
            s = torch.sin(math.pi * r / per) ** 2
        else:  # O(n1 n2 d) memory: the dense mode is for small n
            s = (torch.sin(math.pi * (x1[:, None, :] - x2[None, :, :]) / per) ** 2).sum(-1)
        return torch.exp(-2 * s / ell ** 2)

    def diag(self, x):
        """Ones (see RBF.diag)."""
        x = torch.as_tensor(x)
        return torch.ones(x.shape[0], dtype=torch.float64, device=x.device)


class Linear(Kernel):
    """The linear kernel variance * x^T y (GPyTorch's LinearKernel).

    Parameters
    ----------
    variance : float
        > 0.

    Examples
    --------
    >>> import torch
    >>> from tessel.gp import Linear
    >>> Linear(variance=2.0).diag(torch.ones(1, 3))
    tensor([6.], dtype=torch.float64, grad_fn=<MulBackward0>)
    """

    def __init__(self, variance=1.0):
        super().__init__()
        self._positive_parameter("variance", variance, "Linear")

    variance = _positive("variance", "The variance (softplus of the raw parameter).")

    def _text(self, pack, d):
        return f"{pack.add(self.variance)}*(X|Y)"

    def dense(self, x1, x2):
        """The kernel matrix (n1, n2) in PyTorch (see Kernel.forward)."""
        x1, x2 = _points(x1, x2, "Linear")
        return self.variance.to(x1.dtype) * (x1 @ x2.T)

    def diag(self, x):
        """variance |x_i|^2 (see RBF.diag)."""
        x, _ = _points(x, x, "Linear")
        return self.variance.to(x.dtype) * (x * x).sum(1)


class Polynomial(Kernel):
    """The polynomial kernel (x^T y + offset)^power (GPyTorch's PolynomialKernel).

    Parameters
    ----------
    power : int
        >= 1.
    offset : float
        > 0.

    Raises
    ------
    ValueError
        When power is not an integer >= 1.

    Examples
    --------
    >>> import torch
    >>> from tessel.gp import Polynomial
    >>> Polynomial(power=2, offset=1.0).diag(torch.ones(1, 2))
    tensor([9.], dtype=torch.float64, grad_fn=<PowBackward0>)
    """

    def __init__(self, power=2, offset=1.0):
        super().__init__()
        if isinstance(power, bool) or not isinstance(power, int) or power < 1:
            raise ValueError(f"Polynomial: power must be an integer >= 1, got {power!r}")
        self.power = power
        self._positive_parameter("offset", offset, "Polynomial")

    offset = _positive("offset", "The offset (softplus of the raw parameter).")

    def _text(self, pack, d):
        return f"Pow((X|Y)+{pack.add(self.offset)},{self.power})"

    def dense(self, x1, x2):
        """The kernel matrix (n1, n2) in PyTorch (see Kernel.forward)."""
        x1, x2 = _points(x1, x2, "Polynomial")
        return (x1 @ x2.T + self.offset.to(x1.dtype)) ** self.power

    def diag(self, x):
        """(|x_i|^2 + offset)^power (see RBF.diag)."""
        x, _ = _points(x, x, "Polynomial")
        return ((x * x).sum(1) + self.offset.to(x.dtype)) ** self.power


def _int_at_least_one(value, who, name):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{who}: {name} must be an integer >= 1, got {value!r}")
    return value


class SpectralMixture(Kernel):
    """Wilson and Adams' spectral mixture kernel (GPyTorch's SpectralMixtureKernel): with
    tau = x - y, k = sum_q w_q exp(-2 pi^2 sum_d (tau_d s_qd)^2) prod_d cos(2 pi tau_d mu_qd),
    a mixture of Q Gaussians in the spectral domain (frequencies mu_q, bandwidths s_q).

    Parameters
    ----------
    num_mixtures : int
        Q >= 1.
    d : int
        The input dimension (the means and scales are per dimension).
    weights : sequence of float, optional
        (Q,) > 0; default 1 / Q each.
    means : array-like, optional
        (Q, d) frequencies > 0; default (q + 1) / Q for mixture q, in every dimension.
    scales : array-like, optional
        (Q, d) > 0 (inverse lengthscales); default 1.

    Raises
    ------
    ValueError
        For counts that are not integers >= 1, or parameters of another shape.

    Examples
    --------
    >>> import torch
    >>> from tessel.gp import SpectralMixture
    >>> k = SpectralMixture(2, d=1, weights=[0.5, 1.5])
    >>> k.diag(torch.zeros(2, 1))
    tensor([2., 2.], dtype=torch.float64, grad_fn=<ExpandBackward0>)
    """

    def __init__(self, num_mixtures=4, d=1, weights=None, means=None, scales=None):
        super().__init__()
        who = "SpectralMixture"
        q = self.num_mixtures = _int_at_least_one(num_mixtures, who, "num_mixtures")
        self.d = _int_at_least_one(d, who, "d")
        if weights is None:
            weights = torch.full((q,), 1.0 / q, dtype=torch.float64)
        if means is None:
            means = (torch.arange(1, q + 1, dtype=torch.float64) / q)[:, None].expand(q, d)
        if scales is None:
            scales = torch.ones(q, d, dtype=torch.float64)
        for name, value, shape in (("weights", weights, (q,)), ("means", means, (q, d)),
                                   ("scales", scales, (q, d))):
            t = torch.as_tensor(value, dtype=torch.float64)
            if tuple(t.shape) != shape:
                raise ValueError(f"{who}: {name} must have shape {shape}, got {tuple(t.shape)}")
            self._positive_parameter(name, t.reshape(-1), who, flat=True)

    @property
    def weights(self):
        """The mixture weights (Q,) (softplus of the raw parameter)."""
        return torch.nn.functional.softplus(self.raw_weights)

    @property
    def means(self):
        """The frequencies (Q, d) (softplus of the raw parameter)."""
        return torch.nn.functional.softplus(self.raw_means).reshape(self.num_mixtures, self.d)

    @property
    def scales(self):
        """The bandwidths (Q, d) (softplus of the raw parameter)."""
        return torch.nn.functional.softplus(self.raw_scales).reshape(self.num_mixtures, self.d)

    def _check_d(self, d):
        if d != self.d:
            raise ValueError(f"SpectralMixture: built for points of dimension {self.d}, given "
                             f"{d}")

    def _text(self, pack, d):
        self._check_d(d)
        w, mu, s = self.weights, self.means, self.scales
        two_pi, c = 2 * math.pi, 2 * math.pi ** 2
        diff = [("(X-Y)" if d == 1 else f"(Elem(X,{k})-Elem(Y,{k}))") for k in range(d)]
        terms = []
        for q in range(self.num_mixtures):
            decay = f"Exp(-({c!r}*WeightedSqDist(Square({pack.add(s[q])}),X,Y)))"
            waves = "*".join(f"Cos({two_pi!r}*{diff[k]}*{pack.add(mu[q, k])})"
                             for k in range(d))
            terms.append(f"{pack.add(w[q])}*{decay}*{waves}")
        return "+".join(terms)

    def dense(self, x1, x2):
        """The kernel matrix (n1, n2) in PyTorch (see Kernel.forward); O(n1 n2 d) memory."""
        x1, x2 = _points(x1, x2, "SpectralMixture")
        self._check_d(x1.shape[1])
        tau = x1[:, None, :] - x2[None, :, :]
        w, mu, s = (t.to(x1.dtype) for t in (self.weights, self.means, self.scales))
        out = 0
        for q in range(self.num_mixtures):
            decay = torch.exp(-2 * math.pi ** 2 * ((tau * s[q]) ** 2).sum(-1))
            out = out + w[q] * decay * torch.cos(2 * math.pi * tau * mu[q]).prod(-1)
        return out

    def diag(self, x):
        """sum_q w_q for every point (see RBF.diag)."""
        n = torch.as_tensor(x).shape[0]
        return self.weights.sum().expand(n)
