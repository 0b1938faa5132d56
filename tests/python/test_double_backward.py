"""Derivatives of a backward with respect to its incoming gradient, for every reduction and front end.

`torch.autograd.functional.hvp` and `jvp` (and `torch.func.jvp` of a gradient) use the
double-backward trick: they differentiate a backward with respect to the cotangent it was given,
which every backward must support exactly. Each row of the reduction table that has a gradient is
checked that way against the same derivatives of a dense float64 PyTorch reference, with respect to
every input kind (an i-variable, a j-variable, the weight and a parameter), together with the
create_graph forms (`vhp`, `hessian`-style double grad) that were right all along.
"""
import pytest
import torch
from torch.autograd import functional as AF

import tessel.torch as tt
from tessel import _core
from tessel.compat.pykeops.torch import LazyTensor as KeOpsLazyTensor

F64 = torch.float64
TORCH2 = int(torch.__version__.split(".")[0]) >= 2
N, M, K = 6, 9, 3
ALIASES = ["X = Vi(2)", "Y = Vj(2)", "B = Vj(3)", "S = Pm(1)"]
# Non-quadratic in every input, so that each second derivative has terms of its own.
SCALAR_F = "Sin(S * (X | Y)) - S * SqDist(X, Y) * Sum(B)"
VECTOR_F = "Sin(S * (X - Y)) * Elem(B, 0)"
ROWS = [r for r in _core.reduction_table() if r["by_name"] and r["grad"] != "none"]


def cases():
    out = []
    for r in ROWS:
        weights = {"none": [False], "required": [True], "optional": [False, True]}[r["weight"]]
        for w in weights:
            for var in range(4):
                out.append(pytest.param(r, w, var, id=f"{r['name']}{'-w' if w else ''}-{'XYBS'[var]}"))
    return out


def data(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(N, 2, generator=g, dtype=F64) * 2 - 1,
            torch.rand(M, 2, generator=g, dtype=F64) * 2 - 1,
            torch.rand(M, 3, generator=g, dtype=F64) * 0.8 + 0.2,
            torch.rand(1, generator=g, dtype=F64) + 0.5]


def dense(row, weighted, x, y, b, s, scalar=False):
    """The reduction over j of F on the full grid, differentiable by PyTorch (values only)."""
    xi, yj = x[:, None, :], y[None, :, :]
    if row["scalar_formula"] or scalar:
        F = (torch.sin(s * (xi * yj).sum(-1)) - s * ((xi - yj) ** 2).sum(-1) * b.sum(-1)[None])[..., None]
    else:
        F = torch.sin(s * (xi - yj)) * b[None, :, :1]
    fam = row["family"]
    if fam == "sum":
        return F.sum(1)
    if fam == "select":
        idx = (F.argmax(1) if row["is_max"] else F.argmin(1)).detach()
        return torch.gather(F, 1, idx[:, None, :])[:, 0]
    if fam == "kselect":  # per component, column q * d + c as KeOps lays them out
        idx = torch.topk(F.detach(), K, dim=1, largest=False, sorted=True).indices
        return torch.gather(F, 1, idx).flatten(1)
    f = F[..., 0]
    if row["name"] == "LogSumExp":
        if not weighted:
            return torch.logsumexp(f, 1, keepdim=True)
        return torch.logsumexp(f[..., None] + torch.log(b[None]), 1)
    return torch.einsum("ij,jd->id", torch.softmax(f, 1), b)


def genred(row, weighted, scalar=False):
    formula = SCALAR_F if row["scalar_formula"] or scalar else VECTOR_F
    kw = dict(formula2="B") if weighted else {}
    if row["uses_k"]:
        kw["opt_arg"] = K
    # The interpreter: this file is about the derivative reductions, not about compiled code.
    g = tt.Genred(formula, ALIASES, reduction_op=row["name"], axis=1, backend="interpreter", **kw)

    def f(x, y, b, s):
        out = g(x, y, b, s)
        return out[0] if isinstance(out, tuple) else out
    return f


def scalarize(fn, args, var, w):
    """z -> <fn(args with z at var), w>: a scalar function of one input, with a fixed cotangent."""
    def f(z):
        a = list(args)
        a[var] = z
        return (fn(*a) * w).sum()
    return f


