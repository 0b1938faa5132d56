"""Data attachments between shapes: kernel (MMD) norms, currents, varifolds and Sinkhorn.

Each attachment is a callable object, `loss(source, target)` -> a 0-dim tensor, differentiable
to any order with respect to both shapes' points (and to a scale given as a tensor that
requires grad). The kernel sums are tessel reductions (memory O(N + M), never the N x M
matrix), built once per dimension and kernel kind.

Spatial kernels, s the `scale`:

- "gaussian": k(x, y) = exp(-|x - y|^2 / s^2);
- "cauchy":   k(x, y) = 1 / (1 + |x - y|^2 / s^2).

Every kernel attachment is a squared Hilbert norm |mu - nu|^2 = <mu, mu> - 2 <mu, nu> + <nu, nu>
of the difference of the shapes' (weighted) measures; the three inner products are computed
separately, one Sum reduction each, and added in torch. `backend=` (the kernel attachments)
chooses the reductions' backend for every call, as Genred's call option does (None: tessel's
default).
"""
import functools
import math
import numbers

import torch

from .._docstrings import CIRCLE_AND_ELLIPSE, fill
from ..ot import SamplesLoss
from ..ot.samples_loss import check_gradient
from ..torch import Genred
from ._shape import check_pair

SPATIAL = {"gaussian": "Exp(-G * SqDist(X,Y))",
           "cauchy": "Inv(IntCst(1) + G * SqDist(X,Y))"}

# Orientation kernels on unit normals U, V (as in geomstats' varifold kernels); None: no
# orientation_scale, else their formula reads GO = 2 / orientation_scale^2.
ORIENTATIONS = {"constant": (None, False),
                "linear": ("(U|V)", False),
                "oriented": ("Exp(GO * ((U|V) - IntCst(1)))", True),
                "unoriented": ("Exp(GO * (Square((U|V)) - IntCst(1)))", True),
                "binet": ("Square((U|V))", False)}


def _fail(who, msg):
    raise ValueError(f"tessel.shapes.{who}: {msg}")


def _choice(who, name, value, options):
    if not isinstance(value, str) or value not in options:
        _fail(who, f"unknown {name} {value!r}; expected one of {', '.join(map(repr, options))}")
    return value


def _check_scale(who, name, value):
    """A length: a finite Python number > 0, or a 0-dim floating tensor (may require grad)."""
    if isinstance(value, torch.Tensor):
        if value.dim() != 0 or not value.dtype.is_floating_point:
            _fail(who, f"{name} is a tensor of shape {tuple(value.shape)} and dtype "
                       f"{value.dtype}; expected a 0-dim floating tensor or a number")
        v = float(value.detach())
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):
        _fail(who, f"{name} must be a number or a 0-dim tensor, got {type(value).__name__}")
    else:
        v = float(value)
    if not (v > 0 and math.isfinite(v)):
        _fail(who, f"{name} = {v!r}; expected a finite number > 0 (a length)")
    return value


def _inverse_square(scale, factor, like, length=1.0):
    """factor / (scale / length)^2 as a (1,) parameter of like's dtype and device: computed in
    torch, so that a tensor scale that requires grad gets its gradient through the reductions.
    length: the power of two the coordinates were divided by (exact)."""
    if isinstance(scale, torch.Tensor):
        return (factor / (scale.to(device=like.device, dtype=like.dtype) / length) ** 2).reshape(1)
    return torch.tensor([factor / (float(scale) / length) ** 2], dtype=like.dtype,
                        device=like.device)


def _exponent(v):
    """e with v = m 2^e, m in [0.5, 1) (0 for v = 0): dividing by 2^e is exact."""
    return math.frexp(v)[1]


