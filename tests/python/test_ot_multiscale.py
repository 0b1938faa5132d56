"""tessel.ot's multiscale solver: clusters in any dimension, block-sparse truncation whose
reported dropped mass equals the dense plan's, values and gradients equal to the online
solver's when it is small, batches, and clear errors for what it does not do."""
import pytest
import torch

from ot_cases import weighted_clouds
from tessel.ot import SamplesLoss, solve_sample
from tessel.ot.multiscale import farthest_point_clusters


def dense_plan(a, x, b, y, f, g, eps):
    C = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1) / 2
    return a[:, None] * b[None, :] * torch.exp((f[:, None] + g[None, :] - C) / eps)


def test_clusters_cover_every_point_within_the_radius():
    x = torch.rand(500, 6, dtype=torch.float64)
    labels, centres = farthest_point_clusters(x, 10_000, radius=0.6)
    d = ((x - centres[labels]) ** 2).sum(1).sqrt()
    assert float(d.max()) <= 0.6
    near = torch.cdist(x, centres).argmin(1)  # each point with its nearest centre
    assert torch.equal(((x - centres[near]) ** 2).sum(1), ((x - centres[labels]) ** 2).sum(1))


@pytest.mark.parametrize("d,scale,truncate,shift", [(3, 0.15, 1.0, 0.6), (5, 0.3, 1.5, 1.0),
                                                     (2, 0.1, 3.0, 0.5)])
def test_dropped_mass_equals_the_dense_plans(d, scale, truncate, shift):
    a, x, b, y = weighted_clouds(300, 260, d, seed=d, shift=shift)
    r = solve_sample(a, x, b, y, blur=0.1, debias=False, backend="multiscale",
                     truncate=truncate, cluster_scale=scale, tol=0.0)
    # The report of the (single) problem: which blocks were kept.
    rep = r._reports[0]["truncation"]
    keep = rep["keep"][rep["labels_x"][:, None], rep["labels_y"][None, :]]
    assert not bool(keep.all())  # the test sees a real truncation
    plan = dense_plan(a, x, b, y, r.f.detach(), r.g.detach(), 0.01)
    dropped = float(plan[~keep].sum())
    assert r.dropped_mass == pytest.approx(dropped, rel=1e-9, abs=1e-300)
    assert 0 < r.dropped_mass < float(plan.sum())


@pytest.mark.parametrize("d,reach", [(3, None), (3, 0.5), (4, None), (7, 0.8)])
def test_values_and_gradients_equal_the_online_solver(d, reach):
    a, x, b, y = weighted_clouds(400, 350, d, seed=10 + d, shift=0.3)
    kw = dict(blur=0.15, reach=reach, debias=True, tol=1e-9, max_iter=5000)
    xs = [x.clone().requires_grad_() for _ in range(2)]
    # truncate=7: blocks below exp(-24.5) of the tight pairs dropped (the default, 5, drops
    # below exp(-12.5): a mass of 5e-7 in 7-D here, more than this comparison allows).
    rm = solve_sample(a, xs[0], b, y, backend="multiscale", cluster_scale=0.3, truncate=7.0,
                      **kw)
    ro = solve_sample(a, xs[1], b, y, **kw)
    assert rm.dropped_mass < 1e-8
    assert float(rm.value) == pytest.approx(float(ro.value), abs=1e-7)
    gm, = torch.autograd.grad(rm.value, xs[0])
    go, = torch.autograd.grad(ro.value, xs[1])
    assert torch.allclose(gm, go, atol=1e-7)


@pytest.mark.parametrize("reach,tol", [(None, 1e-9), (0.5, 1e-9), (None, 0.0)])
def test_marginal_error_is_measured(reach, tol):
    # The multiscale result reports its plan's marginal error as the online one does: L1, mass
    # units, at the returned potentials; here against the full (untruncated) plan's marginals.
    a, x, b, y = weighted_clouds(300, 250, 3, seed=5, shift=0.2)
    r = solve_sample(a, x, b, y, blur=0.15, reach=reach, tol=tol, max_iter=5000,
                     backend="multiscale", cluster_scale=0.3)
    rho = None if reach is None else reach ** 2
    want_x = a if rho is None else a * torch.exp(-r.f / rho)
    want_y = b if rho is None else b * torch.exp(-r.g / rho)
    mx, my = r.marginals
    dense = max(float((want_x - mx).abs().sum()), float((want_y - my).abs().sum()))
    assert r.marginal_error == pytest.approx(dense, rel=1e-6, abs=1e-12 + 2 * r.dropped_mass)
    if tol > 0:  # it stops on that error, as the online solver does
        assert r.converged and r.marginal_error <= tol


def test_samples_loss_multiscale_batched_and_high_dimensional():
    a, x, b, y = weighted_clouds(200, 150, 4, seed=3)
    xb = torch.stack([x, x * 0.9]).requires_grad_()
    loss = SamplesLoss(backend="multiscale", blur=0.2, cluster_scale=0.4)
    values = loss(torch.stack([a, a]), xb, torch.stack([b, b]), torch.stack([y, y]))
    assert values.shape == (2,)
    one = SamplesLoss(backend="multiscale", blur=0.2, cluster_scale=0.4,
                      diameter=loss._diameter(xb, torch.stack([y, y]), True))(a, x, b, y)
    assert float(values[0]) == pytest.approx(float(one), abs=1e-12)
    (g,) = torch.autograd.grad(values.sum(), xb)
    assert torch.isfinite(g).all() and float(g.abs().max()) > 0


