"""tessel.ot.solve_sample: entropic OT between point clouds, with its plan as a LazyTensor.

The loop is the core's (as SamplesLoss's); the result keeps what a caller asks of a solver: the
value, the dual potentials, the plan pi_ij = a_i b_j exp((f_i + g_j - C(x_i, y_j)) / eps) as a
LazyTensor (applied to vectors, reduced or matched by argmax, never stored), its marginals and
the loop's history. Memory stays O(N + M).
"""
import math
import numbers

from ._implicit import canonical_gauge, cost_lazy, plan_lazy
from ._potentials import bounding_diameter
from .samples_loss import (SamplesLoss, _check_number, check_gradient, check_length_power,
                           check_snapshots, common_diameter, dual_side, solve_potentials)

_WHO = "tessel.ot.solve_sample"
_UPDATES = ("symmetric", "alternating")


class OTResult:
    """What solve_sample returns: the value, the potentials, the plan and the solver's report.

    Tensors carry a batch axis first when the inputs did.

    Parameters
    ----------
    value : tensor
        The entropic OT cost OT_eps(a, b) (GeomLoss's formula: the primal value when both
        masses are 1), or the Sinkhorn divergence with debias=True; differentiable in a, b,
        x, y.
    f, g : tensor
        The dual potentials of the x-y problem, on x (N) and on y (M).
    p, q : tensor or None
        Those of the x-x and y-y problems with debias (else None). ``potentials`` is
        (f - p, g - q), or (f, g).
    plan : LazyTensor
        The transport plan as an (N, M) LazyTensor: ``plan @ v``, ``plan.sum(1)``,
        ``plan.argmax(1)`` (each x_i's most likely partner), ``plan.t() @ u``... never stored.
    reports : list
        The solver's reports, read into the attributes below.

    Notes
    -----
    ``marginals``: (plan.sum(1), plan.sum(0)) as (N) and (M) tensors (computed on first use).
    ``eps``, ``diameter``: the final temperature blur^p and the schedule's start; ``history``:
    one (eps, error, error_x, error_y) per iteration (marginal errors in mass units);
    ``n_iter``; ``converged``: the last errors were <= tol (tol > 0 only); ``marginal_error``:
    the last error. With backend="multiscale", history holds the iterations on the points (the
    coarse solve's are not listed), marginal_error is measured once more at the returned
    potentials over the kept blocks, ``dropped_mass`` is the plan's mass in the blocks its
    truncation left out, computed exactly (mass units; None for the online solver), and
    ``kept_blocks`` the share of cluster pairs its last mask kept (None for the online
    solver).

    Examples
    --------
    >>> import torch
    >>> from tessel.ot import solve_sample
    >>> x, y = torch.rand(50, 2, dtype=torch.float64), torch.rand(60, 2, dtype=torch.float64)
    >>> r = solve_sample(None, x, None, y, blur=0.1, tol=1e-9)
    >>> r.f.shape, r.g.shape, r.converged
    (torch.Size([50]), torch.Size([60]), True)
    >>> row, col = r.marginals                     # the plan's marginals: 1/N and 1/M
    >>> bool(torch.allclose(row, torch.full((50,), 1 / 50, dtype=torch.float64), atol=1e-8))
    True
    """

    def __init__(self, value, f, g, p, q, plan, reports):
        self.value, self.f, self.g, self.p, self.q, self.plan = value, f, g, p, q, plan
        self.potentials = (f - p, g - q) if p is not None else (f, g)
        one = reports[0]
        self.eps, self.diameter = one["eps"], one["diameter"]
        hist = [r["history"] for r in reports]
        self.history = hist[0] if len(hist) == 1 else hist
        its = [r.get("n_iter", len(r["history"])) for r in reports]
        self.n_iter = its[0] if len(its) == 1 else its
        drop = [r.get("dropped_mass") for r in reports]
        self.dropped_mass = drop[0] if len(drop) == 1 else drop
        kept = [r.get("kept_blocks") for r in reports]
        self.kept_blocks = kept[0] if len(kept) == 1 else kept
        conv = [r["converged"] for r in reports]
        self.converged = conv[0] if len(conv) == 1 else conv
        # Measured at the returned potentials when the solver did (multiscale), else the loop's
        # last iteration's.
        errs = [max(r["marginal_errors"]) if r.get("marginal_errors") else
                max(h[-1][1:]) if h else math.nan for h, r in zip(hist, reports)]
        self.marginal_error = errs[0] if len(errs) == 1 else errs
        self._marginals = None
        self._reports = reports  # each problem's solver report (tests read the truncation)

    @property
    def marginals(self):
        """(plan.sum(1), plan.sum(0)): the plan's marginals on x and y, computed once."""
        if self._marginals is None:
            self._marginals = (self.plan.sum(-2)[..., 0], self.plan.sum(-3)[..., 0])
        return self._marginals

    def __repr__(self):
        return (f"OTResult(value={self.value!r}, eps={self.eps:g}, n_iter={self.n_iter}, "
                f"marginal_error={self.marginal_error})")


