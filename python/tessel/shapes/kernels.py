"""Deformation kernels k(x, y) and the Hamiltonian fields of LDDMM built on them.

Each kernel is one formula in X (an i-point), Y (a j-point) and its parameters; everything the
deformations need follows from it by tessel's reductions, none of which stores an N x M matrix:

- `kernel(x, y, b)`: the velocity sum_j k(x_i, y_j) b_j that momenta b on y give the points x;
- `kernel.hamiltonian(q, p)`: H(q, p) = 1/2 sum_ij k(q_i, q_j) <p_i, p_j>;
- `kernel.field(q, p)`: (dH/dp, -dH/dq), the geodesic equations' right-hand side, with
  dH/dq_i = sum_j <p_i, p_j> grad_1 k(q_i, q_j) from the formula's symbolic gradient (no
  autograd inside a step, so a shooting's backward differentiates one reduction per step).

Conventions (as KeOps's LDDMM tutorial and Deformetrica): gaussian exp(-|x - y|^2 / s^2),
cauchy 1 / (1 + |x - y|^2 / s^2). Widths (`scale`) may be tensors with requires_grad: they enter
the reductions as parameters and receive gradients (a learned width).
"""
import functools
import math

import torch

from .._docstrings import fill
from ..torch import Genred


_BACKENDS = ("auto", "compiled", "interpreter", "cuda")


def _positive(who, name, value):
    """A width: a positive finite float, or a tensor of them (kept, to be differentiated)."""
    if isinstance(value, torch.Tensor):
        if value.is_complex() or not value.dtype.is_floating_point:
            raise TypeError(f"tessel.shapes.{who}: {name} must be a float or a floating tensor, "
                            f"got dtype {value.dtype}")
        if not bool((torch.isfinite(value.detach()) & (value.detach() > 0)).all()):
            raise ValueError(f"tessel.shapes.{who}: {name} must be finite and > 0, got "
                             f"{value.detach().tolist()}")
        return value
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"tessel.shapes.{who}: {name} must be a number or a tensor, got "
                        f"{type(value).__name__}") from None
    if not (v > 0 and math.isfinite(v)):
        raise ValueError(f"tessel.shapes.{who}: {name} must be finite and > 0, got {v}")
    return v


def _length(value):
    """The power of two nearest a width (float or tensor): coordinates divided by it are exact
    and of the width's size, where 1 / width^2 neither overflows nor underflows."""
    v = float(value.detach().reshape(-1)[0]) if isinstance(value, torch.Tensor) else float(value)
    return math.ldexp(1.0, math.frexp(v)[1])


def _inverse_square(who, name, value, length, dtype, device):
    """1 / (value / length)^2 as a (1,) parameter, refused where dtype cannot hold it (widths of
    one kernel too far apart to share one length)."""
    v = (value.detach() if isinstance(value, torch.Tensor)
         else torch.tensor(float(value), dtype=torch.float64))
    e = 2 * (math.frexp(length)[1] - math.frexp(float(v.reshape(-1).min()))[1])
    info = torch.finfo(dtype)
    if not math.frexp(info.tiny)[1] < e < math.frexp(info.max)[1] - 1:
        raise ValueError(f"tessel.shapes.{who}: {name} = {v.tolist()} is 2^{-(e // 2)} times "
                         f"the kernel's largest width; expected widths whose ratio squared "
                         f"{dtype} holds")
    return 1 / (_param(value, dtype, device) / length) ** 2