def _at_unit_size(who, scale, views, names=("source", "target")):
    """The views with coordinates divided by a power of two near the scale, and measures (and
    normals) by one near the largest measure, and that second one's square, which the loss
    computed on them is multiplied by: every kernel argument and product is then of unit size,
    where 1 / scale^2 and m_i m_j can neither overflow nor underflow (scales of 1e-200 or 1e200,
    float32 shapes at 1e20). Both divisions are exact; refuses what the dtype cannot hold."""
    dtype = views[0].centers.dtype
    info = torch.finfo(dtype)
    lo, hi = _exponent(info.tiny), _exponent(info.max) - 1
    peaks = [float(v.measures.detach().abs().max()) for v in views]
    for name, peak in zip(names, peaks):
        if not math.isfinite(peak):
            _fail(who, f"{name}'s measures (lengths or areas) reach {peak}, past {dtype}'s "
                       "range; pass float64 points or rescale the shapes")
    e_mass = _exponent(max(peaks))
    if not lo <= 2 * e_mass <= hi:
        _fail(who, f"the shapes' measures reach {max(peaks):.3g}: the loss, a sum of their "
                   f"products, is about 2^{2 * e_mass}, outside {dtype}'s normal range "
                   f"[{info.tiny:.3g}, {info.max:.3g}]; pass float64 points or rescale the shapes")
    s = float(scale.detach()) if isinstance(scale, torch.Tensor) else float(scale)
    length = math.ldexp(1.0, _exponent(s))
    size = max(float(v.centers.detach().abs().max()) for v in views)
    if not size / length <= info.max / 4:
        _fail(who, f"scale = {s:g} is too small for coordinates of size {size:.3g} "
                   f"in {dtype} (their ratio passes its range); pass float64 points or rescale "
                   "the shapes")
    mass = math.ldexp(1.0, e_mass)
    out = [_Views(v.dim, v.centers / length, v.measures / mass,
                  None if v.normals is None else v.normals / mass, v.units) for v in views]
    for v in out:
        v.length = length
    return out, mass * mass


@functools.lru_cache(maxsize=64)
def _reduction(dim, spatial, orientation=None, weighted=True):
    """sum_j k(X_i, Y_j) [k_o(U_i, V_j)] [B_j]: one Sum reduction over j, (N, 1).

    `orientation`: a formula in U, V (and GO), or None; `weighted`: whether B_j multiplies."""
    parts = [SPATIAL[spatial]]
    aliases = [f"X = Vi({dim})", f"Y = Vj({dim})"]
    if orientation is not None:
        parts.append(orientation)
        aliases += [f"U = Vi({dim})", f"V = Vj({dim})"]
    if weighted:
        parts.append("B")
        aliases.append("B = Vj(1)")
    aliases.append("G = Pm(1)")
    if orientation is not None and "GO" in orientation:
        aliases.append("GO = Pm(1)")
    return Genred(" * ".join(f"({p})" for p in parts), aliases, reduction_op="Sum", axis=1)


def _norm2(pair_product, source, target):
    """<mu, mu> - 2 <mu, nu> + <nu, nu>, each inner product one reduction of its own: the terms
    nearly cancel for close shapes, and kept apart each is summed (and differentiated) to its
    own relative accuracy before the one cancelling difference, taken in torch."""
    return (pair_product(source, source) - 2 * pair_product(source, target)
            + pair_product(target, target))


class _KernelAttachment:
    """What the kernel attachments share: the spatial kernel, its scale and the call's checks."""

    _who = "KernelAttachment"

    def __init__(self, scale, kernel="gaussian", backend=None):
        self.scale = _check_scale(self._who, "scale", scale)
        self.kernel = _choice(self._who, "kernel", kernel, tuple(SPATIAL))
        # backend: the reductions' backend for every call (None: tessel's default choice).
        self.backend = backend

    def __call__(self, source, target):
        check_pair(self._who, source, target)
        self._check_shapes(source, target)
        # Each view once per call: the shapes compute them from their points, and every term
        # that reads a shape then shares one autograd path back to them.
        a, b = (self._views(s) for s in (source, target))
        (a, b), factor = _at_unit_size(self._who, self.scale, (a, b))
        return _norm2(self._inner, a, b) * factor

    def _views(self, shape):
        return _Views(shape.dim, shape.centers, shape.measures, shape.normals)

    def _check_shapes(self, source, target):
        pass

    def _g(self, view):
        return _inverse_square(self.scale, 1.0, view.centers, view.length)

    def _options(self):
        return {} if self.backend is None else {"backend": self.backend}

    def __repr__(self):
        return f"{type(self).__name__}(scale={_length_repr(self.scale)}, kernel={self.kernel!r})"


def _length_repr(v):
    return f"{float(v.detach()):g} (tensor)" if isinstance(v, torch.Tensor) else repr(v)


