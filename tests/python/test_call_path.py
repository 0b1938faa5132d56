"""A built reduction's call path holds no formula text: the core's parser is entered 0 times per
call, in every front end (NumPy, PyTorch forward and backward, LazyTensor, KernelSolve, the
pykeops compatibility layer, tessel.ot), once the objects a call reuses exist."""
import numpy as np
import pytest
import torch

from tessel import _core

# Every case runs on the interpreter: what is counted is the Python and binding path, and a
# compiled kernel per case would add nothing to it.
OPTS = dict(backend="interpreter")


def parses_per_call(fn, calls=3):
    """Runs fn once (to build what it caches), then `calls` times: the parser entries of those."""
    fn()
    before = _core._parser_entries()
    for _ in range(calls):
        fn()
    return _core._parser_entries() - before


def data(dtype=torch.float64, grad=False):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(6, 3, dtype=dtype, generator=g, requires_grad=grad)
    y = torch.rand(7, 3, dtype=dtype, generator=g, requires_grad=grad)
    b = torch.rand(7, 2, dtype=dtype, generator=g, requires_grad=grad)
    return x, y, b


GAUSS = ("Exp(-SqDist(X,Y)) * B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(2)"])


def test_parser_entries_are_counted():
    before = _core._parser_entries()
    _core.parse("Exp(X)", ["X = Vi(1)"])
    assert _core._parser_entries() == before + 1


def test_numpy_genred_call():
    from tessel.numpy import Genred
    g = Genred(*GAUSS, **OPTS)
    x, y, b = (a.numpy() for a in data())
    assert parses_per_call(lambda: g(x, y, b)) == 0


def test_torch_genred_forward_backward_and_second_order():
    from tessel.torch import Genred
    g = Genred(*GAUSS, **OPTS)
    x, y, b = data(grad=True)

    def step():
        out = g(x, y, b)
        (gx,) = torch.autograd.grad(out.square().sum(), [x], create_graph=True)
        torch.autograd.grad(gx.sum(), [y, b])

    assert parses_per_call(step) == 0


def test_torch_genred_per_call_options():
    from tessel.torch import Genred
    g = Genred("SqDist(X,Y)", ["X = Vi(3)", "Y = Vj(3)"], reduction_op="ArgKMin", opt_arg=2,
               **OPTS)
    x, y, _ = data()
    assert parses_per_call(lambda: g(x, y, backend="interpreter", ni=6, nj=7)) == 0


def test_lazytensor_expressions_built_on_each_call():
    from tessel.torch import LazyTensor

    def step():
        x, y, b = data()
        k = (-((LazyTensor(x[:, None, :]) - LazyTensor(y[None, :, :])) ** 2).sum(-1)).exp()
        (k @ b).sum()
        (k * LazyTensor(b[None, :, :1])).sum(dim=1, **OPTS)

    assert parses_per_call(step) == 0


def test_kernel_solve_call():
    from tessel.torch import KernelSolve
    solve = KernelSolve("Exp(-SqDist(X,Y)) * B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)"], "B",
                        **OPTS)
    x = data()[0]
    b = torch.rand(6, 1, dtype=torch.float64)
    assert parses_per_call(lambda: solve(x, x, b, alpha=0.5)) == 0


def test_pykeops_genred_and_lazytensor():
    pk = pytest.importorskip("tessel.compat.pykeops.torch")
    g = pk.Genred(*GAUSS, reduction_op="Sum", axis=1)
    x, y, b = data()
    assert parses_per_call(lambda: g(x, y, b, backend="CPU")) == 0

    def lazy():
        xi, yj = pk.LazyTensor(x[:, None, :]), pk.LazyTensor(y[None, :, :])
        ((xi - yj) ** 2).sum(-1).argKmin(2, dim=1)
        (-((xi - yj) ** 2).sum(-1)).exp().sum(dim=1)

    assert parses_per_call(lazy) == 0

    rhs = torch.rand(6, 1, dtype=torch.float64)

    def solve():
        k = (-pk.LazyTensor(x[:, None, :]).sqdist(pk.LazyTensor(x[None, :, :]))).exp()
        k.solve(pk.LazyTensor(rhs[:, None, :]), alpha=0.5)

    assert parses_per_call(solve) == 0


def test_lazytensor_solve():
    from tessel.torch import LazyTensor
    x = data()[0]
    rhs = torch.rand(6, 1, dtype=torch.float64)

    def solve():
        k = (-LazyTensor(x[:, None, :]).sqdist(LazyTensor(x[None, :, :]))).exp()
        k.solve(LazyTensor(rhs[:, None, :]), alpha=0.5)

    assert parses_per_call(solve) == 0


def test_samples_loss_call():
    from tessel.ot import SamplesLoss
    loss = SamplesLoss("sinkhorn", blur=0.1, backend="online")
    x, y, _ = data(grad=True)

    def step():
        torch.autograd.grad(loss(x, y), [x])

    assert parses_per_call(step, calls=2) == 0
