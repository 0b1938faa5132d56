"""odeint_reversible: gradients equal autograd through the same iteration; order, reconstruction,
memory, errors."""
import math

import pytest
import torch

from tessel.loops.memory import run_isolated
from tessel.torch import odeint_reversible

F64 = torch.float64
TOL = 1e-9


def unrolled(f, y0, t, counts):
    """Reversible Heun written out plainly, every step kept on autograd's tape: the reference.
    The grid formula matches the solver's so both run the very same floating-point iteration."""
    pieces = [t[k] + (t[k + 1] - t[k]) * (torch.arange(m, dtype=t.dtype) / m)
              for k, m in enumerate(counts)]
    grid = torch.cat(pieces + [t[-1:]])
    is_tuple = isinstance(y0, tuple)
    y = z = y0 if is_tuple else (y0,)
    call = (lambda s, x: tuple(f(s, x))) if is_tuple else (lambda s, x: (f(s, x[0]),))
    F = call(grid[0], z)
    rows, n = [y], 0
    for m in counts:
        for _ in range(m):
            h = grid[n + 1] - grid[n]
            z1 = tuple(2 * a - b + c * h for a, b, c in zip(y, z, F))
            F1 = call(grid[n + 1], z1)
            y = tuple(a + (c + d) * (h / 2) for a, c, d in zip(y, F, F1))
            z, F, n = z1, F1, n + 1
        rows.append(y)
    outs = tuple(torch.stack(r) for r in zip(*rows))
    return outs if is_tuple else outs[0]


def mlp_field(d=3, width=16, scale=1.0, dtype=F64):
    net = torch.nn.Sequential(torch.nn.Linear(d + 1, width), torch.nn.Tanh(),
                              torch.nn.Linear(width, d)).to(dtype)
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(scale)

    def f(t, y):  # time-dependent, so the gradient in t goes through f as well as the steps
        return net(torch.cat([y, t.expand(*y.shape[:-1], 1)], dim=-1))

    return f, list(net.parameters())


def linear_field(d=3):
    A = (0.7 * torch.randn(d, d, dtype=F64)).requires_grad_()
    b = torch.randn(d, dtype=F64, requires_grad=True)
    return (lambda t, y: y @ A.T + b * torch.cos(t)), [A, b]


def assert_all_close(got, ref, tol=TOL):
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=tol, atol=tol)


@pytest.mark.parametrize("field", ["mlp", "linear"])
@pytest.mark.parametrize("m", [1, 2, 9])
def test_gradients_match_unrolled(field, m):
    f, params = mlp_field() if field == "mlp" else linear_field()
    y0 = torch.randn(5, 3, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 0.2, 0.7, 0.8, 1.5], dtype=F64, requires_grad=True)
    c = torch.randn(len(t), 5, 3, dtype=F64)  # a cotangent on every output time
    inputs = [y0, t, *params]
    ref_out = unrolled(f, y0, t, [m] * 4)
    ref = torch.autograd.grad((ref_out * c).sum(), inputs)
    stats = {}
    out = odeint_reversible(f, y0, t, steps_per_interval=m, params=params, stats=stats)
    assert out.shape == (5, 5, 3)
    torch.testing.assert_close(out, ref_out, rtol=TOL, atol=TOL)
    assert_all_close(torch.autograd.grad((out * c).sum(), inputs), ref)
    n = 4 * m
    assert stats["steps"] == n and stats["backward"] == "reversible"
    # One evaluation of f per step and one more for the start, forward and backward alike.
    assert stats["nfe_forward"] == stats["nfe_backward"] == stats["vjp_backward"] == n + 1
    assert stats["reconstruction_error"] < 1e-12


def test_cotangent_on_some_outputs_only():
    f, params = mlp_field()
    y0 = torch.randn(4, 3, dtype=F64, requires_grad=True)
    t = torch.linspace(0, 2, 6, dtype=F64)
    loss = lambda out: out[1].sin().sum() + out[4].square().sum()  # noqa: E731
    ref = torch.autograd.grad(loss(unrolled(f, y0, t, [3] * 5)), [y0, *params])
    got = torch.autograd.grad(loss(odeint_reversible(f, y0, t, steps_per_interval=3,
                                                     params=params)), [y0, *params])
    assert_all_close(got, ref)