def _param(value, dtype, device):
    """A Pm parameter tensor (1-D) in the points' dtype and device, differentiable if value is."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype=dtype, device=device).reshape(-1)
    return torch.tensor([value], dtype=dtype, device=device).reshape(-1)


@functools.lru_cache(maxsize=64)
def _reductions(formula, params, dim):
    """The Hamiltonian density (X, Y, P, Q, *params) of one kernel formula in dimension dim and
    its gradient in X (same inputs)."""
    xy = [f"X = Vi({dim})", f"Y = Vj({dim})"]
    pq = [f"P = Vi({dim})", f"Q = Vj({dim})"]
    pm = [f"{name} = Pm({d})" for name, d in params]
    density = Genred(f"({formula}) * (P|Q)", xy + pq + pm)
    force = Genred(f"Grad(({formula}) * (P|Q), X, IntCst(1))", xy + pq + pm)
    return density, force


@functools.lru_cache(maxsize=64)
def _velocity(formula, params, dim, bdim):
    """sum_j k(X_i, Y_j) B_j for B of dimension bdim: (X, Y, B, *params)."""
    pm = [f"{name} = Pm({d})" for name, d in params]
    return Genred(f"({formula}) * B", [f"X = Vi({dim})", f"Y = Vj({dim})", f"B = Vj({bdim})"]
                  + pm)


class Kernel:
    """A deformation kernel k(x, y), the base of GaussianKernel, CauchyKernel and the others.

    Subclasses give ``_formula`` (text in X, Y and their parameter names), ``_param_dims``
    ((name, dim) pairs), ``_param_values(dtype, device, length)`` (for coordinates divided by
    ``_length()``); the base class turns them into the reductions LDDMM needs (the field, the
    Hamiltonian). ``backend``: as Genred's ("auto", "compiled", "interpreter", "cuda"), for every
    reduction.

    Examples
    --------
    >>> from tessel.shapes import GaussianKernel, Kernel
    >>> isinstance(GaussianKernel(1.0), Kernel)
    True
    """

    backend = "auto"

    def _set_backend(self, backend):
        if backend not in _BACKENDS:
            raise ValueError(f"tessel.shapes.{type(self).__name__}: backend must be one of "
                             f"{_BACKENDS}, got {backend!r}")
        self.backend = backend

    def _reductions(self, dim):
        return _reductions(self._formula(dim), tuple(self._param_dims(dim)), dim)

    def _params(self, like):
        return self._param_values(like.dtype, like.device, self._length())

    def _length(self):
        """The power of two that coordinates are divided by before the reductions (exact):
        near the kernel's width, so that its parameters are of unit size."""
        return 1.0

    def _unit(self, *ts):
        """ts divided by the length; refused where coordinates that large pass the dtype's
        range at this width (widths far below the coordinates' size)."""
        length = self._length()
        if length < 2.0 ** -60:
            size = max(float(t.detach().abs().max()) for t in ts)
            if not size / length <= torch.finfo(ts[0].dtype).max / 4:
                raise ValueError(f"tessel.shapes.{type(self).__name__}: its width is too "
                                 f"small for coordinates of size {size:.3g} in "
                                 f"{ts[0].dtype} (their ratio passes its range); pass float64 "
                                 "points or rescale them")
        return [t / length for t in ts]

    def _check(self, who, *ts):
        d = ts[0].shape[-1]
        for t in ts:
            if t.dim() != 2 or t.shape[1] != d:
                raise ValueError(f"tessel.shapes.{type(self).__name__}.{who}: expected (N, {d}) "
                                 f"tensors, got shape {tuple(t.shape)}")
        return d

    def __call__(self, x, y, b):
        """sum_j k(x_i, y_j) b_j for x (N, D), y (M, D), b (M, E) (any E: momenta, masses):
        (N, E)."""
        d = self._check("__call__", x, y)
        if b.dim() != 2 or b.shape[0] != y.shape[0]:
            raise ValueError(f"tessel.shapes.{type(self).__name__}.__call__: b has shape "
                             f"{tuple(b.shape)}; expected ({y.shape[0]}, E), one row per y")
        red = _velocity(self._formula(d), tuple(self._param_dims(d)), d, b.shape[1])
        return red(*self._unit(x, y), b, *self._params(x), backend=self.backend)

    def hamiltonian(self, q, p):
        """H(q, p) = 1/2 sum_ij k(q_i, q_j) <p_i, p_j> (0-dim)."""
        d = self._check("hamiltonian", q, p)
        (u,) = self._unit(q)
        return 0.5 * self._reductions(d)[0](u, u, p, p, *self._params(q),
                                            backend=self.backend).sum()

    def field(self, q, p):
        """(dq/dt, dp/dt) = (dH/dp, -dH/dq) at (q, p): the geodesic equations."""
        d = self._check("field", q, p)
        force = self._reductions(d)[1]
        (u,) = self._unit(q)
        # The reduction differentiates in the divided coordinates u = q / length.
        return self(q, q, p), -force(u, u, p, p, *self._params(q),
                                     backend=self.backend) / self._length()

    def __repr__(self):
        extra = "" if self.backend == "auto" else f", backend={self.backend!r}"
        return f"{type(self).__name__}({self._describe()}{extra})"