def test_what_multiscale_does_not_do():
    a, x, b, y = weighted_clouds(20, 20, 2)
    with pytest.raises(NotImplementedError, match="envelope gradients only"):
        SamplesLoss(backend="multiscale", gradient="implicit")
    with pytest.raises(NotImplementedError, match="p = 1 and p = 2 costs only"):
        SamplesLoss(backend="multiscale", cost="SqDist(X,Y)")(a, x, b, y)


def test_a_cluster_scale_needing_too_many_clusters_is_a_clear_error():
    """Each cloud's clusters pair up in a mask: past 8192 a cloud it would not fit, so the solver
    says so instead of running out of memory."""
    g = torch.Generator().manual_seed(3)
    x, y = torch.rand(9000, 3, generator=g), torch.rand(9000, 3, generator=g)
    with pytest.raises(ValueError, match="cluster_scale=1e-05 needs more than 8192 clusters for x"):
        SamplesLoss("sinkhorn", backend="multiscale", cluster_scale=1e-5)(x, y)


def test_cluster_labels_given_by_the_caller():
    # GeomLoss's six-argument call L(l_x, a, x, l_y, b, y): the caller's clusters replace the
    # farthest-point ones; with the very clusters the solver would pick, the same result.
    import math
    a, x, b, y = weighted_clouds(300, 250, 3, seed=7, shift=0.2)
    k = max(16, int(math.sqrt(300)))
    lx = farthest_point_clusters(x, k)[0]
    ly = farthest_point_clusters(y, k)[0]
    xs = [x.clone().requires_grad_() for _ in range(2)]
    loss = SamplesLoss(blur=0.1, backend="multiscale")
    own = loss(a, xs[0], b, y)
    given = SamplesLoss(blur=0.1)(lx[:, None], a, xs[1], ly.to(torch.int32), b, y)  # "auto"
    assert float(given) == float(own)
    g0, = torch.autograd.grad(own, xs[0])
    g1, = torch.autograd.grad(given, xs[1])
    assert torch.equal(g0, g1)
    # Other clusters (a grid of cells 0.25 wide): the same loss to the truncation's accuracy.
    cell = lambda p: ((p / 0.25).floor().long() * torch.tensor([1, 16, 256])).sum(1)  # noqa: E731
    grid = SamplesLoss(blur=0.1, backend="multiscale")(cell(x), a, x, cell(y), b, y)
    online = SamplesLoss(blur=0.1)(a, x, b, y)
    assert float(grid) == pytest.approx(float(online), rel=1e-2)


def test_cluster_label_errors():
    a, x, b, y = weighted_clouds(20, 15, 2)
    lx, ly = torch.zeros(20, dtype=torch.int64), torch.zeros(15, dtype=torch.int64)
    with pytest.raises(ValueError, match="cluster labels .* are for the multiscale"):
        SamplesLoss(backend="online")(lx, a, x, ly, b, y)
    with pytest.raises(ValueError, match="cluster labels .* are for the multiscale"):
        SamplesLoss("gaussian")(lx, a, x, ly, b, y)
    with pytest.raises(ValueError, match=r"l_y must be an integer tensor of shape \(N,\)"):
        SamplesLoss()(lx, a, x, ly[:3], b, y)
    with pytest.raises(ValueError, match="l_x must be an integer tensor"):
        SamplesLoss()(lx.double(), a, x, ly, b, y)
    with pytest.raises(ValueError, match="no batch"):
        SamplesLoss()(lx, a[None], x[None], ly, b[None], y[None])


def test_verbose_prints_the_clusters_and_scales(capsys):
    a, x, b, y = weighted_clouds(120, 100, 3, seed=2)
    SamplesLoss(blur=0.1, backend="multiscale", verbose=True)(a, x, b, y)
    out = capsys.readouterr().out
    assert "clusters" in out and "Successive scales" in out and "Keep " in out
    SamplesLoss(blur=0.1, backend="multiscale")(a, x, b, y)
    assert capsys.readouterr().out == ""


def test_the_fine_iterations_are_the_core_loops_and_reported():
    # The points' iterations run in the core's loop (the online solver's): their history is
    # reported, ends at blur^p, and with tol stops on the error the loop measured.
    a, x, b, y = weighted_clouds(300, 250, 3, seed=6, shift=0.2)
    r = solve_sample(a, x, b, y, blur=0.1, tol=1e-7, max_iter=3000, backend="multiscale",
                     cluster_scale=0.3)
    assert r.converged and r.n_iter == len(r.history) > 0
    eps, err, err_x, err_y = r.history[-1]
    assert eps == pytest.approx(0.01) and max(err, err_x, err_y) <= 1e-7
    assert all(h[0] >= eps * (1 - 1e-12) for h in r.history)


def test_the_loops_multiscale_inputs_are_checked():
    from tessel import _core
    with pytest.raises(ValueError, match="start.f must be a 1-D float CPU array"):
        _core.SinkhornStart(1.0, [], torch.zeros(3, 2, dtype=torch.float64),
                            torch.zeros(3, dtype=torch.float64))
    a, x, b, y = (t.detach() for t in weighted_clouds(30, 20, 2, seed=1))
    clusters = _core.SinkhornClusters([0, 30], [0, 10, 20], torch.zeros(3, dtype=torch.float64),
                                      tau=2.0)
    with pytest.raises(ValueError, match="clusters.cmin_xy has 3 values; expected 1 x 2"):
        _core.sinkhorn(a, x, b, y, debias=False, clusters=clusters)
