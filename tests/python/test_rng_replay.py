"""Functions that draw random numbers (dropout, noise) and run again in backward: the steps of
checkpoint_loop and checkpoint_while, the branches of ReversibleCoupling. The recomputations must
draw what the forward pass drew, or the gradient is silently wrong."""
import numpy as np
import pytest
import torch

from tessel.torch import ReversibleCoupling, SnapshotLevels, checkpoint_loop, checkpoint_while

F64 = torch.float64


def make_step(w):
    # Dropout and additive noise: two kinds of draws, both replayed.
    def step(x, k):
        h = torch.nn.functional.dropout(torch.tanh(x @ w), p=0.3, training=True)
        return h + 0.1 * torch.randn_like(x) + 0.01 * k
    return step


def unrolled(step, x, n):
    for k in range(n):
        x = step(x, k)
    return x


def grads_of(run, x0, w):
    out = run()
    loss = (out ** 2).sum() + out.sin().sum()
    return [g.detach() for g in torch.autograd.grad(loss, (x0, w))], out.detach()


@pytest.fixture
def problem():
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn(5, 4, generator=gen, dtype=F64).requires_grad_()
    w = (0.5 * torch.randn(4, 4, generator=gen, dtype=F64)).requires_grad_()
    return x0, w


def check_replay(x0, w, step, n, run, seed):
    """run() against the unrolled loop from the same seed: output, gradients, and the random
    stream the caller sees afterwards (the backward's replays run on a forked stream)."""
    torch.manual_seed(seed)
    ref, ref_out = grads_of(lambda: unrolled(step, x0, n), x0, w)
    after_ref = torch.rand(3)
    torch.manual_seed(seed)
    got, out = grads_of(run, x0, w)
    assert torch.equal(torch.rand(3), after_ref)
    assert torch.equal(out, ref_out)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n,s", [(1, 1), (7, 1), (13, 2), (40, 3), (40, 40)])
def test_checkpoint_loop_replays_draws(problem, n, s):
    x0, w = problem
    step = make_step(w)
    check_replay(x0, w, step, n, lambda: checkpoint_loop(step, x0, n, s), 123)


@pytest.mark.parametrize("n,s", [(1, 1), (2, 1), (9, 2), (30, 3), (57, 4)])
def test_checkpoint_while_replays_draws(problem, n, s):
    x0, w = problem
    step = make_step(w)
    stats = {}
    check_replay(x0, w, step, n,
                 lambda: checkpoint_while(lambda x, k: k < n, step, x0, s, stats=stats), 7)
    assert stats["n_steps"] == n


def test_without_preserving_the_draws_the_backward_raises(problem):
    # What the default prevents (and a check that the tests above can fail): the recomputed
    # steps draw other numbers, which the backward finds where a recomputed state meets one it
    # already holds, instead of returning the gradient of another trajectory.
    x0, w = problem
    step = make_step(w)
    torch.manual_seed(5)
    out = checkpoint_loop(step, x0, 20, 2, preserve_rng_state=False)
    with pytest.raises(RuntimeError, match=r"checkpoint_loop: step \d+, run again in backward, "
                                           "gave a different state 0"):
        torch.autograd.grad(out.sum(), (x0, w))


def test_double_backward_replays_draws(problem):
    # create_graph=True recomputes the loop from the initial state: from its random state too.
    x0, w = problem
    step = make_step(w)
    v = torch.randn(4, 4, dtype=F64)

    def hvp(run):
        torch.manual_seed(11)
        out = run()
        (gw,) = torch.autograd.grad((out ** 3).sum(), w, create_graph=True)
        return torch.autograd.grad((gw * v).sum(), w)[0]

    ref = hvp(lambda: unrolled(step, x0, 12))
    for run in (lambda: checkpoint_loop(step, x0, 12, 3),
                lambda: checkpoint_while(lambda x, k: k < 12, step, x0, 3)):
        torch.testing.assert_close(hvp(run), ref, rtol=1e-12, atol=1e-12)


def test_levels_keep_the_draws(problem, tmp_path):
    x0, w = problem
    step = make_step(w)
    torch.manual_seed(3)
    ref, _ = grads_of(lambda: unrolled(step, x0, 25), x0, w)
    state_bytes = x0.numel() * x0.element_size()
    levels = SnapshotLevels(device_bytes=state_bytes, host_bytes=state_bytes, disk_bytes=None,
                            disk_dir=tmp_path)
    torch.manual_seed(3)
    got, _ = grads_of(lambda: checkpoint_while(lambda x, k: k < 25, step, x0, 4, storage=levels),
                      x0, w)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12)


