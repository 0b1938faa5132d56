"""odeint_reversible with rtol/atol: gradients equal autograd through the same accepted steps, the
solution meets the tolerance (analytic solutions, torchdiffeq), rejected steps, errors."""
import math

import pytest
import torch

from tessel.loops.checkpoint import revolve_optimal_recomputations
from tessel.torch import odeint_reversible
from test_odeint import _MEMORY_SETUP as FIXED_STEP_SETUP

F64 = torch.float64
TOL = 1e-10
METHODS = ["reversible_heun", "dopri5"]

# Dormand–Prince 5(4), written out as its Butcher tableau (rows: stages 2..7; the 7th stage's row
# is the 5th-order solution).
DP_A = [[1 / 5],
        [3 / 40, 9 / 40],
        [44 / 45, -56 / 15, 32 / 9],
        [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
        [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
        [35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84]]
DP_C = [1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0]


def step_grid(t, stats):
    """The solver's step times as a function of t: each time inside interval k keeps its
    fraction of the interval (the controller's choices held fixed)."""
    times = stats["step_times"].detach()
    td = t.detach()
    pieces, start = [], 0
    for k in range(len(t) - 1):
        end = int((times == td[k + 1]).nonzero()[-1])
        fr = (times[start:end] - td[k]) / (td[k + 1] - td[k])
        pieces.append(t[k] + (t[k + 1] - t[k]) * fr)
        start = end
    return torch.cat(pieces + [t[-1:]]), [len(p) for p in pieces]


def unrolled(method, f, y0, t, stats):
    """The method written out plainly on the recorded steps, every step on autograd's tape."""
    grid, counts = step_grid(t, stats)
    rows, n = [y0], 0
    y, z = y0, y0
    F = f(grid[0], y0)
    for m in counts:
        for _ in range(m):
            s, h = grid[n], grid[n + 1] - grid[n]
            if method == "reversible_heun":
                z1 = 2 * y - z + F * h
                F1 = f(grid[n + 1], z1)
                y, z, F = y + (F + F1) * (h / 2), z1, F1
            else:
                ks = [F]
                for a, c in zip(DP_A, DP_C):
                    ks.append(f(s + c * h, y + h * sum(ai * k for ai, k in zip(a, ks))))
                y, F = y + h * sum(ai * k for ai, k in zip(DP_A[-1], ks)), ks[-1]
            n += 1
        rows.append(y)
    return torch.stack(rows)


def mlp_field(d=3, width=16):
    net = torch.nn.Sequential(torch.nn.Linear(d + 1, width), torch.nn.Tanh(),
                              torch.nn.Linear(width, d)).to(F64)

    def f(t, y):
        return net(torch.cat([y, t.expand(*y.shape[:-1], 1)], dim=-1))

    return f, list(net.parameters())


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("decreasing", [False, True])
def test_gradients_match_unrolled_through_the_accepted_steps(method, decreasing):
    torch.manual_seed(1)
    f, params = mlp_field()
    y0 = torch.randn(4, 3, dtype=F64, requires_grad=True)
    times = [0.0, 0.3, 1.1, 2.0]
    t = torch.tensor(times[::-1] if decreasing else times, dtype=F64, requires_grad=True)
    c = torch.randn(len(t), 4, 3, dtype=F64)
    rtol = 1e-4 if method == "reversible_heun" else 1e-9
    stats = {}
    out = odeint_reversible(f, y0, t, method=method, rtol=rtol, atol=1e-10, stats=stats)
    assert stats["steps"] > 3 * len(times)  # the controller really cut the intervals
    ref_out = unrolled(method, f, y0, t, stats)
    torch.testing.assert_close(out, ref_out, rtol=TOL, atol=TOL)
    inputs = [y0, t, *params]
    got = torch.autograd.grad((out * c).sum(), inputs)
    ref = torch.autograd.grad((ref_out * c).sum(), inputs)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=TOL, atol=TOL)
    # The backward replays the accepted steps only: no controller, no rejected attempt.
    n = stats["steps"]
    if method == "reversible_heun":
        assert stats["nfe_backward"] == n + 1 and stats["backward"] == "reversible"
        assert stats["reconstruction_error"] < 1e-11
    else:
        # Forward: the controller's pass (f at t[0], the first-step probe, 6 per attempt), then
        # the replay's first sweep (f at t[0], 6 per step); the backward recomputes steps only.
        tries = n + stats["rejected"]
        assert stats["nfe_forward"] == 2 + 6 * tries + 1 + 6 * n
        # Each interval is a checkpoint_loop: its n_k steps plus Revolve's recomputations.
        _, counts = step_grid(t, stats)
        calls = sum(m + revolve_optimal_recomputations(m, 16) for m in counts)
        assert stats["nfe_forward"] + stats["nfe_backward"] == 2 + 6 * tries + 1 + 6 * calls
        assert stats["max_stored"] <= 16


@pytest.mark.parametrize("method,rtol", [("reversible_heun", 1e-5), ("dopri5", 1e-8)])
def test_exponential_decay_and_harmonic_oscillator(method, rtol):
    atol = rtol * 1e-2
    t = torch.linspace(0, 6, 7, dtype=F64)
    lam = torch.tensor(0.7, dtype=F64, requires_grad=True)
    y0 = torch.tensor([2.0, -1.0], dtype=F64)
    out = odeint_reversible(lambda s, y: -lam * y, y0, t, method=method, rtol=rtol, atol=atol)
    exact = y0 * torch.exp(-lam * t)[:, None]
    # Local errors at most rtol |y| + atol per step accumulate over the steps taken; measured
    # global errors are below 30 rtol max |y| for both methods.
    assert float((out - exact).abs().max()) < 100 * rtol * 2
    g, = torch.autograd.grad(out[-1].sum(), lam)
    g_exact = -6.0 * float(y0.sum()) * math.exp(-0.7 * 6)  # d/dlam of sum(y0) e^(-6 lam)
    assert abs(float(g) - g_exact) < 100 * rtol * 2

    omega = 3.0
    A = torch.tensor([[0.0, 1.0], [-omega**2, 0.0]], dtype=F64)
    out = odeint_reversible(lambda s, y: y @ A.T, torch.tensor([1.0, 0.0], dtype=F64), t,
                            method=method, rtol=rtol, atol=atol)
    exact = torch.stack([torch.cos(omega * t), -omega * torch.sin(omega * t)], 1)
    assert float((out - exact).abs().max()) < 100 * rtol * omega


def test_matches_torchdiffeq_dopri5():
    torchdiffeq = pytest.importorskip("torchdiffeq")
    torch.manual_seed(2)
    f, params = mlp_field(d=2, width=8)
    y0 = torch.randn(5, 2, dtype=F64)
    t = torch.tensor([0.0, 0.5, 2.0, 3.0], dtype=F64)
    ours_stats = {}
    ours = odeint_reversible(f, y0, t, method="dopri5", rtol=1e-7, atol=1e-9,
                             stats=ours_stats)
    theirs = torchdiffeq.odeint(f, y0, t, rtol=1e-7, atol=1e-9, method="dopri5")
    # Both meet the tolerance independently (different controllers): their difference is of the
    # order of the local tolerance times the steps, far below 1e-5.
    assert float((ours - theirs).abs().max()) < 1e-6
    # Gradients: ours is exact for our steps, torchdiffeq's (direct backprop) for theirs; both
    # are within the tolerance of the continuous problem's gradient.
    gs = torch.autograd.grad(ours.square().sum(), params)
    gt = torch.autograd.grad(theirs.square().sum(), params)
    for a, b in zip(gs, gt):
        # Measured: at most 1.6e-5 apart (3.6e-5 relative).
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def stiff_decay():
    # y' = -k (y - cos t): once the transient is gone the stability bound of an explicit
    # method, not accuracy, limits h, so the controller keeps overshooting and rejecting.
    k = torch.tensor(1000.0, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 2.0], dtype=F64)
    slow = (1000**2 * math.cos(2.0) + 1000 * math.sin(2.0)) / (1000**2 + 1)
    return (lambda s, y: -k * (y - torch.cos(s))), k, t, 1e-3, 1e-6, slow


