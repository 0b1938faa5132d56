"""LazyTensor (tessel.numpy, tessel.torch): operations and reductions against dense references."""
import math

import numpy as np
import pytest
import torch

from tessel import lazytensor
from tessel import numpy as tnp
from tessel import torch as ttorch
from tessel.numpy import LazyTensor, Pm, Vi, Vj

N, M = 25, 30
TOL = dict(rtol=1e-10, atol=1e-10)


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return dict(
        x=rng.standard_normal((N, 3)), y=rng.standard_normal((M, 3)),
        a=rng.uniform(0.5, 1.5, (N, 1)), b=rng.uniform(0.5, 1.5, (M, 1)),
        u=rng.standard_normal((N, 2)), w=rng.uniform(0.5, 1.5, (M, 2)),
        A=rng.standard_normal((N, 6)), C=rng.standard_normal((M, 12)),
        p=rng.uniform(0.5, 1.5, 3), S=rng.standard_normal(9),
    )


DATA = _data()
I_VARS, J_VARS = ("x", "a", "u", "A"), ("y", "b", "w", "C")


class _NS:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def lazy_vars(d=DATA):
    """The data as LazyTensors (through the (N, 1, D) / (1, M, D) / (D,) shapes)."""
    v = {k: LazyTensor(d[k][:, None, :]) for k in I_VARS}
    v.update({k: LazyTensor(d[k][None, :, :]) for k in J_VARS})
    v.update(p=LazyTensor(d["p"]), S=LazyTensor(d["S"]))
    return _NS(**v)


def dense_vars(d=DATA):
    """The data on the N x M grid (broadcast views), for the dense references."""
    v = {k: d[k][:, None, :] for k in I_VARS}
    v.update({k: d[k][None, :, :] for k in J_VARS})
    v.update(p=d["p"].reshape(1, 1, 3), S=d["S"])
    return _NS(**v)


def grid(f):
    """Dense values broadcast to the full (N, M, dim) grid."""
    f = np.asarray(f, dtype=np.float64)
    return np.broadcast_to(f, (N, M, f.shape[-1]))


def sqdist(a, b):
    return ((a - b) ** 2).sum(-1, keepdims=True)


L, D = lazy_vars(), dense_vars()