def test_tuple_state_decreasing_t_and_step_size():
    w = torch.randn(3, dtype=F64, requires_grad=True)

    def f(t, state):  # a damped pendulum-like pair with states of different shapes
        x, v = state
        return v.mean(-1), -torch.sin(w * x)[..., None] - 0.1 * v

    x0 = torch.randn(3, dtype=F64, requires_grad=True)
    v0 = torch.randn(3, 2, dtype=F64, requires_grad=True)
    t = torch.tensor([1.0, 0.55, -0.3], dtype=F64)
    counts = [math.ceil(0.45 / 0.1), math.ceil(0.85 / 0.1)]  # 5 and 9 steps of size <= 0.1
    cx, cv = torch.randn(3, 3, dtype=F64), torch.randn(3, 3, 2, dtype=F64)
    rx, rv = unrolled(f, (x0, v0), t, counts)
    ref = torch.autograd.grad((rx * cx).sum() + (rv * cv).sum(), [x0, v0, w])
    stats = {}
    out = odeint_reversible(f, (x0, v0), t, step_size=0.1, params=[w], stats=stats)
    assert isinstance(out, tuple) and out[0].shape == (3, 3) and out[1].shape == (3, 3, 2)
    assert stats["steps"] == sum(counts) == 14
    got = torch.autograd.grad((out[0] * cx).sum() + (out[1] * cv).sum(), [x0, v0, w])
    assert_all_close(got, ref)


def test_module_parameters_by_default_and_backward_accumulates():
    class Field(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4).double()

        def forward(self, t, y):
            return torch.tanh(self.lin(y))

    field = Field()
    y0 = torch.randn(2, 4, dtype=F64, requires_grad=True)
    t = torch.linspace(0, 1, 3, dtype=F64)
    params = list(field.parameters())
    ref = torch.autograd.grad(unrolled(field, y0, t, [5, 5]).square().sum(), [y0, *params])
    odeint_reversible(field, y0, t, steps_per_interval=5).square().sum().backward()
    assert_all_close([y0.grad, *[p.grad for p in params]], ref)


def test_second_order_convergence():
    # y' = A y, a decaying rotation: y(T) = exp(A T) y0.
    A = torch.tensor([[-0.3, 2.0], [-2.0, -0.1]], dtype=F64)
    y0 = torch.tensor([1.0, 0.5], dtype=F64)
    t = torch.tensor([0.0, 2.0], dtype=F64)
    exact = torch.matrix_exp(2.0 * A) @ y0
    errs = [float((odeint_reversible(lambda s, y: A @ y, y0, t, steps_per_interval=m)[-1]
                   - exact).norm()) for m in (20, 40, 80, 160)]
    ratios = [a / b for a, b in zip(errs, errs[1:])]  # measured: 4.07, 4.02, 4.00
    assert all(3.7 < r < 4.3 for r in ratios), ratios
    assert errs[-1] < 1e-3


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-8), (torch.float32, 1e-3)])
def test_reconstruction_error_after_1000_steps(dtype, tol):
    # Measured (max |y0_rec - y0| / max |y0|, this field and seed, |y| up to 9): float64
    # 2.0e-14 (6.0e-14 absolute), float32 5.4e-6 (1.3e-5 absolute). The float32 bound only
    # guards against a blow-up.
    f, params = mlp_field(d=4, width=32, scale=1.5, dtype=dtype)
    y0 = torch.randn(16, 4, dtype=dtype, requires_grad=True)
    t = torch.tensor([0.0, 5.0], dtype=dtype)
    stats = {}
    out = odeint_reversible(f, y0, t, steps_per_interval=1000, params=params, stats=stats)
    out[-1].square().sum().backward()
    assert stats["steps"] == 1000 and stats["nfe_backward"] == 1001
    assert stats["reconstruction_error_rel"] < tol, stats
    assert torch.isfinite(y0.grad).all()


