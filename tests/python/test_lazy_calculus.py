"""LazyTensor's grad_matrix, diff, divergence, laplacian, trace_operator and factorize: values and
their gradients (second order) against torch autograd on dense float64 problems, through tessel's
LazyTensor and through tessel.compat's pykeops spelling, and against real pykeops 2.3."""
import os

import pytest
import torch

import tessel.lazytensor as tl
from tessel.lazytensor import Vi, Vj

os.environ.setdefault("PYKEOPS_VERBOSE", "0")

from tessel.compat.pykeops import torch as tk  # noqa: E402

try:  # the reference: real pykeops (CPU), compiling each new formula with g++
    import pykeops.torch as rk
except ImportError:
    rk = None

N, M, D = 5, 4, 3
TOL = dict(rtol=1e-9, atol=1e-11)


def _data(seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, dtype=torch.float64, generator=g)  # noqa: E731
    return dict(x=r(N, D), y=r(M, D), b=r(M, 2), u=r(M, D), a=r(M, D * D), p=r(D))


# Each formula twice: on LazyTensors (V = Lazy) and densely on the (N, M, .) grid (V = Dense).
def gaussian(V, x, y, b, **_):
    return (-V.sqdist(x, y)).exp() * b


def norm(V, x, y, **_):
    return V.norm(x - y) * V.sqnorm(x)


def field(V, x, y, p, **_):
    return (x * y).sin() + x * V.sqnorm(x) / (1 + V.sqnorm(y)) + p * x


class Lazy:
    """The operations as LazyTensor spells them."""

    sqdist = staticmethod(lambda x, y: x.sqdist(y))
    norm = staticmethod(lambda x: x.norm(-1))
    sqnorm = staticmethod(lambda x: (x * x).sum(-1))
    elem = staticmethod(lambda f, k: f[..., k])


class Dense:
    sqdist = staticmethod(lambda x, y: ((x - y) ** 2).sum(-1, keepdim=True))
    norm = staticmethod(lambda x: x.norm(dim=-1, keepdim=True))
    sqnorm = staticmethod(lambda x: (x * x).sum(-1, keepdim=True))
    elem = staticmethod(lambda f, k: f[..., k:k + 1])


def gaussian_1(V, **k):
    return V.elem(gaussian(V, **k), 1)


def _lazy_args(mod, d):
    return dict(x=mod.Vi(d["x"]), y=mod.Vj(d["y"]), b=mod.Vj(d["b"]), p=mod.Pm(d["p"]))


def _dense_args(d):
    return dict(x=d["x"][:, None, :], y=d["y"][None, :, :], b=d["b"][None, :, :], p=d["p"])


def _dense(formula, d):
    return formula(Dense, **_dense_args(d))


def pair_jacobian(fn, x):
    """fn maps the (N, D) i-variable to an (N, M, K) grid; returns d fn_ijk / d x_il as
    (N, M, K, D), keeping the graph (the results are differentiated again)."""
    J = torch.autograd.functional.jacobian(fn, x, create_graph=True)  # (N, M, K, N, D)
    return torch.diagonal(J, dim1=0, dim2=3).permute(3, 0, 1, 2)


def _reference(name, formula, d):
    """The dense result of method `name` of formula, summed over j: (N, dim)."""
    dense = lambda x: _dense(formula, {**d, "x": x})  # noqa: E731
    P = pair_jacobian(dense, d["x"])  # (N, M, K, D)
    if name == "grad_matrix":
        out = P.flatten(2)
    elif name == "divergence":
        out = torch.diagonal(P, dim1=2, dim2=3).sum(-1, keepdim=True)
    elif name == "diff":
        out = (P * d["u"][None, :, None, :]).sum(-1)
    elif name == "laplacian":
        H = pair_jacobian(lambda x: pair_jacobian(
            lambda z: _dense(formula, {**d, "x": z}), x)[:, :, 0, :], d["x"])
        out = torch.diagonal(H, dim1=2, dim2=3).sum(-1, keepdim=True)
    return out.sum(1)


def _lazy(name, mod, formula, d):
    a = _lazy_args(mod, d)
    f = formula(Lazy, **a)
    if name == "diff":
        return f.diff(a["x"], mod.Vj(d["u"]))
    return getattr(f, name)(a["x"])


