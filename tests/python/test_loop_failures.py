"""The loop tools facing user functions that fail: diverging maps, steps that do not compute the
same twice, fields that return NaN or blow up, loops that never stop, and arguments of the wrong
kind or size. Each must end with an error that says what happened, never a silent value."""
import math
import warnings

import numpy as np
import pytest
import torch

from tessel.torch import ConvergenceError, checkpoint_loop, checkpoint_while, fixed_point
from tessel.torch import odeint_reversible

F64 = torch.float64


# ---- fixed_point: divergence ---------------------------------------------------------------------
DIVERGING = [("affine", lambda x: 2 * x + 1), ("square", lambda x: x * x + 1)]


# Anderson solves the affine map's fixed point (-1) exactly: that one converges.
@pytest.mark.parametrize("name,f,method", [(*DIVERGING[0], "picard"), (*DIVERGING[1], "picard"),
                                           (*DIVERGING[1], "anderson")])
def test_fixed_point_divergence_raises(name, f, method):
    # The squared norm overflowed at 1e154, and inf <= tol * inf passed for convergence.
    x0 = torch.tensor([0.5], dtype=F64)
    with pytest.raises(ConvergenceError, match=r"fixed_point: .*(diverged|no convergence).*"
                                               r"maxiter=5000"):
        fixed_point(f, x0, maxiter=5000, method=method)


@pytest.mark.parametrize("name,f", DIVERGING)
def test_fixed_point_divergence_warns_and_reports(name, f):
    stats = {}
    with pytest.warns(RuntimeWarning, match=r"fixed_point: the iteration diverged: f gave "
                                            r"non-finite values .* tol=1e-08, maxiter=5000"):
        x = fixed_point(f, torch.tensor([0.5], dtype=F64), maxiter=5000,
                        on_nonconvergence="warn", stats=stats)
    assert stats["converged"] is False and stats["iterations"] < 5000
    assert not torch.isfinite(x).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fixed_point(f, torch.tensor([0.5], dtype=F64), maxiter=5000, on_nonconvergence="ignore")


def test_fixed_point_large_finite_solution_converges():
    # A norm above sqrt(float max) must not overflow into a false divergence.
    x = fixed_point(lambda x: 0.5 * x + 1e200, torch.tensor([0.0], dtype=F64), tol=1e-12)
    torch.testing.assert_close(x, torch.tensor([2e200], dtype=F64), rtol=1e-11, atol=0)


def test_fixed_point_nan_map_raises_at_once():
    stats = {}
    with pytest.raises(ConvergenceError, match="diverged.*at iteration 1;"):
        fixed_point(lambda x: x * math.nan, torch.ones(3, dtype=F64), stats=stats)
    assert stats["iterations"] == 1


# ---- checkpoint_while: what cond may answer, a loop that does not stop -------------------------
@pytest.mark.parametrize("answer,shown", [
    ("no", r"a str \('no'\)"), (math.nan, r"a float \(nan\)"), (1, r"a int \(1\)"),
    (torch.tensor([1.0]), r"a torch.float32 tensor of shape \(1,\)"),
    (torch.tensor([True, False]), r"a torch.bool tensor of shape \(2,\)"),
    (None, r"None at step 0 \(a missing return\?\)")])
@pytest.mark.parametrize("grad", [True, False])
def test_cond_must_answer_a_bool(answer, shown, grad):
    # A string or NaN used to count as true: the loop went on under a cond that never answered.
    x0 = torch.ones(3, dtype=F64, requires_grad=grad)
    with pytest.raises(TypeError, match=rf"checkpoint_while: cond returned {shown}.*expected a "
                                        r"bool \(Python or NumPy\) or a one-element torch.bool"):
        checkpoint_while(lambda x, k: answer, lambda x, k: x * 2, x0, 2)


@pytest.mark.parametrize("make", [lambda k: k < 4, lambda k: np.int64(k) < 4,
                                  lambda k: torch.tensor(k < 4), lambda k: torch.tensor([k < 4])])