# (name, LazyTensor formula, dense formula on the grid): each is reduced over j and over i.
CASES = [
    ("arith_broadcast", lambda v: (v.x + v.y) * v.a - 2.5 / (v.b + 3) + v.p,
     lambda v: (v.x + v.y) * v.a - 2.5 / (v.b + 3) + v.p),
    ("reverse_ops", lambda v: 1 - v.x / 2 + 3 * v.y - 2.0 / v.a,
     lambda v: 1 - v.x / 2 + 3 * v.y - 2.0 / v.a),
    ("neg_abs_sign", lambda v: -abs(v.x - v.y) + (v.x - v.y).abs() * 0.5 + (v.x - v.y).sign(),
     lambda v: -np.abs(v.x - v.y) * 0.5 + np.sign(v.x - v.y)),
    ("exp_log_sqrt_rsqrt", lambda v: (-(v.x - v.y).sqnorm2()).exp() + (v.a * v.b).log()
     + v.b.sqrt() - v.a.rsqrt(),
     lambda v: np.exp(-sqdist(v.x, v.y)) + np.log(v.a * v.b) + np.sqrt(v.b) - 1 / np.sqrt(v.a)),
    ("sin_cos", lambda v: (v.x * v.b).sin() * (v.y - v.a).cos(),
     lambda v: np.sin(v.x * v.b) * np.cos(v.y - v.a)),
    ("relu_step_square", lambda v: (v.x - v.y).relu() + (v.y - v.x).step() * (v.x + v.y).square(),
     lambda v: np.maximum(v.x - v.y, 0) + (v.y - v.x >= 0) * (v.x + v.y) ** 2),
    ("pow_int", lambda v: (v.x - v.y) ** 2 + (v.x - v.y) ** 3 - v.a ** -2 + v.b.power(1),
     lambda v: (v.x - v.y) ** 2 + (v.x - v.y) ** 3 - v.a ** -2.0 + v.b),
    ("pow_float", lambda v: v.a ** 0.5 + v.b ** -0.5 + (v.a * v.b) ** 1.7 + v.w ** v.a,
     lambda v: np.sqrt(v.a) + 1 / np.sqrt(v.b) + (v.a * v.b) ** 1.7 + v.w ** v.a),
    ("clamp_ifelse", lambda v: (v.x - v.y).clamp(-0.3, 0.4) + (3 * (v.x - v.y)).clamp(-1, 2)
     + (v.x - v.y).ifelse(v.a, v.y * v.b) + (v.x - v.y).clamp(v.a - 1, v.p),
     lambda v: np.clip(v.x - v.y, -0.3, 0.4) + np.clip(3 * (v.x - v.y), -1, 2)
     + np.where(v.x - v.y >= 0, v.a, v.y * v.b) + np.minimum(np.maximum(v.x - v.y, v.a - 1), v.p)),
    ("norms", lambda v: (v.x - v.y).norm2() * v.a + v.x.sqdist(v.y) + (v.x - v.y).normalize(),
     lambda v: np.sqrt(sqdist(v.x, v.y)) * v.a + sqdist(v.x, v.y)
     + (v.x - v.y) / np.sqrt(sqdist(v.x, v.y))),
    ("weighted", lambda v: (v.x - v.y).weightedsqnorm(v.a) + (v.x - v.y).weightedsqnorm(v.p)
     + v.x.weightedsqdist(v.y, v.S),
     lambda v: v.a * sqdist(v.x, v.y) + (v.p * (v.x - v.y) ** 2).sum(-1, keepdims=True)
     + np.einsum("nmp,pq,nmq->nm", grid(v.x - v.y), v.S.reshape(3, 3), grid(v.x - v.y))[..., None]),
    ("elem_extract_getitem", lambda v: v.x.elem(0) * v.y[2] + v.x[-1] + v.y[1:3] * v.x[:2]
     + v.x.extract(1, 2) + v.y[..., 0],
     lambda v: v.x[..., 0:1] * v.y[..., 2:3] + v.x[..., 2:3] + v.y[..., 1:3] * v.x[..., :2]
     + v.x[..., 1:3] + v.y[..., 0:1]),
    ("concat_onehot", lambda v: (v.x - v.y).concat(v.a * v.b).concat((3 * v.a).floor().one_hot(5)),
     lambda v: np.concatenate([grid(v.x - v.y), grid(v.a * v.b),
                               grid(np.eye(5)[np.floor(3 * v.a[..., 0]).astype(int)])], axis=-1)),
    ("scalprod", lambda v: (v.x | v.y) * v.b + (v.u | v.w),
     lambda v: (v.x * v.y).sum(-1, keepdims=True) * v.b + (v.u * v.w).sum(-1, keepdims=True)),
    ("more_math", lambda v: (v.a * v.b).xlogx() + v.a.inv() + (0.3 * v.x).asin()
     + (0.3 * v.y).acos() + v.x.atan() + v.x.atan2(v.y) + (3 * v.x).floor() + (10 * v.y).round(1)
     + v.x.mod(1.5, 0.2) + 2 ** v.a,
     lambda v: v.a * v.b * np.log(v.a * v.b) + 1 / v.a + np.arcsin(0.3 * v.x)
     + np.arccos(0.3 * v.y) + np.arctan(v.x) + np.arctan2(v.x, v.y) + np.floor(3 * v.x)
     + np.round(10 * v.y, 1) + v.x - 1.5 * np.floor((v.x - 0.2) / 1.5) + 2 ** v.a),
    ("compare", lambda v: (v.x < v.y) + 2 * (v.x <= 0.2) + 4 * (v.x > v.y * 0.5) + 8 * (v.x >= v.a)
     + 16 * (v.x == v.x) + 32 * (v.x != v.y)
     # ties: the same variable on both sides
     + 64 * ((v.a < v.a) + 2 * (v.a <= v.a) + 4 * (v.a > v.a) + 8 * (v.a >= v.a)
             + 16 * (v.a != v.a)),
     lambda v: (v.x < v.y) + 2.0 * (v.x <= 0.2) + 4.0 * (v.x > v.y * 0.5) + 8.0 * (v.x >= v.a)
     + 16.0 + 32.0 * (v.x != v.y) + 64.0 * 10),
    ("matvec_vecmat_tensorprod", lambda v: v.A.matvecmult(v.y).concat(v.u.vecmatmult(v.A))
     .concat(v.u.tensorprod(v.y)),
     lambda v: np.concatenate([
         np.einsum("nmpq,nmq->nmp", grid(v.A).reshape(N, M, 2, 3), grid(v.y)),
         np.einsum("nmp,nmpq->nmq", grid(v.u), grid(v.A).reshape(N, M, 2, 3)),
         np.einsum("nmp,nmq->nmpq", grid(v.u), grid(v.y)).reshape(N, M, 6)], axis=-1)),
    ("tensordot", lambda v: v.A.keops_tensordot(v.C, (2, 3), (3, 4), (1,), (0,)),
     lambda v: np.einsum("nmpq,nmqr->nmpr", grid(v.A).reshape(N, M, 2, 3),
                         grid(v.C).reshape(N, M, 3, 4)).reshape(N, M, 8)),
]


