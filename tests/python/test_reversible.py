"""ReversibleCoupling: gradients equal plain autograd to any order; inverse, memory, errors."""
import os

import pytest
import torch
from torch import nn

from tessel.loops.memory import run_isolated
from tessel.torch import ReversibleCoupling

DT = torch.float64
TOL = 1e-10
MODES = [("additive", "exp"), ("affine", "exp"), ("affine", "sigmoid")]
IDS = ["additive", "affine-exp", "affine-sigmoid"]


class MLP(nn.Module):
    """A small branch network: half -> `out` channels."""

    def __init__(self, half, out, hidden=12, pair=False):
        super().__init__()
        self.l1, self.l2, self.pair = nn.Linear(half, hidden), nn.Linear(hidden, out), pair
        with torch.no_grad():
            self.l2.weight.mul_(0.5)

    calls = 0

    def forward(self, x):
        MLP.calls += 1
        out = self.l2(torch.tanh(self.l1(x)))
        return tuple(out.chunk(2, dim=1)) if self.pair else out


def make_stack(depth, half=3, mode="additive", scale="exp", **kw):
    """Couplings alternating between the two affine conventions (one tensor / a pair)."""
    out = half if mode == "additive" else 2 * half
    blocks = [ReversibleCoupling(MLP(half, out, pair=mode == "affine" and k % 2 == 1),
                                 MLP(half, out, pair=mode == "affine" and k % 2 == 1),
                                 mode=mode, scale=scale, **kw) for k in range(depth)]
    return nn.Sequential(*blocks).to(DT)


def deep_case(mode, scale, free, rows):
    """A 20-block stack, an input x (rows, 6) that wants gradients, a cotangent c for the output
    and the stack's parameters."""
    net = make_stack(20, mode=mode, scale=scale, free_inputs=free)
    x = torch.randn(rows, 6, dtype=DT, requires_grad=True)
    return net, x, torch.randn(rows, 6, dtype=DT), list(net.parameters())


def set_reversible(net, flag):
    for b in net:
        b.reversible = flag


def both(net, fn):
    """fn() run through the reversible blocks, then through plain autograd."""
    set_reversible(net, True)
    got = fn()
    set_reversible(net, False)
    ref = fn()
    set_reversible(net, True)
    return got, ref


def assert_all_close(got, ref, tol=TOL):
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=tol, atol=tol)


@pytest.mark.parametrize("free", [True, False], ids=["free", "keep"])
@pytest.mark.parametrize("mode,scale", MODES, ids=IDS)
def test_autograd_grad_matches_plain_for_a_deep_stack(mode, scale, free):
    net, x, c, params = deep_case(mode, scale, free, rows=8)

    def run():
        out = net(x)
        return (out,) + torch.autograd.grad((out * c).sum(), [x] + params)

    got, ref = both(net, run)
    assert_all_close(got, ref)
    assert x.shape == (8, 6) and x.grad is None and all(p.grad is None for p in params)


@pytest.mark.parametrize("mode,scale", MODES, ids=IDS)
def test_backward_accumulates_like_plain(mode, scale):
    net = make_stack(20, mode=mode, scale=scale)
    x = torch.randn(5, 6, dtype=DT, requires_grad=True)

    def run():
        x.grad = None
        net.zero_grad(set_to_none=True)
        (net(x).sin().sum()).backward()
        return [x.grad] + [p.grad for p in net.parameters()]

    got, ref = both(net, run)
    assert_all_close(got, ref)


@pytest.mark.parametrize("free", [True, False], ids=["free", "keep"])
@pytest.mark.parametrize("mode,scale", MODES, ids=IDS)
def test_double_backward_matches_plain(mode, scale, free):
    net, x, c, params = deep_case(mode, scale, free, rows=6)

    def run():
        # The loss's gradient depends on the output, so the second pass crosses the blocks'
        # ordinary (reversible) backward as well as the create_graph one.
        loss = (net(x).pow(2) * c).sum()
        g = torch.autograd.grad(loss, [x] + params, create_graph=True)
        norm = sum(gi.pow(2).sum() for gi in g)
        return g + torch.autograd.grad(norm, [x] + params)

    got, ref = both(net, run)
    assert_all_close(got, ref)


@pytest.mark.parametrize("mode,scale", MODES, ids=IDS)
def test_inverse_recovers_the_input(mode, scale):
    net = make_stack(10, mode=mode, scale=scale)
    x = torch.randn(7, 6, dtype=DT)
    y = net(x)
    for b in reversed(net):
        y = b.inverse(y)
    torch.testing.assert_close(y, x, rtol=1e-12, atol=1e-12)


