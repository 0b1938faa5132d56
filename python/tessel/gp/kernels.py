"""GP kernels as formulas of the core (the stationary ones, scaling, sums and products), with their hyperparameters as PyTorch parameters.

A kernel gives three things that agree: `formula(d)`, one scalar formula k(x_i, x_j) in KeOps
text over the points X = Vi(0, d), Y = Vj(1, d) and every hyperparameter packed in one parameter
vector TH = Pm(2, P) (what the BBMM mode reduces, so the core differentiates it); `dense(x1, x2)`,
the matrix in PyTorch (the exact mode, and tests); `diag(x)`, the exact diagonal without an
n x n matrix. Positive hyperparameters are stored raw and read through softplus (GPyTorch's
choice): value = log(1 + exp(raw)), so any raw value is valid and gradients stay finite.
"""
import math

import torch

__all__ = ["Kernel", "RBF", "Matern", "RationalQuadratic", "Scale"]


def _inv_softplus(value, who, name):
    """The raw value whose softplus is `value` (> 0, finite), as a float64 tensor."""
    v = torch.as_tensor(value, dtype=torch.float64).detach().clone()
    if v.dim() > 1 or v.numel() == 0:
        raise ValueError(f"{who}: {name} must be a positive number or a 1-D sequence of them, "
                         f"got shape {tuple(v.shape)}")
    if not bool(torch.isfinite(v).all()) or not bool((v > 0).all()):
        raise ValueError(f"{who}: {name} must be finite and > 0, got {v.tolist()}")
    return v + torch.log(-torch.expm1(-v))  # log(expm1(v)), stable for large v


def _positive(name, doc):
    """A property reading softplus(raw_<name>)."""
    return property(lambda self: torch.nn.functional.softplus(getattr(self, "raw_" + name)),
                    doc=doc)


class _Pack:
    """Collects hyperparameter values into the one parameter vector TH of the formula."""

    def __init__(self):
        self.values, self.size = [], 0

    def add(self, value):
        value = value.reshape(-1)
        start, self.size = self.size, self.size + value.numel()
        self.values.append(value)
        if value.numel() == 1:
            return f"Elem(TH,{start})"
        return f"Extract(TH,{start},{value.numel()})"


class Kernel(torch.nn.Module):
    """Base class of the GP kernels: `k1 + k2`, `k1 * k2` and `Scale(k)` combine them.

    Subclasses define `_text(pack, d)` (the formula text), `dense(x1, x2)` and `diag(x)`.

    Examples
    --------
    >>> import torch
    >>> from tessel.gp import RBF, Periodic, Scale
    >>> k = Scale(RBF(lengthscale=[1.0, 2.0])) + Periodic()
    >>> k.dense(torch.zeros(3, 2, dtype=torch.float64), torch.zeros(1, 2, dtype=torch.float64))
    tensor([[2.],
            [2.],
            [2.]], dtype=torch.float64, grad_fn=<AddBackward0>)
    """

    def _positive_parameter(self, name, value, who, flat=False):
        """Registers raw_<name>, the raw parameter of a positive hyperparameter."""
        raw = _inv_softplus(value, who, name).reshape(-1 if flat else 1)
        self.register_parameter("raw_" + name, torch.nn.Parameter(raw))

    def __add__(self, other):
        return _Sum(self, other)

    def __mul__(self, other):
        return _Product(self, other)

    def formula(self, d):
        """The kernel as a formula text over d-dimensional points, and its parameter vector.

        Parameters
        ----------
        d : int
            The points' dimension.

        Returns
        -------
        tuple
            (text, aliases, theta): the KeOps text of k(X, Y), the aliases declaring X = Vi(0, d),
            Y = Vj(1, d) and TH = Pm(2, P), and TH's value (a differentiable 1-D tensor of P
            values, the hyperparameters in the order the formula reads them).

        Examples
        --------
        >>> from tessel.gp import RBF
        >>> text, aliases, theta = RBF(lengthscale=0.5).formula(3)
        >>> aliases
        ['X = Vi(0,3)', 'Y = Vj(1,3)', 'TH = Pm(2,1)']
        """
        pack = _Pack()
        text = self._text(pack, d)
        theta = torch.cat(pack.values) if pack.values else torch.zeros(1, dtype=torch.float64)
        return text, [f"X = Vi(0,{d})", f"Y = Vj(1,{d})", f"TH = Pm(2,{max(pack.size, 1)})"], \
            theta

    def forward(self, x1, x2):
        """The dense kernel matrix (same as `dense`).

        Parameters
        ----------
        x1, x2 : torch.Tensor
            Points, (n1, d) and (n2, d).

        Returns
        -------
        torch.Tensor
            (n1, n2).

        Examples
        --------
        >>> import torch
        >>> from tessel.gp import Linear
        >>> Linear()(torch.ones(1, 2), torch.ones(1, 2))
        tensor([[2.]], dtype=torch.float64, grad_fn=<MulBackward0>)
        """
        return self.dense(x1, x2)