def pulse():
    # An oscillator kicked by a narrow pulse at t = 0.6 that the steps, long before it, run
    # into. Reversible Heun is not A-stable (see odeint.py): the stiff decay above excites its
    # parasitic mode, and its controller gives up at max_num_steps (test_errors).
    a = torch.tensor(1.0, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 0.5, 2.0], dtype=F64)

    def f(s, y):
        return a * torch.stack([y[1], -4 * y[0]]) + 5 * torch.exp(-((s - 0.6) / 0.005)**2)

    return f, a, t, 1e-5, 1e-8, None


@pytest.mark.parametrize("method,problem", [("dopri5", stiff_decay),
                                            ("reversible_heun", pulse)])
def test_rejected_steps_and_the_gradient_is_still_exact(method, problem):
    f, k, t, rtol, atol, slow = problem()
    y0 = torch.tensor([1.5, -0.5], dtype=F64, requires_grad=True)
    stats = {}
    out = odeint_reversible(f, y0, t, method=method, rtol=rtol, atol=atol, stats=stats)
    assert stats["rejected"] >= 10, stats  # measured: 27 and 13
    ref_out = unrolled(method, f, y0, t, stats)
    torch.testing.assert_close(out, ref_out, rtol=TOL, atol=TOL)
    got = torch.autograd.grad(out[-1].sum(), [y0, k])
    ref = torch.autograd.grad(ref_out[-1].sum(), [y0, k])
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=TOL, atol=TOL)
    if slow is not None:
        assert abs(float(out[-1, 0]) - slow) < 1e-3


