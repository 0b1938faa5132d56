"""Multiscale Sinkhorn in any dimension: clusters, a coarse solve, block-sparse fine iterations,
and the exact transport mass the truncation drops.

1. Clusters (any D): farthest-point clustering (Gonzalez) of x and of y, each point assigned to
   its nearest centre, until every point lies within `cluster_scale` of its centre (default:
   about sqrt(N) clusters). Each cluster has a centroid, a weight and a radius, all exact.
2. Coarse: the core's Sinkhorn loop on the weighted centroids, down to the temperature
   eps_c = max(blur, 2 r)^p, r the largest radius; its potentials are carried to the points by
   one softmin against the other side's clusters.
3. Fine: the core's Sinkhorn loop (the one every tessel.ot solver runs) on the points, warm
   started from the carried potentials: the rest of the schedule with averaged updates, then
   alternating ones at blur^p while `tol` asks; each softmin a block-sparse LogSumExp
   reduction over the cluster pairs kept: (I, J) is kept when the potentials leave it within
   tau * eps of tightness at the least distance between the two clusters,
   F_I + G_J - Cmin_IJ >= -tau eps (Cmin: the cost of max(0, |c_I - d_J| - r_I - r_J)), with
   tau = truncate^2 / 2 for p = 2 and truncate for p = 1 (GeomLoss's truncate is a multiple of
   the blur: its kernel exp(-C / eps) cut at |x - y| = truncate blur). First with the carried
   potentials at eps_c, then after each finer step again: F_I, G_J the
   largest potential in each cluster bound f_i + g_j - C_ij for every pair of the block, so a
   dropped block holds no pair above exp(-tau) of its tight pairs; as eps shrinks, fewer blocks
   are kept. Past the schedule the masks hold, so that the errors the loop stops on are those
   of one problem.
4. What was dropped: at the returned potentials, the plan's mass in the dropped blocks is
   computed exactly by one block-sparse Sum over them (`dropped_mass`, mass units; the x-y
   problem and, with debias, the x-x and y-y ones); above `tol_dropped` times the total mass
   it warns. The value's error from the truncation is of that order.

The last extrapolation runs through the same block-sparse reductions with autograd, so the
points get envelope gradients (unbalanced ones as in tessel.ot's envelope mode).
"""
import functools
import math
import warnings

import torch

from .. import _core
from .._cluster.torch import cluster_ranges, from_matrix
from ..torch import Genred
from ._implicit import damping
from ._potentials import bounding_diameter, core_sinkhorn, first_order_only

_LOG_ZERO = -1e5
_MAX_CLUSTERS = 8192  # per cloud: the pair mask and the coarse cost stay under ~0.5 GB


def farthest_point_clusters(x, k_max, radius=None):
    """(labels (N,) int64, centres (K, D)) by Gonzalez's farthest-point rule: centres are added
    until every point lies within `radius` of one (or K = k_max); each point takes its nearest."""
    xd = x.detach()
    n = xd.shape[0]
    if n == 0:
        raise ValueError(f"tessel.ot.multiscale.farthest_point_clusters: x has shape "
                         f"{tuple(xd.shape)}; expected at least one point to cluster")
    centres = [0]
    dist = ((xd - xd[0]) ** 2).sum(1)
    labels = torch.zeros(n, dtype=torch.int64, device=xd.device)
    while len(centres) < min(k_max, n):
        far = int(dist.argmax())
        if radius is not None and float(dist[far]) <= radius * radius:
            break
        d_new = ((xd - xd[far]) ** 2).sum(1)
        closer = d_new < dist
        labels[closer] = len(centres)
        dist = torch.minimum(dist, d_new)
        centres.append(far)
    return labels, xd[centres]


class _Side:
    """A cloud sorted by cluster: weights, points, labels, ranges, centroids, radii, masses."""

    def __init__(self, w, pts, k_max, radius, labels=None):
        if labels is None:
            labels, _ = farthest_point_clusters(pts, k_max, radius)
        # Relabel by first use so that labels are 0..K-1 without gaps, then sort the points.
        uniq, labels = torch.unique(labels, return_inverse=True)
        self.perm = torch.argsort(labels, stable=True)
        self.inv = torch.argsort(self.perm)
        self.w, self.x, self.lab = w[self.perm], pts[self.perm], labels[self.perm]
        k = len(uniq)
        counts = torch.bincount(self.lab, minlength=k)
        self.ranges = cluster_ranges(self.lab, counts)
        xd = self.x.detach()
        wd = self.w.detach()
        self.mass = torch.zeros(k, dtype=wd.dtype, device=wd.device).index_add_(0, self.lab, wd)
        cnt = counts.to(xd.dtype)[:, None]
        self.centre = torch.zeros(k, xd.shape[1], dtype=xd.dtype, device=xd.device).index_add_(
            0, self.lab, xd) / cnt
        d = ((xd - self.centre[self.lab]) ** 2).sum(1).sqrt()
        self.radius = _segment_max(d, self.lab, k)
        self.logw = torch.log(self.w.detach()).clamp_min(_LOG_ZERO)