@pytest.mark.parametrize("name,lazy,dense", CASES, ids=[c[0] for c in CASES])
def test_operations_match_dense(name, lazy, dense):
    f = lazy(L)
    want = grid(dense(D))
    assert f.shape == (N, M, want.shape[-1])
    np.testing.assert_allclose(f.sum(axis=1), want.sum(1), **TOL)
    np.testing.assert_allclose(f.sum(dim=0), want.sum(0), **TOL)


def test_variables_roles_shapes_and_dedup():
    x, y = DATA["x"], DATA["y"]
    xi = LazyTensor(x[:, None, :])
    assert xi.shape == (N, 1, 3) and xi.ndim == 3
    assert (xi - LazyTensor(y[None])).shape == (N, M, 3)
    assert LazyTensor(DATA["p"]).shape == (1, 1, 3)
    assert LazyTensor(DATA["p"].reshape(1, 1, 3)).aliases == ["V0 = Pm(3)"]
    assert str(LazyTensor(2.5).formula) == "2.5" and str(LazyTensor(3).formula) == "IntCst(3)"
    # The same array object is one variable; Vi(x) and Vj(x) are two.
    assert len((xi * xi + xi.exp()).aliases) == 1
    assert len((Vi(x) - Vi(x)).aliases) == 1
    assert (Vi(x) - Vj(x)).aliases == ["V0 = Vi(3)", "V1 = Vj(3)"]
    assert LazyTensor(x, axis=1).aliases == ["V0 = Vj(3)"]
    assert Vi(DATA["a"][:, 0]).shape == (N, 1, 1)
    # A NumPy array on the left defers to LazyTensor (a parameter here).
    f = DATA["p"].reshape(1, 1, 3) * Vi(x) - Vj(y)
    np.testing.assert_allclose(f.sum(axis=1), (DATA["p"] * x)[:, None].repeat(M, 1).sum(1)
                               - y.sum(0), **TOL)


def test_scalar_parameter_takes_the_dtype_of_the_data():
    x, y = DATA["x"], DATA["y"]
    f = (-Pm(0.5) * Vi(x).sqdist(Vj(y))).exp()
    want = np.exp(-0.5 * sqdist(x[:, None], y[None])).sum(1)
    np.testing.assert_allclose(f.sum(axis=1), want, **TOL)
    out32 = (-Pm(0.5) * Vi(x.astype(np.float32)).sqdist(Vj(y.astype(np.float32)))).exp().sum(axis=1)
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, want, rtol=1e-5)


def test_component_reductions_are_lazy():
    v = L.x - L.y
    dv = grid(D.x - D.y)
    for lazy, dense in ((v.sum(), dv.sum(-1, keepdims=True)),
                        (v.min(), dv.min(-1, keepdims=True)),
                        (v.max(axis=-1), dv.max(-1, keepdims=True)),
                        (v.argmin(), dv.argmin(-1)[..., None]),
                        (v.argmax(dim=2), dv.argmax(-1)[..., None])):
        assert isinstance(lazy, LazyTensor) and lazy.ndim == 1
        np.testing.assert_allclose(lazy.sum(axis=1), dense.sum(1), **TOL)