@pytest.mark.parametrize("method", METHODS)
def test_tuple_state_and_module_parameters(method):
    class Field(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.tensor([1.3, 0.4], dtype=F64))

        def forward(self, s, state):
            x, v = state
            return v, -self.w[0] * torch.sin(x) - self.w[1] * v

    field = Field()
    x0 = torch.tensor([0.5, 1.0], dtype=F64, requires_grad=True)
    v0 = torch.zeros(2, dtype=F64, requires_grad=True)
    t = torch.linspace(0, 3, 4, dtype=F64)
    stats = {}
    x, v = odeint_reversible(field, (x0, v0), t, method=method, rtol=1e-6, atol=1e-9,
                             stats=stats)
    (x[-1].sum() + v[2].square().sum()).backward()
    got = [x0.grad, v0.grad, field.w.grad]

    def pair(s, y):  # the same field on the stacked state, for the unrolled reference
        return torch.stack(field(s, (y[0], y[1])))

    ref_out = unrolled(method, pair, torch.stack([x0, v0]), t, stats)
    torch.testing.assert_close(torch.stack([x, v], 1), ref_out, rtol=TOL, atol=TOL)
    ref = torch.autograd.grad(ref_out[-1, 0].sum() + ref_out[2, 1].square().sum(),
                              [x0, v0, field.w])
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=TOL, atol=TOL)