CASES = [("grad_matrix", gaussian), ("grad_matrix", norm), ("grad_matrix", field),
         ("divergence", field), ("diff", gaussian), ("diff", field), ("laplacian", norm),
         ("laplacian", gaussian_1)]


@pytest.mark.parametrize("front", ["tessel", "compat"])
@pytest.mark.parametrize("name, formula", CASES)
def test_values_and_second_order_gradients(front, name, formula):
    d = {k: v.clone().requires_grad_() for k, v in _data().items()}
    ours = _lazy(name, tk if front == "compat" else tl, formula, d).sum(1)
    ref = _reference(name, formula, d)
    torch.testing.assert_close(ours, ref, **TOL)
    w = torch.randn(ref.shape, dtype=torch.float64)
    wrt = [d["x"], d["y"], d["b"], d["p"], d["u"]]
    g_ours = torch.autograd.grad((ours * w).sum(), wrt, allow_unused=True)
    g_ref = torch.autograd.grad((ref * w).sum(), wrt, allow_unused=True)
    for k, (go, gr) in enumerate(zip(g_ours, g_ref)):
        if gr is None or go is None:
            assert (go is None or not go.abs().max()) and (gr is None or not gr.abs().max()), k
        else:
            torch.testing.assert_close(go, gr, **TOL)


def test_grad_matrix_layout_is_the_row_major_jacobian():
    # f = (x0 * y0, x1 + 2 x2): entry k * dim(x) + l is d f_k / d x_l.
    d = _data()
    x, y = Vi(d["x"]), Vj(d["y"])
    f = (x[0] * y[0]).concat(x[1] + 2 * x[2])
    gm = f.grad_matrix(x).sum(1)
    want = torch.zeros(N, 6, dtype=torch.float64)
    want[:, 0] = d["y"][:, 0].sum()
    want[:, 4], want[:, 5] = M, 2 * M
    torch.testing.assert_close(gm, want, **TOL)
    # A variable the formula does not read: zeros, as in KeOps (the derivative is 0). The formula
    # is then Zero(.), which reads no array: the result still has the arrays' dtype.
    z = Vj(d["b"])
    assert str(f.grad_matrix(z).formula) == "Zero(4)"
    torch.testing.assert_close(f.grad_matrix(z).sum(1), torch.zeros(N, 4, dtype=torch.float64))
    torch.testing.assert_close(f.diff(z, Vj(d["u"][:, :2])).sum(1),
                               torch.zeros(N, 2, dtype=torch.float64))


def test_trace_operator_of_linear_formulas_drops_the_variable():
    d = _data()
    x, a, y = Vi(d["x"]), Vj(d["a"]), Vj(d["y"])
    t = a.matvecmult(x).trace_operator(x)
    assert "Vi" not in str(t.formula)
    want = torch.diagonal(d["a"].reshape(M, D, D), dim1=1, dim2=2).sum(-1)
    torch.testing.assert_close(t.sum(0).reshape(-1), N * want, **TOL)  # constant in i
    t2 = (x * y - 2 * x).trace_operator(x)
    torch.testing.assert_close(t2.sum(0).reshape(-1), N * (d["y"].sum(-1) - 2 * D), **TOL)
    # Through compat with a symbolic variable: it is no argument of the reduction any more.
    xs, ys = tk.Vi(0, D), tk.Vj(1, D)
    red = (xs * ys * tk.Vi(d["x"][:, :1])).trace_operator(xs).sum(0)
    assert red._nsym == 2
    red = (tk.Vi(d["x"][:, :1]) * xs * tk.Vj(d["y"])).trace_operator(xs).sum(0)
    torch.testing.assert_close(red.reshape(-1), (d["y"].sum(-1)[None] * d["x"][:, :1]).sum(0),
                               **TOL)