def _segment_max(values, labels, k):
    """max of values over each label 0..k-1 (labels sorted)."""
    with warnings.catch_warnings():  # scatter_reduce is "beta" in PyTorch 1.13, stable since
        warnings.simplefilter("ignore", UserWarning)
        return torch.full((k,), -math.inf, dtype=values.dtype, device=values.device).scatter_reduce(
            0, labels, values, "amax")


def _cost_text(p):
    return "SqDist(X,Y) / IntCst(2)" if p == 2 else "Norm2(X-Y)"


@functools.lru_cache(maxsize=16)
def _softmin_lse(p, dim):
    """log sum_j exp(H_j - IEps C(X_i, Y_j)): every softmin of the solver, fine or coarse."""
    return Genred(f"H - IEps * ({_cost_text(p)})",
                  [f"X = Vi({dim})", f"Y = Vj({dim})", "H = Vj(1)", "IEps = Pm(1)"],
                  reduction_op="LogSumExp", axis=1)


def _cmin(u, v, p):
    """The least cost between the balls of clusters u (centres, radii) and v: (Ku, Kv)."""
    gap = (torch.cdist(u.centre, v.centre) - u.radius[:, None] - v.radius[None, :]).clamp_min(0)
    return gap ** 2 / 2 if p == 2 else gap


class MultiscaleProblem:
    """One pair of clouds (u: the rows' side, v: the columns'), clustered, with its softmins
    over the cluster pairs a mask keeps (the core's loop chooses the mask)."""

    def __init__(self, u, v, p, dim):
        self.u, self.v, self.p = u, v, p
        self.cmin = _cmin(u, v, p)
        cost = _cost_text(p)
        # The cost is symmetric: the columns' softmin is the same reduction, sides swapped.
        self.lse = _softmin_lse(p, dim)
        self.mass_sum = Genred(f"Exp(G + H - IEps * ({cost}))",
                               [f"X = Vi({dim})", f"Y = Vj({dim})", "G = Vi(1)", "H = Vj(1)",
                                "IEps = Pm(1)"], reduction_op="Sum", axis=1)
        self.ranges = None

    def set_keep(self, keep):
        """The blocks (I, J) the softmins visit: keep, a (Ku, Kv) boolean mask."""
        self.keep = keep
        self.ranges = from_matrix(self.u.ranges, self.v.ranges, keep)
        self.ranges_t = from_matrix(self.v.ranges, self.u.ranges, keep.t())
        drop = ~keep
        self.ranges_drop = from_matrix(self.u.ranges, self.v.ranges, drop) if drop.any() else None

    def softmin_rows(self, g, eps):
        """-eps log sum_j b_j exp((g_j - C_ij) / eps) over the kept blocks, for every x_i."""
        h = (self.v.logw + g / eps)[:, None]
        ieps = torch.tensor([1 / eps], dtype=self.u.x.dtype, device=self.u.x.device)
        # The columns' points held constant: each potential is differentiated through its own
        # points only, as the envelope theorem asks (GeomLoss's C(x, y.detach())).
        return -eps * self.lse(self.u.x, self.v.x.detach(), h, ieps, ranges=self.ranges)[:, 0]

    def softmin_cols(self, f, eps):
        h = (self.u.logw + f / eps)[:, None]
        ieps = torch.tensor([1 / eps], dtype=self.u.x.dtype, device=self.u.x.device)
        return -eps * self.lse(self.v.x, self.u.x.detach(), h, ieps, ranges=self.ranges_t)[:, 0]

    def dropped_mass(self, f, g, eps):
        """The plan's mass in the dropped blocks, sum a_i b_j exp((f_i + g_j - C_ij) / eps) over
        them: one block-sparse Sum reduction over the complement of the kept blocks."""
        if self.ranges_drop is None:
            return 0.0
        hu = (self.u.logw + f.detach() / eps)[:, None]
        hv = (self.v.logw + g.detach() / eps)[:, None]
        ieps = torch.tensor([1 / eps], dtype=self.u.x.dtype, device=self.u.x.device)
        rows = self.mass_sum(self.u.x.detach(), self.v.x.detach(), hu, hv, ieps,
                             ranges=self.ranges_drop)
        return float(rows.sum())


