"""Index and stride bookkeeping: TensorDot's permutation, Elem/Extract/Concat/OneHot, the row-major
tensor ops and batch dims, each against dense float64 torch (values and gradients) and, on a few
small cases, against the real pykeops 2.3."""
import itertools
import math
import os

import numpy as np
import pytest
import torch

from tessel import torch as ttorch
from tessel.compat.pykeops import torch as compat_torch

os.environ.setdefault("PYKEOPS_VERBOSE", "0")

F64 = torch.float64
TOL = dict(rtol=1e-10, atol=1e-10)
N, M = 4, 5


def _close(got, want):
    torch.testing.assert_close(got, want, **TOL)


def _check(lazy, dense, inputs, axis, backend="interpreter"):
    """lazy builds a LazyTensor from the input tensors, dense the (B..., N, M, E) grid; the sums
    over i (axis 0) or j (axis 1) and the gradients of <sum, cot> must agree."""
    out = lazy(*inputs).sum(axis=axis - 3, backend=backend)  # -3: over i, -2: over j
    grid = dense(*inputs)
    want = grid.sum(dim=grid.dim() - 3 + axis)
    assert out.shape == want.shape, (out.shape, want.shape)
    _close(out, want)
    cot = torch.randn(want.shape, dtype=F64)
    got_g = torch.autograd.grad((out * cot).sum(), inputs, allow_unused=True)
    want_g = torch.autograd.grad((want * cot).sum(), inputs, allow_unused=True)
    for k, (g, w) in enumerate(zip(got_g, want_g)):
        w = torch.zeros_like(inputs[k]) if w is None else w
        g = torch.zeros_like(inputs[k]) if g is None else g
        assert g.shape == inputs[k].shape, (k, g.shape, inputs[k].shape)
        _close(g, w)


def _t(*shape):
    return torch.randn(*shape, dtype=F64, requires_grad=True)


# ---- TensorDot: every permutation of the free axes ----------------------------------------------
def tensordot_dense(a, b, dimfa, dimfb, contfa, contfb, perm):
    """KeOps's TensorDot on the grid: a (..., N, 1, prod dimfa), b (..., 1, M, prod dimfb). The
    free axes (a's then b's) of the contraction go to output positions perm[0], perm[1], ...:
    out = pre.permute(argsort(perm)) in torch's words."""
    A = a.reshape(*a.shape[:-1], *dimfa)
    B = b.reshape(*b.shape[:-1], *dimfb)
    la, lb = a.dim() - 1, b.dim() - 1  # leading (batch, N, M) axes
    free_a = [k for k in range(len(dimfa)) if k not in contfa]
    free_b = [k for k in range(len(dimfb)) if k not in contfb]
    # einsum letters: contracted axes share a letter
    letters = iter("abcdefghijklmnopqrstuvw")
    lead = "".join(next(letters) for _ in range(max(la, lb)))
    sa = [next(letters) for _ in dimfa]
    sb = [next(letters) for _ in dimfb]
    for ca, cb in zip(contfa, contfb):
        sb[cb] = sa[ca]
    pre = [sa[k] for k in free_a] + [sb[k] for k in free_b]
    out = [pre[q] for q in np.argsort(perm)] if perm is not None else pre
    expr = (f"{lead[-la:]}{''.join(sa)},{lead[-lb:]}{''.join(sb)}->{lead}{''.join(out)}")
    r = torch.einsum(expr, A, B)
    return r.reshape(*r.shape[:len(lead)], -1)


# (dimfa, dimfb, contfa, contfb): 2-D and 3-D operands, one or two contracted axes, or none.
TD_SHAPES = [
    ((2, 3), (3, 4), (1,), (0,)),
    ((2, 3), (4, 3), (1,), (1,)),
    ((2, 3), (4,), (), ()),
    ((2, 3, 4), (4, 5), (2,), (0,)),
    ((2, 3, 4), (3, 2), (1,), (0,)),
    ((2, 3, 4), (4, 3, 5), (1, 2), (1, 0)),
    ((2, 3, 4), (3, 5, 2), (1,), (0,)),
    ((2, 3, 4), (4, 2, 5), (0, 2), (1, 0)),
]


