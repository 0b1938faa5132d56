"""checkpoint_loop: Revolve gradients equal unrolled autograd; step counts, memory, errors."""
import pytest
import torch

from tessel import _core
from tessel.loops.checkpoint import checkpoint_loop, revolve_optimal_recomputations, revolve_schedule
from tessel.torch import Genred
from tessel.torch import checkpoint_loop as exported

TOL = 1e-10
CASES = [(1, 1), (1, 3), (2, 1), (5, 1), (7, 3), (10, 10), (10, 25), (30, 4), (50, 2), (64, 6)]


def unrolled(step, state, n):
    for k in range(n):
        state = step(state, k)
    return state


def assert_grads_equal(got, ref):
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=TOL, atol=TOL)


def make_mlp_step(n, counter):
    W = (0.5 * torch.randn(4, 4, dtype=torch.float64)).requires_grad_()
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)

    def step(x, k):
        counter[0] += 1
        return torch.tanh(W @ x + b * (k + 1) / n) + 0.1 * x

    return step, [W, b]


@pytest.mark.parametrize("n,s", CASES)
def test_gradients_match_unrolled(n, s):
    calls = [0]
    step, params = make_mlp_step(n, calls)
    x0 = torch.randn(4, dtype=torch.float64, requires_grad=True)
    c = torch.randn(4, dtype=torch.float64)

    ref_out = unrolled(step, x0, n)
    ref = torch.autograd.grad((ref_out * c).sum(), [x0, *params])

    calls[0] = 0
    stats = {}
    out = checkpoint_loop(step, x0, n, snapshots=s, params=params, stats=stats)
    torch.testing.assert_close(out, ref_out, rtol=TOL, atol=TOL)
    got = torch.autograd.grad((out * c).sum(), [x0, *params])
    assert_grads_equal(got, ref)
    # Every evaluation, forward and backward: n plus Revolve's optimal recomputations.
    assert calls[0] == n + revolve_optimal_recomputations(n, s)
    assert stats["step_calls"] == calls[0]
    assert stats["max_stored"] <= s
    assert calls[0] == _core.revolve_forward_steps(n, s)


def test_backward_via_loss_backward_accumulates_into_params():
    calls = [0]
    step, params = make_mlp_step(12, calls)
    x0 = torch.randn(4, dtype=torch.float64, requires_grad=True)
    ref = torch.autograd.grad(unrolled(step, x0, 12).square().sum(), [x0, *params])
    checkpoint_loop(step, x0, 12, snapshots=3, params=params).square().sum().backward()
    assert_grads_equal([x0.grad, *[p.grad for p in params]], ref)


@pytest.mark.parametrize("n,s", [(1, 1), (9, 2), (20, 20), (40, 3)])
def test_tuple_state(n, s):
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)
    calls = [0]

    def step(state, k):  # a leapfrog-like integrator
        calls[0] += 1
        x, v = state
        x = x + 0.1 * v
        v = v - 0.1 * torch.sin(w * x) * (1 + k % 3)
        return x, v

    x0 = torch.randn(3, dtype=torch.float64, requires_grad=True)
    v0 = torch.randn(3, dtype=torch.float64, requires_grad=True)
    cx, cv = torch.randn(3, dtype=torch.float64), torch.randn(3, dtype=torch.float64)
    rx, rv = unrolled(step, (x0, v0), n)
    ref = torch.autograd.grad((rx * cx).sum() + (rv * cv).sum(), [x0, v0, w])
    calls[0] = 0
    out = checkpoint_loop(step, (x0, v0), n, snapshots=s, params=[w])
    assert isinstance(out, tuple) and len(out) == 2
    got = torch.autograd.grad((out[0] * cx).sum() + (out[1] * cv).sum(), [x0, v0, w])
    assert_grads_equal(got, ref)
    assert calls[0] == n + revolve_optimal_recomputations(n, s)


def test_tuple_state_only_one_part_requires_grad():
    w = torch.randn(3, dtype=torch.float64, requires_grad=True)

    def step(state, k):
        x, v = state
        return x + 0.1 * v, v - 0.1 * w * x

    x0 = torch.randn(3, dtype=torch.float64)  # no grad: its gradient must not be returned
    v0 = torch.randn(3, dtype=torch.float64, requires_grad=True)
    ref = torch.autograd.grad(unrolled(step, (x0, v0), 15)[0].sum(), [v0, w])
    got = torch.autograd.grad(checkpoint_loop(step, (x0, v0), 15, 2, params=[w])[0].sum(), [v0, w])
    assert_grads_equal(got, ref)


def test_genred_inside_step():
    gauss = Genred("Exp(-SqDist(X,Y))*B", ["X = Vi(2)", "Y = Vj(2)", "B = Vj(2)"], "Sum", axis=1)
    y = torch.randn(15, 2, dtype=torch.float64, requires_grad=True)
    b = (0.3 * torch.randn(15, 2, dtype=torch.float64)).requires_grad_()
    calls = [0]

    def step(x, k):  # points flowing along a kernel velocity field
        calls[0] += 1
        return x + 0.1 * gauss(x, y, b)

    x0 = torch.randn(10, 2, dtype=torch.float64, requires_grad=True)
    c = torch.randn(10, 2, dtype=torch.float64)
    n, s = 13, 3
    ref = torch.autograd.grad((unrolled(step, x0, n) * c).sum(), [x0, y, b])
    calls[0] = 0
    out = checkpoint_loop(step, x0, n, snapshots=s, params=[y, b])
    got = torch.autograd.grad((out * c).sum(), [x0, y, b])
    assert_grads_equal(got, ref)
    assert calls[0] == n + revolve_optimal_recomputations(n, s)