def test_cond_bools_are_accepted(make):
    x0 = torch.ones(3, dtype=F64, requires_grad=True)
    out = checkpoint_while(lambda x, k: make(k), lambda x, k: x * 2, x0, 2)
    torch.testing.assert_close(out, 16 * x0)


def test_progress_shows_the_steps_so_far(capsys):
    x0 = torch.ones(2, dtype=F64, requires_grad=True)
    checkpoint_while(lambda x, k: k < 9, lambda x, k: x * 0.5, x0, 2, progress=True)
    err = capsys.readouterr().err.splitlines()
    assert err == [f"checkpoint_while: {k} steps so far" for k in (1, 2, 4, 8)] + [
        "checkpoint_while: stopped after 9 steps (cond false)"]
    checkpoint_while(lambda x, k: True, lambda x, k: x, x0, 2, max_steps=3, progress=True)
    assert capsys.readouterr().err.splitlines()[-1] == \
        "checkpoint_while: stopped after 3 steps (max_steps)"
    checkpoint_while(lambda x, k: k < 3, lambda x, k: x, x0, 2)
    assert capsys.readouterr().err == ""
    with pytest.raises(TypeError, match="checkpoint_while: progress must be True or False"):
        checkpoint_while(lambda x, k: k < 3, lambda x, k: x, x0, 2, progress="yes")


def test_endless_differentiated_loop_stops_at_the_schedule_limit(monkeypatch):
    # The limit itself (2**23 steps) takes minutes to reach: a lowered one shows the behaviour.
    import tessel.loops.online_checkpoint as cw
    monkeypatch.setattr(cw, "MAX_STEPS", 50)
    x0 = torch.ones(2, dtype=F64, requires_grad=True)
    with pytest.raises(ValueError, match=r"checkpoint_while: cond still true after 50 steps"):
        checkpoint_while(lambda x, k: True, lambda x, k: x * 0.5, x0, 3)
    with torch.no_grad():  # no schedule, no limit
        checkpoint_while(lambda x, k: k < 60, lambda x, k: x * 0.5, x0, 3)


# ---- argument checks ----------------------------------------------------------------------------
def test_checkpoint_loop_step_must_be_callable():
    with pytest.raises(TypeError, match="checkpoint_loop: step must be callable as "
                                        r"step\(state, k\), got int"):
        checkpoint_loop(42, torch.ones(2), 3, 2)


@pytest.mark.parametrize("grad", [True, False])
def test_absurd_counts_fail_at_once(grad):
    # n_steps = 2**62 used to end in std::bad_alloc after half a minute of building a schedule.
    x0 = torch.ones(2, dtype=F64, requires_grad=grad)
    step = lambda x, k: x * 0.5  # noqa: E731
    if grad:
        with pytest.raises(ValueError, match=r"checkpoint_loop: 4611686018427387904 steps to "
                                             r"differentiate, more than the largest supported"):
            checkpoint_loop(step, x0, 2 ** 62, 4)
    for fn in (lambda s: checkpoint_loop(step, x0, 3, s),
               lambda s: checkpoint_while(lambda x, k: k < 3, step, x0, s)):
        with pytest.raises(ValueError, match=r"snapshots must be an integer >= 1 \(and <= "
                                             r"MAX_STEPS = 8388608\), got 4611686018427387904"):
            fn(2 ** 62)
        with pytest.raises(ValueError, match="snapshots must be an integer >= 1"):
            fn(2.0)
    with pytest.raises(ValueError, match="checkpoint_loop: n_steps must be an integer >= 0"):
        checkpoint_loop(step, x0, -1, 2)


def test_no_grad_loop_builds_no_schedule(monkeypatch):
    import tessel.loops.checkpoint as cp
    monkeypatch.setattr(cp._core, "revolve_schedule", None)  # any use fails
    with torch.no_grad():
        out = checkpoint_loop(lambda x, k: x + 1, torch.zeros(2), 5, 2)
    assert out.tolist() == [5.0, 5.0]