def _points(x1, x2, who):
    x1 = torch.as_tensor(x1)
    x2 = torch.as_tensor(x2)
    if x1.dim() != 2 or x2.dim() != 2 or x1.shape[1] != x2.shape[1]:
        raise ValueError(f"{who}: points must be (n, d) with the same d, got {tuple(x1.shape)} "
                         f"and {tuple(x2.shape)}")
    dtype = torch.promote_types(torch.promote_types(x1.dtype, x2.dtype), torch.float64)
    return x1.to(dtype), x2.to(dtype)


class _Stationary(Kernel):
    """A kernel of r = |(x - y) / lengthscale|: one lengthscale, or one per dimension (ARD)."""

    def __init__(self, lengthscale=1.0):
        super().__init__()
        who = type(self).__name__
        self._positive_parameter("lengthscale", lengthscale, who, flat=True)

    lengthscale = _positive("lengthscale", "The lengthscales (softplus of the raw parameter).")

    def _r2_text(self, pack, d):
        ell = self.lengthscale
        if ell.numel() not in (1, d):
            raise ValueError(f"{type(self).__name__}: {ell.numel()} lengthscales for points of "
                             f"dimension {d}; expected 1 or {d}")
        return f"WeightedSqDist(Inv(Square({pack.add(ell)})),X,Y)"

    def _scaled(self, x1, x2):
        x1, x2 = _points(x1, x2, type(self).__name__)
        ell = self.lengthscale.to(x1.dtype)
        if ell.numel() not in (1, x1.shape[1]):
            raise ValueError(f"{type(self).__name__}: {ell.numel()} lengthscales for points of "
                             f"dimension {x1.shape[1]}")
        return x1 / ell, x2 / ell

    def _r2(self, x1, x2):
        a, b = self._scaled(x1, x2)
        # The expanded form, clamped at 0: O(n1 n2) memory, as the dense mode is anyway. Its
        # rounding leaves r^2 ~ eps |x|^2 where r = 0: harmless where k is smooth in r^2.
        r2 = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T
        return r2.clamp_min(0)

    def _r(self, x1, x2):
        # From the differences (3x the time): for kernels with a kink at r = 0, where the
        # expanded form's sqrt(eps) would show (exp(-r) off by 1e-8 at equal points).
        a, b = self._scaled(x1, x2)
        return torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist")

    def diag(self, x):
        """k(x_i, x_i) = 1 for every point (no n x n matrix).

        Parameters
        ----------
        x : torch.Tensor
            (n, d) points.

        Returns
        -------
        torch.Tensor
            (n,) ones.

        Examples
        --------
        >>> import torch
        >>> from tessel.gp import RBF
        >>> RBF().diag(torch.zeros(2, 3))
        tensor([1., 1.], dtype=torch.float64)
        """
        x = torch.as_tensor(x)
        return torch.ones(x.shape[0], dtype=torch.float64, device=x.device)


class RBF(_Stationary):
    """The squared exponential kernel exp(-r^2 / 2), r = |(x - y) / lengthscale|.

    Parameters
    ----------
    lengthscale : float or sequence of float
        One lengthscale, or one per input dimension (ARD); > 0.

    Examples
    --------
    >>> import torch
    >>> from tessel.gp import RBF
    >>> RBF(lengthscale=2.0).dense(torch.zeros(1, 1), torch.full((1, 1), 2.0))
    tensor([[0.6065]], dtype=torch.float64, grad_fn=<ExpBackward0>)
    """

    def _text(self, pack, d):
        return f"Exp(-{self._r2_text(pack, d)}/IntCst(2))"

    def dense(self, x1, x2):
        """The kernel matrix (n1, n2) in PyTorch (see Kernel.forward)."""
        return torch.exp(-0.5 * self._r2(x1, x2))


class Matern(_Stationary):
    """The Matérn kernel of smoothness nu = 1/2, 3/2 or 5/2, r = |(x - y) / lengthscale|.

    nu = 1/2: exp(-r); 3/2: (1 + sqrt(3) r) exp(-sqrt(3) r); 5/2: (1 + sqrt(5) r + 5 r^2 / 3)
    exp(-sqrt(5) r) (scikit-learn's and GPyTorch's definitions).

    Parameters
    ----------
    nu : float
        0.5, 1.5 or 2.5.
    lengthscale : float or sequence of float
        One lengthscale, or one per input dimension (ARD); > 0.

    Raises
    ------
    ValueError
        For another nu.

    Examples
    --------
    >>> import torch
    >>> from tessel.gp import Matern
    >>> Matern(nu=0.5).dense(torch.zeros(1, 1), torch.ones(1, 1))
    tensor([[0.3679]], dtype=torch.float64, grad_fn=<ExpBackward0>)
    """

    def __init__(self, nu=2.5, lengthscale=1.0):
        if nu not in (0.5, 1.5, 2.5):
            raise ValueError(f"Matern: nu must be 0.5, 1.5 or 2.5, got {nu!r}")
        super().__init__(lengthscale)
        self.nu = nu

    def _text(self, pack, d):
        r = f"Sqrt({self._r2_text(pack, d)})"
        if self.nu == 0.5:
            return f"Exp(-{r})"
        c = math.sqrt(3.0) if self.nu == 1.5 else math.sqrt(5.0)
        poly = f"(IntCst(1)+{c!r}*{r})" if self.nu == 1.5 else \
            f"(IntCst(1)+{c!r}*{r}+{5.0 / 3.0!r}*Square({r}))"
        return f"{poly}*Exp(-{c!r}*{r})"

    def dense(self, x1, x2):
        """The kernel matrix (n1, n2) in PyTorch (see Kernel.forward)."""
        if self.nu == 0.5:
            return torch.exp(-self._r(x1, x2))  # cdist's derivative at r = 0 is 0
        r2 = self._r2(x1, x2)
        # sqrt has an infinite derivative at 0; r = 0 only on the diagonal, where k is flat.
        r = torch.sqrt(torch.where(r2 > 0, r2, torch.ones_like(r2))) * (r2 > 0)
        c = math.sqrt(3.0) if self.nu == 1.5 else math.sqrt(5.0)
        poly = 1 + c * r if self.nu == 1.5 else 1 + c * r + 5.0 / 3.0 * r2
        return poly * torch.exp(-c * r)