def test_module_parameters():
    net = torch.nn.Linear(5, 5).double()

    def step(x, k):
        return x + 0.05 * torch.tanh(net(x))

    x0 = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    params = list(net.parameters())
    ref = torch.autograd.grad(unrolled(step, x0, 25).sum(), [x0, *params])
    got = torch.autograd.grad(checkpoint_loop(step, x0, 25, 4, params=params).sum(), [x0, *params])
    assert_grads_equal(got, ref)


def test_peak_stored_states_is_bounded():
    n, s = 200, 4
    calls = [0]
    step, params = make_mlp_step(n, calls)
    x0 = torch.randn(4, dtype=torch.float64, requires_grad=True)
    stats = {}
    out = checkpoint_loop(step, x0, n, snapshots=s, params=params, stats=stats)
    assert 1 <= stats["max_stored"] <= s
    after_forward = stats["max_stored"]
    ref = torch.autograd.grad(unrolled(step, x0, n).sum(), [x0, *params])
    calls[0] = 0
    got = torch.autograd.grad(out.sum(), [x0, *params])
    assert_grads_equal(got, ref)
    assert after_forward <= stats["max_stored"] <= s
    assert stats["step_calls"] == n + revolve_optimal_recomputations(n, s)
    # Far fewer than the n(n-1)/2 of one snapshot, far more than the n-1 of storing everything.
    assert n - 1 < revolve_optimal_recomputations(n, s) < n * (n - 1) // 2


def test_zero_steps_and_no_grad():
    x0 = torch.randn(3, dtype=torch.float64, requires_grad=True)
    assert checkpoint_loop(lambda x, k: 2 * x, x0, 0, 1) is x0
    calls = [0]

    def step(x, k):
        calls[0] += 1
        return 2 * x

    with torch.no_grad():
        out = checkpoint_loop(step, x0, 5, 2)
    torch.testing.assert_close(out, 32 * x0.detach())
    assert calls[0] == 5 and not out.requires_grad


def test_exported_from_tessel_torch():
    assert exported is checkpoint_loop
    import tessel.torch

    assert "checkpoint_loop" in tessel.torch.__all__


def test_schedule_from_python():
    sched = revolve_schedule(4, 2)
    assert sched[-1][0] == "done"
    reverses = [a for a, *_ in sched if a in ("first_reverse", "reverse")]
    assert reverses[0] == "first_reverse" and len(reverses) == 4
    assert [f for a, f, _, _ in sched if a.endswith("reverse")] == [3, 2, 1, 0]
    assert revolve_optimal_recomputations(10, 3) == 15


def test_errors():
    x0 = torch.randn(3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(ValueError, match="snapshots"):
        checkpoint_loop(lambda x, k: x, x0, 5, snapshots=0)
    with pytest.raises(ValueError, match="n_steps"):
        checkpoint_loop(lambda x, k: x, x0, -1, snapshots=2)
    with pytest.raises(ValueError, match="snapshots"):
        revolve_schedule(3, 0)
    with pytest.raises(ValueError, match="step 3 changed state 0"):
        checkpoint_loop(lambda x, k: x[:-1] if k == 3 else x * 1.5, x0, 6, snapshots=2)
    with pytest.raises(ValueError, match="step 2 changed state 1"):
        checkpoint_loop(lambda s, k: (s[0], s[1].float() if k == 2 else s[1]),
                        (x0, x0.detach()), 6, snapshots=2)
    with pytest.raises(ValueError, match="step 0 returned"):
        checkpoint_loop(lambda s, k: s[0], (x0, x0), 3, snapshots=2)


def test_backward_twice_recomputes_and_accumulates():
    x0 = torch.randn(3, dtype=torch.float64, requires_grad=True)
    stats = {}
    out = checkpoint_loop(lambda x, k: torch.sin(x), x0, 4, 2, stats=stats).sum()
    out.backward(retain_graph=True)
    first = x0.grad.clone()
    assert "double_backward_fallback" not in stats
    out.backward()
    torch.testing.assert_close(x0.grad, 2 * first, rtol=TOL, atol=TOL)
    assert stats["double_backward_fallback"]


def test_double_backward_falls_back_to_the_full_graph():
    """create_graph=True: second derivatives (here a Hessian-vector product in x0 and in a
    parameter) equal unrolled autograd; the fallback is reported in stats."""
    n, s = 12, 3
    step, params = make_mlp_step(n, [0])
    x0 = torch.randn(4, dtype=torch.float64, requires_grad=True)
    v = torch.randn(4, dtype=torch.float64)

    def hvp(run):
        out = run(x0)
        gx, gw = torch.autograd.grad((out ** 2).sum(), [x0, params[0]], create_graph=True)
        return torch.autograd.grad((gx * v).sum() + gw.sum(), [x0, *params])

    stats = {}
    got = hvp(lambda x: checkpoint_loop(step, x, n, snapshots=s, params=params, stats=stats))
    ref = hvp(lambda x: unrolled(step, x, n))
    assert_grads_equal(got, ref)
    assert stats["double_backward_fallback"]