def _carry(pts, centres, logw, pot, eps, damp, p):
    """A coarse potential carried to points: damp softmin_J (C(x_i, c_J) - pot_J), weights w_J.
    One float64 LogSumExp reduction: memory O(N + K) however many clusters a small cluster_scale
    makes (an N x K matrix would not fit)."""
    f64 = torch.float64
    lse = _softmin_lse(p, pts.shape[1])
    h = (logw.to(f64) + pot.to(f64) / eps)[:, None]
    ieps = torch.tensor([1 / eps], dtype=f64, device=pts.device)
    return -damp * eps * lse(pts.detach().to(f64), centres.to(f64), h, ieps)[:, 0]


def _row_error(w, pot, softmin, eps, rho):
    """sum_i |w_i e^{-pot_i / rho} - w_i exp((pot_i - softmin_i) / eps)|: a marginal's L1 error,
    softmin the undamped softmin of the other side's potential (w_i for a hard marginal)."""
    w = w.detach()
    want = w if rho is None else w * torch.exp(-pot / rho)
    return float((want - w * torch.exp((pot - softmin) / eps)).abs().sum())


def _marginal_errors(prob, f, g, eps, rho_x, rho_y):
    """L1 errors of the plan's marginals at (f, g) over the kept blocks (see _row_error)."""
    with torch.no_grad():
        return (_row_error(prob.u.w, f, prob.softmin_rows(g, eps), eps, rho_x),
                _row_error(prob.v.w, g, prob.softmin_cols(f, eps), eps, rho_y))


class _Solver:
    """The fine problems of one call (x-y, and with debias x-x and y-y) and their marginal
    penalties; each method is one step of multiscale_potentials, in the order it runs them."""

    def __init__(self, u, v, settings, truncate):
        self.u, self.v, self.pw, self.debias = u, v, settings["p"], settings["debias"]
        self.rho_x = None if settings["reach_x"] is None else settings["reach_x"] ** self.pw
        self.rho_y = None if settings["reach_y"] is None else settings["reach_y"] ** self.pw
        # GeomLoss's truncate is a multiple of the blur (its kernel exp(-C / eps) cut at
        # |x - y| = truncate blur): tau in units of eps. None: no truncation.
        self.tau = None if truncate is None else (truncate ** 2 / 2 if self.pw == 2 else truncate)
        dim = u.x.shape[1]
        self.probs = [MultiscaleProblem(u, v, self.pw, dim)]
        if self.debias:
            self.probs += [MultiscaleProblem(u, u, self.pw, dim),
                           MultiscaleProblem(v, v, self.pw, dim)]

    def coarse(self, settings, diameter, blur_c):
        """Step 2: the core's loop on the weighted centroids down to eps_c = blur_c^p, its
        potentials carried to the points (float64, on the host): where the fine loop starts."""
        u, v, pw = self.u, self.v, self.pw
        eps_c = blur_c ** pw
        res = core_sinkhorn(u.mass, u.centre, v.mass, v.centre,
                            dict(p=pw, blur=blur_c, reach_x=settings["reach_x"],
                                 reach_y=settings["reach_y"], diameter=diameter,
                                 scaling=settings["scaling"], debias=self.debias))
        lu, lv = torch.log(u.mass), torch.log(v.mass)
        dx, dy = damping(eps_c, self.rho_x), damping(eps_c, self.rho_y)
        t = lambda arr: torch.from_numpy(arr).to(dtype=torch.float64,  # noqa: E731
                                                 device=u.x.device)
        state = [_carry(u.x, v.centre, lv, t(res.g), eps_c, dx, pw),
                 _carry(v.x, u.centre, lu, t(res.f), eps_c, dy, pw)]
        if self.debias:
            state += [_carry(u.x, u.centre, lu, t(res.p), eps_c, dx, pw),
                      _carry(v.x, v.centre, lv, t(res.q), eps_c, dy, pw)]
        return [s_.cpu() for s_ in state]

    def fine(self, state, eps_c, schedule, settings, diameter, tol, max_iter):
        """Step 3: the core's Sinkhorn loop on the points from the carried potentials: the rest
        of the schedule with averaged updates, then at blur^p with alternating ones until the
        marginal errors are <= tol (max_iter iterations in all); each softmin block-sparse over
        the cluster pairs the truncation keeps, the masks renewed from the potentials after
        every step of the schedule. Returns the core's result (potentials without the last
        extrapolation, which extrapolate runs with autograd)."""
        u, v, probs = self.u, self.v, self.probs
        flat = [(pr.cmin.detach().to(torch.float64).reshape(-1).cpu()) for pr in probs]
        bounds = [[0] + side.ranges[:, 1].tolist() for side in (u, v)]
        clusters = _core.SinkhornClusters(bounds[0], bounds[1], flat[0],
                                          *(flat[1:] if self.debias else ()), tau=self.tau)
        start = _core.SinkhornStart(eps_c, list(schedule), *state)
        res = core_sinkhorn(u.w, u.x, v.w, v.x, dict(
            p=self.pw, blur=settings["blur"], reach_x=settings["reach_x"],
            reach_y=settings["reach_y"], diameter=diameter, scaling=settings["scaling"],
            debias=self.debias, tol=float(tol), max_iter=int(max_iter),
            alternate_after_schedule=True, last_extrapolation=False, start=start,
            clusters=clusters))
        for pr, keep in zip(probs, res.keep):
            mask = torch.frombuffer(bytearray(keep), dtype=torch.uint8).to(torch.bool)
            pr.set_keep(mask.reshape(pr.cmin.shape).to(u.x.device))
        return res

    def sweep(self, st, eps):
        """Every potential updated once from st at eps (damped softmins over the kept blocks)."""
        dx, dy = damping(eps, self.rho_x), damping(eps, self.rho_y)
        f, g = st[0], st[1]
        probs = self.probs
        out = [dx * probs[0].softmin_rows(g, eps), dy * probs[0].softmin_cols(f, eps)]
        if self.debias:
            out += [dx * probs[1].softmin_rows(st[2], eps), dy * probs[2].softmin_rows(st[3], eps)]
        return out

    def extrapolate(self, res, eps):
        """Step 4: the last extrapolation from the loop's potentials, differentiable in x and y
        (the potentials it reads held constant), and the plan's mass in the blocks the masks
        dropped."""
        ins = [res.f_in, res.g_in] + ([res.p_in, res.q_in] if self.debias else [])
        out = self.sweep([torch.from_numpy(t).to(dtype=self.u.x.dtype, device=self.u.x.device)
                          for t in ins], eps)
        probs = self.probs
        dropped = probs[0].dropped_mass(out[0], out[1], eps)
        if self.debias:
            dropped += (probs[1].dropped_mass(out[2], out[2], eps)
                        + probs[2].dropped_mass(out[3], out[3], eps))
        return out, dropped


