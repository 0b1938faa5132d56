"""tessel.compat.pykeops against the real pykeops 2.x (when installed) and dense torch (always)."""
import importlib
import os
import pickle
import sys

import numpy as np
import pytest
import torch

os.environ.setdefault("PYKEOPS_VERBOSE", "0")

import tessel.compat  # noqa: E402
from tessel.compat.pykeops import numpy as tn  # noqa: E402
from tessel.compat.pykeops import torch as tk  # noqa: E402
from tessel.compat.pykeops.numpy import cluster as tnc  # noqa: E402
from tessel.compat.pykeops.torch import cluster as tkc  # noqa: E402

try:  # The reference: the real pykeops (CPU), compiling each new formula with g++ (~5 s).
    import pykeops.numpy as rn
    import pykeops.numpy.cluster as rnc
    import pykeops.torch as rk
    import pykeops.torch.cluster as rkc
except ImportError:
    rn = rnc = rk = rkc = None
HAVE_PYKEOPS = rk is not None

F64 = torch.float64
TOL = dict(rtol=1e-10, atol=1e-12)


def _t(a):
    return torch.from_numpy(np.ascontiguousarray(a))


def _data(seed, *shapes):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


def check_same(ours, ref, tol=TOL):
    """Same structure, shapes, dtypes (torch or numpy) and values; indices exactly."""
    if isinstance(ref, tuple):
        assert isinstance(ours, tuple) and len(ours) == len(ref)
        for o, r in zip(ours, ref):
            check_same(o, r, tol)
        return
    assert type(ours) is type(ref), (type(ours), type(ref))
    assert tuple(ours.shape) == tuple(ref.shape), (ours.shape, ref.shape)
    assert ours.dtype == ref.dtype, (ours.dtype, ref.dtype)
    o, r = (np.asarray(a.detach()) if isinstance(a, torch.Tensor) else a for a in (ours, ref))
    if np.issubdtype(r.dtype, np.integer):
        np.testing.assert_array_equal(o, r)
    else:
        np.testing.assert_allclose(o, r, **tol)


def compare(ours, dense, real=None):
    """ours vs the dense reference, and vs real pykeops when it ran."""
    check_same(ours, dense)
    if real is not None:
        check_same(ours, real)


def sqd(a, b):
    return ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1, keepdim=True)


def gauss_dense(x, y, b, g):
    return (torch.exp(-g * sqd(x, y)) * b[None, :, :]).sum(1)


# ---- Genred / generic_* against pykeops (at most 8 distinct pykeops formulas in this file) -------
GAUSS = ("Exp(-G*SqDist(X,Y))*B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(2)", "G = Pm(1)"])


def test_genred_sum_torch_and_numpy():  # pykeops formula 1 (torch and numpy share it)
    x, y, b = _data(0, (20, 3), (30, 3), (30, 2))
    g = np.array([0.7])
    args_t = [_t(a) for a in (x, y, b, g)]
    ours_t = tk.Genred(*GAUSS, axis=1)(*args_t)
    dense = gauss_dense(*args_t)
    ours_n = tn.Genred(*GAUSS, axis=1)(x, y, b, g)
    real_t = rk.Genred(*GAUSS, axis=1)(*args_t) if HAVE_PYKEOPS else None
    real_n = rn.Genred(*GAUSS, axis=1)(x, y, b, g) if HAVE_PYKEOPS else None
    compare(ours_t, dense, real_t)
    compare(ours_n, dense.numpy(), real_n)
    # Gradients (against dense torch: a pykeops gradient would compile another formula).
    xs = args_t[0].clone().requires_grad_()
    gs = args_t[3].clone().requires_grad_()
    w = torch.randn(20, 2, dtype=F64)
    out = (tk.Genred(*GAUSS, axis=1)(xs, args_t[1], args_t[2], gs) * w).sum()
    ref = (gauss_dense(xs, args_t[1], args_t[2], gs) * w).sum()
    for a, r in zip(torch.autograd.grad(out, [xs, gs]), torch.autograd.grad(ref, [xs, gs])):
        torch.testing.assert_close(a, r, rtol=1e-10, atol=1e-12)


def test_genred_default_axis_is_0_min_argmin():  # pykeops formula 2
    formula, aliases = "(X-Y)*B", ["X = Vi(2)", "Y = Vj(2)", "B = Vi(2)"]
    x, y, b = (_t(a) for a in _data(1, (15, 2), (11, 2), (15, 2)))
    ours = tk.Genred(formula, aliases, reduction_op="Min_ArgMin")(x, y, b)  # axis=0: over i
    F = (x[:, None, :] - y[None, :, :]) * b[:, None, :]                     # (N, M, 2)
    vals, idx = F.min(0)
    compare(ours, (vals, idx), rk.Genred(formula, aliases, reduction_op="Min_ArgMin")(x, y, b)
            if HAVE_PYKEOPS else None)
    assert ours[0].shape == (11, 2)


