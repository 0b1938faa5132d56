"""tessel.distributed.SamplesLoss: GeomLoss's SamplesLoss on point clouds sharded over ranks.

Sinkhorn divergences and kernel losses between point clouds whose rows are spread over the ranks
of a process group, with gradients in every rank's rows.

The Sinkhorn loop is tessel.ot's online one, replayed in Python: GeomLoss's epsilon schedule
(the core's own epsilon_schedule, from the diameter of the global bounding box), a cold start
from zero potentials, symmetric averaged updates of f, g and (debias) p, q, then a last
extrapolation at blur^p that is differentiated with the potentials it starts from held constant
(the envelope gradient). Every softmin is one tessel.distributed.Genred LogSumExp over every
rank's rows, in the core's arithmetic (log-weights and potentials in float64, the reduction in
the points' dtype), so a rank's potentials are the rows of the single-process ones up to the
order of the ring's partial sums. Kernel losses are Genred Sum reductions.

Each rank's loss is its own share l_r (<a_r, f_r - p_r> + <b_r, g_r - q_r>); the value returned
is the all_reduced total, and its backward is l_r's, so that every rank receives d(total)/d(its
own rows): each share reads other ranks' rows only through reductions whose backward sends
their gradients home (Genred's semantics), or not at all (detached, as GeomLoss does).
"""
import math

import torch
import torch.distributed as dist

from .. import _core
from ..ot import SamplesLoss as _WholeLoss
from ..ot._large_blur import _SWITCH, _TERMS, from_moments
from ..ot.kernel_loss import _Q_DEGREE, is_wide
from ..ot._ranges import Scaled, degree, distinct_digits, float32_scale
from ._genred import Genred
from ._ring import Ring, exchange

__all__ = ["SamplesLoss"]

_WHO = "tessel.distributed.SamplesLoss"
_WHOLE = "tessel.ot.SamplesLoss"
_LOG_ZERO = -1e5  # the core's log of a zero weight: finite potentials, exp(.) underflows to 0
_SUPPORTED = ("supported: loss='sinkhorn' (balanced, the built-in costs p=1 and p=2, envelope "
              "gradients) and the kernel losses 'gaussian', 'laplacian' and 'energy'")
_COSTS = {1.0: "Norm2(X-Y)", 2.0: "SqDist(X,Y) / IntCst(2)"}
# k(x, y) * w for the kernel losses, with G the kernel's scale (tessel.ot.kernel_loss's kernels).
_KERNELS = {"gaussian": ("Exp(-G * SqDist(X,Y)) * W", lambda blur: 1 / (2 * blur ** 2)),
            "laplacian": ("Exp(-G * Sqrt(SqDist(X,Y))) * W", lambda blur: 1 / blur),
            "energy": ("-G * Sqrt(SqDist(X,Y)) * W", lambda blur: 1.0)}
_SOFTMIN_ALIASES = "X=Vi({d})", "Y=Vj({d})", "H=Vj(1)", "E=Pm(1)"
_KERNEL_ALIASES = "X=Vi({d})", "Y=Vj({d})", "W=Vj(1)", "G=Pm(1)"
# Past tessel.ot._large_blur's switch, the softmin's series: the weighted mean of C - H (and the
# mass), then the moments of Z = (C - H - NU) / span (tessel.ot._large_blur's arithmetic).
_MEAN = "Concat((({c}) - H) * W, W)"
_MEAN_ALIASES = "X=Vi({d})", "Y=Vj({d})", "H=Vj(1)", "W=Vj(1)"
_MOMENTS_ALIASES = "X=Vi({d})", "Y=Vj({d})", "H=Vj(1)", "W=Vj(1)", "NU=Vi(1)", "IS=Pm(1)"


def _moments_formula(cost):
    z = f"((({cost}) - H - NU) * IS)"
    text = "*".join([z] * _TERMS) + " * W"
    for k in range(_TERMS - 1, 0, -1):
        text = f"Concat({'*'.join([z] * k)} * W, {text})"
    return text