def test_cond_drawing_random_numbers_is_an_error(problem):
    x0, w = problem
    step = make_step(w)
    noisy = lambda x, k: bool(torch.rand(()) < 2.0) and k < 5  # noqa: E731
    with pytest.raises(RuntimeError, match="cond drew random numbers"):
        checkpoint_while(noisy, step, x0, 2)
    # A step drawing nothing does not need the replay: then cond may draw.
    quiet = lambda x, k: torch.tanh(x @ w.detach()) + x  # noqa: E731
    out = checkpoint_while(noisy, quiet, x0, 2, preserve_rng_state=False)
    assert out.shape == x0.shape


def test_cond_returning_none_is_an_error(problem):
    x0, w = problem

    def cond(x, k):
        k < 3  # noqa: B015 (the missing return this test is about)

    with pytest.raises(TypeError, match="cond returned None at step 0"):
        checkpoint_while(cond, make_step(w), x0, 2)


def test_numpy_and_tensor_integers_are_accepted(problem):
    x0, w = problem
    step = lambda x, k: torch.tanh(x @ w)  # noqa: E731
    a = checkpoint_loop(step, x0, np.int64(6), np.int32(2))
    b = checkpoint_while(lambda x, k: True, step, x0, np.int64(2), max_steps=torch.tensor(6))
    c = unrolled(step, x0, 6)
    assert torch.equal(a, c) and torch.equal(b, c)
    for bad in (2.0, True, torch.tensor([1, 2]), torch.tensor(2.0), "2"):
        with pytest.raises(ValueError, match="snapshots must be an integer"):
            checkpoint_loop(step, x0, 3, bad)


def test_failed_step_removes_disk_snapshots_at_once(problem, tmp_path):
    x0, w = problem
    state_bytes = x0.numel() * x0.element_size()

    def step(x, k):
        if k == 30:
            raise ArithmeticError("diverged")
        return torch.tanh(x @ w)

    for run in (lambda lv: checkpoint_while(lambda x, k: True, step, x0, 5, storage=lv),
                lambda lv: checkpoint_loop(step, x0, 40, 5, storage=lv)):
        levels = SnapshotLevels(device_bytes=0, host_bytes=0, disk_bytes=None,
                                disk_dir=tmp_path)
        with pytest.raises(ArithmeticError):
            run(levels)
        # No garbage collection needed: the files went when the step failed.
        assert list(tmp_path.iterdir()) == []


def dropout_branch(channels, seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(channels, channels), torch.nn.Dropout(0.4),
                               torch.nn.Tanh()).to(F64)


@pytest.mark.parametrize("mode", ["additive", "affine"])
@pytest.mark.parametrize("free_inputs", [True, False])
def test_reversible_coupling_replays_dropout(mode, free_inputs):
    width = 3 if mode == "additive" else 6  # affine: F and G give (scale_logit, shift)

    def stack(reversible, preserve=True):
        blocks = [ReversibleCoupling(dropout_branch(3, 10 * i), dropout_branch(3, 10 * i + 1),
                                     mode=mode, free_inputs=free_inputs, reversible=reversible,
                                     preserve_rng_state=preserve) for i in range(3)]
        if mode == "affine":
            for b in blocks:
                for branch in (b.F, b.G):
                    branch[0] = torch.nn.Linear(3, width).to(F64)
        return blocks

    def grads(blocks, create_graph=False):
        torch.manual_seed(99)
        x = torch.randn(4, 6, dtype=F64, requires_grad=True)
        torch.manual_seed(1234)  # the dropout masks come from here
        y = x
        for b in blocks:
            y = b(y)
        params = [p for b in blocks for p in b.parameters()]
        out = torch.autograd.grad((y ** 2).sum(), [x] + params, create_graph=create_graph)
        if create_graph:  # a second derivative, through the stored fallback
            out = torch.autograd.grad(sum((g ** 2).sum() for g in out), [x] + params,
                                      allow_unused=True)
        return [torch.zeros(()) if g is None else g.detach() for g in out], torch.rand(2)

    torch.manual_seed(0)
    ref_blocks = stack(False)
    torch.manual_seed(0)
    rev_blocks = stack(True)
    rev_blocks_off = stack(True, preserve=False)
    for a, b, c in zip(ref_blocks, rev_blocks, rev_blocks_off):
        b.load_state_dict(a.state_dict())
        c.load_state_dict(a.state_dict())
    for create_graph in (False, True):
        ref, after_ref = grads(ref_blocks, create_graph)
        got, after = grads(rev_blocks, create_graph)
        for g, r in zip(got, ref):
            torch.testing.assert_close(g, r, rtol=1e-10, atol=1e-12)
        assert torch.equal(after, after_ref)  # the caller's stream, as without recomputation
    off, _ = grads(rev_blocks_off)
    ref, _ = grads(ref_blocks)
    assert max(float((g - r).abs().max()) for g, r in zip(off, ref)) > 1e-3