def test_four_dimensional_input_with_convolutions():
    conv = lambda: nn.Conv2d(2, 2, 3, padding=1)  # noqa: E731
    net = nn.Sequential(*[ReversibleCoupling(conv(), conv()) for _ in range(4)]).to(DT)
    x = torch.randn(2, 4, 5, 5, dtype=DT, requires_grad=True)
    params = list(net.parameters())
    got, ref = both(net, lambda: torch.autograd.grad(net(x).pow(2).sum(), [x] + params))
    assert_all_close(got, ref)
    torch.testing.assert_close(net[0].inverse(net[0](x)), x, rtol=1e-12, atol=1e-12)


def test_shared_branch_module_and_frozen_or_constant_inputs():
    f = MLP(3, 3)
    net = nn.Sequential(*[ReversibleCoupling(f, f) for _ in range(5)]).to(DT)
    x = torch.randn(4, 6, dtype=DT)  # no grad: only the (shared) parameters need one
    params = list(net.parameters())
    assert len(params) == 4
    got, ref = both(net, lambda: torch.autograd.grad(net(x).pow(2).sum(), params))
    assert_all_close(got, ref)
    for p in params:  # frozen parameters: only x needs a gradient
        p.requires_grad_(False)
    xg = x.clone().requires_grad_()
    got, ref = both(net, lambda: torch.autograd.grad(net(xg).pow(2).sum(), [xg]))
    assert_all_close(got, ref)


def test_each_branch_runs_once_in_forward_and_once_in_backward():
    net = make_stack(10, mode="affine")
    x = torch.randn(4, 6, dtype=DT, requires_grad=True)
    MLP.calls = 0
    out = net(x)
    assert MLP.calls == 20
    torch.autograd.grad(out.sum(), [x] + list(net.parameters()))
    assert MLP.calls == 40


def test_one_block_applied_repeatedly():
    block = ReversibleCoupling(MLP(3, 6), MLP(3, 6, pair=True), mode="affine").to(DT)
    net = nn.Sequential(*[block] * 6)
    x = torch.randn(4, 6, dtype=DT, requires_grad=True)
    params = list(block.parameters())
    got, ref = both(net, lambda: torch.autograd.grad(net(x).pow(2).sum(), [x] + params))
    assert_all_close(got, ref)


def test_retain_graph_gives_the_same_gradients_twice():
    net = make_stack(8, mode="affine")
    x = torch.randn(4, 6, dtype=DT, requires_grad=True)
    params = list(net.parameters())
    loss = net(x).pow(2).sum()
    first = torch.autograd.grad(loss, [x] + params, retain_graph=True)
    second = torch.autograd.grad(loss, [x] + params)
    assert_all_close(first, second, tol=1e-13)


def test_free_inputs_empties_only_coupling_outputs():
    net = make_stack(3)
    x = torch.randn(4, 6, dtype=DT, requires_grad=True)
    h1 = net[0](x)
    h2 = net[1](h1)
    out = net[2](h2)
    assert x.shape == (4, 6) and out.shape == (4, 6)  # the model input and the last output stay
    assert h1.numel() == 0 and h2.numel() == 0  # taken and freed by the next coupling
    got = torch.autograd.grad(out.pow(2).sum(), [x] + list(net.parameters()))
    set_reversible(net, False)
    ref = torch.autograd.grad(net(x).pow(2).sum(), [x] + list(net.parameters()))
    assert_all_close(got, ref)

    keep = make_stack(3, free_inputs=False)
    h1 = keep[0](x)
    out = keep[2](keep[1](h1))
    assert h1.shape == (4, 6)
    got = torch.autograd.grad(out.sum(), [x, h1])
    assert got[1].shape == (4, 6)


def test_no_grad_and_plain_forward_agree():
    net = make_stack(6, mode="affine")
    x = torch.randn(3, 6, dtype=DT)
    with torch.no_grad():
        y = net(x)
    assert y.grad_fn is None
    set_reversible(net, False)
    torch.testing.assert_close(net(x), y, rtol=0, atol=0)
    assert "mode='affine'" in repr(net[0])


@pytest.mark.parametrize("scale", ["exp", "sigmoid"])
def test_affine_scale_is_positive_and_finite_by_construction(scale):
    class Huge(nn.Module):
        def forward(self, x):
            return torch.cat([1e4 * torch.sign(x), x], dim=1)  # scale logits of +-1e4

    block = ReversibleCoupling(Huge(), Huge(), mode="affine", scale=scale, log_scale_bound=3.0)
    x = torch.randn(5, 4, dtype=DT)
    y = block(x)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(block.inverse(y), x, rtol=1e-12, atol=1e-12)
    s = block._scale_of(torch.tensor([-1e300, 0.0, 1e300], dtype=DT))
    assert (s > 0).all() and torch.isfinite(s).all() and (s <= torch.exp(torch.tensor(3.0))).all()