# ---- checkpointed loops: steps that do not compute the same twice -------------------------------
def _numpy_noise_step(seed):
    rng = np.random.default_rng(seed)  # not a torch generator: nothing replays it

    def step(x, k):
        return torch.tanh(x) + 0.1 * torch.from_numpy(rng.standard_normal(x.shape))
    return step


def _global_step():
    calls = [0]

    def step(x, k):
        calls[0] += 1  # a global that changes between calls
        return torch.sin(x) + 1e-3 * calls[0]
    return step


LOOPS = [("loop", lambda step, x0, n, s, **kw: checkpoint_loop(step, x0, n, s, **kw)),
         ("while", lambda step, x0, n, s, **kw: checkpoint_while(lambda x, k: k < n, step, x0, s,
                                                                 **kw))]


@pytest.mark.parametrize("name,loop", LOOPS)
@pytest.mark.parametrize("make", [lambda: _numpy_noise_step(0), _global_step])
@pytest.mark.parametrize("n,s", [(2, 1), (10, 3), (30, 4), (12, 12)])
def test_nondeterministic_step_is_reported(name, loop, make, n, s):
    # The gradient used to be that of another trajectory, silently.
    x0 = torch.linspace(-1, 1, 5, dtype=F64, requires_grad=True)
    out = loop(make(), x0, n, s)
    with pytest.raises(RuntimeError, match=rf"checkpoint_{name}: step {n - 2}, run again in "
                                           "backward, gave a different state 0"):
        torch.autograd.grad(out.sum(), x0)


@pytest.mark.parametrize("name,loop", LOOPS)
@pytest.mark.parametrize("make", [lambda: _numpy_noise_step(0), _global_step])
def test_nondeterministic_step_is_reported_under_create_graph(name, loop, make):
    # The full recomputation (create_graph=True, or a second backward) used to skip the check:
    # a gradient 5 % off, silently.
    x0 = torch.linspace(-1, 1, 5, dtype=F64, requires_grad=True)
    out = loop(make(), x0, 10, 3)
    with pytest.raises(RuntimeError, match=rf"checkpoint_{name}: the loop, run again in backward "
                                           r"\(create_graph=True or a second backward\), ended "
                                           "in a different state 0"):
        torch.autograd.grad(out.sum(), x0, create_graph=True)
    out = loop(make(), x0, 10, 3, determinism_check="none")
    torch.autograd.grad(out.sum(), x0, create_graph=True)  # the caller's choice: no error


@pytest.mark.parametrize("name,loop", LOOPS)
def test_second_backward_checks_and_passes_deterministic_steps(name, loop):
    x0 = torch.linspace(-1, 1, 5, dtype=F64, requires_grad=True)
    out = loop(_global_step(), x0, 6, 6, determinism_check="none")
    torch.autograd.grad(out.sum(), x0, retain_graph=True)
    out = loop(lambda x, k: torch.sin(x) * 0.9, x0, 10, 3)
    (g1,) = torch.autograd.grad(out.sum(), x0, retain_graph=True)
    (g2,) = torch.autograd.grad(out.sum(), x0, create_graph=True)  # recomputed, checked, equal
    torch.testing.assert_close(g1, g2, rtol=1e-14, atol=0)
    (h,) = torch.autograd.grad(g2.sum(), x0)
    assert torch.isfinite(h).all()
    # A result the caller changed in place afterwards leaves nothing to compare: no false alarm.
    out = loop(lambda x, k: torch.sin(x) * 0.9, x0, 10, 3)
    z = out * 1.0
    with torch.no_grad():
        out.add_(1.0)
    torch.autograd.grad(z.sum(), x0, create_graph=True)


@pytest.mark.parametrize("name,loop", LOOPS)
def test_determinism_check_none_turns_the_comparison_off(name, loop):
    """As torch.utils.checkpoint's keyword: for steps that differ in the last bits on a GPU."""
    x0 = torch.linspace(-1, 1, 5, dtype=F64, requires_grad=True)
    out = loop(_global_step(), x0, 10, 3, determinism_check="none")
    torch.autograd.grad(out.sum(), x0)  # the caller's choice: no error
    with pytest.raises(ValueError, match="determinism_check must be 'default' or 'none'"):
        loop(_global_step(), x0, 10, 3, determinism_check=False)