def test_double_backward_falls_back_to_the_stored_graph():
    f, params = mlp_field()
    y0 = torch.randn(3, 3, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 0.5, 1.0], dtype=F64)

    def grad_norm(out, stats):
        g, = torch.autograd.grad(out.sin().sum(), y0, create_graph=True)
        assert stats.get("backward", "stored") == "stored"
        # The cotangent cos(out) depends on out, so this pass also runs a first-order backward
        # of the solve: the reversible one.
        return torch.autograd.grad(g.square().sum(), [y0, *params])

    ref = grad_norm(unrolled(f, y0, t, [4, 4]), {})
    stats = {}
    got = grad_norm(odeint_reversible(f, y0, t, steps_per_interval=4, params=params,
                                      stats=stats), stats)
    assert stats["backward"] == "reversible"
    assert_all_close(got, ref)


def test_backward_can_run_twice():
    f, params = linear_field()
    y0 = torch.randn(3, dtype=F64, requires_grad=True)
    out = odeint_reversible(f, y0, torch.linspace(0, 1, 4, dtype=F64), params=params)
    loss = out.square().sum()
    first = torch.autograd.grad(loss, [y0, *params], retain_graph=True)
    assert_all_close(torch.autograd.grad(loss, [y0, *params]), first, tol=1e-14)


def test_single_time_no_grad_and_float32():
    y0 = torch.randn(2, 3, dtype=F64, requires_grad=True)
    out = odeint_reversible(lambda t, y: -y, y0, torch.zeros(1, dtype=F64))
    assert out.shape == (1, 2, 3)
    y0.grad = None
    out.sum().backward()
    torch.testing.assert_close(y0.grad, torch.ones_like(y0))
    with torch.no_grad():
        out = odeint_reversible(lambda t, y: -y, y0, torch.linspace(0, 1, 3, dtype=F64))
    assert not out.requires_grad
    y32 = torch.randn(4, dtype=torch.float32, requires_grad=True)
    out = odeint_reversible(lambda t, y: torch.cos(y), y32, torch.linspace(0, 1, 3),
                            steps_per_interval=10)
    assert out.dtype == torch.float32
    g, = torch.autograd.grad(out.sum(), y32)
    ref, = torch.autograd.grad(unrolled(lambda t, y: torch.cos(y), y32,
                                        torch.linspace(0, 1, 3), [10, 10]).sum(), y32)
    torch.testing.assert_close(g, ref, rtol=1e-5, atol=1e-5)


_MEMORY_SETUP = """
import torch
from tessel.torch import odeint_reversible
torch.manual_seed(0)
D, H = 16, 32
W1 = (0.3 * torch.randn(D, H, dtype=torch.float64)).requires_grad_()
W2 = (0.3 * torch.randn(H, D, dtype=torch.float64)).requires_grad_()
t = torch.tensor([0.0, 1.0], dtype=torch.float64)

def f(s, y):
    return torch.tanh(y @ W1) @ W2

def plain(y0, m):  # reversible Heun with the graph of every step stored
    h = (t[1] - t[0]) / m
    y = z = y0
    F = f(t[0], z)
    for n in range(m):
        z1 = 2 * y - z + F * h
        F1 = f(t[0] + (n + 1) * h, z1)
        y = y + (F + F1) * (h / 2)
        z, F = z1, F1
    return y

def reversible(y0, m):
    return odeint_reversible(f, y0, t, steps_per_interval=m, params=[W1, W2])[-1]

# Warm up on a tiny state so one-time allocations (autograd engine, kernels) stay out of the
# measurement.
_tiny = torch.randn(4, D, dtype=torch.float64, requires_grad=True)
plain(_tiny, 3).sum().backward()
reversible(_tiny, 3).sum().backward()
y0 = torch.randn(2048, D, dtype=torch.float64, requires_grad=True)  # 256 KiB
"""