# solve_sample's documentation (numpydoc; the site and help() read it), kept beside the
# function so that the function itself stays short.
_SOLVE_SAMPLE_DOC = """Entropic OT between (a, x) and (b, y): the solver, its potentials, its plan.

Parameters
----------
a : (N,) or (N, 1) tensor or None
    The weights of x (None: uniform 1/N); a list of them with lists of clouds.
x : (N, D) or (B, N, D) tensor, or a list of (N_k, D) tensors
    The first cloud; batched inputs solve B problems, lists of clouds of different sizes
    give a list of OTResult.
b, y : tensors or lists
    The second cloud and its weights, likewise.
p, blur, reach, diameter, scaling, cost, debias, backend, gradient, snapshots : optional
    As in :class:`SamplesLoss` (eps = blur^p).
reach_x, reach_y : float, optional
    The two marginal penalties apart (semi-unbalanced; None: a hard constraint).
tol : float, default 1e-6
    Stop when the marginal error (L1, mass units) is <= tol (0: the schedule only).
max_iter : int, default 1000
    The most iterations in all; the solver warns if it stops there first.
update : {"alternating", "symmetric"}
    Classic alternating Sinkhorn updates, or GeomLoss's averaged symmetric ones.
truncate, cluster_scale : float, optional
    The multiscale solver's settings.

Returns
-------
OTResult or list of OTResult
    The value, potentials, plan and report; a list for lists of clouds.

Raises
------
ValueError
    An unknown update, a negative tol, a max_iter below 1, mismatched lists, or clouds of
    different dimensions.
TypeError
    A cost that is not a formula.
NotImplementedError
    A non-envelope gradient with the multiscale solver.

Notes
-----
a: (N,), (N, 1) or None (uniform weights 1/N, for that cloud only); x: (N, D); b, y
likewise; batched inputs (B, N, D) solve B problems; lists of clouds of different sizes
(x = [x1, x2], y = [y1, y2], a and b None or lists of weights) give a list of OTResult, one
per pair, their schedules starting at one diameter for all (as SamplesLoss's). p, blur,
reach, diameter, scaling, cost, debias and backend as in SamplesLoss (eps = blur^p;
backend="multiscale" runs the multiscale solver with
`truncate` and `cluster_scale`, envelope gradients only; any other the online solver);
reach_x / reach_y set the two marginal penalties apart
(semi-unbalanced; None: that marginal is a hard constraint).

A solver converges by default: after GeomLoss's eps-scaling schedule it iterates at
eps = blur^p until the marginal error (L1, mass units) is <= tol, up to max_iter iterations
in all, with classic alternating Sinkhorn updates, and warns if it stopped first.
tol=0, update="symmetric" reproduce GeomLoss's loop exactly (the schedule only, averaged
symmetric updates: what SamplesLoss runs). gradient="envelope" (default) differentiates
the last extrapolation (one extra reduction per potential); gradient="implicit" the fixed
point itself (two Newton steps of conjugate gradients on the plan operator: exact first and
second derivatives, for Hessian-vector products; as SamplesLoss's; a balanced problem's f and g
then satisfy <a, f> = <b, g>, which fixes their constant); gradient="unrolled"
differentiates through the iterations the loop ran (snapshots=s: at most s kept). The
global grad mode is not touched. Returns an OTResult.


Examples
--------
>>> import torch
>>> from tessel.ot import solve_sample
>>> x = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
>>> y = torch.tensor([[0.1], [1.1]], dtype=torch.float64)
>>> r = solve_sample(None, x, None, y, blur=0.01, tol=1e-10)
>>> r.plan.argmax(1).ravel().tolist()          # each x_i's partner
[0, 1]
>>> # the transport cost 0.1^2 / 2, up to the entropic term at this blur
>>> bool(abs(float(r.value) - 0.005) < 2e-4)
True
"""