class _Views:
    """What the kernel sums read of one shape, computed once per call."""

    def __init__(self, dim, centers, measures, normals, units=None):
        self.dim, self.centers, self.measures, self.normals = dim, centers, measures, normals
        self.units = units if units is not None or normals is None else _unit(normals, measures)
        self.length = 1.0  # the power of two the centers were divided by


def _unit(normals, measures):
    """normals / measures, and 0 on a piece of measure 0 (a collapsed face or segment of a
    deformed shape): its term m_i k_o(u_i, .) is 0 for any u_i, and both where branches have
    finite derivatives, so its value and gradient stay those of the limit."""
    m = measures[:, None]
    live = m > 0
    return torch.where(live, normals / torch.where(live, m, torch.ones_like(m)),
                       torch.zeros_like(normals))


@fill(circle_and_ellipse=CIRCLE_AND_ELLIPSE)
class KernelNorm(_KernelAttachment):
    """Squared kernel (MMD) distance between the shapes' measures, any shape kind.

    ``|mu - nu|_k^2 = <mu, mu>_k - 2 <mu, nu>_k + <nu, nu>_k`` with
    ``<mu, nu>_k = sum_ij m_i m'_j k(x_i, y_j)`` and mu = sum_i measures_i delta_{centers_i}
    (point weights, segment lengths or face areas at the points, segment midpoints or face
    centroids). Orientation is ignored.

    Parameters
    ----------
    scale : float or 0-dim tensor
        s, a finite number > 0 (a learnable tensor gets its gradient).
    kernel : {"gaussian", "cauchy"}
        exp(-|x - y|^2 / s^2) or 1 / (1 + |x - y|^2 / s^2).
    backend : str, optional
        As Genred's.

    Raises
    ------
    ValueError
        A scale that is not > 0, or an unknown kernel; at call time, shapes of different
        dimensions, or shapes whose loss the dtype cannot hold (non-finite measures, measures
        whose products pass its range, coordinates past it once divided by the scale). Any
        scale the dtype can hold is computed exactly rescaled (the coordinates and the scale
        divided by one power of two, the measures by another).

    Examples
    --------
    {circle_and_ellipse}
    >>> from tessel.shapes import KernelNorm
    >>> d = KernelNorm(0.5)
    >>> float(d(circle, circle)), float(d(circle, ellipse)) > 0
    (0.0, True)
    """

    _who = "KernelNorm"

    def _inner(self, a, b):
        red = _reduction(a.dim, self.kernel)
        out = red(a.centers, b.centers, b.measures[:, None], self._g(a), **self._options())
        return (a.measures * out[:, 0]).sum()


@fill(circle_and_ellipse=CIRCLE_AND_ELLIPSE)
class Currents(_KernelAttachment):
    """Squared currents norm: oriented curves and surfaces as vector-valued measures.

    ``<S, T> = sum_ij k(x_i, y_j) <n_i, n'_j>``, x the segment midpoints / face centroids, n the
    length-weighted segment vectors / the area-weighted face normals. Flipping a shape's
    orientation flips the sign of its current; opposite pieces cancel. Equals
    Varifold(orientation="linear").

    Parameters
    ----------
    scale, kernel, backend
        As KernelNorm's.

    Raises
    ------
    ValueError
        As KernelNorm's; a PointCloud (it has no orientation).

    Examples
    --------
    {circle_and_ellipse}
    >>> from tessel.shapes import Currents
    >>> reversed_circle = Curve(circle.points, circle.edges.flip(1))       # opposite orientation
    >>> c = Currents(0.5)
    >>> float(c(circle, circle)), float(c(circle, reversed_circle)) > 0
    (0.0, True)
    """

    _who = "Currents"

    def _check_shapes(self, source, target):
        _need_normals(self._who, source, target, "")

    def _inner(self, a, b):
        return _currents_inner(self, a, b)


def _currents_inner(att, a, b):
    """sum_ij k(x_i, y_j) <n_i, n'_j> with att's spatial kernel, scale and backend."""
    red = _reduction(a.dim, att.kernel, ORIENTATIONS["linear"][0], weighted=False)
    return red(a.centers, b.centers, a.normals, b.normals, att._g(a),
               **att._options()).sum()