@pytest.mark.parametrize("axis", [0, 1])
def test_reductions_numpy(axis):
    F = L.x.sqdist(L.y) * L.b  # dim 1, both i and j
    V = (L.x - L.y) * L.a  # dim 3
    dF, dV = grid(sqdist(D.x, D.y) * D.b), grid((D.x - D.y) * D.a)
    W = L.w * L.a
    dW = grid(D.w * D.a)
    np.testing.assert_allclose(F.sum(axis=axis), dF.sum(axis), **TOL)
    for op in ("min", "max"):
        want = getattr(dV, op)(axis)
        np.testing.assert_allclose(getattr(V, op)(axis=axis), want, **TOL)
        arg = getattr(V, "arg" + op)(axis=axis)
        assert arg.dtype == np.int64
        np.testing.assert_array_equal(arg, getattr(dV, "arg" + op)(axis))
        val, idx = getattr(V, f"{op}_arg{op}")(axis=axis)
        np.testing.assert_allclose(val, want, **TOL)
        np.testing.assert_array_equal(idx, getattr(dV, "arg" + op)(axis))
    # logsumexp, with and without weight; sumsoftmaxweight
    np.testing.assert_allclose((-F).logsumexp(axis=axis), np.log(np.exp(-dF).sum(axis)), **TOL)
    np.testing.assert_allclose((-F).logsumexp(axis=axis, weight=W),
                               np.log((np.exp(-dF) * dW).sum(axis)), **TOL)
    e = np.exp(-dF)
    np.testing.assert_allclose((-F).sumsoftmaxweight(W, axis=axis),
                               (e * dW).sum(axis) / e.sum(axis), **TOL)
    # K-min
    K = 4
    order = np.argsort(dF[..., 0], axis=axis, kind="stable")
    order = order[:K].T if axis == 0 else order[:, :K]
    vals = np.take_along_axis(dF[..., 0].T if axis == 0 else dF[..., 0], order, 1)
    np.testing.assert_allclose(F.Kmin(K, axis=axis), vals, **TOL)
    np.testing.assert_array_equal(F.argKmin(K, axis=axis), order)
    kv, ki = F.Kmin_argKmin(K, dim=axis)
    np.testing.assert_allclose(kv, vals, **TOL)
    np.testing.assert_array_equal(ki, order)


def test_reductions_torch_match_numpy():
    x, y, b = (torch.from_numpy(DATA[k]) for k in ("x", "y", "b"))
    xi, yj = ttorch.LazyTensor(x[:, None]), ttorch.LazyTensor(y[None])
    bj = ttorch.LazyTensor(b[None])
    F = xi.sqdist(yj) * bj
    Fn = L.x.sqdist(L.y) * L.b
    for red in (lambda f: f.sum(axis=1), lambda f: (-f).logsumexp(axis=0),
                lambda f: f.min(axis=1), lambda f: f.Kmin(3, axis=1)):
        got = red(F)
        assert isinstance(got, torch.Tensor)
        np.testing.assert_allclose(got.numpy(), red(Fn), **TOL)
    idx = F.argKmin(3, axis=1)
    assert idx.dtype == torch.int64
    np.testing.assert_array_equal(idx.numpy(), Fn.argKmin(3, axis=1))


def test_matvec_transpose_and_float32():
    x, y, b = DATA["x"], DATA["y"], DATA["w"]
    K = (-Vi(x).sqdist(Vj(y)) / 2).exp()
    dK = np.exp(-sqdist(x[:, None], y[None])[..., 0] / 2)
    np.testing.assert_allclose(K @ b, dK @ b, **TOL)
    out = K @ b[:, 0]
    assert out.shape == (N,)
    np.testing.assert_allclose(out, dK @ b[:, 0], **TOL)
    a = DATA["u"]
    assert K.t().shape == (M, N, 1) and K.T.aliases == ["V0 = Vj(3)", "V1 = Vi(3)"]
    np.testing.assert_allclose(K.t() @ a, dK.T @ a, **TOL)
    np.testing.assert_allclose(K.T.sum(axis=0), dK.T.sum(0)[:, None], **TOL)
    # float32 end to end
    x32, y32, b32 = x.astype(np.float32), y.astype(np.float32), b.astype(np.float32)
    K32 = (-Vi(x32).sqdist(Vj(y32)) / 2).exp()
    out32 = K32 @ b32
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, dK @ b, rtol=1e-5, atol=1e-5)