@pytest.mark.parametrize("name,loop", LOOPS)
def test_deterministic_steps_pass_the_check(name, loop):
    # Dropout (replayed draws), a NaN in the state and an integer state are all the same twice.
    x0 = torch.linspace(-1, 1, 6, dtype=F64).requires_grad_()
    w = torch.full((6,), 0.5, dtype=F64, requires_grad=True)

    def step(state, k):
        x, c = state
        y = torch.nn.functional.dropout(torch.tanh(w * x), p=0.3, training=True) + 0.01 * k
        return torch.where(c == 0, y, torch.full_like(y, math.nan)), c + 1

    c0 = torch.tensor([0, 0, 0, 0, 0, 1])
    torch.manual_seed(3)
    out, c = loop(step, (x0, c0), 17, 3)
    assert torch.isnan(out[5]) and c.tolist() == [17] * 5 + [18]
    got = torch.autograd.grad(out[:5].sum(), (x0, w))
    torch.manual_seed(3)
    ref, cr = x0, c0
    for k in range(17):
        ref, cr = step((ref, cr), k)
    # The same operations on the same numbers: equal to rounding, NaN where autograd makes one.
    for g, r in zip(got, torch.autograd.grad(ref[:5].sum(), (x0, w))):
        torch.testing.assert_close(g, r, rtol=1e-12, atol=1e-12, equal_nan=True)


# ---- odeint_reversible with adaptive steps: NaN fields, blow-ups ---------------------------------
METHODS = ["reversible_heun", "dopri5"]
T02 = torch.tensor([0.0, 2.0], dtype=F64)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("where,f", [
    ("t=0, evaluation 1 ", lambda t, y: y * math.nan),
    (r"t=0\.5000000000", lambda t, y: torch.where(t < 0.5, -y, y * math.inf))])
def test_non_finite_field_ends_the_solve(method, where, f):
    # It used to reject every step until max_num_steps (1e6 attempts, a quarter of an hour).
    stats = {}
    with pytest.raises(ValueError, match=rf"odeint_reversible: f returned non-finite values "
                                         rf"\(nan or inf\) at {where}"):
        odeint_reversible(f, torch.ones(1, dtype=F64), T02, method=method, rtol=1e-6, atol=1e-8,
                          stats=stats)
    # Shrinking h by dfactor 0.2 from ~1e-2 to the floor 4 eps takes ~20 rejections in a row.
    assert stats["rejected"] <= 100 and stats["steps"] <= 1000


@pytest.mark.parametrize("method,rtol", [("reversible_heun", 1e-3), ("dopri5", 1e-6)])
def test_blow_up_hits_the_step_floor(method, rtol):
    # y' = y^2, y(0) = 1 blows up at t = 1: the steps shrink toward it until h < 4 eps |t|.
    stats = {}
    with pytest.raises(RuntimeError, match=r"odeint_reversible: step size .* at t=1\.00.* is "
                                           r"below the floor 4 \* eps"):
        odeint_reversible(lambda t, y: y * y, torch.ones(1, dtype=F64), T02, method=method,
                          rtol=rtol, atol=1e-8, stats=stats)
    assert stats["steps"] + stats["rejected"] < 100_000