def test_genred_kmin_argkmin_vector_layout():  # pykeops formula 3
    formula, aliases = "(X-Y)*B", ["X = Vi(2)", "Y = Vj(2)", "B = Vi(2)"]
    x, y, b = (_t(a) for a in _data(2, (9, 2), (13, 2), (9, 2)))
    ours = tk.Genred(formula, aliases, reduction_op="KMin_ArgKMin", axis=1, opt_arg=3)(x, y, b)
    F = (x[:, None, :] - y[None, :, :]) * b[:, None, :]          # (N, M, 2)
    vals, idx = torch.sort(F, dim=1, stable=True)
    dense = (vals[:, :3, :], idx[:, :3, :])                        # KeOps layout (N, K, D)
    real = (rk.Genred(formula, aliases, reduction_op="KMin_ArgKMin", axis=1, opt_arg=3)(x, y, b)
            if HAVE_PYKEOPS else None)
    compare(ours, dense, real)


def test_genred_sumsoftmaxweight():  # pykeops formula 4
    aliases = ["X = Vi(3)", "Y = Vj(3)", "B = Vj(2)"]
    x, y, b = (_t(a) for a in _data(3, (12, 3), (17, 3), (17, 2)))
    kw = dict(reduction_op="SumSoftMaxWeight", formula2="B", axis=1)
    ours = tk.Genred("-SqDist(X,Y)", aliases, **kw)(x, y, b)
    dense = (torch.softmax(-sqd(x, y), dim=1) * b[None]).sum(1)
    compare(ours, dense, rk.Genred("-SqDist(X,Y)", aliases, **kw)(x, y, b) if HAVE_PYKEOPS
            else None)


LSE = ("( B - (P * (SqDist(X,Y) / IntCst(2)) ) )", "A = Vi(1)", "X = Vi(2)", "Y = Vj(2)",
       "B = Vj(1)", "P = Pm(1)")  # GeomLoss's softmin


def test_generic_logsumexp_geomloss_softmin():  # pykeops formula 5
    x, y, h = (_t(a) for a in _data(4, (25, 2), (35, 2), (35, 1)))
    p = torch.tensor([40.0], dtype=F64)
    ours = tk.generic_logsumexp(*LSE)(x, y, h, p)
    dense = torch.logsumexp(h.view(1, -1) - p * sqd(x, y)[..., 0] / 2, dim=1, keepdim=True)
    compare(ours, dense, rk.generic_logsumexp(*LSE)(x, y, h, p) if HAVE_PYKEOPS else None)
    # Numpy front end, same formula.
    compare(tn.generic_logsumexp(*LSE)(x.numpy(), y.numpy(), h.numpy(), p.numpy()),
            dense.numpy(), rn.generic_logsumexp(*LSE)(x.numpy(), y.numpy(), h.numpy(), p.numpy())
            if HAVE_PYKEOPS else None)


def test_generic_argkmin_and_sum():  # pykeops formula 6 (generic_sum reuses formula 1)
    args = ("SqDist(X,Y)", "a = Vj(4)", "X = Vi(3)", "Y = Vj(3)")
    x, y = (_t(a) for a in _data(5, (30, 3), (10, 3)))
    ours = tk.generic_argkmin(*args)(x, y)  # output Vj: reduction over i
    dense = torch.argsort(sqd(y, x)[..., 0], dim=1)[:, :4]
    compare(ours, dense, rk.generic_argkmin(*args)(x, y) if HAVE_PYKEOPS else None)
    assert ours.dtype == torch.int64 and ours.shape == (10, 4)
    b, g = _t(_data(6, (10, 2))[0]), torch.tensor([0.7], dtype=F64)
    s = tk.generic_sum(GAUSS[0], "a = Vi(2)", *GAUSS[1])(x, y, b, g)
    compare(s, gauss_dense(x, y, b, g),
            rk.generic_sum(GAUSS[0], "a = Vi(2)", *GAUSS[1])(x, y, b, g) if HAVE_PYKEOPS else None)