def test_genred_objects_are_cached():
    def run(seed):
        d = _data(seed)
        K = (-Vi(d["x"]).sqdist(Vj(d["y"]))).exp()
        return K @ d["w"]

    run(1)
    before = len(lazytensor._genred_cache)
    run(2)
    run(3)
    assert len(lazytensor._genred_cache) == before


# ---- PyTorch: autograd ---------------------------------------------------------------------------
def _t(a, grad=False):
    return torch.tensor(a, dtype=torch.float64, requires_grad=grad)


def test_gradcheck_gaussian_kernel_matvec():
    x, y, b = _t(DATA["x"][:8], True), _t(DATA["y"][:9], True), _t(DATA["w"][:9], True)
    s = _t([0.7], True)

    def f(x, y, b, s):
        K = (-ttorch.LazyTensor(x[:, None, :]).sqdist(ttorch.LazyTensor(y[None, :, :]))
             / ttorch.LazyTensor(s)).exp()
        return K @ b

    assert torch.autograd.gradcheck(f, (x, y, b, s))


def test_gradcheck_logsumexp():
    x, y, b = _t(DATA["x"][:8], True), _t(DATA["y"][:9], True), _t(DATA["b"][:9], True)

    def f(x, y, b):
        xi, yj, bj = ttorch.Vi(x), ttorch.Vj(y), ttorch.Vj(b)
        return (-xi.sqdist(yj) + bj).logsumexp(axis=1)

    assert torch.autograd.gradcheck(f, (x, y, b))


def test_hamiltonian_gradient_matches_dense():
    q, p = _t(DATA["x"], True), _t(DATA["u"] @ np.ones((2, 3)) * 0.3 + DATA["x"], True)

    def H_lazy(q, p):
        qi, qj = ttorch.LazyTensor(q[:, None, :]), ttorch.LazyTensor(q[None, :, :])
        K = (-qi.sqdist(qj) / 0.5).exp()
        return 0.5 * (p * (K @ p)).sum()

    def H_dense(q, p):
        K = torch.exp(-((q[:, None] - q[None]) ** 2).sum(-1) / 0.5)
        return 0.5 * (p * (K @ p)).sum()

    h, hd = H_lazy(q, p), H_dense(q, p)
    torch.testing.assert_close(h, hd, rtol=1e-10, atol=1e-10)
    g = torch.autograd.grad(h, (q, p))
    gd = torch.autograd.grad(hd, (q, p))
    for a, c in zip(g, gd):
        torch.testing.assert_close(a, c, rtol=1e-10, atol=1e-10)


def test_knn_argkmin_matches_argsort():
    rng = np.random.default_rng(5)
    train, test = rng.standard_normal((40, 2)), rng.standard_normal((20, 2))
    d2 = Vi(test).sqdist(Vj(train))
    idx = d2.argKmin(5, axis=1)
    want = np.argsort(sqdist(test[:, None], train[None])[..., 0], axis=1, kind="stable")[:, :5]
    np.testing.assert_array_equal(idx, want)
    tt, tr = torch.from_numpy(test), torch.from_numpy(train)
    tidx = ttorch.Vi(tt).sqdist(ttorch.Vj(tr)).argKmin(5, axis=1)
    np.testing.assert_array_equal(tidx.numpy(), want)