class _Radial(Kernel):
    """phi(|x - y|^2 / scale^2) for the formula FORMULA in G = 1 / scale^2."""

    FORMULA = ""

    def __init__(self, scale, backend="auto"):
        self.scale = _positive(type(self).__name__, "scale", scale)
        self._set_backend(backend)

    def _formula(self, dim):
        return self.FORMULA

    def _param_dims(self, dim):
        return [("G", 1)]

    def _length(self):
        return _length(self.scale)

    def _param_values(self, dtype, device, length):
        return [_inverse_square(type(self).__name__, "scale", self.scale, length, dtype, device)]

    def _describe(self):
        return f"scale={self.scale}"


# The arguments and errors of every radial kernel.
_RADIAL_SECTIONS = """Parameters
----------
scale : float or 0-dim tensor
    The width (> 0); a tensor with ``requires_grad`` is learned with the momenta.
backend : str, default "auto"
    The reductions' backend, as Genred's.

Raises
------
ValueError
    A scale that is not a finite number > 0."""


@fill(radial_sections=_RADIAL_SECTIONS)
class GaussianKernel(_Radial):
    """The deformation kernel exp(-|x - y|^2 / scale^2).

    {radial_sections}

    Examples
    --------
    >>> import torch
    >>> from tessel.shapes import GaussianKernel
    >>> k = GaussianKernel(1.0)
    >>> q = torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    >>> p = torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    >>> v, _ = k.field(q, p)            # velocity at q: sum_j k(q_i, q_j) p_j
    >>> round(float(v[1, 0]), 4)        # k at distance 1: exp(-1)
    0.3679
    """

    FORMULA = "Exp(-G * SqDist(X, Y))"


@fill(radial_sections=_RADIAL_SECTIONS)
class CauchyKernel(_Radial):
    """The deformation kernel 1 / (1 + |x - y|^2 / scale^2).

    Heavier tails than the Gaussian (long-range coupling): at three widths it still weighs
    1/10, where the Gaussian's exp(-9) has vanished.

    {radial_sections}

    Examples
    --------
    >>> import torch
    >>> from tessel.shapes import CauchyKernel, GaussianKernel
    >>> q = torch.tensor([[0.0, 0.0], [3.0, 0.0]], dtype=torch.float64)   # three widths apart
    >>> p = torch.tensor([[1.0, 0.0], [0.0, 0.0]], dtype=torch.float64)
    >>> cauchy = CauchyKernel(1.0).field(q, p)[0][1, 0]       # 1 / (1 + 9)
    >>> gauss = GaussianKernel(1.0).field(q, p)[0][1, 0]      # exp(-9)
    >>> round(float(cauchy), 4), float(gauss) < 1e-3
    (0.1, True)
    """

    FORMULA = "Inv(IntCst(1) + G * SqDist(X, Y))"


class SumOfGaussians(Kernel):
    """sum_k w_k exp(-|x - y|^2 / s_k^2): several scales at once (coarse and fine motions).

    Parameters
    ----------
    scales : sequence of float
        The widths s_k (> 0).
    weights : sequence of float, optional
        The w_k (default 1 each).
    backend : str, default "auto"
        As Genred's.

    Raises
    ------
    ValueError
        Empty or non-positive scales, or weights of another length.

    Examples
    --------
    >>> import torch
    >>> from tessel.shapes import SumOfGaussians
    >>> k = SumOfGaussians([0.5, 2.0], [1.0, 0.5])
    >>> q = torch.zeros(1, 2, dtype=torch.float64)
    >>> float(k.field(q, torch.ones(1, 2, dtype=torch.float64))[0][0, 0])   # k(x, x) = 1.5
    1.5
    """

    def __init__(self, scales, weights=None, backend="auto"):
        self._set_backend(backend)
        n = len(scales)
        if n == 0:
            raise ValueError("tessel.shapes.SumOfGaussians: scales is empty; expected at least "
                             "one width")
        self.scales = [_positive("SumOfGaussians", f"scales[{k}]", s) for k, s in enumerate(scales)]
        if weights is None:
            weights = [1.0] * n
        if len(weights) != n:
            raise ValueError(f"tessel.shapes.SumOfGaussians: {len(weights)} weights for {n} "
                             "scales; expected one weight per scale")
        for k, w in enumerate(weights):
            wv = w.detach() if isinstance(w, torch.Tensor) else w
            if not (float(wv) >= 0 and math.isfinite(float(wv))):
                raise ValueError(f"tessel.shapes.SumOfGaussians: weights[{k}] = {float(wv)}; "
                                 "expected a finite weight >= 0")
        self.weights = list(weights)

    def _formula(self, dim):
        return "(W | Exp(-G * SqDist(X, Y)))"

    def _param_dims(self, dim):
        return [("G", len(self.scales)), ("W", len(self.scales))]

    def _length(self):
        return max(_length(s) for s in self.scales)

    def _param_values(self, dtype, device, length):
        g = torch.cat([_inverse_square("SumOfGaussians", f"scales[{k}]", s, length, dtype, device)
                       for k, s in enumerate(self.scales)])
        w = torch.cat([_param(w, dtype, device) for w in self.weights])
        return [g, w]

    def _describe(self):
        return f"scales={self.scales}, weights={self.weights}"