def test_factorize_keeps_the_formula():
    d = _data()
    x, y, b = Vi(d["x"]), Vj(d["y"]), Vj(d["b"])
    k = (-x.sqdist(y)).exp()
    f = k * b + k * (b * b).sum()
    assert f.factorize(k).formula == f.formula
    assert f.auto_factorize() is f
    torch.testing.assert_close(f.factorize(k).sum(1), f.sum(1), rtol=0, atol=0)
    kc = (-tk.Vi(d["x"]).sqdist(tk.Vj(d["y"]))).exp()
    fc = kc * tk.Vj(d["b"])
    assert fc.factorize(kc).formula == fc.formula == fc.auto_factorize().formula


@pytest.mark.parametrize("call, message", [
    (lambda x, y, z, f: f.grad_matrix(x + 1), "LazyTensor.grad_matrix: other must be a LazyTensor "
                                           "that is one variable"),
    (lambda x, y, z, f: f.divergence(x), "LazyTensor.divergence: self has dim 2 and var dim 3"),
    (lambda x, y, z, f: f.laplacian(x), "LazyTensor.laplacian: self has dim 2"),
    (lambda x, y, z, f: f.diff(x, y[:2]), "LazyTensor.diff: diffin has dim 2; expected the dim 3"),
    (lambda x, y, z, f: (x * y).trace_operator(y.sum()),
     "LazyTensor.trace_operator: var must be a LazyTensor that is one variable"),
    (lambda x, y, z, f: (x * y).trace_operator(z),
     "LazyTensor.trace_operator: self has dim 3 and var dim 1"),
    (lambda x, y, z, f: x.exp().trace_operator(x), "LazyTensor.trace_operator: TraceOperator: the "
                                                "formula"),
    (lambda x, y, z, f: f.divergence("x"), "LazyTensor.divergence: expected a LazyTensor"),
])
@pytest.mark.parametrize("front", ["tessel", "compat"])
def test_bad_arguments_name_the_method(front, call, message):
    d = _data()
    mod = tk if front == "compat" else tl
    x, y, z = mod.Vi(d["x"]), mod.Vj(d["y"]), mod.Vj(d["b"][:, :1])
    f = (-x.sqdist(y)).exp() * mod.Vj(d["b"])
    with pytest.raises((ValueError, TypeError), match=message.replace("(", r"\(")):
        call(x, y, z, f)


@pytest.mark.skipif(rk is None, reason="pykeops is not installed")
def test_lazytensor_methods_against_pykeops():
    # One formula holding the methods, so that pykeops compiles a single kernel. pykeops 2.3's own
    # LazyTensor.grad_matrix (it prints the LazyTensor into the formula) and trace_operator (on
    # an array variable, and in joins) fail: their text forms are compared below.
    d = _data()

    def build(mod):
        x, y, b, u = mod.Vi(d["x"]), mod.Vj(d["y"]), mod.Vj(d["b"]), mod.Vj(d["u"])
        g = (-x.sqdist(y)).exp() * b
        v = (x * y).sin() + x * (x * x).sum()
        s = (x - y).norm2() * (x * x).sum()
        parts = (v.divergence(x), s.laplacian(x), g.diff(x, u),
                 v.factorize(x * y).auto_factorize())
        return mod.LazyTensor.concatenate(parts)

    ours = build(tk).sum(1)
    ref = build(rk).sum(1, backend="CPU")
    torch.testing.assert_close(ours, ref, **TOL)


@pytest.mark.skipif(rk is None, reason="pykeops is not installed")
def test_text_forms_against_pykeops():
    d = _data()
    aliases = ["x = Vi(3)", "y = Vj(3)", "b = Vj(2)", "u = Vj(3)"]
    g = "Exp(-SqDist(x, y)) * b"
    formula = (f"Concat(Concat(Concat(GradMatrix({g}, x), Divergence(Sin(x * y), x)), "
               f"Concat(Laplacian(Norm2(x - y) * SqNorm2(x), x), Diff({g}, x, u))), "
               f"Concat(TraceOperator(x * y - 2 * x, x), "
               f"Factorize(AutoFactorize({g}), SqDist(x, y))))")
    args = [d[k] for k in "xybu"]
    ours = tk.Genred(formula, aliases, reduction_op="Sum", axis=1)(*args)
    ref = rk.Genred(formula, aliases, reduction_op="Sum", axis=1)(*args, backend="CPU")
    torch.testing.assert_close(ours, ref, **TOL)