# ---- batch dimensions ----------------------------------------------------------------------------
def test_batched_numpy_with_broadcasting():
    rng = np.random.default_rng(7)
    B = 3
    x = rng.standard_normal((B, N, 1, 3))
    y = rng.standard_normal((1, 1, M, 3))  # broadcasts over the batch
    s = rng.uniform(0.5, 1.5, (B, 1, 1, 1))  # one bandwidth per batch element
    v = rng.standard_normal((B, M, 2))
    K = (-LazyTensor(x).sqdist(LazyTensor(y)) / LazyTensor(s)).exp()
    assert K.shape == (B, N, M, 1) and K.nbatchdims == 1
    dK = np.exp(-sqdist(x, y) / s)[..., 0]  # (B, N, M)
    np.testing.assert_allclose(K.sum(axis=2), dK.sum(2)[..., None], **TOL)
    np.testing.assert_allclose(K.sum(dim=-3), dK.sum(1)[..., None], **TOL)
    np.testing.assert_allclose(K @ v, dK @ v, **TOL)
    np.testing.assert_array_equal(K.argmax(axis=2)[..., 0], dK.argmax(2))
    np.testing.assert_allclose(Vi(x[:, :, 0]).sqdist(Vj(y[0, 0])).Kmin(2, axis=2),
                               np.sort(sqdist(x, y)[..., 0], axis=2)[..., :2], **TOL)


def test_batched_torch_gradients():
    B = 2
    x = torch.randn(B, N, 1, 3, dtype=torch.float64, requires_grad=True)
    y = torch.randn(1, M, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(B, M, 2, dtype=torch.float64, requires_grad=True)
    K = (-ttorch.LazyTensor(x).sqdist(ttorch.LazyTensor(y[:, None]))).exp()
    out = K @ b
    dense = torch.exp(-((x - y[:, None]) ** 2).sum(-1)) @ b
    torch.testing.assert_close(out, dense, rtol=1e-10, atol=1e-10)
    g = torch.autograd.grad((out ** 2).sum(), (x, y, b))
    gd = torch.autograd.grad((dense ** 2).sum(), (x, y, b))
    for a, c in zip(g, gd):
        torch.testing.assert_close(a, c, rtol=1e-10, atol=1e-10)


# ---- errors --------------------------------------------------------------------------------------
def test_errors():
    x, y = DATA["x"], DATA["y"]
    with pytest.raises(TypeError, match="cannot mix NumPy arrays and PyTorch tensors"):
        Vi(x) - ttorch.Vj(torch.from_numpy(y))
    with pytest.raises(ValueError, match=r"LazyTensor.__add__: .*dims 3 and 2"):
        Vi(x) + Vj(DATA["w"])
    with pytest.raises(ValueError, match="LazyTensor.sqdist: .*dims 3 and 2"):
        Vi(x).sqdist(Vj(DATA["w"]))
    with pytest.raises(ValueError, match="neither an i-, a j- nor a parameter shape"):
        LazyTensor(np.zeros((4, 5, 3)))
    with pytest.raises(ValueError, match="ambiguous"):
        LazyTensor(x)
    with pytest.raises(ValueError, match="no j-variable"):
        (Vi(x) * 2).sum(axis=1)
    with pytest.raises(ValueError, match="no i-variable"):
        Vj(y).exp().logsumexp(axis=0)
    with pytest.raises(ValueError, match="rows"):
        Vi(x) + Vi(y)  # N = 25 and 30 rows
    with pytest.raises(TypeError, match="float32, float64, float16 or bfloat16"):
        Vi(np.ones((3, 2), dtype=np.int64))
    with pytest.raises(TypeError, match="dtypes"):
        Vi(x).sqdist(Vj(y.astype(np.float32))).sum(axis=1)
    with pytest.raises(ValueError, match="rows"):  # a 25 x 30 kernel matrix
        (Vi(x) - Vj(y)).sqnorm2().solve(Vi(DATA["a"]), alpha=0.1)
    with pytest.raises(ValueError, match="one i- or j-variable"):
        (Vi(x) - Vj(x)).sqnorm2().solve(Vi(x).sqnorm2(), alpha=0.1)
    with pytest.raises(ValueError, match="dim 1"):
        (Vi(x) - Vj(y)) @ y
    with pytest.raises(ValueError, match="axis"):
        Vi(x).sqdist(Vj(y)).logsumexp()
    with pytest.raises(ValueError, match="axis 5"):
        Vi(x).sqdist(Vj(y)).sum(axis=5)
    with pytest.raises(ValueError, match="positive integer"):
        Vi(x).sqdist(Vj(y)).Kmin(0, axis=1)
    with pytest.raises(IndexError):
        Vi(x)[3]
    with pytest.raises(TypeError, match="truth value"):
        bool(Vi(x) < Vj(y))
    with pytest.raises(TypeError):
        Vi(x) + "a"


def test_module_exports():
    assert tnp.LazyTensor is ttorch.LazyTensor is lazytensor.LazyTensor
    for m in (tnp, ttorch):
        for name in ("LazyTensor", "Vi", "Vj", "Pm", "Genred"):
            assert name in m.__all__


def test_sinc_is_the_normalised_sinc_of_torch_and_numpy():
    # pykeops's LazyTensor.sinc is sin(pi x) / (pi x); sinxdivx is the op sin(x) / x.
    import torch
    import tessel.torch as tt

    x = torch.tensor([[-2.5], [-1.0], [-1e-9], [0.0], [1e-9], [0.5], [3.0]], dtype=torch.float64,
                     requires_grad=True)
    ones = torch.ones(1, 1, dtype=torch.float64)
    got = (tt.Vi(x).sinc() * tt.Vj(ones)).sum(1)
    want = torch.sinc(x)
    assert torch.allclose(got, want, rtol=1e-14, atol=1e-15)
    g_got, = torch.autograd.grad(got.sum(), x)
    # d/dx sinc: (pi x cos(pi x) - sin(pi x)) / (pi x^2), its series near 0 (torch's own backward
    # returns 0 there, which is off by pi^2 |x| / 3).
    t = x.detach()
    px = torch.pi * t
    far = (px * torch.cos(px) - torch.sin(px)) / (torch.pi * t * t)
    near = -torch.pi**2 * t / 3 + torch.pi**4 * t**3 / 30
    g_want = torch.where(t.abs() < 1e-3, near, far)
    assert torch.allclose(g_got, g_want, rtol=1e-12, atol=1e-15)
    u = (tt.Vi(x).sinxdivx() * tt.Vj(ones)).sum(1)
    assert torch.allclose(u, torch.sinc(x / torch.pi), rtol=1e-14, atol=1e-15)


def test_sinc_is_the_cpp_builders_sinc():
    # The formula and points of tests/cpp/test_sinc_naming.cpp: C++ sinc(x) and x.sinc() agree.
    x = np.array([[0.0], [0.5], [-0.5], [1.5], [0.25], [1.0], [2.0], [-3.0]])
    s = Vi(x).sinc()
    assert str(s.formula) == "SinXDivX((3.1415926535897931*Vi(0,1)))"
    got = (s * Vj(np.ones((1, 1)))).sum(1)[:, 0]
    want = [1.0, 2 / math.pi, 2 / math.pi, -2 / (3 * math.pi), 2 * math.sqrt(2) / math.pi, 0, 0, 0]
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)


