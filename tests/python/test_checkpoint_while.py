"""checkpoint_while: gradients of loops that stop at an unknown n equal unrolled autograd; step
counts, the memory held, max_steps, errors."""
import ctypes
import math
import os

import pytest
import torch

from tessel import _core
from tessel.loops.online_checkpoint import checkpoint_while, online_recomputations
from tessel.torch import checkpoint_while as exported

TOL = 1e-10
D = torch.float64


def unrolled(cond, step, state, max_steps=None):
    k = 0
    while (max_steps is None or k < max_steps):
        with torch.no_grad():
            if not bool(cond(state, k)):
                break
        state = step(state, k)
        k += 1
    return state, k


def close(got, ref):
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=TOL, atol=TOL)


def sinkhorn_problem(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(7, 2, generator=g, dtype=D, requires_grad=True)
    y = torch.randn(9, 2, generator=g, dtype=D)
    a = torch.full((7,), 1 / 7, dtype=D)
    b = torch.full((9,), 1 / 9, dtype=D)
    eps = 0.5
    C = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)  # computed before the loop: captured

    def step(state, k):
        f, h = state
        f = -eps * torch.logsumexp((h[None, :] - C) / eps + b.log()[None, :], dim=1)
        h = -eps * torch.logsumexp((f[:, None] - C) / eps + a.log()[:, None], dim=0)
        return f, h

    def cond(state, k):  # the row marginal's error: Sinkhorn until the tolerance
        f, h = state
        P = torch.exp((f[:, None] + h[None, :] - C) / eps) * a[:, None] * b[None, :]
        return (P.sum(1) - a).abs().sum() > 1e-9

    return x, (torch.zeros(7, dtype=D), torch.zeros(9, dtype=D)), step, cond


@pytest.mark.parametrize("s", [1, 2, 3, 5, 40])
def test_sinkhorn_until_tolerance(s):
    x, state, step, cond = sinkhorn_problem()
    stats = {}
    f, h = checkpoint_while(cond, step, state, snapshots=s, stats=stats)
    # C's graph (x -> C) serves both runs below
    got = torch.autograd.grad(f.sum() + (h ** 2).sum(), [x], retain_graph=True)
    (rf, rh), n = unrolled(cond, step, state)
    ref = torch.autograd.grad(rf.sum() + (rh ** 2).sum(), [x])
    close(got, ref)
    assert stats["n_steps"] == n > 5
    assert stats["recomputations"] == online_recomputations(n, s)
    assert stats["step_calls"] == n + stats["recomputations"]
    assert 1 <= stats["max_stored"] <= s
    assert not stats["max_steps_reached"]


def test_every_length_through_three_repetitions():
    """snapshots=4, every loop length from 14 to 40 (repetition numbers 2 to 4): the gradient
    equals unrolled autograd, and up to C(7, 3) = 35 steps the run evaluates step at most once
    more than offline Revolve told n would."""
    w = torch.tensor(0.7, dtype=D, requires_grad=True)

    def step(x, k):
        return torch.sin(w * x) + 0.01 * k * x

    for n in range(14, 41):
        def cond(x, k, n=n):
            return k < n

        x0 = torch.tensor([0.3, -1.2], dtype=D, requires_grad=True)
        stats = {}
        out = checkpoint_while(cond, step, x0, snapshots=4, stats=stats)
        got = torch.autograd.grad((out * out).sum(), [x0, w])
        ref_out = unrolled(cond, step, x0)[0]
        close(got, torch.autograd.grad((ref_out * ref_out).sum(), [x0, w]))
        assert stats["n_steps"] == n
        assert stats["step_calls"] == n + stats["recomputations"]
        offline = _core.revolve_optimal_recomputations(n, 4)
        assert offline <= stats["recomputations"] <= offline + (1 if n <= 35 else n), n