def _need_normals(who, source, target, what):
    for name, s in (("source", source), ("target", target)):
        if s.normals is None:
            _fail(who, f"{name} is a {type(s).__name__}, which has no normals{what}; expected "
                       "a Curve or a Mesh (use KernelNorm or SinkhornLoss for point clouds)")
    # A curve's tangents and a surface's normals are not comparable directions.
    if source.kind != target.kind:
        _fail(who, f"source is a {type(source).__name__} but target a {type(target).__name__}; "
                   "expected two curves or two meshes")


@fill(circle_and_ellipse=CIRCLE_AND_ELLIPSE)
class Varifold(_KernelAttachment):
    """Squared varifold norm: unit normals (or tangents) u = n / |n| as a second variable.

    ``<S, T> = sum_ij m_i m'_j k(x_i, y_j) k_o(u_i, v_j)``, m the measures (lengths / areas), x
    the centers, k the spatial kernel (see KernelNorm) and k_o the orientation kernel, so =
    orientation_scale: "constant": 1 (KernelNorm); "linear": <u, v> (Currents); "oriented":
    exp(2 (<u, v> - 1) / so^2); "unoriented": exp(2 (<u, v>^2 - 1) / so^2) (u and -u alike);
    "binet": <u, v>^2 (Deformetrica's and KeOps's LDDMM tutorial's choice). A remeshed shape has
    nearly the same varifold. A piece of measure 0 (a face or segment that a deformation
    collapsed) contributes nothing, and its limit's gradient where that exists.

    Parameters
    ----------
    scale : float or 0-dim tensor
        The spatial width s (> 0).
    orientation : {"binet", "unoriented", "oriented", "linear", "constant"}, default "binet"
        The orientation kernel (the default, as register's, ignores the orientation of the
        pieces and needs no orientation_scale).
    orientation_scale : float, optional
        so, needed by the Gaussian ones ("oriented", "unoriented") and refused by the others; in
        [2^-60, 2^60].
    kernel : {"gaussian", "cauchy"}
        The spatial kernel.
    backend : str, optional
        As Genred's.

    Raises
    ------
    ValueError
        A missing or refused orientation_scale, an unknown orientation or kernel, a scale that is
        not > 0; a PointCloud (it has no normals).

    Examples
    --------
    {circle_and_ellipse}
    >>> from tessel.shapes import Varifold
    >>> v = Varifold(0.5, orientation="binet")
    >>> flipped = Curve(circle.points, circle.edges.flip(1))      # the same curve, reversed
    >>> float(v(circle, circle)), abs(float(v(circle, flipped))) < 1e-12
    (0.0, True)
    """

    _who = "Varifold"

    def __init__(self, scale, orientation="binet", orientation_scale=None,
                 kernel="gaussian", backend=None):
        super().__init__(scale, kernel, backend)
        self.orientation = _choice(self._who, "orientation", orientation, tuple(ORIENTATIONS))
        needs = ORIENTATIONS[orientation][1]
        if needs and orientation_scale is None:
            _fail(self._who, f"orientation={orientation!r} is a Gaussian kernel on the unit "
                             "normals and needs orientation_scale (expected a finite number > 0, "
                             "e.g. 0.5)")
        if not needs and orientation_scale is not None:
            _fail(self._who, f"orientation={orientation!r} has no scale; expected "
                             f"orientation_scale=None, got {orientation_scale!r}")
        self.orientation_scale = (None if orientation_scale is None else
                                  _check_scale(self._who, "orientation_scale", orientation_scale))
        so = self.orientation_scale
        so = None if so is None else float(so.detach() if isinstance(so, torch.Tensor) else so)
        # Its kernel reads 2 / so^2, a float32 parameter; past these bounds it is a Dirac or a
        # constant to float32's precision anyway.
        if so is not None and not 2.0 ** -60 <= so <= 2.0 ** 60:
            _fail(self._who, f"orientation_scale = {so:g}; expected a number in [2^-60, 2^60] "
                             f"(a scale on unit normals, where 2 / orientation_scale^2 is a "
                             "normal float32 number)")

    def _check_shapes(self, source, target):
        _need_normals(self._who, source, target, " (a varifold reads the unit normals)")

    def _inner(self, a, b):
        if self.orientation == "linear":
            # m_i m_j <u_i, v_j> = <n_i, n_j>: no unit normals, hence the exact derivative at a
            # collapsed piece (where u_i is undefined but n_i -> 0 is smooth).
            return _currents_inner(self, a, b)
        formula = ORIENTATIONS[self.orientation][0]
        red = _reduction(a.dim, self.kernel, formula)
        x = a.centers
        args = [x, b.centers]
        if formula is not None:
            args += [a.units, b.units]
        args += [b.measures[:, None], self._g(a)]
        if self.orientation_scale is not None:
            args.append(_inverse_square(self.orientation_scale, 2.0, x))
        out = red(*args, **self._options())
        return (a.measures * out[:, 0]).sum()

    def __repr__(self):
        so = self.orientation_scale
        so = "" if so is None else f", orientation_scale={_length_repr(so)}"
        return (f"Varifold(scale={_length_repr(self.scale)}, orientation={self.orientation!r}"
                f"{so}, kernel={self.kernel!r})")