def test_genred_cache_is_bounded():
    # A loop that builds a new formula each step must not grow the process without bound.
    import numpy as np
    import tessel.numpy as tn
    from tessel import _lazy_reduce

    x, y = np.random.rand(4, 1), np.random.rand(5, 1)
    cache = _lazy_reduce._genred_cache
    old = cache.maxsize
    cache.maxsize = 3
    try:
        for k in range(6):
            (tn.Vi(x) - tn.Vj(y) * float(k + 2)).sum(1)
            assert len(cache) <= 3
    finally:
        cache.maxsize = old


def test_str_shows_formula_variables_and_shape():
    """str() read as repr's one line; like pykeops's it now gives the formula and shape on lines
    of their own, with what each variable of the formula holds."""
    x, y = np.random.rand(10, 3), np.random.rand(20, 3)
    L = (-((Vi(x) - Vj(y)) ** 2).sum()).exp() * Pm([1.0, 2.0])
    assert str(L) == ("tessel LazyTensor\n"
                      "    formula: (Exp((-Sum(Square((Vi(0,3)-Vj(1,3))))))*Pm(2,2))\n"
                      "    variables:\n"
                      "        Vi(0,3): ndarray of dtype float64, shape (10, 3)\n"
                      "        Vj(1,3): ndarray of dtype float64, shape (20, 3)\n"
                      "        Pm(2,2): the numbers (1.0, 2.0)\n"
                      "    shape: (10, 20, 2)")
    assert repr(L).startswith("LazyTensor(formula='(Exp(")
    assert str(LazyTensor(2.5)).splitlines()[2] == "    variables: none (a constant)"