class SamplesLoss(torch.nn.Module):
    """Sinkhorn divergences and kernel losses between point clouds sharded over ranks.

    tessel.ot.SamplesLoss (GeomLoss's SamplesLoss) on clouds whose points are spread over the
    ranks of a torch.distributed group: the Sinkhorn loop's softmins and the kernel products are
    tessel.distributed.Genred reductions over every rank's points, so each rank holds only its
    own rows, and the loss and its gradients are those of the whole clouds (up to the order of
    the ring's partial sums). Typical use: an optimal transport or MMD loss between two clouds
    too large for one device, in a data-parallel training loop.

    Call it on every rank, collectively, as ``L(x, y)`` (uniform weights over the whole clouds)
    or ``L(a, x, b, y)`` with that rank's rows: x (n_r, D) and y (m_r, D) float32 or float64
    tensors, a (n_r,) or (n_r, 1) and b likewise; shards may be uneven or empty, and x and y
    sharded differently. It returns the loss of the whole clouds, a 0-d tensor with the same
    value on every rank; with ``potentials=True``, this rank's rows of GeomLoss's dual potentials
    (F, G), shaped (1, n_r) and (1, m_r). Backward is collective (every rank backpropagates its
    copy of the loss) and each rank receives d(loss)/d(its own rows of a, x, b, y), the rows of
    what one process would get on the whole clouds; first order only (envelope gradients).

    Parameters
    ----------
    loss : {"sinkhorn", "gaussian", "laplacian", "energy"}, default "sinkhorn"
        The Sinkhorn divergence (balanced), or half the squared kernel norm of a - b for the
        kernels ``exp(-|x-y|^2 / 2 blur^2)``, ``exp(-|x-y| / blur)`` or ``-|x-y|``.
    p : {1, 2}, default 2
        The cost ``|x-y|`` (p=1) or ``|x-y|^2 / 2`` (p=2) of the Sinkhorn loss.
    blur : float, default 0.05
        The scale of the loss: the Sinkhorn temperature is ``eps = blur^p``; the kernels' width.
    reach : None
        Unbalanced transport is not sharded: only None.
    diameter : float, optional
        The clouds' diameter, where the epsilon schedule starts; None (the default): the
        diagonal of the global bounding box.
    scaling : float, default 0.5
        The ratio between consecutive blurs of the epsilon schedule (closer to 1: more
        iterations, more accurate).
    truncate : float, default 5
        Accepted, as tessel.ot.SamplesLoss; only its multiscale backend (not sharded) uses it.
    cost, kernel, cluster_scale : None
        Custom costs and kernels and the multiscale backend are not sharded: only None.
    debias : bool, default True
        The Sinkhorn divergence ``OT_eps(a, b) - (OT_eps(a, a) + OT_eps(b, b)) / 2`` (True)
        or the entropic transport cost ``OT_eps(a, b)`` (False).
    potentials : bool, default False
        Return this rank's rows of the dual potentials instead of the loss.
    verbose : bool, default False
        Accepted, as tessel.ot.SamplesLoss; prints nothing here.
    backend : {"auto", "online"}, default "auto"
        The online solver; the other backends are not sharded.
    gradient : {"envelope"}, default "envelope"
        GeomLoss's envelope gradient, the only one sharded.
    snapshots, reach_x, reach_y : None
        tessel.ot.SamplesLoss options that are not sharded: only None.
    group : torch.distributed.ProcessGroup, optional
        The ranks that share the clouds; None (the default) is the world.

    Raises
    ------
    ValueError
        If an argument is invalid for tessel.ot.SamplesLoss; when called, if x and y are not
        (n, D) tensors of one dimension, a weight has the wrong shape or is negative, a value is
        not finite, a Sinkhorn cloud is empty over all ranks, or the total masses differ.
    TypeError
        If an argument has a wrong type; when called, for other than 2 or 4 arguments, or
        arguments that are not float32 or float64 tensors of x's dtype.
    NotImplementedError
        For an option or backend that is not sharded (see above).
    RuntimeError
        When another rank of the group refused its call, skipped it, or died in it.

    See Also
    --------
    tessel.ot.SamplesLoss : The same losses in one process, with every option.
    Genred : The sharded reductions it runs.

    Examples
    --------
    A Sinkhorn divergence and its gradient in a one-rank gloo group, equal to one process's:

    >>> import socket
    >>> import torch
    >>> import torch.distributed as dist
    >>> import tessel.ot
    >>> from tessel.distributed import SamplesLoss
    >>> s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
    >>> dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
    ...                         world_size=1)
    >>> _ = torch.manual_seed(0)
    >>> x = torch.randn(60, 3, dtype=torch.float64, requires_grad=True)  # this rank's rows
    >>> y = torch.randn(50, 3, dtype=torch.float64) + 1
    >>> loss = SamplesLoss("sinkhorn", p=2, blur=0.1)(x, y)
    >>> loss.backward()
    >>> x1 = x.detach().clone().requires_grad_()
    >>> one = tessel.ot.SamplesLoss("sinkhorn", p=2, blur=0.1)(x1, y)  # one process
    >>> one.backward()
    >>> bool(torch.allclose(loss, one)), bool(torch.allclose(x.grad, x1.grad))
    (True, True)
    >>> dist.destroy_process_group()
    """

    def __init__(self, loss="sinkhorn", p=2, blur=0.05, reach=None, diameter=None, scaling=0.5,
                 truncate=5, cost=None, kernel=None, cluster_scale=None, debias=True,
                 potentials=False, verbose=False, backend="auto", gradient="envelope",
                 snapshots=None, reach_x=None, reach_y=None, group=None):
        super().__init__()
        try:  # tessel.ot's checks of every argument, naming this class
            whole = _WholeLoss(loss=loss, p=p, blur=blur, reach=reach, diameter=diameter,
                               scaling=scaling, truncate=truncate, cost=cost, kernel=kernel,
                               cluster_scale=cluster_scale, debias=debias,
                               potentials=potentials, verbose=verbose, backend=backend,
                               gradient=gradient, snapshots=snapshots, reach_x=reach_x,
                               reach_y=reach_y)
        except (TypeError, ValueError, NotImplementedError) as e:
            raise type(e)(str(e).replace(_WHOLE, _WHO)) from None
        unsupported = [("reach", reach), ("reach_x", reach_x), ("reach_y", reach_y),
                       ("cost", cost), ("kernel", kernel), ("cluster_scale", cluster_scale),
                       ("snapshots", snapshots)]
        unsupported += [("backend", backend)] if backend not in ("auto", "online") else []
        unsupported += [("gradient", gradient)] if gradient != "envelope" else []
        for name, v in unsupported:
            if v is not None:
                raise NotImplementedError(f"{_WHO}: {name}={v!r} is not sharded; {_SUPPORTED}")
        self.loss, self.p, self.blur, self.diameter = whole.loss, whole.p, whole.blur, diameter
        self.scaling, self.debias, self.potentials = whole.scaling, whole.debias, whole.potentials
        self.group = group
        self._reds = {}

    def _genred(self, formula, aliases, op, dim):
        """The Genred of a formula, built once per dimension of the points."""
        key = (formula, op, dim)
        if key not in self._reds:
            self._reds[key] = Genred(formula, [s.format(d=dim) for s in aliases], op, axis=1,
                                     group=self.group)
        return self._reds[key]

    def _settings(self):
        return repr((self.loss, self.p, self.blur, self.diameter, self.scaling, self.debias,
                     self.potentials))

    def forward(self, *args):
        """The loss of the whole clouds from this rank's rows, ``(x, y)`` or ``(a, x, b, y)``
        (see the class); every rank of the group must call it."""
        ring = Ring.of(self.group, _WHO)
        ns, ms = exchange(_Call(self._settings()), ring, args, _WHO)
        a, x, b, y = _with_weights(args, sum(ns), sum(ms))
        if self.loss == "sinkhorn" and not (sum(ns) and sum(ms)):
            raise ValueError(f"{_WHO}: x has {sum(ns)} and y {sum(ms)} points over all ranks; "
                             "expected at least one point per cloud for loss='sinkhorn'")
        lo, hi, needs, masses = _global_stats(ring, a, x, b, y)
        # A rank whose rows need no gradient still joins the collective backward of those that
        # do: every rank's reductions must record the same graph.
        a, x, b, y = (t.detach().requires_grad_() if n and not t.requires_grad else t
                      for t, n in zip((a, x, b, y), needs))
        box = math.sqrt(sum((h - l) ** 2 for h, l in zip(hi, lo))) if sum(ns) + sum(ms) else 0.0
        diameter = box if box > 0 else None
        if self.loss == "sinkhorn":
            _check_masses(masses, x.dtype)
            # The core's estimate: the global bounding box's diagonal.
            diameter = self.diameter or diameter or self.blur
        self._box = box  # the costs' range bounds the series' switch (tessel.ot._large_blur)
        out = self._in_range(ring, (a, x, b, y), diameter, masses,
                             max(map(abs, lo + hi)) if diameter else 0.0)
        if self.potentials:
            return out
        total = out.detach().clone()
        dist.all_reduce(total, group=ring.group)
        if not bool(torch.isfinite(total)) and x.dtype == torch.float32:
            raise ValueError(f"{_WHO}: the loss of these float32 points is past float32's "
                             "range; pass float64 points")
        return _Total.apply(out, total)

    def _in_range(self, ring, args, diameter, masses, extent):
        """The loss (this rank's share) or potentials, float32 clouds far from unit size
        divided by a power of two (exact) and scaled back, or solved on their float64 copies
        where no power of two fits float32 (tessel.ot._ranges: the same rule as one process's;
        every rank decides alike from the global box)."""
        a, x, b, y = args
        scale = 1
        if x.dtype == torch.float32:
            scale = float32_scale(self.loss, self.p, self.blur, diameter, extent)
            if scale != 1 and is_wide(self.loss, self.blur, diameter):
                scale = None  # divided by blur, the squared distances would underflow
        if scale == 1:
            return self._solve(args, self.blur, diameter, masses, self._box)
        if scale is None:
            a, x, b, y = (t.double() for t in args)
            if self.loss == "sinkhorn":  # equal in float32's tolerance: equal in float64's too
                b = b * (masses[0] / masses[1])
            equal = (masses[0],) * 2 if self.loss == "sinkhorn" else masses
            out = self._solve((a, x, b, y), self.blur, diameter, equal, self._box)
            if not self.potentials:  # the total's check (forward) covers the value
                return out.float()
            return _all_finite(ring, out, tuple(t.float() for t in out))
        factor = scale ** degree(self.loss, self.p)
        x, y = (Scaled.apply(t, 1 / scale, factor / scale) for t in (x, y))
        a, b = (Scaled.apply(t, 1.0, factor) for t in (a, b))
        out = self._solve((a, x, b, y), self.blur / scale,
                          None if diameter is None else diameter / scale,
                          [m * factor for m in masses], self._box / scale)
        if not self.potentials:
            return Scaled.apply(out, factor, 1.0)
        return _all_finite(ring, out, tuple(Scaled.apply(t, factor, 1.0) for t in out))

    def _solve(self, args, blur, diameter, masses, box):
        if self.loss != "sinkhorn":
            return self._kernel(*args, blur, masses, box)
        return self._sinkhorn(*args, blur, diameter, masses, box)

    def _sinkhorn(self, a, x, b, y, blur, diameter, masses, box):
        """This rank's share of the loss, or its rows of the potentials (F, G)."""
        schedule = _core.epsilon_schedule(self.p, diameter, blur, self.scaling)
        dim, cost = x.shape[1], _COSTS[self.p]
        red = self._genred(f"H - E * ({cost})", _SOFTMIN_ALIASES, "LogSumExp", dim)
        span = (box * box / 2 if self.p == 2 else box) or 1.0
        series = span <= _SWITCH[x.dtype] * schedule[-1]
        # Past the switch, the normalised measures (tessel.ot._large_blur): no -eps log(mass).
        norms = (masses[0], masses[1]) if series else (1.0, 1.0)
        la, lb = _log_weights(a / norms[0]), _log_weights(b / norms[1])
        mean = self._genred(_MEAN.format(c=cost), _MEAN_ALIASES, "Sum", dim)
        moments = self._genred(_moments_formula(cost), _MOMENTS_ALIASES, "Sum", dim)

        def softmin(u, v, logw, pot, eps, last):
            """-eps log sum_j exp(log w_j + pot_j / eps - C(u_i, v_j) / eps), over all ranks:
            float64 in the loop (the core keeps its potentials so), u's dtype at the last step;
            past the switch by tessel.ot._large_blur's series (float64)."""
            if span <= _SWITCH[x.dtype] * eps:
                ud, vd, w = u.double(), v.detach().double(), logw.exp()[:, None]
                hw = mean(ud, vd, pot[:, None], w)
                nu = hw[:, 0] / hw[:, 1]
                mom = moments(ud, vd, pot[:, None], w, nu[:, None], ud.new_tensor([1 / span]))
                out = from_moments(nu, mom / hw[:, 1:], span, eps)
                return out.to(u.dtype) if last else out
            h = (logw + pot / eps).to(u.dtype)[:, None]
            lse = red(u, v.detach(), h, u.new_tensor([1 / eps]))[:, 0]
            return -eps * (lse if last else lse.double())

        def sweep(pots, eps, u, v, last=False):
            """Every potential as the softmin of the others (the cold start, the last step)."""
            f, g, p, q = pots
            out = [softmin(u, v, lb, g, eps, last), softmin(v, u, la, f, eps, last)]
            if self.debias:
                out += [softmin(u, u, la, p, eps, last), softmin(v, v, lb, q, eps, last)]
            return out + [None] * (4 - len(out))

        xd, yd = x.detach(), y.detach()
        with torch.no_grad():
            zeros = [la.new_zeros(x.shape[0]), lb.new_zeros(y.shape[0])]
            pots = sweep(zeros * 2, schedule[0], xd, yd)
            for eps in schedule:  # symmetric updates, averaged (the core's order and rounding)
                new = sweep(pots, eps, xd, yd)
                pots = [None if o is None else 0.5 * (o + s) for o, s in zip(pots, new)]
        f, g, p, q = sweep(pots, schedule[-1], x, y, last=True)
        if series and not self.debias:  # OT_eps's -eps log(mass) terms, split evenly
            shift = -schedule[-1] * (math.log(masses[0]) + math.log(masses[1])) / 4
            f, g = f + shift, g + shift
        if self.potentials:
            F, G = (f - p, g - q) if self.debias else (f, g)
            return F[None], G[None]
        share = (a * f).sum() + (b * g).sum()
        if self.debias:
            share = share - (a * p).sum() - (b * q).sum()
        return share

    def _kernel(self, a, x, b, y, blur, masses, box):
        """This rank's share of half the squared kernel norm of a - b, or its rows of the
        potentials (tessel.ot.kernel_loss's, its gradients included). A kernel wider than the
        clouds is 1 - q (tessel.ot.kernel_loss.is_wide): the products are with q, the constants
        gather into (mass_a - mass_b)^2 / 2, shared by the ranks in proportion to their mass."""
        formula, scale = _KERNELS[self.loss]
        wide = is_wide(self.loss, blur, box)
        if wide:
            t = "G * SqDist(X,Y)" if self.loss == "gaussian" else "G * Sqrt(SqDist(X,Y))"
            formula = f"({_one_minus_exp_text(t)}) * W"
        red = self._genred(formula, _KERNEL_ALIASES, "Sum", x.shape[1])
        k = x.new_tensor([scale(blur)])
        sign, dm = (-1, masses[0] - masses[1]) if wide else (1, 0.0)

        def product(u, v, w):
            return red(u, v, w[:, None], k)[:, 0]

        if self.potentials:
            # GeomLoss's graph: K(x, x) a with its second x and a constant, the gradient twice.
            a_x = product(2 * x - x.detach(), x.detach(), a.detach())
            b_y = product(2 * y - y.detach(), y.detach(), b.detach())
            return ((dm + sign * (a_x - product(x, y, b)))[None],
                    (-dm + sign * (b_y - product(y, x, a)))[None])
        # Every side differentiable: the gradient of the quadratic form (tessel.ot's too).
        share = sign * (0.5 * (a * product(x, x, a)).sum() + 0.5 * (b * product(y, y, b)).sum()
                        - (a * product(x, y, b)).sum())
        if wide:  # sums to dm^2 / 2 over the ranks, gradient dm in a and -dm in b
            part = float(a.detach().sum() + b.detach().sum()) / (masses[0] + masses[1])
            share = share + dm * (a.sum() - b.sum()) - 0.5 * dm * dm * part
        return share


