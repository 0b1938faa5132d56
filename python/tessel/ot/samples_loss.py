"""tessel.ot.SamplesLoss: GeomLoss's SamplesLoss (same signature and defaults) on tessel's core.

The Sinkhorn loop runs in the C++ core (softmins as compiled LogSumExp reductions, memory
O(N + M)); the loss value is assembled here in torch from the weights and the potentials, so
autograd gives the weights' gradients and the points' come from the potentials' envelope
gradients (SinkhornPotentials). The global grad mode is never touched.
"""
import copy
import math
import numbers
import warnings

import torch

from .. import _core
from ._dense import dense_potentials
from ._implicit import canonical_gauge, implicit_potentials
from ._large_blur import in_series_regime, series_potentials
from ._potentials import SinkhornPotentials, bounding_diameter, first_order_only
from ._ranges import (Scaled, check_masses, degree, eps_past_float32, float32_scale,
                      to_float32)
from ._unrolled import unrolled_potentials
from .multiscale import multiscale_potentials
from .kernel_loss import KERNELS, is_wide, kernel_loss

_WHO = "tessel.ot.SamplesLoss"
_BACKENDS = ("auto", "tensorized", "online", "multiscale")


def _check_number(name, v, allow_none=False):
    if v is None and allow_none:
        return None
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{_WHO}: {name} must be a number, got {v!r}")
    if not (float(v) > 0 and float(v) < float("inf")):
        raise ValueError(f"{_WHO}: {name} must be a finite number > 0, got {v!r}")
    return float(v)


# eps = blur^p and rho = reach^p, their inverses and products must be normal float64 numbers.
_POWER_RANGE = (1e-150, 1e150)


def check_length_power(who, name, v, p):
    """A length's p-th power inside _POWER_RANGE, or a ValueError naming the length: 1e-200 or
    1e200 gave NaN or an OverflowError naming nothing."""
    if v is None:
        return v
    lo, hi = _POWER_RANGE
    if not (math.log10(lo) <= p * math.log10(v) <= math.log10(hi)):
        raise ValueError(f"{who}: {name}={v!r} gives {name}^p = 10^{p * math.log10(v):.0f} "
                         f"(p={p:g}); expected {name}^p in [{lo:g}, {hi:g}], where the solver's "
                         "float64 arithmetic holds it; rescale the points and lengths (the "
                         "Sinkhorn divergence scales as scale^p)")
    return v


def common_diameter(xs, ys, who):
    """The bounding-box diagonal of every cloud of a batch given as lists (None if all points
    coincide): one epsilon schedule for all, as for a batch of equal sizes."""
    pts = []
    for name, clouds in (("x", xs), ("y", ys)):
        for k, t in enumerate(clouds):
            if not isinstance(t, torch.Tensor) or t.dim() != 2:
                raise ValueError(f"{who}: in a batch of lists, {name}[{k}] must be an (N, D) "
                                 f"tensor, got {type(t).__name__} "
                                 f"{tuple(getattr(t, 'shape', ()))}")
            if t.shape[0] == 0:
                raise ValueError(f"{who}: {name}[{k}] has shape {tuple(t.shape)}; expected at "
                                 "least one point per cloud for loss='sinkhorn'")
            pts.append(t.detach())
    if len({t.shape[-1] for t in pts}) != 1:
        raise ValueError(f"{who}: every cloud of a batch must have the same dimension D, got "
                         f"{sorted({t.shape[-1] for t in pts})}")
    return bounding_diameter(*pts)