def _td_cases():
    for dimfa, dimfb, contfa, contfb in TD_SHAPES:
        rank = len(dimfa) + len(dimfb) - 2 * len(contfa)
        for perm in itertools.permutations(range(rank)):
            yield pytest.param(dimfa, dimfb, contfa, contfb, perm,
                               id=f"{dimfa}x{dimfb}_c{contfa}{contfb}_p{perm}".replace(" ", ""))


@pytest.mark.parametrize("dimfa,dimfb,contfa,contfb,perm", list(_td_cases()))
def test_tensordot_every_permutation(dimfa, dimfb, contfa, contfb, perm):
    a, b = _t(N, 1, math.prod(dimfa)), _t(1, M, math.prod(dimfb))
    lazy = lambda a, b: ttorch.LazyTensor(a).keops_tensordot(  # noqa: E731
        ttorch.LazyTensor(b), dimfa, dimfb, contfa, contfb, perm)
    dense = lambda a, b: tensordot_dense(a, b, dimfa, dimfb, contfa, contfb, perm)  # noqa: E731
    for axis in (0, 1):
        _check(lazy, dense, (a, b), axis)


def test_tensordot_permutation_compiled_text_compat_and_second_order():
    """The compiled backend, the KeOps text, the pykeops compat layer and a second derivative
    agree on one 3-axis permutation (the shortest that tells a permutation from its inverse)."""
    dimfa, dimfb, contfa, contfb, perm = (2, 3), (3, 4, 5), (1,), (0,), (1, 2, 0)
    a, b = _t(N, 1, 6), _t(1, M, 60)
    want = tensordot_dense(a, b, dimfa, dimfb, contfa, contfb, perm).sum(1)
    lazy = ttorch.LazyTensor(a).keops_tensordot(ttorch.LazyTensor(b), dimfa, dimfb, contfa,
                                                contfb, perm)
    _close(lazy.sum(axis=1, backend="compiled"), want)
    g = ttorch.Genred("TensorDot(A,B,(2,3),(3,4,5),(1),(0),(1,2,0))", ["A = Vi(6)", "B = Vj(60)"],
                      axis=1)
    _close(g(a[:, 0], b[0]), want)
    cl = compat_torch.LazyTensor(a).keops_tensordot(compat_torch.LazyTensor(b), dimfa, dimfb,
                                                    contfa, contfb, perm)
    _close(cl.sum(1), want)
    # Second order: the VJP of the VJP is a permuted TensorDot too.
    out = (lazy.sum(axis=1, backend="compiled") ** 2).sum()
    ref = (want ** 2).sum()
    (ga,) = torch.autograd.grad(out, a, create_graph=True)
    (ra,) = torch.autograd.grad(ref, a, create_graph=True)
    _close(ga, ra)
    w = torch.randn_like(ga)
    _close(torch.autograd.grad((ga * w).sum(), b)[0], torch.autograd.grad((ra * w).sum(), b)[0])


def test_tensordot_bad_permutation_is_an_error():
    a, b = ttorch.LazyTensor(_t(N, 1, 6)), ttorch.LazyTensor(_t(1, M, 12))
    for perm in ((0, 0), (0, 2), (0, 1, 2)):
        with pytest.raises(ValueError, match="permutation"):
            a.keops_tensordot(b, (2, 3), (3, 4), (1,), (0,), perm).sum(axis=1)


# ---- Elem, Extract, Concat, OneHot and the row-major tensor ops ----------------------------------
def _one_hot(k, d):
    return torch.nn.functional.one_hot(k.long(), d).to(F64)


def _cat(*ts):
    """torch.cat on the last axis, the others broadcast."""
    lead = torch.broadcast_shapes(*(t.shape[:-1] for t in ts))
    return torch.cat([t.expand(*lead, t.shape[-1]) for t in ts], -1)


def _mat(t, rows, cols):
    return t.reshape(*t.shape[:-1], rows, cols)


