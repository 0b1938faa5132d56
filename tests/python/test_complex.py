"""Complex LazyTensors: values and gradients against dense complex128 NumPy / PyTorch, both precisions.

References are the dense (N, M, D) computations in complex128; complex64 results are held to a
bound derived from float32 rounding: each of the k ops of a term adds at most a few units of
roundoff relative to the magnitudes it combines, and a sum over M terms at most M more, so
|error| <= (M + 8 k) * eps32 * sum_j |term_ij| (a worst-case bound, far above typical errors).
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tessel.lazytensor import ComplexLazyTensor, LazyTensor  # noqa: E402
import tessel.numpy  # noqa: E402,F401  (registers NumPy arrays)
import tessel.torch  # noqa: E402,F401  (registers tensors)

N, M, D = 6, 9, 3
EPS32 = float(np.finfo(np.float32).eps)
RNG = np.random.default_rng(12)


def crand(*shape):
    return RNG.uniform(-1, 1, shape) + 1j * RNG.uniform(-1, 1, shape)


X, Y = crand(N, 1, D), crand(1, M, D)
R = RNG.uniform(0.5, 1.5, (1, M, D))  # a real j-variable
S = RNG.uniform(-1, 1, (N, 1, 1))     # a real scalar i-variable

# (name, formula on LazyTensors or dense arrays (the same code), ops per term for the bound)
FORMULAS = [
    ("mult_add_real", lambda x, y, r, s: (x * y) * y.real + x + x.real, 4),
    ("divide", lambda x, y, r, s: x / (y + 2.0), 3),
    ("exp_conj", lambda x, y, r, s: (x * y.conj()).exp(), 6),
    ("sub_imag", lambda x, y, r, s: x - y * y.imag - 1j, 4),
    ("real_scalar", lambda x, y, r, s: s * x * y + x * 2.5, 4),
    ("mixed_real", lambda x, y, r, s: r / x + r * y - (r - y), 6),
    ("angle_abs", lambda x, y, r, s: (x * y).angle() * abs(x - y) + 1j * abs(y) ** 2, 8),
    ("number_ops", lambda x, y, r, s: (2 - x) * (1 + 2j) / y + 0.5j * x, 6),
]


def lazy(x, y, r, s):
    return LazyTensor(x), LazyTensor(y), LazyTensor(r), LazyTensor(s)


def dense(f, *arrays):
    """f on the dense (N, M, D) tensors (torch spells exp, angle and conj as LazyTensor does)."""
    return f(*[torch.tensor(a) for a in arrays]).resolve_conj().numpy()


@pytest.mark.parametrize("name,f,k", FORMULAS, ids=[c[0] for c in FORMULAS])
@pytest.mark.parametrize("axis", [0, 1])
def test_values_numpy_complex128(name, f, k, axis):
    ref = dense(f, X, Y, R, S)
    out = f(*lazy(X, Y, R, S)).sum(axis=axis)
    want = ref.sum(axis=axis)
    assert out.dtype == np.complex128 and out.shape == want.shape
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12 * np.abs(ref).sum())


@pytest.mark.parametrize("name,f,k", FORMULAS, ids=[c[0] for c in FORMULAS])
def test_values_numpy_complex64_within_float32_bound(name, f, k):
    x, y = X.astype(np.complex64), Y.astype(np.complex64)
    r, s = R.astype(np.float32), S.astype(np.float32)
    ref = dense(f, x.astype(np.complex128), y.astype(np.complex128), r.astype(np.float64),
                s.astype(np.float64))
    out = f(*lazy(x, y, r, s)).sum(axis=1)
    assert out.dtype == np.complex64
    bound = (M + 8 * k) * EPS32 * np.abs(ref).sum(axis=1)
    assert np.all(np.abs(out - ref.sum(axis=1)) <= bound)


@pytest.mark.parametrize("name,f,k", FORMULAS, ids=[c[0] for c in FORMULAS])
@pytest.mark.parametrize("backend", ["compiled", "interpreter"])
def test_gradients_match_torch_autograd(name, f, k, backend):
    """PyTorch's convention (conjugate Wirtinger) for every complex input, and the real ones."""
    leaves = [torch.tensor(a, requires_grad=True) for a in (X, Y, R, S)]
    w = torch.tensor(crand(M, D))  # weights of the loss on the sum over i

    def loss(out):
        return (out * w.conj()).real.sum() + (out.abs() ** 2).sum()

    out = f(*[LazyTensor(t) for t in leaves]).sum(axis=0, backend=backend)
    got = torch.autograd.grad(loss(out), leaves, allow_unused=True)
    dense = f(*leaves).sum(dim=0)
    want = torch.autograd.grad(loss(dense), leaves, allow_unused=True)
    for g, h in zip(got, want):
        if h is None:
            assert g is None or torch.all(g == 0)
            continue
        assert g.dtype == h.dtype
        torch.testing.assert_close(g, h, rtol=1e-10, atol=1e-10 * float(h.abs().max()))


