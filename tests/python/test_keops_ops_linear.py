"""KeOps's ElemT, ExtractT, SumT, DiffClampInt, IntInv and Kron: values and gradients against torch.

Each formula is reduced (Sum over j) by tessel.torch.Genred and compared in float64 with the same
computation written densely in torch, gradients included; degenerate placements (first and last
component, dim-1 results) and bad arguments are checked too.
"""
import numpy as np
import pytest
import torch

from tessel import _core
from tessel.lazytensor import LazyTensor
from tessel.torch import Genred

N, M = 7, 9
ALIASES = ["x = Vi(0, 3)", "y = Vj(1, 3)"]


def _xy(grid=False):
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(N, 3, generator=g, dtype=torch.float64), torch.randn(M, 3, generator=g,
                                                                             dtype=torch.float64)
    if grid:  # integers: differences land on DiffClampInt's bounds
        x, y = torch.round(2 * x), torch.round(2 * y)
    return x.requires_grad_(), y.requires_grad_()


def _check(formula, dense, aliases=ALIASES, grid=False, xy=None):
    """Sum_j formula(x_i, y_j) and its gradients against dense(x[:, None], y[None]).sum(1)."""
    x, y = xy if xy is not None else _xy(grid)
    out = Genred(formula, aliases, reduction_op="Sum", axis=1)(x, y)
    ref = dense(x[:, None, :], y[None, :, :]).sum(1)
    assert out.shape == ref.shape
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    w = torch.randn(ref.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    got = torch.autograd.grad((out * w).sum(), [x, y], allow_unused=True)
    want = torch.autograd.grad((ref * w).sum(), [x, y], allow_unused=True)
    for v, g, h in zip((x, y), got, want):  # None: no dependence, a zero gradient
        zero = torch.zeros_like(v)
        torch.testing.assert_close(zero if g is None else g, zero if h is None else h,
                                   rtol=1e-12, atol=1e-12)


def _placed(v, dim, start):
    """v (..., D) at [start, start + D) of a zero (..., dim) tensor, as torch writes it."""
    z = torch.zeros(*v.shape[:-1], dim, dtype=v.dtype)
    return torch.cat([z[..., :start], v, z[..., start + v.shape[-1]:]], -1)


def _sdot(x, y):
    return torch.sin((x * y).sum(-1, keepdim=True))


@pytest.mark.parametrize("n, m", [(5, 3), (4, 0), (4, 3), (1, 0)])
def test_elemt(n, m):
    _check(f"ElemT(Sin(x | y), {n}, {m})", lambda x, y: _placed(_sdot(x, y), n, m))


@pytest.mark.parametrize("start, dim", [(3, 8), (0, 5), (2, 5), (0, 3)])
def test_extractt(start, dim):
    _check(f"ExtractT(Sin(x * y), {start}, {dim})",
           lambda x, y: _placed(torch.sin(x * y), dim, start))


@pytest.mark.parametrize("dim", [4, 1])
def test_sumt(dim):
    _check(f"SumT(Sin(x | y), {dim})", lambda x, y: _sdot(x, y).expand(-1, -1, dim) * 1.0)


def test_adjoints_compose_with_their_transposes():
    """Sum(SumT(f, d)) = d f, Elem(ElemT(f, n, m), m) = f, Extract(ExtractT(f, s, d), s, D) = f."""
    _check("Sum(SumT(Sin(x | y), 4)) + Elem(ElemT(Sin(x | y), 3, 2), 2) "
           "+ Sum(Extract(ExtractT(Sin(x * y), 1, 6), 1, 3))",
           lambda x, y: 5 * _sdot(x, y) + torch.sin(x * y).sum(-1, keepdim=True))


def test_diffclampint_includes_both_bounds_and_has_no_derivative():
    def dense(x, y):
        d = x - y
        return ((d >= -1) & (d <= 1)).to(d.dtype) * torch.exp(0.1 * x * y)

    _check("DiffClampInt(x - y, -1, 1) * Exp(IntInv(10) * x * y)", dense, grid=True)


def _clamp_bounds_inside(d, lo, hi):
    """clamp(d, lo, hi) whose derivative is 1 on [lo, hi], bounds included (KeOps's convention,
    docs/conventions.md): torch.clamp's is 1 at the bounds in torch 1.x but 0 in recent 2.x."""
    inside = ((d >= lo) & (d <= hi)).to(d.dtype)
    return d.clamp(lo, hi).detach() + (d - d.detach()) * inside


def test_clampint_gradient_is_diffclampint():
    """ClampInt's derivative is 1 on [a, b], bounds included (DiffClampInt)."""
    _check("ClampInt(x - y, -1, 1) * Exp(IntInv(10) * x * y)",
           lambda x, y: _clamp_bounds_inside(x - y, -1, 1) * torch.exp(0.1 * x * y), grid=True)


def test_diffclampint_keeps_nan_like_keops():
    x = torch.tensor([[np.nan], [0.5], [3.0]], dtype=torch.float64)
    y = torch.zeros(1, 1, dtype=torch.float64)
    out = Genred("DiffClampInt(x - y, 0, 1)", ["x = Vi(0, 1)", "y = Vj(1, 1)"], axis=1)(x, y)
    assert out[:, 0].tolist() == [1.0, 1.0, 0.0]  # NaN compares false both ways, as in KeOps


def test_intinv_is_an_exact_rational():
    assert str(_core.parse("IntInv(3)")) == str(_core.parse("Rat(1, 3)"))
    assert str(_core.parse("IntInv(-4)")) == str(_core.parse("Rat(-1, 4)"))
    assert str(_core.parse("IntInv(1)")) == str(_core.parse("IntCst(1)"))
    _check("IntInv(3) * x - y * IntInv(-7)", lambda x, y: x / 3 + y / 7)


def _kron_dense(da, db):
    """torch.kron of every (x_i, y_j) pair, x of shape (N, 1, D), y (1, M, E)."""
    def dense(x, y):
        n, m = x.shape[0], y.shape[1]
        x, y = x.expand(n, m, -1), y.expand(n, m, -1)
        out = [torch.kron(x[i, j].reshape(da), y[i, j].reshape(db)).reshape(-1)
               for i in range(n) for j in range(m)]
        return torch.stack(out).reshape(n, m, -1)
    return dense


def _kron_xy(da, db):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(N, int(np.prod(da)), generator=g, dtype=torch.float64).requires_grad_()
    y = torch.randn(M, int(np.prod(db)), generator=g, dtype=torch.float64).requires_grad_()
    return x, y


@pytest.mark.parametrize("da, db", [([2, 3], [2, 2]), ([3, 2, 1, 2], [1, 2, 2, 3]), ([3], [2]),
                                    ([1, 1], [2, 1])])
def test_kron_genred(da, db):
    aliases = [f"x = Vi(0, {int(np.prod(da))})", f"y = Vj(1, {int(np.prod(db))})"]
    _check(f"Kron(x, y, {list(da)}, {list(db)})", _kron_dense(da, db), aliases,
           xy=_kron_xy(da, db))


def test_kron_is_keops_tensordot_with_interleaving_permutation():
    a = _core.parse("Kron(x, y, [2, 3], [2, 2])", ["x = Vi(0, 6)", "y = Vj(1, 4)"])
    b = _core.parse("TensorDot(x, y, [2, 3], [2, 2], [], [], [0, 2, 1, 3])",
                    ["x = Vi(0, 6)", "y = Vj(1, 4)"])
    assert str(a) == str(b)


def test_keops_kron_lazytensor_values_and_gradients():
    da, db = [2, 1, 2], [3, 2, 1]
    x, y = _kron_xy(da, db)
    out = LazyTensor(x[:, None, :]).keops_kron(LazyTensor(y[None, :, :]), da, db).sum(axis=1)
    ref = _kron_dense(da, db)(x[:, None, :], y[None, :, :]).sum(1)
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    got = torch.autograd.grad(out.sum(), [x, y])
    want = torch.autograd.grad(ref.sum(), [x, y])
    for g, h in zip(got, want):
        torch.testing.assert_close(g, h, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("text, piece", [
    ("ElemT(x, 4, 1)", "ElemT: the argument (argument 1) must have dim 1, got 3"),
    ("ElemT(Sum(x), 4, 4)", "ElemT: the position m (argument 3) must lie in [0, 4), got 4"),
    ("ElemT(Sum(x), 0, 0)", "ElemT: the output dim n (argument 2) must be >= 1, got 0"),
    ("ExtractT(x, 2, 4)", "ExtractT: the argument of dim 3 placed at start 2 (argument 2) does "
                          "not fit in dim 4; expected 0 <= start <= 1"),
    ("ExtractT(x, -1, 4)", "does not fit in dim 4"),
    ("ExtractT(x, 0, 2)", "expected 0 <= start <= -1"),
    ("SumT(x, 3)", "SumT: the argument (argument 1) must have dim 1, got 3"),
    ("SumT(Sum(x), 0)", "SumT: the output dim (argument 2) must be >= 1, got 0"),
    ("IntInv(0)", "IntInv: n must be non-zero"),
    ("Kron(x, y, [3], [2, 2])", "Kron: the dims of the two tensors (arguments 3 and 4) must have "
                                "the same length, got 1 and 2"),
    ("Kron(x, y, [2, 2], [3, 1])", "Kron: the dims of the first tensor multiply to 4 but that "
                                   "formula has dim 3"),
    ("Kron(x, y, [3, 0], [3, 1])", "Kron: the dims of the first tensor must be >= 1, got 0"),
    ("Kron(x, y, 3, 3)", "expected a tuple like (2,3) or a list like [2,3]"),
    ("DiffClampInt(x, 1)", "'DiffClampInt' takes 3 arguments"),
])
def test_bad_arguments_name_the_function_and_argument(text, piece):
    with pytest.raises(ValueError) as e:
        _core.parse(text, ALIASES)
    assert piece in str(e.value)


def test_lazytensor_methods_name_themselves_in_errors():
    x = LazyTensor(np.ones((4, 1, 3)))
    with pytest.raises(ValueError, match=r"LazyTensor\.elemt: ElemT: the argument"):
        x.elemt(4, 1)
    with pytest.raises(ValueError, match=r"LazyTensor\.keops_kron: Kron: the dims of the second"):
        x.keops_kron(x, [3], [2])
    with pytest.raises(TypeError, match=r"LazyTensor\.keops_kron: dimfother must be an integer"):
        x.keops_kron(x, [3], [1.5])
    assert x.elem(0).sumt(3).ndim == 3 and x.elem(2).elemt(4, 3).ndim == 4
    assert x.extractt(1, 5).ndim == 5 and x.diffclampint(0, 1).ndim == 3