@pytest.mark.parametrize("lam,rtol", [(100.0, 1e-6), (1e4, 1e-6), (100.0, 1e-3), (1.0, 1e-4)])
def test_reversible_heun_on_a_contracting_field_says_stiff_early(lam, rtol):
    # y' = -lam (y - cos t): its parasitic mode grows like exp(lam t) and shrinks the steps until
    # max_num_steps (a million steps, minutes, at lam = 100). Now: a few thousand steps.
    stats = {}
    t = torch.tensor([0.0, 10.0], dtype=F64)
    with pytest.raises(RuntimeError, match=r"odeint_reversible: the field looks stiff for "
                                           r"reversible Heun .* would take about .* steps, "
                                           r"beyond options\['max_num_steps'\] = 1000000\. "
                                           "Use method='dopri5'"):
        odeint_reversible(lambda s, y: -lam * (y - torch.cos(s)), torch.zeros(3, dtype=F64), t,
                          rtol=rtol, atol=rtol * 1e-2, stats=stats)
    assert stats["steps"] + stats["rejected"] < 5000
    if lam > 100:
        return  # dopri5 too is stability-bound there: 3e4 steps at lam = 1e4
    # dopri5 solves it, to the tolerance, in few steps.
    stats = {}
    y = odeint_reversible(lambda s, y: -lam * (y - torch.cos(s)), torch.zeros(3, dtype=F64), t,
                          method="dopri5", rtol=1e-6, atol=1e-8, stats=stats)
    c = lam / (1 + lam * lam)  # y(t) = c (lam cos t + sin t) - c lam exp(-lam t)
    exact = c * (lam * math.cos(10.0) + math.sin(10.0)) - c * lam * math.exp(-lam * 10.0)
    assert abs(float(y[-1, 0]) - exact) < 1e-4 and stats["steps"] < 5000


def test_reversible_heun_finishes_what_its_budget_can():
    # Dissipative but short: its error estimates alternate, yet the steps do not fall fast
    # enough to pass the budget, so the solve runs to the end as before.
    stats = {}
    t = torch.linspace(0.0, 5.0, 3, dtype=F64)
    y = odeint_reversible(lambda s, y: -y, torch.ones(2, dtype=F64), t, rtol=1e-3, atol=1e-5,
                          stats=stats)
    torch.testing.assert_close(y[:, 0], torch.exp(-t), rtol=0, atol=1e-2)
    # A small budget with the same field: the projection now passes it, so it stops early.
    with pytest.raises(RuntimeError, match="looks stiff for reversible Heun"):
        odeint_reversible(lambda s, y: -y, torch.ones(2, dtype=F64), t, rtol=1e-3, atol=1e-5,
                          options={"max_num_steps": 1000})


@pytest.mark.parametrize("method", METHODS)
def test_overflow_of_a_too_large_step_is_retried(method):
    # The first step of 1e40 overflows f (y^9 of a stage near -1e40) from a finite stage; a
    # smaller step cures it, so it is no error.
    stats = {}
    y = odeint_reversible(lambda t, y: -y ** 9, torch.ones(1, dtype=F64), T02, method=method,
                          rtol=1e-8, atol=1e-10, options={"first_step": 1e40}, stats=stats)
    assert stats["rejected"] >= 1
    # y = (1 + 8 t)^(-1/8); a global error of 1e-5 is ~1000 times the local tolerance.
    torch.testing.assert_close(y[-1], torch.tensor([17.0 ** -0.125], dtype=F64), rtol=1e-5,
                               atol=0)


def test_odeint_counts_and_initial_state_are_checked():
    f = lambda t, y: -y  # noqa: E731
    y0 = torch.ones(1, dtype=F64)
    with pytest.raises(ValueError, match="odeint_reversible: y0 holds non-finite values"):
        odeint_reversible(f, y0 * math.nan, T02, rtol=1e-6)
    with pytest.raises(ValueError, match=r"odeint_reversible: step_size=1e-300 makes more than"):
        odeint_reversible(f, y0, T02, step_size=1e-300)
    with pytest.raises(ValueError, match=r"odeint_reversible: 4611686018427387904 fixed steps"):
        odeint_reversible(f, y0, T02, steps_per_interval=2 ** 62)
    with pytest.raises(ValueError, match=r"odeint_reversible: 16777216 fixed steps, more than "
                                         r"the 8388608 supported in an interval \(dopri5"):
        odeint_reversible(f, y0, T02, method="dopri5", steps_per_interval=2 ** 24)
    with pytest.raises(TypeError, match="odeint_reversible: f must be callable"):
        odeint_reversible(42, y0, T02)