def test_complex64_tensors_give_complex64_and_gradients():
    x = torch.tensor(X, dtype=torch.complex64, requires_grad=True)
    y = torch.tensor(Y, dtype=torch.complex64)
    out = (LazyTensor(x) * LazyTensor(y)).exp().sum(dim=1)
    assert out.dtype == torch.complex64
    (g,) = torch.autograd.grad(out.abs().sum(), [x])
    xd = x.detach().to(torch.complex128).requires_grad_()
    (h,) = torch.autograd.grad((xd * y.to(torch.complex128)).exp().sum(dim=1).abs().sum(), [xd])
    assert g.dtype == torch.complex64
    terms = (X * Y).size  # each gradient entry sums M terms of a few ops
    torch.testing.assert_close(g.to(torch.complex128), h, rtol=0, atol=(terms + 64) * EPS32 *
                               float(h.abs().max()))


def test_degenerate_points_match_torch():
    """angle(0) = 0 and abs(0) = 0, with gradient 0 there (PyTorch: sgn(0) = 0 and its angle
    backward gives 0 at 0); no NaN anywhere."""
    x = np.zeros((2, 1, 2), dtype=np.complex128)
    x[1, 0, 1] = 1 + 1j
    y = np.zeros((1, 3, 2), dtype=np.complex128)
    xt, yt = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    sqabs = [lambda a, b: (a + b).sqabs(), lambda a, b: (a + b).abs() ** 2]
    for fn, fd in ((lambda a, b: (a * b + a).angle(), None), (lambda a, b: abs(a - b), None),
                   sqabs):
        out = fn(LazyTensor(xt), LazyTensor(yt)).sum(axis=1)
        dense = (fd or fn)(xt, yt).sum(dim=1)
        torch.testing.assert_close(out, dense)
        got = torch.autograd.grad(out.sum(), [xt, yt])
        want = torch.autograd.grad(dense.sum(), [xt, yt])
        for g, h in zip(got, want):
            assert not torch.isnan(g).any()
            torch.testing.assert_close(g, h)


def test_exp1j_real2complex_imag2complex_and_component_sum():
    p, q = RNG.uniform(-3, 3, (N, 1, D)), RNG.uniform(-3, 3, (1, M, D))
    P, Q = LazyTensor(p), LazyTensor(q)
    f = (P - Q).exp1j() * P.real2complex() + Q.imag2complex()
    assert isinstance(f, ComplexLazyTensor) and f.shape == (N, M, D)
    dense = np.exp(1j * (p - q)) * p + 1j * q
    np.testing.assert_allclose(f.sum(axis=1), dense.sum(axis=1), rtol=1e-12)
    g = f.sum(axis=-1)  # ComplexSum over the D components
    assert isinstance(g, ComplexLazyTensor) and g.ndim == 1
    np.testing.assert_allclose(g.sum(axis=0), dense.sum(axis=2).sum(axis=0)[:, None], rtol=1e-12)


def test_views_need_no_copy_and_strided_arrays_work():
    x = crand(N, 1, 2 * D)[..., ::2]  # strided last axis: copied into its float view
    y = np.ascontiguousarray(Y)
    lt = LazyTensor(y)
    assert np.shares_memory(lt.variables[0].array, y)  # a contiguous array is viewed, not copied
    out = (LazyTensor(x) * lt).sum(axis=1)
    np.testing.assert_allclose(out, (x * y).sum(axis=1), rtol=1e-12)
    t = torch.tensor(Y)
    assert LazyTensor(t).variables[0].array.data_ptr() == t.data_ptr()
    # a conjugated view (PyTorch's lazy conj bit) is read with its conjugation resolved
    out = (LazyTensor(torch.tensor(X)) * LazyTensor(t.conj())).sum(dim=1)
    np.testing.assert_allclose(out.numpy(), (X * Y.conj()).sum(axis=1), rtol=1e-12)


def test_complex_parameters_and_matmul():
    z = np.array([0.5 - 2j, 1j, 3.0 + 0j])
    K = LazyTensor(X) * LazyTensor(z) + LazyTensor(Y)  # a complex (D,) parameter
    np.testing.assert_allclose(K.sum(axis=1), (X * z + Y).sum(axis=1), rtol=1e-12)
    k = (LazyTensor(X[..., :1]) * LazyTensor(Y[..., :1])).exp()  # a complex kernel of dim 1
    v = crand(M, 2)
    np.testing.assert_allclose(k @ v, np.exp(X[..., 0] * Y[..., 0]) @ v, rtol=1e-12)
    real_k = LazyTensor(S) * LazyTensor(R[..., :1])  # a real kernel times a complex vector
    out = real_k @ v[:, 0]
    assert out.dtype == np.complex128 and out.shape == (N,)
    np.testing.assert_allclose(out, (S[..., 0] * R[..., 0]) @ v[:, 0], rtol=1e-12)