# name -> (LazyTensor formula of x (dim 6, i), y (dim 3, j), p (dim 2, parameter), the dense
# formula on broadcast grids). Nonlinear where the op is linear, so that gradients see layout.
OPS = {
    "elem": (lambda x, y, p: x.elem(4) * y.elem(1) + x[..., 0] * p[1],
             lambda x, y, p: x[..., 4:5] * y[..., 1:2] + x[..., 0:1] * p[..., 1:2]),
    "extract": (lambda x, y, p: (x[1:4] * y.extract(0, 3)).sin().extract(1, 2)
                + x.extract(4, 2) * p,
                lambda x, y, p: (x[..., 1:4] * y).sin()[..., 1:3] + x[..., 4:6] * p),
    "concat": (lambda x, y, p: y.concat(p).concat(x[2:3]).exp() * x,
               lambda x, y, p: _cat(y, p, x[..., 2:3]).exp() * x),
    "one_hot": (lambda x, y, p: (2 * (y.elem(0) > 0) + (x.elem(5) > 0)).one_hot(4) * x[0:4] * y[2],
                lambda x, y, p: _one_hot(2 * (y[..., 0] > 0) + (x[..., 5] > 0), 4)
                * x[..., 0:4] * y[..., 2:3]),
    "matvecmult": (lambda x, y, p: x.matvecmult(y).square(),
                   lambda x, y, p: (_mat(x, 2, 3) @ y[..., None])[..., 0] ** 2),
    "vecmatmult": (lambda x, y, p: p.vecmatmult(x) * y,
                   lambda x, y, p: (p[..., None, :] @ _mat(x, 2, 3))[..., 0, :] * y),
    "tensorprod": (lambda x, y, p: p.tensorprod(y).cos() * x,
                   lambda x, y, p: (p[..., :, None] * y[..., None, :]).flatten(-2).cos() * x),
    "matvec_transposed_matrix": (lambda x, y, p: y.concat(y).matvecmult(p) * x[0:3],
                                 lambda x, y, p: (_mat(torch.cat([y, y], -1), 3, 2)
                                                  @ p[..., None])[..., 0] * x[..., 0:3]),
}


def _lazy(op):
    f = OPS[op][0]
    return lambda x, y, p: f(ttorch.LazyTensor(x), ttorch.LazyTensor(y), ttorch.LazyTensor(p))


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("op", list(OPS))
def test_vector_ops_values_and_gradients(op, axis):
    x, y, p = _t(N, 1, 6), _t(1, M, 3), _t(1, 1, 2)
    _check(_lazy(op), OPS[op][1], (x, y, p), axis)


# Batch layouts: (x, y, p) shapes with batch dims, batch dims of size 1 that broadcast, and a
# parameter given as (D,) among batched variables.
BATCHES = {
    "batch_1d": ((3, N, 1, 6), (3, 1, M, 3), (3, 1, 1, 2)),
    "batch_2d_broadcast": ((2, 1, N, 1, 6), (1, 3, 1, M, 3), (2, 3, 1, 1, 2)),
    "batch_param_flat": ((2, N, 1, 6), (2, 1, M, 3), (2,)),
    "batch_only_x": ((2, 3, N, 1, 6), (1, M, 3), (1, 1, 1, 1, 2)),
    "batch_only_p": ((N, 1, 6), (1, M, 3), (3, 1, 1, 2)),
}


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("batch", list(BATCHES))
@pytest.mark.parametrize("op", ["elem", "extract", "concat", "matvecmult", "vecmatmult",
                                "tensorprod"])
def test_vector_ops_with_batch_dims(op, batch, axis):
    x, y, p = (_t(*s) for s in BATCHES[batch])
    dense = OPS[op][1]
    if len(p.shape) == 1:
        dense = (lambda f: lambda x, y, p: f(x, y, p.reshape(1, 1, 1, -1)))(dense)
    _check(_lazy(op), dense, (x, y, p), axis)


@pytest.mark.parametrize("op", list(OPS))
def test_vector_ops_with_batch_dims_compiled(op):
    """The compiled kernels (SIMD over j, batches in one call) on broadcast batch dims."""
    x, y, p = (_t(*s) for s in BATCHES["batch_2d_broadcast"])
    for axis in (0, 1):
        _check(_lazy(op), OPS[op][1], (x, y, p), axis, backend="compiled")