def _one_minus_exp_text(t):
    """1 - exp(-t) as tessel.ot.kernel_loss's series, a formula in t (a formula text)."""
    q = "IntCst(1)"
    for k in range(_Q_DEGREE, 1, -1):
        q = f"(IntCst(1) - ({t}) * {q} / IntCst({k}))"
    return f"({t}) * {q}"


class _Total(torch.autograd.Function):
    """The total over the ranks (the same number on every rank), whose backward is the rank's
    own share's."""

    @staticmethod
    def forward(ctx, share, total):
        return total.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, None


class _Call:
    """A call's descriptor for the ranks' check (tessel.distributed's exchange): the loss's
    settings and each argument's dims, dtype and device; raises on this rank's own errors."""

    def __init__(self, settings):
        self._text = settings

    def _descriptor(self, args):
        a, x, b, y = _split(args)
        for name, t in (("x", x), ("y", y), ("a", a), ("b", b)):
            if t is None:
                continue
            if not isinstance(t, torch.Tensor):
                raise TypeError(f"{_WHO}: {name} must be a torch tensor, got {type(t).__name__}")
            if t.dtype not in (torch.float32, torch.float64) or t.dtype != x.dtype:
                raise TypeError(f"{_WHO}: {name} has dtype {t.dtype}; expected float32 or "
                                f"float64, the dtype of x ({x.dtype})")
            if t.device != x.device:
                raise ValueError(f"{_WHO}: {name} is on {t.device} but x on {x.device}; "
                                 "expected one device")
            if not bool(torch.isfinite(t.detach()).all()):
                raise ValueError(f"{_WHO}: {name} has a non-finite value on this rank")
        for name, t in (("x", x), ("y", y)):
            if t.dim() != 2:
                raise ValueError(f"{_WHO}: {name} has shape {tuple(t.shape)}; expected this "
                                 "rank's rows as an (n, D) tensor (batches are not sharded)")
        if x.shape[1] != y.shape[1]:
            raise ValueError(f"{_WHO}: x has points of dimension {x.shape[1]} but y of "
                             f"dimension {y.shape[1]}; expected the same")
        for name, w, pts in (("a", a, x), ("b", b, y)):
            if w is None:
                continue
            if tuple(w.shape) not in ((pts.shape[0],), (pts.shape[0], 1)):
                raise ValueError(f"{_WHO}: {name} has shape {tuple(w.shape)}; expected "
                                 f"({pts.shape[0]},) or ({pts.shape[0]}, 1): one weight per "
                                 "point of this rank's rows")
            if bool((w.detach() < 0).any()):
                raise ValueError(f"{_WHO}: {name} has a negative weight; weights must be >= 0")
        parts = [(self._text, len(args))]
        for name, kind, t in (("a", "weights", a), ("x", "points", x), ("b", "weights", b),
                              ("y", "points", y)):
            if t is not None:
                parts.append((name, kind, tuple(t.shape[1:]), str(t.dtype), t.device.type,
                               False))
        return parts, x.shape[0], y.shape[0]