def solve_sample(a, x, b, y, *, p=2, blur=0.05, reach=None, reach_x=None, reach_y=None,
                 diameter=None, scaling=0.5, cost=None, debias=False, tol=1e-6, max_iter=1000,
                 update="alternating", backend="auto", gradient="envelope", snapshots=None,
                 truncate=5.0, cluster_scale=None):
    if isinstance(x, (list, tuple)) or isinstance(y, (list, tuple)):
        return _solve_ragged(a, x, b, y, dict(
            p=p, blur=blur, reach=reach, reach_x=reach_x, reach_y=reach_y, diameter=diameter,
            scaling=scaling, cost=cost, debias=debias, tol=tol, max_iter=max_iter,
            update=update, backend=backend, gradient=gradient, snapshots=snapshots,
            truncate=truncate, cluster_scale=cluster_scale))
    gradient = check_gradient(_WHO, gradient)
    snapshots = check_snapshots(_WHO, snapshots)
    if update not in _UPDATES:
        raise ValueError(f"{_WHO}: update must be 'symmetric' or 'alternating', got {update!r}")
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not 0 <= tol < math.inf:
        raise ValueError(f"{_WHO}: tol must be a finite number >= 0, got {tol!r}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, numbers.Integral) or max_iter < 1:
        raise ValueError(f"{_WHO}: max_iter must be an integer >= 1, got {max_iter!r}")
    rx = _check_number("reach_x", reach_x, allow_none=True)
    ry = _check_number("reach_y", reach_y, allow_none=True)
    loss = SamplesLoss("sinkhorn", p=p, blur=blur, reach=reach, diameter=diameter,
                       scaling=scaling, cost=cost, debias=debias, backend=backend,
                       truncate=truncate, cluster_scale=cluster_scale)
    rx = loss.reach if reach_x is None else check_length_power(_WHO, "reach_x", rx, loss.p)
    ry = loss.reach if reach_y is None else check_length_power(_WHO, "reach_y", ry, loss.p)
    # As in GeomLoss, a None weight is uniform for its own cloud only.
    a_, x_, b_, y_, batched = loss._process_args((a, x, b, y), _WHO)
    if loss._dense:
        raise TypeError(f"{_WHO}: cost must be a formula (a string in X and Y or a tessel "
                        "Formula): the plan is a LazyTensor of it; a cost function of dense "
                        "tensors is for SamplesLoss (GeomLoss's tensorized backend)")
    scale = loss._float32_scale(x_, y_, None)
    if scale is None:
        # C / eps, up to (diameter / blur)^p, is the same at every scale (NaN before).
        d = loss.diameter or bounding_diameter(x_, y_)
        raise ValueError(f"{_WHO}: float32 clouds of diameter {d:.3g} with blur={loss.blur:g} "
                         f"give costs / eps up to (diameter / blur)^p = "
                         f"2^{loss.p * math.log2(d / loss.blur):.0f}, past what float32 holds "
                         "(2^100 here); pass float64 points")
    if scale != 1:
        d = loss.diameter or bounding_diameter(x_, y_)
        if not (2.0 ** -40 <= d <= 2.0 ** 40 and abs(loss.p * math.log2(loss.blur)) <= 100):
            # Their squared distances leave float32's normal range (NaN or a wrong value);
            # SamplesLoss rescales such clouds, but this result's potentials, plan and history
            # would all need scaling back.
            raise ValueError(f"{_WHO}: x and y are float32 clouds of size {d:.3g} with "
                             f"blur={loss.blur:g}, whose squared distances or eps = blur^p "
                             "float32 cannot hold; pass float64 points, or rescale the points "
                             "and lengths (SamplesLoss does so by itself)")
    formula = loss._cost_formula(x_.shape[-1])
    settings = dict(p=loss.p, cost=formula, blur=loss.blur, reach_x=rx, reach_y=ry,
                    diameter=loss._diameter(x_, y_, batched), scaling=loss.scaling,
                    debias=loss.debias, backend="auto")
    solve = dict(settings, alternating=update == "alternating", tol=float(tol),
                 max_iter=int(max_iter))
    reports = [{} for _ in range(x_.shape[0])]
    multiscale = None
    if backend == "multiscale":
        if gradient != "envelope":
            raise NotImplementedError(f"{_WHO}: the multiscale solver gives envelope gradients "
                                      f"only, not gradient={gradient!r}")
        multiscale = dict(truncate=loss.truncate, cluster_scale=loss.cluster_scale,
                          marginal_error=True)
    f, g, pp, qq = solve_potentials(gradient, a_, x_, b_, y_, solve, settings, _WHO, reports,
                                    snapshots, multiscale)
    eps = loss.blur ** loss.p
    rho_x = None if rx is None else rx ** loss.p
    rho_y = None if ry is None else ry ** loss.p
    env, semi = gradient == "envelope", (rho_x is None) != (rho_y is None)
    value = dual_side(a_, f, rho_x, eps, env, semi) + dual_side(b_, g, rho_y, eps, env, semi)
    if loss.debias:
        value = (value - dual_side(a_, pp, rho_x, eps, env, semi)
                 - dual_side(b_, qq, rho_y, eps, env, semi))
    else:
        pp = qq = None
    if gradient == "implicit" and rho_x is None and rho_y is None:
        f, g = canonical_gauge(a_, f, b_, g)  # after the value, which it leaves as it was
    if not batched:
        value, f, g, a_, x_, b_, y_ = value[0], f[0], g[0], a_[0], x_[0], b_[0], y_[0]
        pp, qq = (None, None) if pp is None else (pp[0], qq[0])
    # The weights enter the plan as constants: their gradients come from the value alone.
    plan = plan_lazy(a_.detach(), x_, b_.detach(), y_, f, g, eps,
                     lambda u, v: cost_lazy(formula, u, v, loss.p))
    return OTResult(value, f, g, pp, qq, plan, reports)


solve_sample.__doc__ = _SOLVE_SAMPLE_DOC


def _solve_ragged(a, x, b, y, opts):
    """Clouds of different sizes as lists: one OTResult per pair, every schedule starting at the
    diameter of all the clouds together (as SamplesLoss does for such a batch)."""
    if not (isinstance(x, (list, tuple)) and isinstance(y, (list, tuple))):
        raise ValueError(f"{_WHO}: give x and y both as lists (clouds of different sizes) or "
                         "both as tensors")
    n = len(x)
    lists = {"x": x, "y": y}
    for name, w in (("a", a), ("b", b)):
        if w is not None:
            if not isinstance(w, (list, tuple)):
                raise ValueError(f"{_WHO}: with lists of clouds, {name} must be None or a list "
                                 f"of weight vectors, got {type(w).__name__}")
            lists[name] = w
    if n == 0 or any(len(t) != n for t in lists.values()):
        raise ValueError(f"{_WHO}: a batch of clouds of different sizes takes lists of the same "
                         f"non-zero length, got lengths "
                         f"{ {k: len(t) for k, t in lists.items()} }")
    if opts["diameter"] is None:
        opts = dict(opts, diameter=common_diameter(x, y, _WHO))
    return [solve_sample(None if a is None else a[k], x[k], None if b is None else b[k], y[k],
                         **opts) for k in range(n)]


__all__ = ["solve_sample", "OTResult"]