class SamplesLoss(torch.nn.Module):
    """Distances between weighted point clouds, as geomloss.SamplesLoss.

    GeomLoss's signature and defaults, so GeomLoss code switches by changing the import; the
    log-domain Sinkhorn loop runs in the C++ core, each softmin a LogSumExp reduction, memory
    O(N + M).

    Parameters
    ----------
    loss : {"sinkhorn", "gaussian", "laplacian", "energy", "hausdorff"}
        The Sinkhorn divergence (or OT_eps) or a kernel norm.
    p : {1, 2}, default 2
        The cost ``|x - y|^p / p`` (p = 2: ``|x - y|^2 / 2``); other p need ``cost=``.
    blur : float, default 0.05
        The temperature's scale: eps = blur^p; the kernel losses' width.
    reach : float, optional
        Unbalanced OT: marginal penalty rho = reach^p (None: balanced).
    diameter : float, optional
        The schedule's start (default: the clouds' bounding box).
    scaling : float, default 0.5
        eps-scaling ratio of the schedule, in (0, 1).
    truncate, cluster_scale : float, optional
        The multiscale solver's truncation and cluster size (tessel.ot.multiscale).
    cost : str or callable, optional
        A formula in X and Y (KeOps syntax, memory O(N + M)), or a function of dense tensors
        ``(x, y) -> (B, N, M)`` (its matrices are stored).
    kernel : callable, optional
        For the kernel losses: ``kernel(x, y, blur=..., **kw) -> (B, N, M)`` of dense tensors.
    debias : bool, default True
        The Sinkhorn divergence (True) or the entropic OT cost OT_eps (False).
    potentials : bool, default False
        Return the dual potentials (F, G) instead of the value.
    verbose : bool, default False
        Accepted for GeomLoss compatibility.
    backend : {"auto", "online", "multiscale", "tensorized"}
        "multiscale" runs tessel's multiscale solver; every other the online solver.
    gradient : {"envelope", "implicit", "unrolled"}
        How the value is differentiated (see Notes).
    snapshots : int, optional
        With gradient="unrolled": keep at most this many iterations (checkpoint_loop).
    reach_x, reach_y : float, optional
        Semi-unbalanced OT: the two marginal penalties apart.

    Raises
    ------
    ValueError
        An unknown loss or backend, a blur or reach that is not a positive number, a scaling
        outside (0, 1), a p without a cost formula, or at call time clouds of different
        dimensions, non-finite points or a wrong number of arguments.
    TypeError
        A cost or kernel of the wrong kind, or at call time arguments that are not float32 /
        float64 tensors of one dtype.
    NotImplementedError
        loss="hausdorff" without kernel=, or a non-envelope gradient with the multiscale solver
        or a dense cost function.

    Notes
    -----
    loss="gaussian", "laplacian" or "energy": half the squared kernel norm of a - b (kernel
    exp(-|x-y|^2 / 2 blur^2), exp(-|x-y| / blur) or -|x-y|); kernel=, a function of dense tensors
    kernel(x, y, blur=..., **kw) -> (B, N, M) as GeomLoss's tensorized backend takes, replaces the
    built-in kernel (its matrices are then stored); "hausdorff" is that norm for a kernel= (as in
    GeomLoss 0.3, which has no built-in one).
    loss="sinkhorn": the debiased Sinkhorn divergence
    (debias=True) or the entropic OT cost OT_eps (debias=False), eps = blur^p, balanced
    (reach=None) or unbalanced (rho = reach^p; reach_x / reach_y, a tessel option, set the two
    marginals apart: semi-unbalanced); cost |x-y| (p=1), |x-y|^2/2 (p=2), a formula
    string in X and Y (KeOps syntax, as GeomLoss's online backend takes), or a function of dense
    tensors (x, y) -> (B, N, M) as GeomLoss's tensorized backend takes (the N x M matrices are
    then stored; envelope gradients; tessel.ot._dense). Call as L(x, y) (uniform
    weights) or L(a, x, b, y); x: (N, D) or batched (B, N, D), a: (N,), (N, 1), (B, N) or
    (B, N, 1); a batch of clouds of different sizes is given as lists ([x1, x2], [y1, y2]) or
    ([a1, a2], [x1, x2], [b1, b2], [y1, y2]).
    Returns a scalar (a (B,) tensor when batched), or with potentials=True the pair
    (F, G) of dual potentials, (B, N) and (B, M), or (1, N) and (1, M) without a batch, as
    GeomLoss returns them. backend="multiscale" runs tessel's multiscale solver (clusters in any
    dimension, block-sparse truncation with a bound on the mass it drops; `truncate`,
    `cluster_scale`: see tessel.ot.multiscale); every other backend the online solver.

    gradient (a tessel option): "envelope" (default, GeomLoss's: the loop's last extrapolation
    differentiated with the potentials it started from held constant; one extra reduction) or
    "implicit": the loop runs to convergence (alternating updates, marginal error 1e-9 in
    float64, 1e-5 in float32, at most 10000 iterations, then damped Newton steps if that was not
    enough; a RuntimeWarning when they do not reach it either) and the potentials are
    differentiated by the implicit function theorem (two Newton steps of conjugate gradients on
    the plan operator), exact at the fixed point and to second order: Hessian-vector products
    (autograd with create_graph=True) of debiased, unbalanced and semi-unbalanced losses alike
    (a balanced problem's potentials f, g, defined up to a constant, are then returned with
    <a, f> = <b, g>, so that their own derivatives are exact too);
    "unrolled": autograd through every iteration of the loop (the exact derivative of what it
    computed, converged or not, to any order, with its eps schedule held fixed: it starts at the
    clouds' diameter, not differentiated, as in GeomLoss; a given diameter= makes it exact),
    keeping every iteration or, with snapshots=s, at most s of them (checkpoint_loop).


    Examples
    --------
    >>> import torch
    >>> from tessel.ot import SamplesLoss
    >>> x = torch.randn(200, 2, dtype=torch.float64, requires_grad=True)
    >>> y = torch.randn(300, 2, dtype=torch.float64) + 1
    >>> loss = SamplesLoss("sinkhorn", p=2, blur=0.1)
    >>> value = loss(x, y)                                # debiased Sinkhorn divergence
    >>> (gx,) = torch.autograd.grad(value, x)
    >>> dense = SamplesLoss("sinkhorn", p=2, blur=0.1,    # the same loop on stored matrices
    ...                     cost=lambda a, b: ((a[:, :, None] - b[:, None]) ** 2).sum(-1) / 2)
    >>> bool(torch.allclose(value, dense(x, y))), float(loss(y, y)) == 0.0
    (True, True)
    """

    def __init__(self, loss="sinkhorn", p=2, blur=0.05, reach=None, diameter=None, scaling=0.5,
                 truncate=5, cost=None, kernel=None, cluster_scale=None, debias=True,
                 potentials=False, verbose=False, backend="auto", gradient="envelope",
                 snapshots=None, reach_x=None, reach_y=None):
        super().__init__()
        if loss == "hausdorff" and kernel is None:
            # GeomLoss 0.3 computes "hausdorff" as the kernel norm of its kernel= function and
            # has no built-in one (KeyError without it); so does tessel.ot.
            raise NotImplementedError(f"{_WHO}: loss='hausdorff' needs kernel= (a function of "
                                      "dense tensors, as in GeomLoss 0.3, which has no built-in "
                                      "one); or use 'gaussian', 'laplacian' or 'energy'")
        if loss != "sinkhorn" and loss not in KERNELS + ("hausdorff",):
            raise ValueError(f"{_WHO}: unknown loss {loss!r}; expected 'sinkhorn', "
                             f"{', '.join(map(repr, KERNELS))} or 'hausdorff' (with kernel=)")
        if kernel is not None:
            if loss == "sinkhorn":
                raise ValueError(f"{_WHO}: kernel= applies to the kernel losses "
                                 f"({', '.join(map(repr, KERNELS))}); loss={loss!r} takes cost=")
            if not callable(kernel):
                raise TypeError(f"{_WHO}: kernel must be a function (x, y, blur=..., **kw) -> "
                                f"the (B, N, M) kernel matrix, got {type(kernel).__name__}")
            if backend in ("online", "multiscale"):
                raise ValueError(f"{_WHO}: a kernel function of dense tensors runs tensorized, "
                                 f"not backend={backend!r}")
        if backend not in _BACKENDS:
            raise ValueError(f"{_WHO}: unknown backend {backend!r}; expected one of "
                             f"{', '.join(_BACKENDS)}")
        if backend == "multiscale" and gradient != "envelope":
            raise NotImplementedError(f"{_WHO}: the multiscale solver gives envelope gradients "
                                      f"only, not gradient={gradient!r}; use backend='online'")
        self.p = _check_number("p", p)
        if cost is None and self.p not in (1.0, 2.0):
            raise ValueError(f"{_WHO}: p={p!r} needs a cost formula; the built-in costs are p=1 "
                             "(|x-y|) and p=2 (|x-y|^2/2)")
        # A function of dense tensors (GeomLoss's tensorized backend) stores the N x M matrices.
        self._dense = cost is not None and not isinstance(cost, (str, _core.Formula))
        if self._dense and not callable(cost):
            raise TypeError(f"{_WHO}: cost must be a formula string in X and Y (e.g. "
                            "'SqDist(X,Y) / IntCst(2)'), a tessel Formula or a function of "
                            f"dense tensors (x, y) -> (B, N, M), got {type(cost).__name__}")
        if self._dense and backend in ("online", "multiscale"):
            raise ValueError(f"{_WHO}: backend={backend!r} needs a cost formula (a string in X "
                             "and Y); a cost function of dense tensors runs tensorized")
        if self._dense and gradient != "envelope":
            raise NotImplementedError(f"{_WHO}: a cost function of dense tensors gives envelope "
                                      f"gradients only, not gradient={gradient!r}; give the cost "
                                      "as a formula string for the other modes")
        self.blur = _check_number("blur", blur)
        self.reach = _check_number("reach", reach, allow_none=True)
        # Semi-unbalanced (a tessel option): each marginal's own reach, else `reach`.
        rx = _check_number("reach_x", reach_x, allow_none=True)
        ry = _check_number("reach_y", reach_y, allow_none=True)
        self.reach_x = self.reach if rx is None else rx
        self.reach_y = self.reach if ry is None else ry
        self.diameter = _check_number("diameter", diameter, allow_none=True)
        for name in ("blur", "reach", "reach_x", "reach_y", "diameter"):
            check_length_power(_WHO, name, getattr(self, name), self.p)
        if isinstance(scaling, bool) or not isinstance(scaling, numbers.Real) or not (
                0 < scaling < 1):
            raise ValueError(f"{_WHO}: scaling must be a number in (0, 1), got {scaling!r}")
        truncate = _check_number("truncate", truncate, allow_none=True)  # None: keep every block
        cluster_scale = _check_number("cluster_scale", cluster_scale, allow_none=True)
        self.loss, self.scaling, self.truncate, self.cost = loss, float(scaling), truncate, cost
        self.kernel, self.cluster_scale, self.backend = kernel, cluster_scale, backend
        self.debias, self.potentials, self.verbose = bool(debias), bool(potentials), verbose
        self.gradient = check_gradient(_WHO, gradient)
        self.snapshots = check_snapshots(_WHO, snapshots)

    def _cost_formula(self, dim):
        if self.cost is None or isinstance(self.cost, _core.Formula):
            return self.cost
        try:
            return _core.parse(self.cost, [f"X = Vi({dim})", f"Y = Vj({dim})"])
        except ValueError as e:
            raise ValueError(f"{_WHO}: the cost {self.cost!r} is not a formula in X and Y (points "
                             f"of dimension {dim}): {e}") from None

    def forward(self, *args):
        if len(args) in (2, 4) and all(isinstance(t, (list, tuple)) for t in args):
            return self._ragged(args)
        if len(args) == 6:
            return self._labelled(args)
        return self._forward(args, None)

    def _labelled(self, args):
        """GeomLoss's L(l_x, a, x, l_y, b, y): the caller's cluster labels for the multiscale
        solver, (N,) or (N, 1) integers, one pair of clouds (no batch, as in GeomLoss)."""
        lx, a, x, ly, b, y = args
        if self.backend not in ("auto", "multiscale") or self.loss != "sinkhorn" or self._dense:
            raise ValueError(f"{_WHO}: cluster labels (six arguments) are for the multiscale "
                             "Sinkhorn solver: loss='sinkhorn', backend 'auto' or 'multiscale', "
                             "a cost formula (GeomLoss takes them there only)")
        if self.gradient != "envelope":
            raise NotImplementedError(f"{_WHO}: the multiscale solver gives envelope gradients "
                                      f"only, not gradient={self.gradient!r}")
        labels = []
        for name, lab, pts in (("l_x", lx, x), ("l_y", ly, y)):
            if not isinstance(pts, torch.Tensor) or pts.dim() != 2:
                raise ValueError(f"{_WHO}: with cluster labels the points are one (N, D) cloud "
                                 f"each (no batch, as in GeomLoss), got "
                                 f"{tuple(getattr(pts, 'shape', ()))}")
            if (not isinstance(lab, torch.Tensor) or lab.is_floating_point() or lab.is_complex()
                    or lab.dtype == torch.bool or lab.numel() != pts.shape[0]
                    or lab.dim() not in (1, 2) or (lab.dim() == 2 and lab.shape[1] != 1)):
                raise ValueError(f"{_WHO}: {name} must be an integer tensor of shape (N,) or "
                                 f"(N, 1) for the {pts.shape[0]} points, got "
                                 f"{getattr(lab, 'dtype', type(lab).__name__)} "
                                 f"{tuple(getattr(lab, 'shape', ()))}")
            labels.append(lab.reshape(-1).to(device=pts.device, dtype=torch.int64))
        return self._forward((a, x, b, y), None, labels=tuple(labels))

    def _ragged(self, args):
        """A batch of clouds of different sizes, as lists: L([x1, x2], [y1, y2]) or
        L([a1, a2], [x1, x2], [b1, b2], [y1, y2]). Returns a (B,) tensor, or with potentials=True
        the lists [F1, F2], [G1, G2] ((N_k,) and (M_k,)). As for a batch of equal sizes, the
        schedule starts at one diameter for all: the bounding box of every cloud together."""
        n = len(args[0])
        if n == 0 or any(len(t) != n for t in args):
            raise ValueError(f"{_WHO}: a batch of clouds of different sizes takes lists of the "
                             f"same non-zero length, got lengths {[len(t) for t in args]}")
        pairs = [tuple(t[k] for t in args) for k in range(n)]
        diameter = self.diameter
        if diameter is None and self.loss == "sinkhorn":
            diameter = common_diameter([p[-3] if len(p) == 4 else p[0] for p in pairs],
                                       [p[-1] for p in pairs], _WHO)
        outs = [self._forward(pair, diameter) for pair in pairs]
        if self.potentials:
            return [o[0][0] for o in outs], [o[1][0] for o in outs]
        return torch.stack(outs)

    def _forward(self, args, diameter, labels=None):
        a, x, b, y, batched = self._process_args(args)
        scale = self._float32_scale(x, y, diameter)
        if scale is None:
            return self._in_float64((a, x, b, y), diameter, labels, batched)
        if scale != 1:
            return self._rescaled(scale, (a, x, b, y), diameter, labels, batched)
        if self.loss != "sinkhorn":
            out = kernel_loss(self.loss, self.blur, a, x, b, y, self.potentials, self.kernel)
            return out if self.potentials or batched else out[0]
        dim = x.shape[-1]
        if self._dense:
            settings = dict(p=self.p, blur=self.blur, reach_x=self.reach_x, reach_y=self.reach_y,
                            diameter=diameter or self.diameter, scaling=self.scaling,
                            debias=self.debias)
            if self.reach_x is None and self.reach_y is None:
                check_masses(_WHO, a, b)
            pots = dense_potentials(a, x, b, y, self.cost, settings)
            return self._finish(pots, a, b, batched)
        settings = dict(p=self.p, cost=self._cost_formula(dim), blur=self.blur,
                        reach_x=self.reach_x, reach_y=self.reach_y,
                        diameter=diameter or self._diameter(x, y, batched),
                        scaling=self.scaling, debias=self.debias, backend="auto")
        if self.gradient != "implicit":
            solve = dict(settings, alternating=False, tol=0.0, max_iter=1000)
        else:  # the implicit function theorem needs the fixed point itself
            solve = dict(settings, alternating=True, max_iter=10000,
                         tol=1e-9 if x.dtype == torch.float64 else 1e-5)
        multiscale = None
        if self.backend == "multiscale" or labels is not None:
            multiscale = dict(truncate=self.truncate, cluster_scale=self.cluster_scale,
                              labels=labels, verbose=bool(self.verbose))
        pots = solve_potentials(self.gradient, a, x, b, y, solve, settings, _WHO,
                                snapshots=self.snapshots, multiscale=multiscale)
        return self._finish(pots, a, b, batched)

    def _float32_scale(self, x, y, diameter):
        """The power of two by which float32 clouds far from unit size, or a blur far from
        theirs, are divided (tessel.ot._ranges.float32_scale), 1 for every other input, or None
        where float32 cannot hold the problem at any scale. Squared distances of points at 1e30
        overflow float32 (NaN) and those of points at 1e-20 fall below its normal range (a
        silently wrong value); the built-in costs and kernels are homogeneous, so dividing
        every length by a power of two is exact."""
        if x.dtype != torch.float32 or x.shape[-2] == 0 or y.shape[-2] == 0:
            return 1
        if self.loss == "sinkhorn" and eps_past_float32(self.p, self.blur, self._dense,
                                                        self.reach_x, self.reach_y):
            return None
        if (self._dense or self.kernel is not None
                or (self.loss == "sinkhorn" and self.cost is not None)):
            return 1
        d = (diameter or self.diameter) if self.loss == "sinkhorn" else None
        d = d or bounding_diameter(x, y)
        if d is not None and not math.isfinite(d):
            raise ValueError(f"{_WHO}: x and y must be finite; their bounding box is {d}")
        extent = float(max(x.detach().abs().max(), y.detach().abs().max()))
        scale = float32_scale(self.loss, self.p, self.blur, d, extent)
        if scale != 1 and is_wide(self.loss, self.blur, d):
            # Divided by blur ~ 2^100, the points' squared distances would underflow; the value
            # (~ (d / blur)^2) is computed in float64 and rounded once.
            return None
        return scale

    def _in_float64(self, args, diameter, labels, batched):
        """The loss of float32 clouds that no rescaling fits in float32 (see _ranges), solved on
        their float64 copies (exact) and rounded to float32 once; gradients flow back through
        the casts."""
        a, x, b, y = (t.double() for t in args)
        if self.loss == "sinkhorn" and self.reach_x is None and self.reach_y is None:
            # Equal in float32 (its tolerance), the masses are made equal in float64's: a change
            # below the rounding of float32 weights.
            check_masses(_WHO, *args[::2])
            b = b * (a.sum(-1, keepdim=True) / b.sum(-1, keepdim=True)).detach()
        out = self._forward((a, x, b, y), diameter, labels)
        if self.potentials:
            return tuple(to_float32(t, _WHO) for t in out)
        value = to_float32(out, _WHO)
        return value if batched else value[0]

    def _rescaled(self, scale, args, diameter, labels, batched):
        """The loss of clouds of unit size (see _float32_scale), scaled back. The factors go on
        the inputs' side of the backward: a cotangent scaled by (2^-40)^2 before it meets the
        solver's kernel values would underflow float32 (a zero or wrong gradient)."""
        a, x, b, y = args
        unit = copy.copy(self)
        for name in ("blur", "reach", "reach_x", "reach_y", "diameter"):
            v = getattr(self, name)
            setattr(unit, name, None if v is None else v / scale)
        factor = scale ** degree(self.loss, self.p)
        x, y = (Scaled.apply(t, 1 / scale, factor / scale) for t in (x, y))
        a, b = (Scaled.apply(t, 1.0, factor) for t in (a, b))
        out = unit._forward((a, x, b, y), None if diameter is None else diameter / scale, labels)
        if self.potentials:
            return tuple(Scaled.apply(t, factor, 1.0) for t in out)
        value = Scaled.apply(out, factor, 1.0)
        if not bool(torch.isfinite(value).all()) and bool(torch.isfinite(out).all()):
            raise ValueError(f"{_WHO}: the loss of these float32 points is about "
                             f"{float(out.detach().abs().max()) * factor:.3g}, past float32's "
                             "range; pass float64 points")
        return value if batched else value[0]

    def _finish(self, pots, a, b, batched):
        """The value (or GeomLoss's potentials) from the potentials (f, g, p, q)."""
        f, g, p, q = pots
        if self.potentials:
            if self.gradient == "implicit" and self.reach_x is None and self.reach_y is None:
                f, g = canonical_gauge(a, f, b, g)
            F, G = (f - p, g - q) if self.debias else (f, g)
            # Shaped as GeomLoss returns them: (B, N) batched, (1, N) for a single pair of clouds.
            return F, G
        value = self._ot(a, f, self.reach_x) + self._ot(b, g, self.reach_y)
        if self.debias:
            value = value - self._ot(a, p, self.reach_x) - self._ot(b, q, self.reach_y)
        return value if batched else value[0]

    def _diameter(self, x, y, batched):
        """The schedule's start: the given diameter, or for a batch GeomLoss's estimate, the
        bounding box of every cloud together (None: the core measures one pair of clouds)."""
        if self.diameter is not None or not batched:
            return self.diameter
        return bounding_diameter(x, y)

    def _ot(self, w, pot, reach):
        rho = None if reach is None else reach ** self.p
        semi = (self.reach_x is None) != (self.reach_y is None)
        return dual_side(w, pot, rho, self.blur ** self.p, self.gradient == "envelope", semi)

    def _process_args(self, args, who=_WHO):
        if len(args) == 2:
            x, y = args
            a = b = None
        elif len(args) == 4:
            a, x, b, y = args
        else:
            raise ValueError(f"{_WHO}: takes (x, y) or (a, x, b, y), got {len(args)} arguments")
        for name, t in (("x", x), ("y", y), ("a", a), ("b", b)):
            if t is None:
                continue
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{_WHO}: {name} must be a torch tensor, got "
                                f"{type(t).__name__}")
            if t.dtype not in (torch.float32, torch.float64):
                raise TypeError(f"{_WHO}: {name} has dtype {t.dtype}; expected float32 or "
                                "float64")
            if t.dtype != x.dtype:
                raise TypeError(f"{_WHO}: {name} has dtype {t.dtype} but x has {x.dtype}; "
                                "expected the same dtype")
            # Before any torch operation on them, which would name neither argument.
            if t.device != x.device:
                raise ValueError(f"{_WHO}: {name} is on {t.device} but x on {x.device}; expected "
                                 "one device")
        if x.dim() not in (2, 3) or y.dim() != x.dim():
            raise ValueError(f"{_WHO}: x and y must both be (N, D) or both (B, N, D) tensors, got "
                             f"shapes {tuple(x.shape)} and {tuple(y.shape)}")
        if x.shape[-1] != y.shape[-1]:
            raise ValueError(f"{_WHO}: x and y must have the same last dimension (D), got "
                             f"{x.shape[-1]} and {y.shape[-1]}")
        batched = x.dim() == 3
        if batched and x.shape[0] != y.shape[0]:
            raise ValueError(f"{_WHO}: x and y must have the same batch size, got {x.shape[0]} "
                             f"and {y.shape[0]}")
        for name, t in (("x", x), ("y", y)):
            # A kernel norm of an empty measure is defined (0 mass); transport to one is not,
            # and every Sinkhorn backend must say so alike (the multiscale clusters would not).
            if self.loss == "sinkhorn" and t.shape[-2] == 0:
                raise ValueError(f"{who}: {name} has shape {tuple(t.shape)}; expected at least "
                                 "one point per cloud for loss='sinkhorn'")
            # On every device and backend alike (the bounding box, the scalings and the series
            # regime would otherwise turn one NaN into a NaN loss without a word).
            if not bool(torch.isfinite(t.detach()).all()):
                raise ValueError(f"{who}: {name} has a non-finite coordinate; points must be "
                                 "finite")
        # As in GeomLoss, a None weight is uniform for its own cloud only.
        a, b = self._weights("a", a, x), self._weights("b", b, y)
        if not batched:
            a, x, b, y = a[None], x[None], b[None], y[None]
        return a, x, b, y, batched

    def _weights(self, name, w, pts):
        want = tuple(pts.shape[:-1])
        if w is None:
            return torch.ones(want, dtype=pts.dtype, device=pts.device) / pts.shape[-2]
        if tuple(w.shape) == want + (1,):
            w = w[..., 0]
        if tuple(w.shape) != want:
            raise ValueError(f"{_WHO}: {name} has shape {tuple(w.shape)}; expected {want} or "
                             f"{want + (1,)}: one weight per point")
        return w