def _split(args):
    if len(args) == 2:
        return None, args[0], None, args[1]
    if len(args) == 4:
        return args
    raise TypeError(f"{_WHO}: takes (x, y) or (a, x, b, y), this rank's rows of each, got "
                    f"{len(args)} arguments")


def _with_weights(args, n, m):
    """(a, x, b, y) with weights of shape (rows,); a None weight is uniform over its whole
    cloud (as tessel.ot's: ones / the global count)."""
    a, x, b, y = _split(args)
    a = torch.ones(x.shape[0], dtype=x.dtype, device=x.device) / n if a is None else a
    b = torch.ones(y.shape[0], dtype=y.dtype, device=y.device) / m if b is None else b
    return a.reshape(-1), x, b.reshape(-1), y


def _global_stats(ring, a, x, b, y):
    """The global bounding box (lo, hi per coordinate), whether any rank's a, x, b, y needs a
    gradient, and the total masses: one all_reduce of maxima, one of sums."""
    pts = torch.cat([x.detach(), y.detach()]).double()
    inf = torch.full((x.shape[1],), math.inf, dtype=torch.float64, device=pts.device)
    hi = pts.max(0)[0] if pts.shape[0] else -inf
    lo = pts.min(0)[0] if pts.shape[0] else inf
    grad = torch.is_grad_enabled()
    flags = torch.tensor([float(grad and t.requires_grad) for t in (a, x, b, y)],
                         dtype=torch.float64, device=pts.device)
    top = torch.cat([hi, -lo, flags])
    masses = torch.stack([a.detach().double().sum(), b.detach().double().sum()])
    if ring.backend == "gloo":
        top, masses = top.cpu(), masses.cpu()
    dist.all_reduce(top, op=dist.ReduceOp.MAX, group=ring.group)
    dist.all_reduce(masses, group=ring.group)
    d = x.shape[1]
    return ((-top[d:2 * d]).tolist(), top[:d].tolist(), [bool(v) for v in top[2 * d:].tolist()],
            masses.tolist())


