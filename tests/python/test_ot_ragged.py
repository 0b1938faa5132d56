"""tessel.ot.SamplesLoss on batches of clouds of different sizes (lists): each pair's value and
gradients equal those of the same clouds padded to one size with zero weights, and of the pair
alone with the batch's diameter; bad lists are refused. solve_sample on lists: one result per
pair, equal to that pair's own solve at the batch's diameter."""
import pytest
import torch

from tessel.ot import SamplesLoss

SIZES = [(7, 5), (12, 9), (3, 11)]


def ragged(seed=0, d=2):
    g = torch.Generator().manual_seed(seed)
    out = []
    for n, m in SIZES:
        x = torch.rand(n, d, generator=g, dtype=torch.float64)
        y = torch.rand(m, d, generator=g, dtype=torch.float64) + 0.3
        a = torch.rand(n, generator=g, dtype=torch.float64) + 0.1
        b = torch.rand(m, generator=g, dtype=torch.float64) + 0.1
        out.append((a / a.sum(), x, b / b.sum(), y))
    return [list(t) for t in zip(*out)]


def padded(clouds):
    """One (B, N, D) batch: each cloud padded by copies of its first point with weight 0, so
    neither the values nor the bounding box change."""
    a, x, b, y = clouds
    n, m = max(len(t) for t in x), max(len(t) for t in y)

    def pad(w, p, size):
        k = size - len(p)
        return (torch.cat((w, w.new_zeros(k))), torch.cat((p, p[:1].expand(k, -1))))

    pa = [pad(w, p, n) for w, p in zip(a, x)]
    pb = [pad(w, p, m) for w, p in zip(b, y)]
    return (torch.stack([u for u, _ in pa]), torch.stack([v for _, v in pa]),
            torch.stack([u for u, _ in pb]), torch.stack([v for _, v in pb]))


@pytest.mark.parametrize("kw", [dict(), dict(reach=0.5), dict(p=1, debias=False),
                                dict(gradient="implicit", blur=0.2), dict(loss="gaussian")])
def test_lists_equal_zero_padded_batch(kw):
    a, x, b, y = ragged()
    for t in x + y:
        t.requires_grad_()
    loss = SamplesLoss(**kw)
    values = loss(a, x, b, y)
    assert values.shape == (len(SIZES),)
    pa, px, pb, py = padded((a, x, b, y))
    want = loss(pa, px, pb, py)
    assert torch.allclose(values, want, rtol=0, atol=1e-10)
    gx = torch.autograd.grad(values.sum(), x)
    gw = torch.autograd.grad(want.sum(), x)
    for u, v, t in zip(gx, gw, x):
        assert torch.allclose(u, v, atol=1e-10)
        assert u.shape == t.shape


def test_each_pair_alone_with_the_batch_diameter_and_potentials():
    a, x, b, y = ragged(seed=1)
    pts = torch.cat(x + y)
    diameter = float((pts.max(0)[0] - pts.min(0)[0]).norm())
    values = SamplesLoss(blur=0.1)(x, y)  # uniform weights
    F, G = SamplesLoss(blur=0.1, potentials=True)(x, y)
    for k in range(len(SIZES)):
        alone = SamplesLoss(blur=0.1, diameter=diameter)
        assert float(values[k]) == pytest.approx(float(alone(x[k], y[k])), abs=1e-12)
        Fk, Gk = SamplesLoss(blur=0.1, diameter=diameter, potentials=True)(x[k], y[k])
        assert F[k].shape == (SIZES[k][0],) and G[k].shape == (SIZES[k][1],)
        assert torch.allclose(F[k], Fk[0], atol=1e-12) and torch.allclose(G[k], Gk[0], atol=1e-12)


def test_bad_lists():
    a, x, b, y = ragged()
    with pytest.raises(ValueError, match="lists of the same non-zero length"):
        SamplesLoss()(x, y[:2])
    with pytest.raises(ValueError, match="lists of the same non-zero length"):
        SamplesLoss()([], [])
    with pytest.raises(ValueError, match="same dimension D"):
        SamplesLoss()([x[0], torch.rand(4, 3, dtype=torch.float64)], y[:2])
    with pytest.raises(ValueError, match=r"x\[1\] must be an \(N, D\) tensor"):
        SamplesLoss()([x[0], [1.0, 2.0]], y[:2])


@pytest.mark.parametrize("weights", [True, False])
def test_solve_sample_lists_give_one_result_per_pair(weights):
    from tessel.ot import solve_sample
    a, x, b, y = ragged(3)
    x = [t.clone().requires_grad_() for t in x]
    every = torch.cat([t.detach() for t in x + y])
    diameter = float((every.max(0)[0] - every.min(0)[0]).norm())
    kw = dict(blur=0.2, reach=0.7, debias=True, tol=1e-10)
    res = solve_sample(a if weights else None, x, b if weights else None, y, **kw)
    assert isinstance(res, list) and len(res) == len(SIZES)
    for k, r in enumerate(res):
        alone = solve_sample(a[k] if weights else None, x[k], b[k] if weights else None, y[k],
                             diameter=diameter, **kw)
        assert r.diameter == pytest.approx(diameter)
        torch.testing.assert_close(r.value, alone.value, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(r.f, alone.f, rtol=1e-12, atol=1e-14)
        (g1,) = torch.autograd.grad(r.value, x[k])
        (g2,) = torch.autograd.grad(alone.value, x[k])
        torch.testing.assert_close(g1, g2, rtol=1e-12, atol=1e-14)
        assert r.f.shape == (SIZES[k][0],) and r.plan.shape[:2] == SIZES[k]
        assert r.marginal_error < 1e-9


def test_solve_sample_bad_lists():
    from tessel.ot import solve_sample
    a, x, b, y = ragged(4)
    with pytest.raises(ValueError, match="same non-zero length"):
        solve_sample(None, x, None, y[:2])
    with pytest.raises(ValueError, match="both as lists"):
        solve_sample(None, x, None, y[0])
    with pytest.raises(ValueError, match="a must be None or a list"):
        solve_sample(a[0], x, None, y)
    with pytest.raises(ValueError, match=r"x\[1\] must be an \(N, D\) tensor"):
        solve_sample(None, [x[0], x[1][0]], None, y[:2])