GRADIENTS = ("envelope", "implicit", "unrolled")


def check_gradient(who, gradient):
    if gradient not in GRADIENTS:
        raise ValueError(f"{who}: gradient must be one of {', '.join(map(repr, GRADIENTS))}, got "
                         f"{gradient!r}")
    return gradient


def check_snapshots(who, snapshots):
    if snapshots is not None and (isinstance(snapshots, bool) or not isinstance(
            snapshots, numbers.Integral) or snapshots < 1):
        raise ValueError(f"{who}: snapshots must be None (keep every iteration) or an integer "
                         f">= 1, got {snapshots!r}")
    return snapshots


def solve_potentials(gradient, a, x, b, y, solve, settings, who, reports=None, snapshots=None,
                     multiscale=None):
    """(f, g, p, q), each stacked over the batch, by the chosen gradient mode; warns when a loop
    asked to converge (tol > 0) stopped at max_iter first."""
    reports = [{} for _ in range(x.shape[0])] if reports is None else reports
    if settings["reach_x"] is None and settings["reach_y"] is None:
        check_masses(who, a, b)
    def one(k):
        args = (a[k], x[k], b[k], y[k])
        if in_series_regime(x[k], y[k], settings):  # blur^p far above the costs: _large_blur
            if multiscale is not None:  # nothing to truncate: every block is kept
                reports[k].update(dropped_mass=0.0, kept_blocks=1.0)
            return series_potentials(gradient, *args, solve, settings, reports[k])
        if multiscale is not None:
            return multiscale_potentials(*args, settings, report=reports[k], tol=solve["tol"],
                                         max_iter=solve["max_iter"], **multiscale)
        if gradient == "envelope":
            return SinkhornPotentials.apply(x[k], y[k], a[k], b[k], solve, settings, reports[k])
        if gradient == "implicit":
            return implicit_potentials(*args, solve, settings, reports[k])
        return unrolled_potentials(*args, solve, settings, reports[k], snapshots)

    pots = [one(k) for k in range(x.shape[0])]
    if solve["tol"] > 0 and not all(r["converged"] for r in reports):
        worst = max(r.get("refined_error", max(r["history"][-1][1:])) for r in reports)
        newton = " and Newton refinement" if gradient == "implicit" else ""
        hint = ("raise blur, or call tessel.ot.solve_sample, which takes max_iter and tol"
                if who.endswith("SamplesLoss") else
                "raise max_iter or blur, or lower the accuracy asked for")
        warnings.warn(f"{who}: stopped after max_iter={solve['max_iter']} iterations{newton} "
                      f"with a marginal error of {worst:.3g} > tol={solve['tol']:g}; {hint}",
                      RuntimeWarning, stacklevel=3)
    return [torch.stack([pk[m] for pk in pots]) for m in range(4)]