class RationalQuadratic(_Stationary):
    """The rational quadratic kernel (1 + r^2 / (2 alpha))^(-alpha).

    Parameters
    ----------
    lengthscale : float or sequence of float
        One lengthscale, or one per input dimension (ARD); > 0.
    alpha : float
        The scale mixture parameter, > 0.

    Examples
    --------
    >>> import torch
    >>> from tessel.gp import RationalQuadratic
    >>> RationalQuadratic(alpha=1.0).dense(torch.zeros(1, 1), torch.ones(1, 1))
    tensor([[0.6667]], dtype=torch.float64, grad_fn=<ExpBackward0>)
    """

    def __init__(self, lengthscale=1.0, alpha=1.0):
        super().__init__(lengthscale)
        self._positive_parameter("alpha", alpha, "RationalQuadratic")

    alpha = _positive("alpha", "The scale mixture parameter (softplus of the raw parameter).")

    def _text(self, pack, d):
        r2 = self._r2_text(pack, d)
        a = pack.add(self.alpha)
        return f"Exp(-{a}*Log(IntCst(1)+{r2}/(IntCst(2)*{a})))"

    def dense(self, x1, x2):
        """The kernel matrix (n1, n2) in PyTorch (see Kernel.forward)."""
        a = self.alpha.to(torch.float64)
        return torch.exp(-a * torch.log1p(self._r2(x1, x2) / (2 * a)))


class Scale(Kernel):
    """outputscale * base: the kernel's variance as a hyperparameter (GPyTorch's ScaleKernel).

    Parameters
    ----------
    base : Kernel
        The kernel scaled.
    outputscale : float
        The scale, > 0.

    Raises
    ------
    TypeError
        When base is not a Kernel.

    Examples
    --------
    >>> import torch
    >>> from tessel.gp import RBF, Scale
    >>> Scale(RBF(), outputscale=3.0).diag(torch.zeros(2, 1))
    tensor([3., 3.], dtype=torch.float64, grad_fn=<MulBackward0>)
    """

    def __init__(self, base, outputscale=1.0):
        super().__init__()
        if not isinstance(base, Kernel):
            raise TypeError(f"Scale: base must be a tessel.gp kernel, got {type(base).__name__}")
        self.base = base
        self._positive_parameter("outputscale", outputscale, "Scale")

    outputscale = _positive("outputscale", "The scale (softplus of the raw parameter).")

    def _text(self, pack, d):
        return f"{pack.add(self.outputscale)}*({self.base._text(pack, d)})"

    def dense(self, x1, x2):
        """The kernel matrix (n1, n2) in PyTorch (see Kernel.forward)."""
        return self.outputscale.to(torch.float64) * self.base.dense(x1, x2)

    def diag(self, x):
        """outputscale times the base's diagonal (see RBF.diag)."""
        return self.outputscale.to(torch.float64) * self.base.diag(x)


class _Combined(Kernel):
    """Two kernels combined entrywise."""

    def __init__(self, a, b):
        super().__init__()
        for k in (a, b):
            if not isinstance(k, Kernel):
                raise TypeError(f"tessel.gp: kernels combine with kernels, got "
                                f"{type(k).__name__}")
        self.a, self.b = a, b


class _Sum(_Combined):
    def _text(self, pack, d):
        return f"({self.a._text(pack, d)})+({self.b._text(pack, d)})"

    def dense(self, x1, x2):
        return self.a.dense(x1, x2) + self.b.dense(x1, x2)

    def diag(self, x):
        return self.a.diag(x) + self.b.diag(x)


class _Product(_Combined):
    def _text(self, pack, d):
        return f"({self.a._text(pack, d)})*({self.b._text(pack, d)})"

    def dense(self, x1, x2):
        return self.a.dense(x1, x2) * self.b.dense(x1, x2)

    def diag(self, x):
        return self.a.diag(x) * self.b.diag(x)