def _sides(a, x, b, y, cluster_scale, labels):
    """Step 1: the two clouds clustered (by farthest points, or by the caller's labels), at most
    _MAX_CLUSTERS clusters each."""
    n, m = x.shape[0], y.shape[0]
    k_max = max(16, int(math.sqrt(max(n, m))))
    lx, ly = (None, None) if labels is None else labels
    u = _Side(a, x, k_max if cluster_scale is None else min(n, _MAX_CLUSTERS + 1), cluster_scale,
              lx)
    v = _Side(b, y, k_max if cluster_scale is None else min(m, _MAX_CLUSTERS + 1), cluster_scale,
              ly)
    for side, name in ((u, "x"), (v, "y")):
        # The truncation keeps a mask per pair of clusters: past that many, it would not fit.
        if side.mass.shape[0] > _MAX_CLUSTERS:
            if labels is not None:
                raise ValueError(f"tessel.ot multiscale: the labels of {name} make "
                                 f"{side.mass.shape[0]} clusters, more than {_MAX_CLUSTERS}")
            raise ValueError(f"tessel.ot multiscale: cluster_scale={cluster_scale:g} needs more "
                             f"than {_MAX_CLUSTERS} clusters for {name}; raise cluster_scale (or "
                             "leave it None: about sqrt(N) clusters)")
    return u, v


def _print_summary(u, v, keep, r_max, blur_c, schedule, pw, dropped, total):
    """What GeomLoss's verbose multiscale solver prints: clusters, scales and blocks kept."""
    print(f"tessel.ot multiscale: {u.mass.shape[0]}x{v.mass.shape[0]} clusters (largest "
          f"radius {r_max:.3f}), coarse scale {blur_c:.3f}")
    print("Successive scales: " + ", ".join(f"{e ** (1 / pw):.3f}" for e in schedule))
    print(f"Keep {int(keep.sum())}/{keep.numel()} = {100 * float(keep.float().mean()):.1f}% "
          f"of the cluster pairs; dropped transport mass {dropped:.3g} (of {total:.3g})")