class AnisotropicGaussian(Kernel):
    """exp(-(x - y)^T A (x - y)) for a symmetric positive definite (D, D) matrix A.

    A is e.g. the inverse of a covariance, Sigma^-1: widths along its eigenvectors; a (D,)
    vector means a diagonal A.

    Parameters
    ----------
    matrix : (D, D) or (D,) tensor
        A, symmetric positive definite (or its diagonal).
    backend : str, default "auto"
        As Genred's.

    Raises
    ------
    ValueError
        A matrix that is not square and symmetric positive definite, or a diagonal with
        non-positive entries.

    Examples
    --------
    >>> import torch
    >>> from tessel.shapes import AnisotropicGaussian
    >>> k = AnisotropicGaussian(torch.tensor([1.0, 4.0], dtype=torch.float64))
    >>> q = torch.tensor([[0.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    >>> p = torch.tensor([[0.0, 0.0], [1.0, 0.0]], dtype=torch.float64)
    >>> round(float(k.field(q, p)[0][0, 0]), 4)           # exp(-4): narrow along y
    0.0183
    """

    def __init__(self, matrix, backend="auto"):
        self._set_backend(backend)
        if not isinstance(matrix, torch.Tensor) or matrix.dim() not in (1, 2):
            raise TypeError("tessel.shapes.AnisotropicGaussian: matrix must be a (D, D) or (D,) "
                            "tensor")
        m = matrix.detach().to(torch.float64)
        if matrix.dim() == 2:
            if m.shape[0] != m.shape[1] or not torch.allclose(m, m.T, rtol=1e-6, atol=1e-12):
                raise ValueError("tessel.shapes.AnisotropicGaussian: matrix must be square and "
                                 f"symmetric, got shape {tuple(m.shape)}")
            smallest = float(torch.linalg.eigvalsh(m).min())
        else:
            smallest = float(m.min())
        if not (smallest > 0):
            raise ValueError("tessel.shapes.AnisotropicGaussian: matrix must be positive "
                             f"definite (its smallest eigenvalue is {smallest:g})")
        self.matrix = matrix

    def _formula(self, dim):
        return "Exp(-WeightedSqDist(A, X, Y))"

    def _param_dims(self, dim):
        if self.matrix.shape[0] != dim:
            raise ValueError(f"tessel.shapes.AnisotropicGaussian: the matrix is for dimension "
                             f"{self.matrix.shape[0]} but the points have dimension {dim}")
        return [("A", self.matrix.numel())]

    def _param_values(self, dtype, device, length):
        return [self.matrix.to(dtype=dtype, device=device).reshape(-1) * length ** 2]

    def _describe(self):
        return f"matrix={tuple(self.matrix.shape)}"


_BY_NAME = {"gaussian": GaussianKernel, "cauchy": CauchyKernel}


def as_kernel(kernel, scale=None, who="kernel"):
    """A Kernel from a Kernel, or a name ("gaussian", "cauchy") with its scale."""
    if isinstance(kernel, Kernel):
        return kernel
    if kernel in _BY_NAME:
        if scale is None:
            raise ValueError(f"tessel.shapes.{who}: kernel={kernel!r} needs a scale")
        return _BY_NAME[kernel](scale)
    raise ValueError(f"tessel.shapes.{who}: kernel must be a tessel.shapes Kernel or one of "
                     f"{sorted(_BY_NAME)}, got {kernel!r}")
