"""tessel.distributed.SamplesLoss on 2 and 3 gloo processes against one process's tessel.ot.

Values, potentials and the gradients in a, x, b and y of tessel.distributed.SamplesLoss on
sharded clouds against tessel.ot.SamplesLoss on the whole clouds in one process.

One spawned group per world size runs every configuration (spawning costs a second or two), each
rank returning its value and its rows of the gradients; the test compares them, stacked in rank
order, with the single process's. Workers live at module level (spawn imports them) and
gloo_ranks.py runs them.
"""
import pytest
import torch
import torch.distributed as dist

import tessel.distributed as td
import tessel.ot
from gloo_ranks import run_ranks

pytestmark = pytest.mark.skipif(not (dist.is_available() and dist.is_gloo_available()),
                                reason="torch.distributed with gloo is not available")

# Both sides run the same schedule and the same float64 arithmetic on the same log-weights and
# potentials; only the order of each LogSumExp's partial sums differs (the ring merges blocks),
# a few ulps per softmin carried through ~12 averaged iterations that contract errors. So the
# agreement is near float64 rounding, not a convergence tolerance: 1e-9 relative leaves room.
RTOL = 1e-9
WAIT_S = 60
N, M, D = 13, 11, 2
# Per world size: rows of x and of y per rank; uneven, x and y sharded differently, an empty
# shard of x where y has rows (2 ranks) and a rank with no rows at all (3 ranks).
SHARDS = {2: ([13, 0], [4, 7]), 3: ([5, 0, 8], [6, 0, 5])}
CONFIGS = [
    dict(p=2, debias=True),
    dict(p=2, debias=False, blur=0.1, scaling=0.7),
    dict(p=1, debias=True, blur=0.2),
    dict(p=1, debias=False),
    dict(p=2, debias=True, potentials=True),
    dict(loss="gaussian", blur=0.5),
    dict(loss="energy"),
    dict(loss="laplacian", blur=0.5, potentials=True),
]


def _clouds(dtype=torch.float64):
    """The whole problem, the same on every rank (one seed): weights of equal total mass, one
    of them zero (the core's finite log of 0)."""
    gen = torch.Generator().manual_seed(2024)
    x = torch.randn(N, D, dtype=torch.float64, generator=gen)
    y = torch.randn(M, D, dtype=torch.float64, generator=gen) * 0.7 + 0.5
    a = torch.rand(N, dtype=torch.float64, generator=gen) + 0.1
    b = torch.rand(M, dtype=torch.float64, generator=gen) + 0.1
    a[3] = 0
    return tuple(t.to(dtype) for t in (a / a.sum(), x, b / b.sum(), y))


def _rows(sizes, rank):
    return slice(sum(sizes[:rank]), sum(sizes[: rank + 1]))


def _plain(t):
    """A tensor as a NumPy array: torch's queue shares tensors through file descriptors, which
    die with the worker that returns them."""
    return None if t is None else t.detach().numpy().copy()


def _run_config(config, whole, weighted, rank, world, grad=True):
    """This rank's value (or potentials) and its rows of the gradients, as NumPy arrays; grad:
    whether this rank's rows require a gradient."""
    xs, ys = SHARDS[world]
    a, x, b, y = whole
    rx, ry = _rows(xs, rank), _rows(ys, rank)
    mine = [t.clone().requires_grad_(grad) for t in (a[rx], x[rx], b[ry], y[ry])]
    loss = td.SamplesLoss(**config)
    args = mine if weighted else (mine[1], mine[3])
    out = loss(*args)
    if config.get("potentials"):
        F, G = out
        # A loss of the potentials, to check their gradients too (collective backward).
        (F.square().sum() + G.sum()).backward()
        value = (_plain(F), _plain(G))
    else:
        out.backward()
        value = _plain(out)
    return value, [_plain(t.grad) for t in mine]


def _bad_inputs(rank, world):
    """Calls that go wrong on one rank only: every rank raises (none hangs)."""
    loss = td.SamplesLoss()
    messages = []
    d = 3 if rank == 0 else 2
    for args in ((torch.randn(3, d, dtype=torch.float64), torch.randn(2, d, dtype=torch.float64)),
                 (torch.randn(*((3, d) if rank else (3 * d,)), dtype=torch.float64),
                  torch.randn(2, d, dtype=torch.float64))):
        try:
            loss(*args)
            messages.append(None)
        except (ValueError, RuntimeError) as e:
            messages.append(f"{type(e).__name__}: {e}")
    # Masses that differ over all ranks (each rank's rows look fine): refused on every rank.
    x = torch.randn(2, 2, dtype=torch.float64)
    with pytest.raises(ValueError, match="balanced OT needs equal total masses"):
        loss(torch.full((2,), 0.25, dtype=x.dtype), x, torch.full((2,), 0.5, dtype=x.dtype), x)
    return messages


