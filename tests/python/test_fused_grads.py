"""Gradients of several inputs on the same side come from one fused reduction, with the values,
higher derivatives and broadcasting of separate ones."""
import pytest
import torch

import tessel._torch_autograd as ta
from tessel.torch import Genred

HAM = "Exp(-G*SqDist(Qi,Qj)) * (Pi|Pj)"
HAM_ALIASES = ["Qi = Vi(3)", "Qj = Vj(3)", "Pi = Vi(3)", "Pj = Vj(3)", "G = Pm(1)"]


@pytest.fixture
def count_reductions(monkeypatch):
    """Counts the reductions GenredFunction runs (each is one kernel pass over the pairs)."""
    calls = []
    original = ta.GenredFunction.apply

    def apply(reduction, options, *args):
        calls.append(str(reduction))
        return original(reduction, options, *args)

    monkeypatch.setattr(ta.GenredFunction, "apply", staticmethod(apply))
    return calls


def dense_hamiltonian(q, p, g):
    k = torch.exp(-g * ((q[:, None, :] - q[None, :, :]) ** 2).sum(-1))
    return 0.5 * (k * (p @ p.T)).sum()


def test_hamiltonian_gradients_take_two_fused_passes(count_reductions):
    torch.manual_seed(0)
    q = torch.rand(40, 3, dtype=torch.float64, requires_grad=True)
    p = torch.rand(40, 3, dtype=torch.float64, requires_grad=True)
    g = torch.tensor([20.0], dtype=torch.float64)
    h = 0.5 * Genred(HAM, HAM_ALIASES)(q, q, p, p, g).sum()
    dq, dp = torch.autograd.grad(h, (q, p), create_graph=True)
    # One forward pass, then one pass for (Qi, Pi) and one for (Qj, Pj), not four.
    assert len(count_reductions) == 3, count_reductions
    assert "Concat" in count_reductions[1] and "Concat" in count_reductions[2]
    hd = dense_hamiltonian(q, p, g)
    dqd, dpd = torch.autograd.grad(hd, (q, p), create_graph=True)
    torch.testing.assert_close(dq, dqd, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dp, dpd, rtol=1e-12, atol=1e-12)
    # Through the split of the fused output, second derivatives as the dense ones.
    s, sd = (dq ** 2).sum() + (dp * q).sum(), (dqd ** 2).sum() + (dpd * q).sum()
    for a, b in zip(torch.autograd.grad(s, (q, p)), torch.autograd.grad(sd, (q, p))):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def test_fused_gradients_pass_gradcheck():
    torch.manual_seed(1)
    q = torch.rand(12, 3, dtype=torch.float64, requires_grad=True)
    p = torch.rand(12, 3, dtype=torch.float64, requires_grad=True)
    g = torch.tensor([5.0], dtype=torch.float64)
    fn = Genred(HAM, HAM_ALIASES)
    assert torch.autograd.gradcheck(lambda q, p: fn(q, q, p, p, g), (q, p))
    assert torch.autograd.gradgradcheck(lambda q, p: fn(q, q, p, p, g).sum(), (q, p))


def test_some_inputs_without_grad_and_batches(count_reductions):
    """Only the inputs that need a gradient are fused; batch dimensions sum back as before."""
    torch.manual_seed(2)
    x = torch.rand(2, 30, 3, dtype=torch.float64, requires_grad=True)
    y = torch.rand(1, 25, 3, dtype=torch.float64, requires_grad=True)
    b = torch.rand(2, 25, 2, dtype=torch.float64, requires_grad=True)
    u = torch.rand(2, 30, 2, dtype=torch.float64)
    f = Genred("Exp(-SqDist(X,Y)) * B * (U|B)", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(2)",
                                                  "U = Vi(2)"])
    out = f(x, y, b, u)
    w = torch.rand_like(out)
    gx, gy, gb = torch.autograd.grad(out, (x, y, b), w)
    assert len(count_reductions) == 3  # forward, x alone (u needs none), (y, b) fused
    k = torch.exp(-((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1))
    bb = b.expand(2, 25, 2)
    dense = (k[..., None] * bb[:, None, :, :] * (u[:, :, None, :] * bb[:, None, :, :])
             .sum(-1, keepdim=True)).sum(2)
    want = torch.autograd.grad(dense, (x, y, b), w)
    for a, e in zip((gx, gy, gb), want):
        assert a.shape == e.shape
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-12)


def test_non_sum_gradients_are_not_fused():
    """A gradient that is not a plain Sum keeps its own reduction (and its value)."""
    torch.manual_seed(3)
    x = torch.rand(20, 2, dtype=torch.float64, requires_grad=True)
    y = torch.rand(15, 2, dtype=torch.float64, requires_grad=True)
    b = torch.rand(15, 1, dtype=torch.float64, requires_grad=True)
    f = Genred("-SqDist(X,Y) + B", ["X = Vi(2)", "Y = Vj(2)", "B = Vj(1)"],
               reduction_op="LogSumExp")
    out = f(x, y, b)
    gy, gb = torch.autograd.grad(out.sum(), (y, b))
    d = -((x[:, None, :] - y[None, :, :]) ** 2).sum(-1) + b[:, 0][None, :]
    wy, wb = torch.autograd.grad(torch.logsumexp(d, dim=1).sum(), (y, b))
    torch.testing.assert_close(gy, wy, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gb, wb, rtol=1e-12, atol=1e-12)


def test_gradients_without_the_other_side_variables_stay_separate(count_reductions):
    """d/dY and d/dB of Sum_j <X, Y> + B read no j variable (E * X and E): fused, they would lose
    the j rows, so each keeps its own reduction and the values are right."""
    torch.manual_seed(4)
    x = torch.rand(6, 3, dtype=torch.float64, requires_grad=True)
    y = torch.rand(9, 3, dtype=torch.float64, requires_grad=True)
    b = torch.rand(9, 1, dtype=torch.float64, requires_grad=True)
    out = Genred("(X|Y) + B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)"])(x, y, b)
    w = torch.rand_like(out)
    gy, gb = torch.autograd.grad(out, (y, b), w)
    dense = ((x[:, None, :] * y[None, :, :]).sum(-1) + b[:, 0][None, :]).sum(1, keepdim=True)
    wy, wb = torch.autograd.grad(dense, (y, b), w)
    torch.testing.assert_close(gy, wy, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(gb, wb, rtol=1e-12, atol=1e-12)
    assert not any("Concat" in r for r in count_reductions[1:])