def multiscale_potentials(a, x, b, y, settings, truncate=5.0, cluster_scale=None,
                          report=None, tol_dropped=1e-5, tol=0.0, max_iter=1000,
                          marginal_error=False, labels=None, verbose=False):
    """(f, g, p, q) of one problem by the multiscale solver (see the module docstring), with
    envelope gradients in x and y. tol > 0: after the schedule, the fine iterations go on at
    blur^p until the plan's marginal errors (L1, mass units, as the online solver's; of the x-y
    problem and with debias of the x-x and y-y ones) are <= tol (max_iter iterations in all).
    `report` receives eps, diameter, n_iter, converged, the clusters, the share of blocks kept
    and dropped_mass; with marginal_error, also the returned x-y potentials' marginal errors (two
    more block-sparse reductions): marginal_errors = (error_x, error_y), L1 in mass units, as
    the online solver's history. labels: None (clusters by farthest points) or the caller's
    (l_x, l_y), int64 (N,) and (M,) tensors (GeomLoss's six-argument call); verbose: print the
    clusters, the scales and the blocks kept, as GeomLoss's verbose multiscale solver does.

    The steps: the clouds clustered (_sides), the coarse solve carried to the points
    (_Solver.coarse), the core's loop on the points (fine), the last extrapolation and the
    dropped mass (extrapolate)."""
    pw = settings["p"]
    # Envelope gradients: differentiating them again would drop the potentials' dependence.
    x, y = first_order_only(x, y, hint="use backend='online' with gradient='implicit' (exact) "
                            "or 'unrolled'; the multiscale solver gives envelope gradients only")
    if pw not in (1.0, 2.0) or settings["cost"] is not None:
        raise NotImplementedError("tessel.ot multiscale: the p = 1 and p = 2 costs only (its "
                                  "truncation needs the cost of a distance between clusters)")
    blur = settings["blur"]
    diameter = settings["diameter"]
    if diameter is None:
        diameter = bounding_diameter(x, y) or blur
    u, v = _sides(a, x, b, y, cluster_scale, labels)
    r_max = float(torch.cat((u.radius, v.radius)).max())
    blur_c = max(blur, 2 * r_max)
    schedule = _core.epsilon_schedule(pw, diameter, blur, settings["scaling"])
    eps_c = blur_c ** pw
    fine = [e for e in schedule if e < eps_c * (1 - 1e-12)]
    solver = _Solver(u, v, settings, truncate)
    state = solver.coarse(settings, diameter, blur_c)
    eps = blur ** pw
    res = solver.fine(state, eps_c, fine, settings, diameter, tol, max_iter)
    out, dropped = solver.extrapolate(res, eps)
    keep = solver.probs[0].keep
    total = float(a.detach().sum() * b.detach().sum())
    errors = None
    if marginal_error:
        errors = _marginal_errors(solver.probs[0], out[0].detach(), out[1].detach(), eps,
                                  solver.rho_x, solver.rho_y)
    if verbose:
        _print_summary(u, v, keep, r_max, blur_c, schedule, pw, dropped, total)
    if report is not None:
        report.update(eps=eps, diameter=diameter, converged=res.converged, history=res.history,
                      clusters=(u.mass.shape[0], v.mass.shape[0]), coarse_blur=blur_c,
                      kept_blocks=float(keep.float().mean()),
                      truncation=dict(labels_x=u.lab[u.inv], labels_y=v.lab[v.inv], keep=keep),
                      dropped_mass=dropped, marginal_errors=errors)
    if tol > 0 and not res.converged:
        worst = max(res.history[-1][1:]) if res.history else math.inf
        warnings.warn(f"tessel.ot multiscale: stopped after max_iter={max_iter} iterations with "
                      f"a marginal error of {worst:.3g} > tol={tol:g}", RuntimeWarning,
                      stacklevel=4)
    if dropped > tol_dropped * total:
        warnings.warn(f"tessel.ot multiscale: the truncated blocks hold {dropped:.3g} of the "
                      f"plan's mass (> {tol_dropped:g} of {total:.3g}); raise truncate or lower "
                      "cluster_scale", RuntimeWarning, stacklevel=4)
    f, g = out[0][u.inv], out[1][v.inv]
    if not solver.debias:
        return f, g, x.new_zeros(0), x.new_zeros(0)
    return f, g, out[2][u.inv], out[3][v.inv]