@pytest.mark.parametrize("s", [1, 2, 4, 9])
def test_damped_oscillator_until_threshold(s):
    omega = torch.tensor(3.0, dtype=D, requires_grad=True)
    damping = torch.nn.Parameter(torch.tensor(0.4, dtype=D))
    dt = 0.05

    def step(state, k):  # closure over omega and a Parameter: found without listing them
        q, p = state
        p = p - dt * (omega ** 2 * q + damping * p)
        return q + dt * p, p

    def cond(state, k):
        q, p = state
        return q * q + p * p > 1e-2

    q0 = torch.tensor([1.0], dtype=D, requires_grad=True)
    p0 = torch.tensor([0.0], dtype=D)
    stats = {}
    q, p = checkpoint_while(cond, step, (q0, p0), snapshots=s, stats=stats)
    got = torch.autograd.grad((q + 2 * p).sum(), [q0, omega, damping])
    (rq, rp), n = unrolled(cond, step, (q0, p0))
    ref = torch.autograd.grad((rq + 2 * rp).sum(), [q0, omega, damping])
    close(got, ref)
    assert stats["n_steps"] == n > 50
    assert stats["step_calls"] == n + stats["recomputations"]
    assert stats["recomputations"] >= _core.revolve_optimal_recomputations(n, s)


def test_module_captured_and_backward():
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Tanh()).double()
    x0 = torch.randn(3, dtype=D, requires_grad=True)
    step = lambda x, k: 0.5 * net(x) + 0.3 * x  # noqa: E731
    cond = lambda x, k: k < 17  # noqa: E731
    checkpoint_while(cond, step, x0, snapshots=3).pow(2).sum().backward()
    got = [x0.grad.clone()] + [p.grad.clone() for p in net.parameters()]
    x0.grad = None
    net.zero_grad()
    unrolled(cond, step, x0)[0].pow(2).sum().backward()
    close(got, [x0.grad] + [p.grad for p in net.parameters()])


def test_zero_and_one_step():
    x0 = torch.randn(3, dtype=D, requires_grad=True)
    stats = {}
    assert checkpoint_while(lambda x, k: False, torch.sin, x0, 2, stats=stats) is x0
    assert stats["n_steps"] == 0 and stats["step_calls"] == 0
    out = checkpoint_while(lambda x, k: k < 1, lambda x, k: torch.sin(x), x0, 2, stats=stats)
    close(torch.autograd.grad(out.sum(), [x0]), [torch.cos(x0)])
    assert stats["n_steps"] == 1 and stats["step_calls"] == 1 + stats["recomputations"] == 1


def test_max_steps_caps_the_loop_silently():
    x0 = torch.randn(3, dtype=D, requires_grad=True)
    seen = []

    def cond(x, k):
        seen.append(k)
        return True  # would run forever

    stats = {}
    out = checkpoint_while(cond, lambda x, k: torch.cos(x), x0, 3, max_steps=25, stats=stats)
    ref, n = unrolled(lambda x, k: True, lambda x, k: torch.cos(x), x0, max_steps=25)
    close(torch.autograd.grad(out.sum(), [x0]), torch.autograd.grad(ref.sum(), [x0]))
    assert n == stats["n_steps"] == 25 and stats["max_steps_reached"]
    assert max(seen) == 24  # not evaluated on the state the cap stopped at
    assert checkpoint_while(cond, torch.cos, x0, 3, max_steps=0) is x0


def test_no_grad_runs_plain():
    calls = [0]

    def step(x, k):
        calls[0] += 1
        return 2 * x

    x0 = torch.ones(2, dtype=D, requires_grad=True)
    stats = {}
    with torch.no_grad():
        out = checkpoint_while(lambda x, k: x[0] < 100, step, x0, 2, stats=stats)
    assert calls[0] == stats["n_steps"] == 7 and float(out[0]) == 128 and not out.requires_grad