def test_memory_constant_in_the_number_of_steps():
    # A single thread: on a shared 2-core machine intra-op threads make each step far slower.
    peak = {(kind, m): run_isolated(_MEMORY_SETUP, f"{kind}(y0, {m}).square().sum().backward()",
                                    threads=1, timeout=120)["peak_bytes"] / 2**20
            for kind in ("plain", "reversible") for m in (50, 400)}
    # Measured peak rises (MiB), 50 -> 400 steps: plain 52 -> 401, reversible 5.6 -> 5.8. The
    # state is 0.25 MiB and f's hidden layer 0.5 MiB: the plain graph costs ~1 MiB a step.
    plain_growth = peak["plain", 400] - peak["plain", 50]
    assert plain_growth > 150, peak
    assert peak["reversible", 400] - peak["reversible", 50] < 0.05 * plain_growth, peak
    assert peak["reversible", 400] < 0.5 * peak["plain", 50], peak


def test_errors():
    y0 = torch.randn(3, dtype=F64)
    t = torch.linspace(0, 1, 3, dtype=F64)
    f = lambda s, y: -y  # noqa: E731
    with pytest.raises(ValueError, match="odeint_reversible: t must be a 1-D"):
        odeint_reversible(f, y0, t[None])
    with pytest.raises(ValueError, match="odeint_reversible: t must hold at least 1"):
        odeint_reversible(f, y0, t[:0])
    with pytest.raises(ValueError, match="strictly increasing or strictly decreasing"):
        odeint_reversible(f, y0, torch.tensor([0.0, 1.0, 1.0], dtype=F64))
    with pytest.raises(ValueError, match="strictly increasing or strictly decreasing"):
        odeint_reversible(f, y0, torch.tensor([0.0, 1.0, 0.5], dtype=F64))
    with pytest.raises(ValueError, match="non-finite"):
        odeint_reversible(f, y0, torch.tensor([0.0, float("nan")], dtype=F64))
    with pytest.raises(TypeError, match="odeint_reversible: t must be a floating-point"):
        odeint_reversible(f, y0, torch.arange(3))
    with pytest.raises(TypeError, match="odeint_reversible: t must be a 1-D torch.Tensor"):
        odeint_reversible(f, y0, [0.0, 1.0])
    with pytest.raises(TypeError, match="odeint_reversible: y0 must be floating-point"):
        odeint_reversible(f, torch.arange(3), t)
    with pytest.raises(TypeError, match=r"odeint_reversible: y0\[1\] is a list"):
        odeint_reversible(f, (y0, [1.0]), t)
    with pytest.raises(ValueError, match="f returned shape \\(2,\\).*expected shape \\(3,\\)"):
        odeint_reversible(lambda s, y: y[:2], y0, t)
    with pytest.raises(ValueError, match="f returned shape \\(3,\\), torch.float32"):
        odeint_reversible(lambda s, y: y.float(), y0, t)
    with pytest.raises(ValueError, match="odeint_reversible: f returned a tuple"):
        odeint_reversible(lambda s, y: (y,), y0, t)
    with pytest.raises(ValueError, match="expected a tuple of 2 tensors"):
        odeint_reversible(lambda s, y: y[0], (y0, y0), t)
    with pytest.raises(ValueError, match="not both"):
        odeint_reversible(f, y0, t, step_size=0.1, steps_per_interval=2)
    with pytest.raises(ValueError, match="steps_per_interval must be an integer >= 1"):
        odeint_reversible(f, y0, t, steps_per_interval=0)
    with pytest.raises(ValueError, match="step_size must be a finite number > 0"):
        odeint_reversible(f, y0, t, step_size=-0.1)
    with pytest.raises(TypeError, match=r"odeint_reversible: params\[0\]"):
        odeint_reversible(f, y0, t, params=[1.0])
    with pytest.raises(TypeError, match="odeint_reversible: f must be callable"):
        odeint_reversible(None, y0, t)
