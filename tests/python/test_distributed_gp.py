"""tessel.distributed.ExactGP on 1, 2 and 3 gloo processes: the sharded BBMM log marginal
likelihood and its gradient equal one process's whatever the sharding (uneven, one rank empty),
equal the exact value with a full-rank preconditioner, and estimate the exact gradient within
the estimator's own standard error; fit() runs in step on every rank. Workers live at module
level (spawn imports them); gloo_ranks.py runs them."""
import math

import pytest
import torch
import torch.distributed as dist

from gloo_ranks import run_ranks

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with gloo is not available")

N, D, PROBES = 60, 2, 16
SHARDS = {1: [60], 2: [23, 37], 3: [25, 0, 35]}
WAIT_S = 120


def _whole():
    g = torch.Generator().manual_seed(5)
    x = torch.rand(N, D, generator=g, dtype=torch.float64)
    y = torch.sin(4 * x[:, 0]) + x[:, 1] + 0.1 * torch.randn(N, generator=g, dtype=torch.float64)
    return x, y


def _model(cls, x, y, **kw):
    from tessel.gp import Matern, Scale
    return cls(x, y, Scale(Matern(nu=2.5, lengthscale=[0.4, 0.6]), outputscale=1.2), noise=0.05,
               **kw)


def _grads(model):
    # Plain lists: a tensor would cross the queue by shared memory, gone with its process.
    return [p.grad.tolist() for p in model.parameters()]


def _work(rank, world):
    from tessel.distributed import ExactGP
    x, y = _whole()
    lo = sum(SHARDS[world][:rank])
    rows = slice(lo, lo + SHARDS[world][rank])
    out = {}
    gp = _model(ExactGP, x[rows], y[rows])
    lml = gp.log_marginal_likelihood(probes=PROBES, rank=6, seed=3, tol=1e-10)
    lml.backward()
    out["value"], out["grads"] = float(lml), _grads(gp)
    full = _model(ExactGP, x[rows], y[rows])
    stats = {}
    lml = full.log_marginal_likelihood(probes=PROBES, rank=N, seed=4, tol=1e-10, stats=stats)
    lml.backward()
    out["full"], out["full_grads"], out["full_rank"] = float(lml), _grads(full), stats["rank"]
    fitted = _model(ExactGP, x[rows], y[rows])
    out["history"] = [h["loss"] for h in fitted.fit(max_iter=3, probes=PROBES, rank=6)]
    if world == 1:
        with pytest.raises(NotImplementedError, match="ExactGP.predict: predictions are not"):
            gp.predict(x[:3])
        with pytest.raises(NotImplementedError, match="mode='exact' is not sharded"):
            gp.log_marginal_likelihood(mode="exact")
    return out


@pytest.fixture(scope="module")
def runs():
    return {w: run_ranks(_work, w, WAIT_S) for w in (1, 2, 3)}


def test_every_sharding_gives_one_process_s_value_and_gradient(runs):
    one = runs[1][0]
    for world in (2, 3):
        for rank, got in runs[world].items():
            # CG stops every column at |r| <= 1e-10 |b|; a sharding changes only the order of
            # the sums, hence the rounding of the iterates and the quadrature: far below 1e-7.
            assert got["value"] == pytest.approx(one["value"], rel=1e-7, abs=1e-7), (world, rank)
            for g, w in zip(got["grads"], one["grads"]):
                torch.testing.assert_close(torch.tensor(g), torch.tensor(w), rtol=1e-6, atol=1e-7)
            assert got["history"] == runs[world][0]["history"]  # in step on every rank
        assert runs[world][0]["history"][-1] < runs[world][0]["history"][0]


def test_a_full_rank_preconditioner_gives_the_exact_value_and_an_unbiased_gradient(runs):
    from tessel.gp import ExactGP
    x, y = _whole()
    exact = _model(ExactGP, x, y)
    lml = exact.log_marginal_likelihood(mode="exact")
    lml.backward()
    got = runs[2][1]
    assert got["full_rank"] == N
    assert got["full"] == pytest.approx(float(lml), rel=1e-9)
    # With P = K + D the trace estimate is (1/t) sum_p u_p^T dK u_p, u_p ~ N(0, (K + D)^-1):
    # its variance is 2 tr(((K + D)^-1 dK)^2) / t. dK for the noise (I) and the outputscale
    # (K / s), each by the chain rule of its softplus.
    k = exact.kernel.dense(x, x).detach()
    inv = torch.linalg.inv(k + 0.05 * torch.eye(N, dtype=torch.float64))
    names = [n for n, _ in exact.named_parameters()]
    for name, dk in (("raw_noise", torch.eye(N, dtype=torch.float64)),
                     ("kernel.raw_outputscale", k / 1.2)):
        q = names.index(name)
        raw = dict(exact.named_parameters())[name]
        se = 0.5 * math.sqrt(2 * float(torch.trace(inv @ dk @ inv @ dk)) / PROBES) * float(
            torch.sigmoid(raw.detach()))
        dev = abs(got["full_grads"][q][0] - float(raw.grad))
        assert dev <= 4 * se, (name, dev, se)
    q = names.index("mean_constant")  # no trace term: exact
    assert got["full_grads"][q][0] == pytest.approx(float(exact.mean_constant.grad), rel=1e-8,
                                                    abs=1e-10)