def test_backward_twice_and_double_backward():
    x0 = torch.randn(3, dtype=D, requires_grad=True)
    v = torch.randn(3, dtype=D)
    cond = lambda x, k: k < 9  # noqa: E731
    step = lambda x, k: torch.sin(x) * 1.1  # noqa: E731
    stats = {}
    out = checkpoint_while(cond, step, x0, 2, stats=stats)
    (g,) = torch.autograd.grad(out.pow(2).sum(), [x0], create_graph=True)
    (h,) = torch.autograd.grad((g * v).sum(), [x0])
    ref = unrolled(cond, step, x0)[0]
    (rg,) = torch.autograd.grad(ref.pow(2).sum(), [x0], create_graph=True)
    close([g, h], [rg, torch.autograd.grad((rg * v).sum(), [x0])[0]])
    assert stats["double_backward_fallback"]


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc (Linux)")
@pytest.mark.parametrize("n,s", [(60, 3), (200, 3), (200, 6)])
def test_memory_holds_at_most_s_states(n, s):
    """Resident memory, sampled in every step and cond call, with 4 MiB states: the checkpointed
    loop holds at most s snapshots + the taped step (its input, output and intermediates),
    whatever n, while the same measure sees unrolled autograd hold every state (so it cannot
    pass by accident)."""
    try:  # large blocks mmapped and unmapped when freed, so resident memory follows live tensors
        ctypes.CDLL("libc.so.6").mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
    except (OSError, AttributeError):
        pytest.skip("needs glibc's mallopt")
    size = 1 << 19  # float64 elements: 4 MiB
    mib4 = size * 8
    w = torch.tensor(0.999, dtype=D, requires_grad=True)
    x0 = torch.rand(size, dtype=D, requires_grad=True)
    peak = [0]

    def step(x, k):
        peak[0] = max(peak[0], _rss())
        return w * torch.sin(x)

    def cond(x, k):
        peak[0] = max(peak[0], _rss())
        return k < n

    base = _rss()
    stats = {}
    out = checkpoint_while(cond, step, x0, snapshots=s, stats=stats)
    gx, gw = torch.autograd.grad(out.sum(), [x0, w])
    ours = (peak[0] - base) / mib4
    del out, gx, gw
    theirs = math.inf
    if n == 60:  # the unrolled reference once: it holds n states
        peak[0] = 0
        base = _rss()
        ref = unrolled(cond, step, x0)[0]
        torch.autograd.grad(ref.sum(), [x0, w])
        theirs = (peak[0] - base) / mib4
    assert stats["max_stored"] <= s and stats["n_steps"] == n
    # s snapshots (x0 is the caller's), the taped step's input, sin(x) and output, the state
    # being stepped, and in the backward the gradients in flight: a constant number of states
    # besides the s (about 9.3 measured), where unrolled autograd holds n.
    assert ours <= s + 7, (ours, theirs)
    assert theirs >= n, (ours, theirs)


def test_errors():
    x0 = torch.zeros(2, dtype=D)
    f = lambda x, k: x  # noqa: E731
    with pytest.raises(TypeError, match="checkpoint_while: cond must be callable"):
        checkpoint_while(None, f, x0, 2)
    with pytest.raises(TypeError, match="checkpoint_while: step must be callable"):
        checkpoint_while(f, 3, x0, 2)
    with pytest.raises(ValueError, match="checkpoint_while: snapshots must be an integer >= 1"):
        checkpoint_while(lambda x, k: False, f, x0, 0)
    with pytest.raises(ValueError, match="checkpoint_while: max_steps must be None or an integer"):
        checkpoint_while(lambda x, k: False, f, x0, 2, max_steps=-1)
    with pytest.raises(TypeError, match="checkpoint_while: state 0 is a list"):
        checkpoint_while(lambda x, k: False, f, ([1.0],), 2)
    with pytest.raises(TypeError, match="checkpoint_while: cond returned a torch.bool tensor of "
                                        "shape"):
        checkpoint_while(lambda x, k: x > 0, f, x0.requires_grad_(), 2)
    with pytest.raises(ValueError, match="checkpoint_while: step 0 changed state 0"):
        checkpoint_while(lambda x, k: k < 3, lambda x, k: x[:1], x0, 2)
    assert exported is checkpoint_while