def _check_masses(masses, dtype):
    """The core's check: balanced OT between different total masses has no solution."""
    ma, mb = masses
    tol = 1e-4 if dtype == torch.float32 else 1e-8
    if not (ma > 0 and mb > 0):
        raise ValueError(f"{_WHO}: the weights sum to {ma:g} (a) and {mb:g} (b) over all ranks; "
                         "expected a positive total mass for each")
    if abs(ma - mb) > tol * max(ma, mb):
        sa, sb = distinct_digits(ma, mb)
        raise ValueError(f"{_WHO}: balanced OT needs equal total masses; over all ranks the "
                         f"weights a sum to {sa} and b to {sb}: normalise a and b")


def _all_finite(ring, exact, rounded):
    """`rounded` (float32 potentials, this rank's rows) if every rank's are finite where the
    `exact` ones are; else a ValueError on every rank alike (a rank left alone in the
    collective backward would wait for the others)."""
    bad = float(any(bool((torch.isfinite(e.detach()) & ~torch.isfinite(r.detach())).any())
                    for e, r in zip(_tuple(exact), _tuple(rounded))))
    flag = torch.tensor([bad], dtype=torch.float64)
    if ring.backend != "gloo":
        flag = flag.to(exact[0].device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=ring.group)
    if float(flag) > 0:
        raise ValueError(f"{_WHO}: the result for these float32 points is past float32's range "
                         "on some rank; pass float64 points")
    return rounded


def _tuple(t):
    return t if isinstance(t, tuple) else (t,)


def _log_weights(w):
    """The core's log-weights, in float64 and detached (the loop and the extrapolation hold the
    weights constant; their gradient is the potentials', through the loss's sums)."""
    w = w.detach().double()
    return torch.where(w > 0, torch.log(w), torch.full_like(w, _LOG_ZERO))