def test_tensordot_with_batch_dims_and_permutation():
    dimfa, dimfb, contfa, contfb, perm = (2, 3), (3, 4, 5), (1,), (0,), (2, 0, 1)
    a, b = _t(2, 1, N, 1, 6), _t(1, 3, 1, M, 60)
    lazy = lambda a, b: ttorch.LazyTensor(a).keops_tensordot(  # noqa: E731
        ttorch.LazyTensor(b), dimfa, dimfb, contfa, contfb, perm)
    dense = lambda a, b: tensordot_dense(a, b, dimfa, dimfb, contfa, contfb, perm)  # noqa: E731
    for axis in (0, 1):
        _check(lazy, dense, (a, b), axis, backend="auto")


def _strided(shape, how):
    """A leaf whose view of the given shape is not contiguous: every other element, a transposed
    buffer, or a batch axis that is not the outermost in memory."""
    base_shape = list(shape)
    if how == "step":
        base = torch.randn(*base_shape[:-1], 2 * base_shape[-1], dtype=F64, requires_grad=True)
        return base, lambda b: b[..., ::2]
    if how == "transposed":  # the last two axes swapped in memory
        base = torch.randn(*base_shape[:-2], base_shape[-1], base_shape[-2], dtype=F64,
                           requires_grad=True)
        return base, lambda b: b.transpose(-1, -2)
    # batch axis inner in memory
    base = torch.randn(*base_shape[1:], base_shape[0], dtype=F64, requires_grad=True)
    return base, lambda b: b.movedim(-1, 0)


@pytest.mark.parametrize("how", ["step", "transposed", "batch_inner"])
@pytest.mark.parametrize("op", ["extract", "concat", "matvecmult", "tensorprod"])
def test_vector_ops_on_non_contiguous_inputs(op, how):
    bx, vx = _strided((3, N, 6), how)
    by, vy = _strided((3, M, 3), how)
    p = _t(3, 2)
    lazy, dense = OPS[op]

    def lz(bx, by, p):
        x, y = vx(bx), vy(by)
        assert not x.is_contiguous() and not y.is_contiguous()
        return lazy(ttorch.Vi(x), ttorch.Vj(y), ttorch.LazyTensor(p[:, None, None, :]))

    def dn(bx, by, p):
        return dense(vx(bx)[:, :, None, :], vy(by)[:, None, :, :], p[:, None, None, :])

    for axis in (0, 1):
        _check(lz, dn, (bx, by, p), axis)


# ---- against the real pykeops 2.3 (each new formula costs it a g++ compile: four in all) -------
try:
    import pykeops.torch as keops_torch
except ImportError:  # pragma: no cover - the reference is optional
    keops_torch = None


def _pykeops(run):
    if keops_torch is None:
        pytest.skip("pykeops is not installed")
    try:
        return run()
    except Exception as e:  # its first call compiles with g++ into its cache
        pytest.skip(f"pykeops could not build the reference: {type(e).__name__}: {e}")


def test_tensordot_permutation_matches_pykeops():
    """KeOps's own reading of the permutation, values and both gradients (pykeops formulas 1-3)."""
    dimfa, dimfb, contfa, contfb, perm = (2, 3), (3, 4, 5), (1,), (0,), (1, 2, 0)
    a, b = _t(N, 1, 6), _t(1, M, 60)

    def run(lib):
        out = lib.LazyTensor(a).keops_tensordot(lib.LazyTensor(b), dimfa, dimfb, contfa, contfb,
                                                perm).sum(1)
        return (out,) + torch.autograd.grad((out * cot).sum(), (a, b))

    cot = torch.randn(N, 40, dtype=F64)
    theirs = _pykeops(lambda: run(keops_torch))
    for ours, ref in zip(run(ttorch), theirs):
        _close(ours, ref)
    _close(theirs[0], tensordot_dense(a, b, dimfa, dimfb, contfa, contfb, perm).sum(1))