def _work(rank, world):
    whole = _clouds()
    results = [_run_config(c, whole, True, rank, world) for c in CONFIGS]
    results.append(_run_config(CONFIGS[0], whole, False, rank, world))
    results.append(_run_config(CONFIGS[0], _clouds(torch.float32), True, rank, world))
    # Only rank 0's rows need a gradient: the other ranks still join its collective backward.
    results.append(_run_config(CONFIGS[0], whole, True, rank, world, grad=rank == 0))
    return results, _bad_inputs(rank, world)


def _reference(config, weighted, dtype=torch.float64):
    whole = [t.clone().requires_grad_() for t in _clouds(dtype)]
    loss = tessel.ot.SamplesLoss(**config)
    out = loss(*(whole if weighted else (whole[1], whole[3])))
    if config.get("potentials"):
        F, G = out
        (F.square().sum() + G.sum()).backward()
        value = (F.detach()[0], G.detach()[0])
    else:
        out.backward()
        value = out.detach()
    return value, [t.grad for t in whole]


def _close(what, got, want):
    # float32: the ring's partial sums round differently from one process's, a few ulps per
    # softmin, carried through the loop and the debiased value's cancellation (4e-5 measured).
    rtol = RTOL if want.dtype == torch.float64 else 2e-4
    scale = max(want.abs().max().item(), 1e-300)
    torch.testing.assert_close(got, want, rtol=rtol, atol=rtol * scale,
                               msg=lambda m: f"{what}: {m}")


def _tensors(v):
    if isinstance(v, (list, tuple)):
        return type(v)(_tensors(u) for u in v)
    return None if v is None else torch.from_numpy(v)


@pytest.mark.parametrize("world", [2, 3])
def test_sharded_loss_matches_one_process(world, interpreted):
    results = run_ranks(_work, world, WAIT_S)
    results = {r: (_tensors(v[0]), v[1]) for r, v in results.items()}
    xs, ys = SHARDS[world]
    want_grads_0 = _reference(CONFIGS[0], True)[1]
    cases = [(c, True, torch.float64) for c in CONFIGS] + [(CONFIGS[0], False, torch.float64),
                                                           (CONFIGS[0], True, torch.float32)]
    for k, (config, weighted, dtype) in enumerate(cases):
        want_value, want_grads = _reference(config, weighted, dtype)
        what = f"{config}{'' if weighted else ' without weights'}"
        got = [results[r][0][k] for r in range(world)]
        if config.get("potentials"):
            for n, rows in ((0, xs), (1, ys)):
                for r in range(world):
                    assert got[r][0][n].shape == (1, rows[r]), what
                _close(f"{what} potential {n}", torch.cat([g[0][n][0] for g in got]),
                       want_value[n])
        else:
            for r in range(world):  # the same number on every rank, bit for bit
                assert torch.equal(got[r][0], got[0][0]), (what, r)
            _close(f"{what} value", got[0][0], want_value)
        for n, name in enumerate("axby"):
            if want_grads[n] is None or not weighted and name in "ab":
                continue
            grad = [g[1][n] for g in got]
            assert all(t is not None for t in grad), (what, name)
            grad = torch.cat(grad)
            _close(f"{what} gradient in {name}", grad, want_grads[n])
    # Only rank 0's rows required a gradient: it got them, the others none.
    partial = [results[r][0][len(cases)][1] for r in range(world)]
    assert all(g is None for r in range(1, world) for g in partial[r])
    for n, rows in enumerate((xs, xs, ys, ys)):
        _close(f"rank 0's gradient {n}", partial[0][n], want_grads_0[n][: rows[0]])
    # Bad inputs on one rank: x of dimension 3 on rank 0, 2 elsewhere, named on every rank; a
    # 1-D x on rank 0 refused there, the others told which rank refused.
    for r in range(world):
        dims, flat = results[r][1]
        assert "rank 1 disagrees with rank 0 on argument x (points): dims (2,) vs (3,)" in dims
        assert "tessel.distributed.SamplesLoss" in dims
        if r == 0:
            assert "ValueError: tessel.distributed.SamplesLoss: x has shape (9,)" in flat
        else:
            assert "rank 0 of the group refused its arguments" in flat


@pytest.mark.parametrize("option, value", [("reach", 0.5), ("cluster_scale", 0.1),
                                           ("backend", "multiscale"), ("gradient", "implicit"),
                                           ("cost", "SqDist(X,Y)")])
def test_unsharded_options_say_what_is_supported(option, value):
    with pytest.raises(NotImplementedError, match=rf"tessel.distributed.SamplesLoss: {option}="
                                                  r".* is not sharded; supported: loss="):
        td.SamplesLoss(**{option: value})


def test_bad_settings_name_the_sharded_loss():
    with pytest.raises(ValueError, match="tessel.distributed.SamplesLoss: blur must be"):
        td.SamplesLoss(blur=-1)
    with pytest.raises(ValueError, match="tessel.distributed.SamplesLoss: unknown loss"):
        td.SamplesLoss(loss="wasserstein")


def test_without_a_process_group_the_call_says_what_to_do():
    assert not dist.is_initialized()
    with pytest.raises(RuntimeError, match="SamplesLoss: no process group is initialized"):
        td.SamplesLoss()(torch.randn(4, 2), torch.randn(5, 2))