def test_bad_inputs_name_the_function_and_the_shape():
    block = ReversibleCoupling(MLP(3, 3), MLP(3, 3)).to(DT)
    for bad in [torch.zeros(4, 5, dtype=DT), torch.zeros(6, dtype=DT),
                torch.zeros(4, 0, dtype=DT)]:
        with pytest.raises(ValueError, match=r"ReversibleCoupling\.forward: x has shape"):
            block(bad)
    with pytest.raises(ValueError, match=r"ReversibleCoupling\.inverse: y has shape \(4, 5\)"):
        block.inverse(torch.zeros(4, 5, dtype=DT))
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        block([[1.0] * 6])
    with pytest.raises(TypeError, match="floating-point"):
        block(torch.zeros(2, 6, dtype=torch.int64))


def test_branches_that_change_the_shape_are_rejected():
    x = torch.randn(4, 6, dtype=DT, requires_grad=True)
    with pytest.raises(ValueError, match=r"F returned shape \(4, 4\).*expected shape \(4, 3\)"):
        ReversibleCoupling(MLP(3, 4), MLP(3, 3)).to(DT)(x)
    with pytest.raises(ValueError, match=r"G returned shape \(4, 3\).*affine mode expected "
                                         r"shape \(4, 6\)"):
        ReversibleCoupling(MLP(3, 6), MLP(3, 3), mode="affine").to(DT)(x)
    class Single(nn.Module):
        def forward(self, x):
            return x.float()

    with pytest.raises(ValueError, match=r"F returned shape \(4, 3\), torch.float32.*expected "
                                         r"shape \(4, 3\), torch.float64"):
        ReversibleCoupling(Single(), Single())(x)

    class Three(nn.Module):
        def forward(self, x):
            return x, x, x

    with pytest.raises(ValueError, match="F returned 3 tensors"):
        ReversibleCoupling(Three(), Three(), mode="affine")(x)


def test_bad_construction_arguments():
    f = MLP(3, 3)
    with pytest.raises(TypeError, match="ReversibleCoupling: F is a function; expected a "
                                        "torch.nn.Module"):
        ReversibleCoupling(lambda x: x, f)
    with pytest.raises(ValueError, match="mode='multiplicative'"):
        ReversibleCoupling(f, f, mode="multiplicative")
    with pytest.raises(ValueError, match="scale='tanh'"):
        ReversibleCoupling(f, f, mode="affine", scale="tanh")
    for bound in [0.0, -1.0, float("inf"), "big"]:
        with pytest.raises(ValueError, match="log_scale_bound"):
            ReversibleCoupling(f, f, mode="affine", log_scale_bound=bound)


def test_misuse_of_a_taken_output_is_reported():
    net = make_stack(3)
    x = torch.randn(4, 6, dtype=DT, requires_grad=True)
    h = net[0](x)
    net[1](h)
    with pytest.raises(ValueError, match="already took and freed.*free_inputs=False"):
        net[2](h)

    h = net[0](x)
    early = (h * h).sum()  # saved h before the next coupling took it
    out = net[1](h)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        torch.autograd.grad(early + out.sum(), [x])

    out = net[1](net[0](x))
    with torch.no_grad():
        out.mul_(2.0)
    with pytest.raises(RuntimeError, match="ReversibleCoupling: the block's output was modified"):
        torch.autograd.grad(out.sum(), [x])


_SETUP = """
import resource
import torch
from torch import nn
from tessel.torch import ReversibleCoupling

class Branch(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.full((d,), 0.5))
        self.b = nn.Parameter(torch.zeros(d))
    def forward(self, x):
        return torch.addcmul(self.b, x, self.w)

def hwm():
    # VmHWM: run_isolated resets it to the resident set before the work (ru_maxrss would keep
    # the import's transient peaks, which can hide the shallow stack's rise).
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

def train_step(depth):
    net = nn.Sequential(*[ReversibleCoupling(Branch(D), Branch(D), reversible={rev})
                          for _ in range(depth)])
    x.grad = None
    net(x).sum().backward()

B, D = 1280, 2048  # one activation: B x 2D float32 = 20 MiB
x = torch.randn(B, 2 * D, requires_grad=True)
"""

# The high-water mark only grows, so one process measures both depths: the deeper stack raises
# it only by what it needs beyond the shallow one.
_WORK = """
h0 = hwm()
train_step(4)
h4 = hwm()
train_step(16)
RESULT = [h4 - h0, hwm() - h0]
"""


def test_activation_memory_is_flat_with_depth():
    act = 1280 * 4096 * 4
    # Large blocks mmapped and unmapped one by one: the resident set then follows the live
    # tensors, without glibc's heap fragmentation (which otherwise adds tens of MB of noise).
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(1 << 20))
    rise = {}
    for rev in (False, True):
        rise[rev] = run_isolated(_SETUP.format(rev=rev), _WORK, timeout=300, env=env)["result"]
    plain, revers = rise[False][1] - rise[False][0], rise[True][1] - rise[True][0]
    # Plain autograd keeps y1 and y (1.5 activations) per block: about 18 for 12 more blocks;
    # the reversible stack keeps none per block.
    assert plain > 9 * act, rise
    assert revers < 2 * act, rise
    assert rise[True][1] < rise[False][1], rise