def test_row_major_tensor_ops_match_pykeops():
    """MatVecMult, VecMatMult and TensorProd read and write row-major matrices (formula 4)."""
    A, u, y, B = _t(N, 1, 6), _t(N, 1, 2), _t(1, M, 3), _t(1, M, 6)

    def run(lib):
        LA, Lu, Ly, LB = (lib.LazyTensor(t) for t in (A, u, y, B))
        return LA.matvecmult(Ly).concat(Lu.vecmatmult(LB)).concat(Lu.tensorprod(Ly)).sum(1)

    theirs = _pykeops(lambda: run(keops_torch))
    _close(run(ttorch), theirs)
    dense = torch.cat([(_mat(A, 2, 3) @ y[..., None])[..., 0],
                       (u[..., None, :] @ _mat(B, 2, 3))[..., 0, :],
                       (u[..., :, None] * y[..., None, :]).flatten(-2)], -1).sum(1)
    _close(theirs, dense)


# ---- indexing and the NumPy front end ------------------------------------------------------------
def test_getitem_indexes_only_the_D_axis():
    x = ttorch.LazyTensor(_t(N, 1, 6)) - ttorch.LazyTensor(_t(1, M, 6))  # shape (N, M, 6)
    for same in (x[..., 2], x[:, :, 2], x[2], x[..., -4], x[:, :, -4]):
        assert same.formula == x.elem(2).formula
    assert x[..., 1:3].formula == x[:, :, 1:3].formula == x[1:3].formula == x.extract(1, 2).formula
    # x[:, 2] would be column 2 of the M axis in torch, not component 2 of D: an error, as in
    # pykeops, never Elem(x, 2).
    for bad in ((slice(None), 2), (slice(None), slice(1, 3)), (slice(None),) * 3 + (0,)):
        with pytest.raises(IndexError, match="indices for the 3 axes"):
            x[bad]
    b = ttorch.LazyTensor(_t(2, N, 1, 6))  # shape (2, N, 1, 6)
    assert b[:, :, :, 4].formula == b[..., 4].formula == b.elem(4).formula
    with pytest.raises(IndexError, match="indices for the 4 axes"):
        b[:, :, 4]


def test_numpy_strided_inputs():
    from tessel import numpy as tnp
    rng = np.random.default_rng(3)
    x = rng.standard_normal((6, N)).T[:, ::2]  # (N, 3): transposed and every other column
    y = rng.standard_normal((M, 8))[:, 1:7:2]  # (M, 3)
    A = rng.standard_normal((2, 6, N)).transpose(0, 2, 1)  # (2, N, 6), batch of matrices
    assert not (x.flags.c_contiguous or y.flags.c_contiguous or A.flags.c_contiguous)
    f = tnp.Vi(A).matvecmult(tnp.Vj(y)).concat(tnp.Vi(x).tensorprod(tnp.Vj(y))[3:5])
    dense = np.concatenate(np.broadcast_arrays(
        np.einsum("bnpq,mq->bnmp", A.reshape(2, N, 2, 3), y),
        np.einsum("np,mq->nmpq", x, y).reshape(N, M, 9)[None, ..., 3:5]), -1)
    np.testing.assert_allclose(f.sum(axis=-3), dense.sum(1), **TOL)
    np.testing.assert_allclose(f.sum(axis=-2), dense.sum(2), **TOL)


def test_tensordot_arguments_as_pykeops_takes_them():
    a, b = _t(N, 1, 6), _t(1, M, 6)
    La, Lb = ttorch.LazyTensor(a), ttorch.LazyTensor(b)
    # an int for a 1-axis tuple, lists for tuples
    got = La.keops_tensordot(Lb, 6, [6], [], (), [1, 0]).sum(axis=1)
    _close(got, tensordot_dense(a, b, (6,), (6,), (), (), (1, 0)).sum(1))
    with pytest.raises(ValueError, match="keops_tensordot: .*contracted"):
        La.keops_tensordot(Lb, (2, 3), (3, 2), (2,), (0,))
    with pytest.raises(TypeError, match="contfa must be an integer or a sequence"):
        La.keops_tensordot(Lb, (2, 3), (3, 2), 1.0, (0,))