class _DualSide(torch.autograd.Function):
    """One marginal's part of OT_eps with the fixed point's derivatives (envelope mode).

    Soft marginal (rho): value sum_i w_i (rho + eps/2)(1 - exp(-pot_i / rho)); derivative
    (rho + eps) exp(-pot / rho) w / rho for the potential, as Sejourne et al. (2019, Prop. 12)
    give and GeomLoss's UnbalancedWeight documents (its backward method is never called by
    autograd, so GeomLoss differentiates with rho + eps/2 instead), and
    (rho + eps)(1 - exp(-pot / rho)) - eps/2 for the weight (envelope theorem on the dual).
    Hard marginal (rho None): value <w, pot>, derivatives w and pot - shift; shift = eps/2 when
    the other marginal is soft (semi-unbalanced: the masses are free), else 0 (balanced: the
    weights' gradient is defined up to a constant; GeomLoss's convention)."""

    @staticmethod
    def forward(ctx, w, pot, rho, eps, shift):
        ctx.rho, ctx.eps, ctx.shift = rho, eps, shift
        if rho is None:
            ctx.save_for_backward(w, pot)
            return (w * pot).sum(-1)
        # expm1: past eps ~ rho / rounding, pot / rho is below float's rounding of 1.
        em1 = torch.expm1(-pot / rho)
        ctx.save_for_backward(w, em1)
        return (w * ((rho + eps / 2) * -em1)).sum(-1)

    @staticmethod
    def backward(ctx, grad):
        w, t = ctx.saved_tensors
        rho, eps, g = ctx.rho, ctx.eps, grad[..., None]
        if rho is None:
            gw, gp = g * (t - ctx.shift), g * w
        else:
            gw = g * ((rho + eps) * -t - eps / 2)
            gp = g * w * (rho + eps) * (1 + t) / rho
        return (gw if ctx.needs_input_grad[0] else None,
                gp if ctx.needs_input_grad[1] else None, None, None, None)


def dual_side(w, pot, rho, eps, envelope, semi=False):
    """One marginal's part of OT_eps: <w, pot> for a hard marginal (rho None), else
    <w, (rho + eps/2)(1 - exp(-pot / rho))>. envelope: the potentials carry envelope gradients
    (no dependence on the weights), so the fixed point's derivatives are applied here
    (_DualSide; semi: the problem is semi-unbalanced); otherwise the potentials are
    differentiable functions of everything and plain autograd is exact."""
    if envelope:  # the weights' gradient is an envelope one too: first order only
        (w,) = first_order_only(w)
    if envelope and (rho is not None or semi):
        return _DualSide.apply(w, pot, rho, eps, eps / 2 if semi else 0.0)
    if rho is None:
        return (w * pot).sum(-1)
    return (w * ((rho + eps / 2) * -torch.expm1(-pot / rho))).sum(-1)