@fill(circle_and_ellipse=CIRCLE_AND_ELLIPSE)
class SinkhornLoss:
    """Debiased Sinkhorn divergence between the shapes' measures (tessel.ot with their weights).

    Entropic optimal transport, cost ``|x - y|^2 / 2``, eps = blur^2, between
    sum_i m_i delta_{x_i} (m: point weights, lengths or areas; x: the centers):
    tessel.ot.SamplesLoss("sinkhorn", p=2, blur, reach, scaling) with the measures as weights.

    Parameters
    ----------
    blur : float, default 0.05
        The temperature's scale.
    reach : float, optional
        Unbalanced OT (mass created or destroyed at a cost reach^2); None: balanced.
    scaling : float, default 0.5
        The eps-scaling ratio.
    normalize : bool, optional
        Divide each shape's measures by their sum; None: True when reach is None (balanced OT
        needs equal masses), False with a reach.
    gradient : {"envelope", "implicit"}
        SamplesLoss's: "envelope" (GeomLoss's, nearly converged potentials) or "implicit" (the
        fixed point, exact to any order).

    Raises
    ------
    ValueError
        A blur or reach that is not > 0, an unknown gradient, unequal masses without
        normalization in balanced OT.

    Examples
    --------
    {circle_and_ellipse}
    >>> from tessel.shapes import SinkhornLoss
    >>> loss = SinkhornLoss(blur=0.1)
    >>> float(loss(circle, ellipse)) > float(loss(circle, circle))
    True
    """

    _who = "SinkhornLoss"

    def __init__(self, blur=0.05, reach=None, scaling=0.5, normalize=None, gradient="envelope"):
        for name, v in (("blur", blur), ("reach", reach)):
            if v is not None or name == "blur":
                if isinstance(v, torch.Tensor) or isinstance(v, bool) or not isinstance(
                        v, numbers.Real) or not (math.isfinite(v) and v > 0):
                    _fail(self._who, f"{name} = {v!r}; expected a finite number > 0 (a length)")
        if isinstance(scaling, bool) or not isinstance(scaling, numbers.Real) or not (
                0 < scaling < 1):
            _fail(self._who, f"scaling = {scaling!r}; expected a number in (0, 1)")
        if normalize is None:
            normalize = reach is None
        if not isinstance(normalize, bool):
            _fail(self._who, f"normalize = {normalize!r}; expected True, False or None")
        self.blur, self.reach, self.scaling, self.normalize = blur, reach, scaling, normalize
        self.gradient = check_gradient(f"tessel.shapes.{self._who}", gradient)
        self._loss = SamplesLoss("sinkhorn", p=2, blur=blur, reach=reach, scaling=scaling,
                                 gradient=gradient)

    def __call__(self, source, target):
        check_pair(self._who, source, target)
        a, b = source.measures, target.measures
        if self.normalize:
            a, b = a / a.sum(), b / b.sum()
        return self._loss(a, source.centers, b, target.centers)

    def __repr__(self):
        extra = "" if self.gradient == "envelope" else f", gradient={self.gradient!r}"
        return (f"SinkhornLoss(blur={self.blur!r}, reach={self.reach!r}, "
                f"scaling={self.scaling!r}, normalize={self.normalize!r}{extra})")