@pytest.mark.parametrize("method", METHODS)
def test_double_backward_and_single_time(method):
    f, params = mlp_field()
    y0 = torch.randn(2, 3, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 0.8], dtype=F64)
    stats = {}
    out = odeint_reversible(f, y0, t, method=method, rtol=1e-5, atol=1e-7, stats=stats)
    ref_out = unrolled(method, f, y0, t, stats)

    def gg(o):
        g, = torch.autograd.grad(o.sin().sum(), y0, create_graph=True)
        return torch.autograd.grad(g.square().sum(), [y0, *params])

    for a, b in zip(gg(out), gg(ref_out)):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9)

    single = odeint_reversible(f, y0, t[:1], method=method, rtol=1e-5, atol=1e-7, stats=stats)
    assert single.shape == (1, 2, 3) and stats["steps"] == 0
    torch.testing.assert_close(single[0], y0)
    with torch.no_grad():
        plain = odeint_reversible(f, y0, t, method=method, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(plain, out.detach(), rtol=0, atol=0)


def test_fixed_step_dopri5_is_fifth_order():
    A = torch.tensor([[-0.3, 2.0], [-2.0, -0.1]], dtype=F64)
    y0 = torch.tensor([1.0, 0.5], dtype=F64)
    t = torch.tensor([0.0, 2.0], dtype=F64)
    exact = torch.matrix_exp(2.0 * A) @ y0
    errs = [float((odeint_reversible(lambda s, y: A @ y, y0, t, method="dopri5",
                                     steps_per_interval=m)[-1] - exact).norm())
            for m in (10, 20, 40)]
    ratios = [a / b for a, b in zip(errs, errs[1:])]
    assert all(25 < r < 40 for r in ratios), ratios  # 2^5 = 32


def test_errors():
    y0 = torch.randn(3, dtype=F64)
    t = torch.linspace(0, 1, 3, dtype=F64)
    f = lambda s, y: -y  # noqa: E731
    cases = [
        (dict(method="rk4"), ValueError, "odeint_reversible: method must be one of"),
        (dict(rtol=-1e-3), ValueError, "odeint_reversible: rtol must be a finite number >= 0"),
        (dict(atol=float("nan")), ValueError, "odeint_reversible: atol must be a finite"),
        (dict(rtol="1e-3"), ValueError, "odeint_reversible: rtol must be"),
        (dict(rtol=0, atol=0), ValueError, "rtol and atol are both 0"),
        (dict(rtol=1e-3, step_size=0.1), ValueError, "not both"),
        (dict(options={"first_step": 0.1}, steps_per_interval=2), ValueError, "not both"),
        (dict(rtol=1e-3, options={"maxsteps": 3}), ValueError,
         r"options has unknown key\(s\) \['maxsteps'\]"),
        (dict(rtol=1e-3, options=[1]), TypeError, "odeint_reversible: options must be a dict"),
        (dict(rtol=1e-3, options={"first_step": -1.0}), ValueError,
         r"options\['first_step'\] must be a finite number > 0"),
        (dict(rtol=1e-3, options={"safety": 2.0}), ValueError, r"options\['safety'\]"),
        (dict(rtol=1e-3, options={"max_num_steps": 0}), ValueError,
         r"options\['max_num_steps'\] must be an integer >= 1"),
        (dict(rtol=1e-3, snapshots=4), ValueError, "snapshots applies to method='dopri5' only"),
        (dict(method="dopri5", snapshots=0), ValueError, "snapshots must be an integer >= 1"),
    ]
    for kwargs, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            odeint_reversible(f, y0, t, **kwargs)
    with pytest.raises(ValueError, match="strictly increasing or strictly decreasing"):
        odeint_reversible(f, y0, torch.tensor([0.0, 1.0, 0.5], dtype=F64), rtol=1e-3)
    for method in METHODS:
        with pytest.raises(RuntimeError, match=r"options\['max_num_steps'\] = 5 steps"):
            odeint_reversible(f, y0, t, method=method, rtol=1e-9, atol=1e-12,
                              options={"max_num_steps": 5})
        # A solution that blows up in finite time (y' = y^2, y(0) = 1, at t = 1).
        with pytest.raises(RuntimeError, match="odeint_reversible: (step size .* below the "
                                               "floor|options)"):
            odeint_reversible(lambda s, y: y * y, torch.ones(1, dtype=F64),
                              torch.tensor([0.0, 2.0], dtype=F64), method=method, rtol=1e-6,
                              options={"max_num_steps": 3000})
    f, _, t, rtol, atol, _ = stiff_decay()
    # Said as stiffness, long before the budget is spent (tessel.loops._odeint_adaptive).
    with pytest.raises(RuntimeError, match=r"looks stiff for reversible Heun .* beyond "
                                           r"options\['max_num_steps'\] = 2000"):
        odeint_reversible(f, torch.ones(2, dtype=F64), t, rtol=rtol, atol=atol,
                          options={"max_num_steps": 2000})


# The fixed-step memory test's field and weights, over a longer time.
_MEMORY_SETUP = FIXED_STEP_SETUP + """
t = torch.tensor([0.0, 3.0], dtype=torch.float64)

def run(method, rtol, y0, stats):
    extra = {"snapshots": 4} if method == "dopri5" else {}
    return odeint_reversible(f, y0, t, method=method, rtol=rtol, atol=rtol * 1e-2, stats=stats,
                             **extra)[-1]

# Warm up on a tiny state: one-time allocations stay out of the measurement.
_tiny = torch.randn(4, D, dtype=torch.float64, requires_grad=True)
run("dopri5", 1e-3, _tiny, {}).sum().backward()
run("reversible_heun", 1e-3, _tiny, {}).sum().backward()
y0 = torch.randn(1024, D, dtype=torch.float64, requires_grad=True)  # 128 KiB
stats = {}
"""


@pytest.mark.parametrize("method,tols", [("dopri5", (1e-4, 1e-8)),
                                         ("reversible_heun", (1e-3, 3e-5))])
def test_memory_flat_in_the_number_of_accepted_steps(method, tols):
    from tessel.loops.memory import run_isolated

    res = [run_isolated(_MEMORY_SETUP, f"run({method!r}, {rtol}, y0, stats).square().sum()"
                        ".backward()\nRESULT = stats['steps']", threads=1, timeout=120)
           for rtol in tols]
    (few, peak_few), (many, peak_many) = [(r["result"], r["peak_bytes"] / 2**20) for r in res]
    assert many >= 5 * few, (few, many)
    # Measured peak rises (MiB): dopri5 9, 20, 51, 130 steps: 20.6, 20.2, 20.5, 22.9;
    # reversible Heun 157 -> 1724 steps: 6.2 -> 6.6. The resident-set mark of the short run moves
    # by several MiB from run to run on a loaded machine (dopri5 9 -> 51 steps once measured
    # 15.7 -> 22.4). Unrolled autograd stores a graph per step: 7 evaluations of f, each keeping
    # 1024 x 32 activations, over 2 MiB a dopri5 step, so the 42 more steps would add 80 MiB;
    # the bound below fails from about 0.4 MiB per step.
    assert peak_many - peak_few < 0.25 * peak_few + 10.0, (few, many, peak_few, peak_many)