def test_lazytensor_batched_gaussian_matmul():  # pykeops formula 7 (batch mode)
    x, y, v = (_t(a) for a in _data(7, (2, 20, 3), (2, 25, 3), (2, 25, 2)))

    def kernel(LT):
        x_i, y_j = LT(x[:, :, None, :]), LT(y[:, None, :, :])
        return (-((x_i - y_j) ** 2).sum(-1) / 2).exp()

    K = kernel(tk.LazyTensor)
    Kd = torch.exp(-((x[:, :, None, :] - y[:, None, :, :]) ** 2).sum(-1) / 2)  # (2, 20, 25)
    compare(K @ v, Kd @ v, kernel(rk.LazyTensor) @ v if HAVE_PYKEOPS else None)
    assert (K.shape, K._shape, K.ndim, K.dim(), K.nbatchdims) == ((2, 20, 25), (2, 20, 25, 1),
                                                                  1, 4, 1)
    if HAVE_PYKEOPS:
        R = kernel(rk.LazyTensor)
        assert (K.shape, K._shape, K.ndim, K.dim(), K.nbatchdims) == (
            R.shape, R._shape, R.ndim, R.dim(), R.nbatchdims)
    # Transpose and reductions over the other axis (against dense only: each would be one more
    # pykeops compilation).
    check_same(K.t() @ v[:, :20, :], Kd.transpose(1, 2) @ v[:, :20, :])
    check_same(K.sum(dim=2), Kd.sum(2)[..., None])
    check_same(K.sum(dim=1), Kd.sum(1)[..., None])