def assert_close(got, want):
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("row,weighted,var", cases())
def test_double_backward_of_every_reduction(row, weighted, var):
    args = data()
    out = dense(row, weighted, *args)
    gw = torch.Generator().manual_seed(1)
    w = torch.randn(out.shape, generator=gw, dtype=F64)
    v = torch.randn(args[var].shape, generator=gw, dtype=F64)
    ours = scalarize(genred(row, weighted), args, var, w)
    ref = scalarize(lambda *a: dense(row, weighted, *a), args, var, w)
    z = args[var]
    # hvp and vhp: the first by double backward, the second by create_graph.
    assert_close(AF.hvp(ours, z, v)[1], AF.hvp(ref, z, v)[1])
    assert_close(AF.vhp(ours, z, v)[1], AF.vhp(ref, z, v)[1])

    # The jvp of the gradient, by double backward too.
    def grad_fn(f):
        return lambda u: torch.autograd.grad(f(u), u, create_graph=True)[0]
    zr = z.clone().requires_grad_()
    assert_close(AF.jvp(grad_fn(ours), zr, v)[1], AF.jvp(grad_fn(ref), zr, v)[1])


@pytest.mark.skipif(not TORCH2, reason="torch.func needs PyTorch 2")
@pytest.mark.parametrize("name", ["Sum", "LogSumExp", "SumSoftMaxWeight", "Min"])
def test_torch_func_jvp_of_grad(name):
    row = next(r for r in ROWS if r["name"] == name)
    weighted = row["weight"] == "required"
    args = data(3)
    # Forward mode through Min/Max takes formulas of dim 1 (a clear error otherwise, below).
    w = torch.randn(dense(row, weighted, *args, scalar=True).shape, dtype=F64)
    v = torch.randn(args[0].shape, dtype=F64)
    ours = scalarize(genred(row, weighted, scalar=True), args, 0, w)
    ref = scalarize(lambda *a: dense(row, weighted, *a, scalar=True), args, 0, w)
    got = torch.func.jvp(torch.func.grad(ours), (args[0],), (v,))[1]
    assert_close(got, torch.func.jvp(torch.func.grad(ref), (args[0],), (v,))[1])
    if name == "Min":
        wide = scalarize(genred(row, weighted), args, 0, torch.ones(N, 2, dtype=F64))
        with pytest.raises(ValueError, match="forward mode through Min needs a formula of dim 1"):
            torch.func.jvp(torch.func.grad(wide), (args[0],), (v,))


def lazy_logsumexp(LT, x, y):
    return (-((LT(x[:, None, :]) - LT(y[None, :, :])) ** 2).sum(-1)).logsumexp(dim=1)


def lazy_softmax(LT, x, y):
    b = y[:, :1] * 3 + 1
    return (-((LT(x[:, None, :]) - LT(y[None, :, :])) ** 2).sum(-1)).sumsoftmaxweight(
        LT(b[None, :, :]), dim=1)


def lazy_kmin(LT, x, y):
    return ((LT(x[:, None, :]) - LT(y[None, :, :])) ** 2).sum(-1).Kmin(K, dim=1)


@pytest.mark.usefixtures("interpreted")
@pytest.mark.parametrize("LT", [tt.LazyTensor, KeOpsLazyTensor], ids=["tessel", "pykeops-compat"])
@pytest.mark.parametrize("build", [lazy_logsumexp, lazy_softmax, lazy_kmin])
def test_lazytensor_front_ends(LT, build):
    """LazyTensor reductions (tessel's and the pykeops drop-in's) under the double-backward hvp."""
    x, y = data(5)[:2]
    ref_lt = {lazy_logsumexp: lambda x, y: torch.logsumexp(-((x[:, None] - y[None]) ** 2).sum(-1), 1),
              lazy_softmax: lambda x, y: torch.softmax(-((x[:, None] - y[None]) ** 2).sum(-1), 1)
              @ (y[:, :1] * 3 + 1),
              lazy_kmin: lambda x, y: torch.topk(((x[:, None] - y[None]) ** 2).sum(-1), K, 1,
                                                  largest=False).values}[build]
    w = torch.randn(ref_lt(x, y).reshape(N, -1).shape, dtype=F64)
    v = torch.randn(x.shape, dtype=F64)
    for var in (0, 1):
        ours = scalarize(lambda a, b: build(LT, a, b).reshape(N, -1), [x, y], var, w)
        ref = scalarize(lambda a, b: ref_lt(a, b).reshape(N, -1), [x, y], var, w)
        vv = v if var == 0 else torch.randn(y.shape, dtype=F64)
        assert_close(AF.hvp(ours, [x, y][var], vv)[1], AF.hvp(ref, [x, y][var], vv)[1])