def test_errors_name_the_function_and_argument():
    x64 = LazyTensor(X.astype(np.complex64))
    with pytest.raises(TypeError, match=r"LazyTensor\.sum: the arrays have dtypes complex64 and "
                                        r"float64.*complex64 goes with float32"):
        (x64 * LazyTensor(R)).sum(axis=1)
    with pytest.raises(ValueError, match=r"LazyTensor\.__mul__: ComplexMult: operands have dims "
                                         r"6 and 4"):
        LazyTensor(X) * LazyTensor(Y[..., :2])
    with pytest.raises(TypeError, match=r"LazyTensor\.__lt__: not defined for complex"):
        LazyTensor(X) < LazyTensor(Y)
    with pytest.raises(TypeError, match=r"LazyTensor\.sqrt: not defined for complex"):
        LazyTensor(X).sqrt()
    with pytest.raises(TypeError, match=r"LazyTensor\.logsumexp: not defined for complex"):
        LazyTensor(X).logsumexp(axis=1)
    with pytest.raises(TypeError, match=r"LazyTensor\.exp1j: cannot be applied to a complex"):
        LazyTensor(X).exp1j()
    with pytest.raises(TypeError, match="complex64 / complex128"):
        LazyTensor(np.ones((3, 1, 2), dtype=np.int32))
    with pytest.raises(ValueError, match=r"LazyTensor: the constant .* is not finite"):
        LazyTensor(X) + complex(1, float("inf"))


def test_pykeops_complex_api_values_and_gradients():
    """pykeops's ComplexLazyTensor: the NUDFT of its test_complex.py, and the gradient that file
    leaves commented out, against torch."""
    import math
    from tessel.compat.pykeops.torch import ComplexLazyTensor as CLT, LazyTensor as PLT
    torch.manual_seed(0)
    x = torch.rand(1, 40, 2, dtype=torch.complex128, requires_grad=True)
    p = torch.rand(1, 40, 2, dtype=torch.float64)
    f = torch.rand(30, 1, 2, dtype=torch.float64)

    def fun(x, p, f, keops):
        if keops:
            x, p, f = PLT(x), PLT(p), PLT(f)
        return (x * (-2 * math.pi * 1j * p * f).exp()).sum(dim=0)

    got, want = fun(x, p, f, True), fun(x, p, f, False)
    assert got.dtype == torch.complex128
    torch.testing.assert_close(got, want)
    g = torch.autograd.grad((got.real ** 2 + got.imag ** 2).sum(), [x])[0]
    h = torch.autograd.grad((want.real ** 2 + want.imag ** 2).sum(), [x])[0]
    torch.testing.assert_close(g, h)
    z = PLT(x)
    assert isinstance(z, CLT) and z.dtype == "complex128" and z.shape == (1, 40, 2)
    assert z._shape == (1, 40, 4) and z.ndim == 4
    with pytest.raises(TypeError, match=r"LazyTensor\.min_reduction: the Min reduction is not "
                                        r"defined for complex"):
        (z * PLT(f)).min_reduction(axis=0)
    with pytest.raises(TypeError, match=r"LazyTensor\.sum: the arrays have dtypes complex64 and "
                                        r"float64"):
        (PLT(x.detach().to(torch.complex64)) * PLT(f)).sum(axis=0)
    assert isinstance(PLT(f).real2complex(), CLT)
    assert isinstance(CLT([1.0, 2.0]) * PLT(f), CLT)  # real numbers, seen as complex


def test_second_order_gradients_match_torch():
    """The backward of a complex reduction is a reduction too: gradients of gradients."""
    xs = torch.tensor(X, requires_grad=True)
    ys = torch.tensor(Y, requires_grad=True)

    def f(a, b):
        return ((a * b.conj()).exp() / (b + 3)).angle()

    results = []
    for lazy in (True, False):
        out = f(LazyTensor(xs), LazyTensor(ys)).sum(axis=1) if lazy else f(xs, ys).sum(dim=1)
        (g,) = torch.autograd.grad(out.sum(), [xs], create_graph=True)
        results.append(torch.autograd.grad((g.abs() ** 2).sum(), [ys])[0])
    torch.testing.assert_close(results[0], results[1], rtol=1e-10, atol=1e-10)