def test_lazytensor_logsumexp_weight_numpy():  # pykeops formula 8
    x, y, w = _data(8, (14, 2), (19, 2), (19, 3))
    w = np.abs(w) + 0.1

    def run(LT):
        x_i, y_j, w_j = LT(x[:, None, :]), LT(y[None, :, :]), LT(w[None, :, :])
        return (-((x_i - y_j) ** 2).sum(-1)).logsumexp(dim=1, weight=w_j)

    C = -((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)
    dense = np.log((np.exp(C)[:, :, None] * w[None]).sum(1))
    compare(run(tn.LazyTensor), dense, run(rn.LazyTensor) if HAVE_PYKEOPS else None)
    # pykeops also takes the weight as `other` (its test_torch_func_logsumexp.py does).
    x_i, y_j, w_j = (tn.LazyTensor(a) for a in (x[:, None, :], y[None, :, :], w[None, :, :]))
    compare((-((x_i - y_j) ** 2).sum(-1)).logsumexp(dim=1, other=w_j), dense, None)


# ---- behaviour checked against dense references only ---------------------------------------------
def test_all_reduction_layouts():
    x, y, b = (_t(a) for a in _data(9, (6, 2), (8, 2), (8, 2)))
    aliases = ["X = Vi(2)", "Y = Vj(2)", "B = Vj(2)"]
    F = (x[:, None, :] - y[None, :, :]) * b[None]
    r = lambda op, **kw: tk.Genred("(X-Y)*B", aliases, reduction_op=op, axis=1, **kw)(x, y, b)
    check_same(r("Sum"), F.sum(1))
    check_same(r("Max"), F.max(1).values)
    check_same(r("ArgMax"), F.argmax(1))
    check_same(r("Max_ArgMax"), tuple(F.max(1)))
    check_same(r("KMin", opt_arg=2), torch.sort(F, 1).values[:, :2, :])
    check_same(r("ArgKMin", opt_arg=2), torch.sort(F, 1).indices[:, :2, :])
    s = tk.Genred("SqDist(X,Y)", aliases, reduction_op="KMin", axis=1, opt_arg=3)(x, y, b)
    check_same(s, torch.sort(sqd(x, y)[..., 0], 1).values[:, :3])  # D = 1: (N, K)


def test_formula_without_j_variable_has_one_j():
    x, p = _t(_data(10, (5, 2))[0]), torch.tensor([2.0, 3.0], dtype=F64)
    g = tk.Genred("X*P", ["X = Vi(2)", "P = Pm(2)"], axis=1)
    check_same(g(x, p), x * p)
    xs = x.clone().requires_grad_()
    (gx,) = torch.autograd.grad(g(xs, p).sum(), xs)
    check_same(gx, p.expand(5, 2))


def test_unnamed_and_positional_aliases():
    x, y, b = (_t(a) for a in _data(11, (7, 3), (9, 3), (9, 2)))
    g = torch.tensor([0.5], dtype=F64)
    ref = gauss_dense(x, y, b, g)
    a = tk.Genred("Exp(-Var(3,1,2)*SqDist(X,Y))*B", ["Y = Vj(1,3)", "X = Vi(0,3)", "B = Vj(2,2)"],
                  axis=1)
    assert a.nargs == 4
    check_same(a(x, y, b, g), ref)
    c = tk.Genred("Exp(-Var(3,1,2)*SqDist(Var(0,3,0),Var(1,3,1)))*Var(2,2,1)",
                  ["Vi(0,3)", "Vj(1,3)", "Var(2,2,1)"], axis=1)
    check_same(c(x, y, b, g), ref)
    with pytest.raises(ValueError, match="number of arguments"):
        a(x, y, b)


def test_symbolic_variables():
    x, y, b = (_t(a) for a in _data(12, (7, 3), (9, 3), (9, 2)))
    x_i, y_j, b_j, g = tk.Vi(0, 3), tk.Vj(1, 3), tk.Vj(2, 2), tk.Pm(3, 1)
    fun = ((-g * ((x_i - y_j) ** 2).sum()).exp() * b_j).sum_reduction(axis=1)
    gg = torch.tensor([0.5], dtype=F64)
    check_same(fun(x, y, b, gg), gauss_dense(x, y, b, gg))
    # Symbolic and data variables mixed: the data come after the symbolic arguments.
    fun2 = ((-((x_i - tk.LazyTensor(y[None])) ** 2).sum()).exp() * tk.Vj(b)).sum(dim=1)
    check_same(fun2(x), gauss_dense(x, y, b, torch.tensor([1.0], dtype=F64)))
    # Transposed symbolic formula: reduction over i of K^T.
    fun3 = ((-((x_i - y_j) ** 2).sum()).exp()).t().sum(dim=1)
    check_same(fun3(x, y), torch.exp(-sqd(y, x)).sum(1))
    # The old tuple syntax, on NumPy.
    xn, yn = x.numpy(), y.numpy()
    f4 = (tn.LazyTensor((0, 3, 0)) - tn.LazyTensor((1, 3, 1))).sqnorm2().min(dim=1)
    check_same(f4(xn, yn), sqd(x, y).min(1).values.numpy())


def test_lazytensor_conventions_and_options():
    x, y = (_t(a) for a in _data(13, (6, 3), (8, 3)))
    x_i, y_j = tk.Vi(x), tk.Vj(y)
    D = x_i - y_j
    assert (D.shape, D._shape, D.ndim, D.dim(), D.nbatchdims) == ((6, 8, 3), (6, 8, 3), 3, 3, 0)
    assert x_i.axis == 0 and y_j.axis == 1 and tk.Pm(2.0).axis == 2 and D.axis is None
    assert D.dtype == "float64" and len(D.variables) == 2 and D.variables[0] is x
    S = D.sqnorm2()
    assert S.shape == (6, 8) and S.T.shape == (8, 6)
    check_same(S.sum(0, sum_scheme="kahan_scheme", backend="CPU"), sqd(y, x).sum(1))
    check_same(S.argmin(dim=1), sqd(x, y).argmin(1))
    check_same(S.Kmin(2, dim=0), torch.sort(sqd(y, x)[..., 0], 1).values[:, :2])
    check_same(D.sum(-1).exp().sum(1), torch.exp((x[:, None] - y[None]).sum(-1, True)).sum(1))
    check_same(D[..., 1].abs().max(1), (x[:, None, 1:2] - y[None, :, 1:2]).abs().max(1).values)
    check_same(tk.LazyTensor.cat((x_i, y_j), -1).sum(-1).sum(1),
               (x.sum(-1, True)[:, None] + y.sum(-1, True)[None]).sum(1))
    check_same((S * 2.5 + tk.Pm([1.0, 2.0])).sum(1),
               (2.5 * sqd(x, y) + torch.tensor([1.0, 2.0], dtype=F64)).sum(1))
    v = torch.randn(8, dtype=F64)
    check_same((-S).exp() @ v, (torch.exp(-sqd(x, y))[..., 0] @ v))  # 1-D in, 1-D out
    gx = (-S).exp().grad(x_i, tk.Vi(torch.ones(6, 1, dtype=F64))).sum(1)
    check_same(gx, (-2 * (x[:, None] - y[None]) * torch.exp(-sqd(x, y))).sum(1))
    # Floats are parameters (as in pykeops): new values reuse the same reduction.
    from tessel.compat.pykeops import _lazytensor
    _lazytensor.clear_caches()  # an earlier test in this process may have built this reduction
    n0 = len(_lazytensor._genred_cache)
    for scale in (0.5, 0.7, np.float64(1.3)):
        check_same((-S * scale).exp().sum(1), torch.exp(-scale * sqd(x, y)).sum(1))
    assert len(_lazytensor._genred_cache) == n0 + 1
    pending = S.sum(1, call=False)
    check_same(pending(), sqd(x, y).sum(1))
    with pytest.raises(ValueError, match="axis"):
        S.sum(3)
    with pytest.raises(TypeError, match="unexpected keyword"):
        S.sum(1, bogus=1)
    with pytest.raises(TypeError, match="torch"):
        tk.LazyTensor(np.zeros((3, 1, 2)))


def test_lazytensor_autograd_through_geomloss_style_kernel():
    x = _t(_data(14, (1, 10, 2))[0]).requires_grad_()
    y, a = _t(_data(15, (1, 12, 2))[0]), torch.rand(1, 12, 1, dtype=F64)
    K = (-((tk.LazyTensor(x[:, :, None, :]) - tk.LazyTensor(y[:, None, :, :])) ** 2).sum(-1)).exp()
    out = (K @ a).sum()
    ref = (torch.exp(-((x[:, :, None] - y[:, None]) ** 2).sum(-1)) @ a).sum()
    torch.testing.assert_close(torch.autograd.grad(out, x)[0], torch.autograd.grad(ref, x)[0])


# ---- KernelSolve ---------------------------------------------------------------------------------
KS = ("Exp(-G*SqDist(X,Y))*A", ["X = Vi(2)", "Y = Vj(2)", "A = Vj(2)", "G = Pm(1)"])


def _solve_dense(x, b, g, alpha):
    K = torch.exp(-g * sqd(x, x)[..., 0])
    return torch.linalg.solve(K + alpha * torch.eye(len(x), dtype=x.dtype), b)


def test_kernelsolve_forward_torch_numpy_lazytensor():
    x, b = (_t(a) for a in _data(16, (30, 2), (30, 2)))
    g = torch.tensor([2.0], dtype=F64)
    ref = _solve_dense(x, b, g, 0.1)
    ks = tk.KernelSolve(*KS, "A", axis=1)
    torch.testing.assert_close(ks(x, x, b, g, alpha=0.1, eps=1e-12), ref)
    a_np = tn.KernelSolve(*KS, "A", axis=1)(x.numpy(), x.numpy(), b.numpy(), g.numpy(),
                                          alpha=0.1, eps=1e-12)
    np.testing.assert_allclose(a_np, ref.numpy(), rtol=1e-8, atol=1e-10)
    K = (-tk.Pm(g) * tk.Vi(x).sqdist(tk.Vj(x))).exp()
    torch.testing.assert_close(K.solve(tk.Vi(b), alpha=0.1, eps=1e-12), ref)
    Kn = (-2.0 * tn.Vi(x.numpy()).sqdist(tn.Vj(x.numpy()))).exp()
    np.testing.assert_allclose(Kn.solve(b.numpy(), alpha=0.1, eps=1e-12), ref.numpy(),
                               rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("lib", ["torch", "numpy"])
def test_lazytensor_solve_with_lazytensor_b(lib):
    """pykeops's K.solve(LazyTensor(b[:, None, :]), alpha=a): (N, D) out, gradients in torch."""
    x, b = (_t(a).requires_grad_() for a in _data(23, (25, 2), (25, 3)))
    g = torch.tensor([2.0], dtype=F64)
    ref = _solve_dense(x, b, g, 0.2)
    if lib == "numpy":
        xn, bn = x.detach().numpy(), b.detach().numpy()
        K = (-2.0 * ((tn.LazyTensor(xn[:, None, :]) - tn.LazyTensor(xn[None, :, :])) ** 2)
             .sum(-1)).exp()
        out = K.solve(tn.LazyTensor(bn[:, None, :]), alpha=0.2, eps=1e-12)
        np.testing.assert_allclose(out, ref.detach().numpy(), rtol=1e-8, atol=1e-10)
        return
    K = (-2.0 * ((tk.LazyTensor(x[:, None, :]) - tk.LazyTensor(x[None, :, :])) ** 2)
         .sum(-1)).exp()
    out = K.solve(tk.LazyTensor(b[:, None, :]), alpha=0.2, eps=1e-12)
    assert out.shape == (25, 3)
    torch.testing.assert_close(out, ref)
    w = torch.randn(25, 3, dtype=F64)
    for p, q in zip(torch.autograd.grad((out * w).sum(), (x, b)),
                    torch.autograd.grad((ref * w).sum(), (x, b))):
        torch.testing.assert_close(p, q, rtol=1e-8, atol=1e-10)
    if HAVE_PYKEOPS:
        Kr = (-2.0 * ((rk.LazyTensor(x[:, None, :]) - rk.LazyTensor(x[None, :, :])) ** 2)
              .sum(-1)).exp()
        real = Kr.solve(rk.LazyTensor(b[:, None, :]), alpha=0.2, eps=1e-12)
        assert real.shape == out.shape
        torch.testing.assert_close(out, real, rtol=1e-6, atol=1e-8)


def test_kernelsolve_gradcheck():
    x, b = (_t(a).requires_grad_() for a in _data(17, (6, 2), (6, 2)))
    g = torch.tensor([0.8], dtype=F64, requires_grad=True)
    ks = tk.KernelSolve(*KS, "A", axis=1)
    f = lambda x, b, g: ks(x, x, b, g, alpha=0.5, eps=1e-14)  # noqa: E731
    assert torch.autograd.gradcheck(f, (x, b, g), eps=1e-6, atol=1e-7)
    # Against dense autograd, and second order.
    w = torch.randn(6, 2, dtype=F64)
    gr = torch.autograd.grad((f(x, b, g) * w).sum(), (x, b, g), create_graph=True)
    gd = torch.autograd.grad((_solve_dense(x, b, g, 0.5) * w).sum(), (x, b, g), create_graph=True)
    for p, q in zip(gr, gd):
        torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-11)
    hr = torch.autograd.grad(gr[0].pow(2).sum(), (x, g))
    hd = torch.autograd.grad(gd[0].pow(2).sum(), (x, g))
    for p, q in zip(hr, hd):
        torch.testing.assert_close(p, q, rtol=1e-7, atol=1e-9)


# ---- block-sparse ranges ------------------------------------------------------------------------
def _clustered(seed, n, m):
    """Sorted clouds, their cluster ranges, a random cluster mask, its ranges and the dense mask."""
    torch.manual_seed(seed)
    x, y = torch.rand(n, 2, dtype=F64), torch.rand(m, 2, dtype=F64)
    (x,), lx = tkc.sort_clusters((x,), tkc.grid_cluster(x, 0.3))
    (y,), ly = tkc.sort_clusters((y,), tkc.grid_cluster(y, 0.3))
    rx, ry = tkc.cluster_ranges(lx), tkc.cluster_ranges(ly)
    keep = torch.rand(len(rx), len(ry)) < 0.5
    mask = keep[lx.long()][:, ly.long()].to(F64)[..., None]
    return x, y, tkc.from_matrix(rx, ry, keep), mask


GAUSS2 = ("Exp(-G*SqDist(X,Y))*B", ["X = Vi(2)", "Y = Vj(2)", "B = Vj(2)", "G = Pm(1)"])


def test_block_sparse_ranges():
    x, y, ranges, mask = _clustered(21, 40, 50)
    b, c = torch.randn(50, 2, dtype=F64), torch.randn(40, 2, dtype=F64)
    g = torch.tensor([3.0], dtype=F64)
    K = torch.exp(-g * sqd(x, y)) * mask                                   # (N, M, 1)
    check_same(tk.Genred(*GAUSS2, axis=1)(x, y, b, g, ranges=ranges), (K * b[None]).sum(1))
    check_same(tk.Genred("Exp(-G*SqDist(X,Y))*C", ["X = Vi(2)", "Y = Vj(2)", "C = Vi(2)",
                                                   "G = Pm(1)"])(x, y, c, g, ranges=ranges),
               (K * c[:, None]).sum(0))                                    # axis=0 (default)
    np_ranges = tuple(r.numpy() for r in ranges)
    check_same(tn.Genred(*GAUSS2, axis=1)(x.numpy(), y.numpy(), b.numpy(), g.numpy(),
                                          ranges=np_ranges), (K * b[None]).sum(1).numpy())
    # LazyTensor: the .ranges attribute, kept through arithmetic and swapped by .t().
    xs = x.clone().requires_grad_()
    Kl = (-tk.Pm(g) * tk.Vi(xs).sqdist(tk.Vj(y))).exp()
    Kl.ranges = ranges
    out = Kl @ b
    check_same(out, (K * b[None]).sum(1))
    check_same((2 * Kl).t() @ c, 2 * (K * c[:, None]).sum(0))
    check_same((-Kl).logsumexp(1), torch.logsumexp(torch.where(
        mask > 0, -torch.exp(-g * sqd(x, y)), torch.tensor(-np.inf, dtype=F64)), 1))
    xd = x.clone().requires_grad_()
    dense = ((torch.exp(-g * sqd(xd, y)) * mask) * b[None]).sum(1)
    w = torch.randn(40, 2, dtype=F64)
    torch.testing.assert_close(torch.autograd.grad((out * w).sum(), xs)[0],
                               torch.autograd.grad((dense * w).sum(), xd)[0])
    # KernelSolve on a block-diagonal pattern.
    _, lx = tkc.sort_clusters(x, tkc.grid_cluster(x, 0.3))
    rx = tkc.cluster_ranges(lx)
    diag = tkc.from_matrix(rx, rx, torch.eye(len(rx), dtype=torch.bool))
    Kd = torch.exp(-g * sqd(x, x)[..., 0]) * (lx[:, None] == lx[None, :])
    want = torch.linalg.solve(Kd + 0.1 * torch.eye(40, dtype=F64), c)
    got = tk.KernelSolve(*KS, "A", axis=1)(x, x, c, g, alpha=0.1, eps=1e-12, ranges=diag)
    torch.testing.assert_close(got, want)
    # Batch dimensions and ranges do not mix (yet): a clear error, not a silent dense reduction.
    with pytest.raises(ValueError, match="batch"):
        tk.Genred(*GAUSS2, axis=1)(x[None].expand(2, 40, 2), y, b, g, ranges=ranges)


def test_backends_and_options():
    x, y, b = (_t(a) for a in _data(19, (6, 3), (8, 3), (8, 2)))
    g = torch.ones(1, dtype=F64)
    gen = tk.Genred(*GAUSS, axis=1, dtype="float64", cuda_type="float64", enable_chunks=False,
                    rec_multVar_highdim=False, use_fast_math=False)
    ref = gen(x, y, b, g)
    check_same(gen(x, y, b, g, backend="CPU", device_id=-1), ref)
    if not tessel.cuda_available():
        # backend="GPU" is tessel's CUDA backend: without a usable GPU, the core's clear error.
        for backend in ("GPU", "GPU_1D", "GPU_2D_host"):
            with pytest.raises(ValueError, match="CUDA is not usable"):
                gen(x, y, b, g, backend=backend)
    else:
        check_same(gen(x, y, b, g, backend="GPU").cpu(), ref)
    with pytest.raises(ValueError, match="invalid backend"):
        gen(x, y, b, g, backend="TPU")
    out = torch.empty(6, 2, dtype=F64)
    assert gen(x, y, b, g, out=out) is out
    check_same(out, ref)
    check_same(pickle.loads(pickle.dumps(gen))(x, y, b, g), ref)
    check_same(tk.Genred(*GAUSS, axis=1, use_double_acc=True)(x.float(), y.float(), b.float(),
                                                             g.float()),
               ref.float(), dict(rtol=1e-6, atol=1e-7))
    with pytest.raises(ValueError, match="use_double_acc"):
        tk.Genred(*GAUSS, dtype_acc="float64", use_double_acc=True)
    with pytest.raises(ValueError, match="sum_scheme"):
        tk.Genred(*GAUSS, reduction_op="Min", sum_scheme="kahan_scheme")
    with pytest.raises(NotImplementedError, match="reduction_op"):
        tk.Genred(*GAUSS, reduction_op="Max_SumShiftExp")


# ---- install() -----------------------------------------------------------------------------------
def test_install_registers_and_restores_modules():
    before = {k: v for k, v in sys.modules.items() if k == "pykeops" or k.startswith("pykeops.")}
    try:
        tessel.compat.install()
        import pykeops
        import pykeops.config
        import pykeops.numpy.cluster
        import pykeops.torch.cluster
        from pykeops.torch import LazyTensor, generic_logsumexp  # noqa: F401
        from pykeops.torch.cluster import grid_cluster
        assert tessel.compat.installed()
        assert pykeops.__name__ == "tessel.compat.pykeops" and pykeops.__version__.startswith("2.")
        assert pykeops.config.gpu_available is tessel.cuda_available()
        assert pykeops.torch.Genred is tk.Genred and grid_cluster is tkc.grid_cluster
        assert pykeops.numpy.cluster is tnc
        assert importlib.import_module("pykeops.torch.lazytensor.LazyTensor").Vi is tk.Vi
        assert pykeops.test_torch_bindings() and pykeops.test_numpy_bindings()
    finally:
        tessel.compat.uninstall()
    after = {k: v for k, v in sys.modules.items() if k == "pykeops" or k.startswith("pykeops.")}
    assert after == before
    assert not tessel.compat.installed()


# ---- cluster helpers against pykeops's ----------------------------------------------------------
def _clusters_dense(x, lab, w):
    """Brute-force ranges / centroids / weights of a labelled cloud (NumPy, float64)."""
    C = int(lab.max()) + 1
    counts = np.array([(lab == k).sum() for k in range(C)])
    ends = np.cumsum(counts)
    cent = np.stack([(x[lab == k] * w[lab == k, None]).sum(0) / w[lab == k].sum()
                     for k in range(C)])
    return np.stack([ends - counts, ends], 1), cent, np.array([w[lab == k].sum()
                                                               for k in range(C)])


@pytest.mark.parametrize("D", [1, 2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cluster_helpers_torch(D, dtype):
    x = torch.rand(300, D, dtype=dtype) * 3 - 1
    w = torch.rand(300, dtype=dtype)
    w[:3] = 0  # clamped to min_weight
    lab = tkc.grid_cluster(x, 0.4)
    ours = dict(lab=lab, rcw=tkc.cluster_ranges_centroids(x, lab, weights=w),
                rc=tkc.cluster_ranges_centroids(x, lab), r=tkc.cluster_ranges(lab),
                s=tkc.sort_clusters((x, w), lab), s1=tkc.sort_clusters(x, lab))
    r = ours["r"]
    keep = torch.rand(len(r), len(r)) > 0.6
    ours["fm"] = tkc.from_matrix(r, r, keep)
    ours["fm32"] = tkc.from_matrix(r.int(), r.int(), keep)
    assert tkc.swap_axes(None) is None
    assert tkc.swap_axes(ours["fm"]) == ours["fm"][3:] + ours["fm"][:3]
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-13)
    if HAVE_PYKEOPS:
        ref = dict(lab=rkc.grid_cluster(x, 0.4),
                   rcw=rkc.cluster_ranges_centroids(x, lab, weights=w),
                   rc=rkc.cluster_ranges_centroids(x, lab), r=rkc.cluster_ranges(lab),
                   s=rkc.sort_clusters((x, w), lab), s1=rkc.sort_clusters(x, lab),
                   fm=rkc.from_matrix(r, r, keep), fm32=rkc.from_matrix(r.int(), r.int(), keep))
        for k in ref:
            _check_nested(ours[k], ref[k], tol)
    # Brute force, whatever the reference.
    cells = torch.floor((x - x.min(0).values) / 0.4)
    same_cell = (cells[:, None, :] == cells[None, :, :]).all(-1)
    assert torch.equal(same_cell, lab[:, None] == lab[None, :])
    (xs, ws), ls = ours["s"]
    assert torch.all(ls[1:] >= ls[:-1])
    rng, cent, wc = _clusters_dense(xs.double().numpy(), ls.numpy(),
                                    np.maximum(ws.double().numpy(), 1e-9))
    np.testing.assert_array_equal(ours["rcw"][0].numpy(), rng)
    np.testing.assert_allclose(ours["rcw"][1].double().numpy(), cent, **tol)
    np.testing.assert_allclose(ours["rcw"][2].double().numpy(), wc, **tol)
    _check_from_matrix(ours["fm"], r.numpy(), keep.numpy())


def test_cluster_helpers_numpy():
    rng = np.random.default_rng(20)
    x, w = rng.uniform(-1, 2, (300, 2)), rng.uniform(0, 1, 300)
    lab = tnc.grid_cluster(x, 0.4)
    ours = dict(lab=lab, rcw=tnc.cluster_ranges_centroids(x, lab, weights=w),
                rc=tnc.cluster_ranges_centroids(x.astype(np.float32), lab),
                r=tnc.cluster_ranges(lab), s=tnc.sort_clusters([x, w], lab))
    keep = rng.uniform(size=(len(ours["r"]), len(ours["r"]))) > 0.6
    ours["fm"] = tnc.from_matrix(ours["r"], ours["r"], keep)
    if HAVE_PYKEOPS:
        ref = dict(lab=rnc.grid_cluster(x, 0.4),
                   rcw=rnc.cluster_ranges_centroids(x, lab, weights=w),
                   rc=rnc.cluster_ranges_centroids(x.astype(np.float32), lab),
                   r=rnc.cluster_ranges(lab), s=rnc.sort_clusters([x, w], lab),
                   fm=rnc.from_matrix(ours["r"], ours["r"], keep))
        for k in ref:
            _check_nested(ours[k], ref[k], dict(rtol=1e-12, atol=1e-13))
    cells = np.floor(x / 0.4)
    same_cell = (cells[:, None, :] == cells[None, :, :]).all(-1)
    np.testing.assert_array_equal(same_cell, lab[:, None] == lab[None, :])
    (xs, ws), ls = ours["s"]
    rng_, cent, wc = _clusters_dense(xs, ls, ws)
    np.testing.assert_array_equal(ours["rcw"][0], rng_)
    np.testing.assert_allclose(ours["rcw"][1], cent, rtol=1e-12)
    np.testing.assert_allclose(ours["rcw"][2], wc, rtol=1e-12)
    _check_from_matrix(ours["fm"], ours["r"], keep)


def _check_nested(o, r, tol):
    if isinstance(r, (tuple, list)):
        assert type(o) is type(r) and len(o) == len(r)
        for a, b in zip(o, r):
            _check_nested(a, b, tol)
        return
    check_same(o, r, tol)


def _check_from_matrix(fm, r, keep):
    """The block-sparse schedule lists, for each cluster, its partners in order."""
    ranges_i, slices_i, red_j, ranges_j, slices_j, red_i = (np.asarray(a) for a in fm)
    np.testing.assert_array_equal(ranges_i, r)
    np.testing.assert_array_equal(ranges_j, r)
    _check_partners(red_j, slices_i, keep, r)
    _check_partners(red_i, slices_j, np.asarray(keep).T, r)


def _check_partners(red, slices, keep, r):
    """Row k of `keep` lists the partner clusters of cluster k: red[slices[k-1]:slices[k]]."""
    start = 0
    for k in range(len(r)):
        partners = [r[l_] for l_ in range(len(r)) if keep[k, l_]]
        np.testing.assert_array_equal(red[start:slices[k]].reshape(-1, 2),
                                      np.array(partners).reshape(-1, 2))
        start = slices[k]
