"""tessel.torch.Genred: values, autograd to third order, layouts, errors, pickling, options."""
import pickle

import numpy as np
import pytest
import torch

import tessel
from tessel.torch import Genred

from dense import CASES, LSE_F, LSE_W, SOFTMAX_G, reduce, reduce_error_bound, scheme_of, to_torch

K_OPS = ("KMin", "ArgKMin", "KMin_ArgKMin")
TWO_OUTPUTS = ("Min_ArgMin", "Max_ArgMax", "KMin_ArgKMin")
INDEX_ONLY = ("ArgMin", "ArgMax", "ArgKMin")
TOL = {torch.float64: 1e-10, torch.float32: 1e-5}
N, M, K = 21, 33, 4
GAUSS = CASES["gauss"]


def assert_close(out, ref, tol):
    """Relative to the largest reference value (and at least absolute `tol`)."""
    assert out.shape == ref.shape, (out.shape, ref.shape)
    ref = ref.detach().double()
    out = out.detach().double()
    finite = ref[torch.isfinite(ref)].abs()
    scale = max(1.0, finite.max().item()) if finite.numel() else 1.0
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol * scale, equal_nan=True)


def make(op, axis=1, k=K, lse=False, formula2=None, **kw):
    """A Genred on the Gaussian aliases: the Gaussian kernel, or LSE_F for the softmax family."""
    formula = LSE_F[0] if lse or formula2 else GAUSS.formula
    return Genred(formula, GAUSS.aliases, op, axis=axis, opt_arg=k if op in K_OPS else None,
                  formula2=formula2, **kw)


SPECS = {  # name: (reduction_op, formula, formula2), formulas as (text, dense) pairs
    "Sum": ("Sum", None, None),
    "LogSumExp": ("LogSumExp", LSE_F, None),
    "LogSumExp_weighted": ("LogSumExp", LSE_F, LSE_W),
    "SumSoftMaxWeight": ("SumSoftMaxWeight", LSE_F, SOFTMAX_G),
    "Min": ("Min", None, None),
    "Max": ("Max", None, None),
    "Min_ArgMin": ("Min_ArgMin", None, None),
    "Max_ArgMax": ("Max_ArgMax", None, None),
    "KMin": ("KMin", None, None),
    "KMin_ArgKMin": ("KMin_ArgKMin", None, None),
}


def build(name, axis, **kw):
    """(Genred returning the values only, dense function of the inputs returning the same)."""
    op, f, w = SPECS[name]
    g = Genred(f[0] if f else GAUSS.formula, GAUSS.aliases, op, axis=axis,
               opt_arg=K if op in K_OPS else None, formula2=w[0] if w else None, **kw)

    def tessel_fn(*args):
        out = g(*args)
        return out[0] if op in TWO_OUTPUTS else out

    def dense_fn(*args):
        F = GAUSS.F(args, f[1] if f else None)
        out = reduce(op, F, axis, K, GAUSS.F(args, w[1]) if w else None)
        return out[0] if op in TWO_OUTPUTS else out

    return tessel_fn, dense_fn


# ---- values ---------------------------------------------------------------------------------------
ALL_OPS = ["Sum", "Min", "Max", "ArgMin", "ArgMax", "Min_ArgMin", "Max_ArgMax", "KMin", "ArgKMin",
           "KMin_ArgKMin", "LogSumExp", "LogSumExp_weighted", "SumSoftMaxWeight"]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("name", ALL_OPS)
def test_values_against_dense(name, axis, dtype):
    op, f, w = SPECS.get(name, (name, None, None))
    np_args = GAUSS.data(N, M, seed=7, dtype=np.float32 if dtype == torch.float32 else np.float64)
    args = to_torch(np_args, dtype=dtype)
    g = Genred(f[0] if f else GAUSS.formula, GAUSS.aliases, op, axis=axis,
               opt_arg=K if op in K_OPS else None, formula2=w[0] if w else None)
    out = g(*args)
    t = to_torch(np_args)
    F = GAUSS.F(t, f[1] if f else None)
    ref = reduce(op, F, axis, K, GAUSS.F(t, w[1]) if w else None)
    outs, refs = (out, ref) if op in TWO_OUTPUTS else ((out,), (ref,))
    assert isinstance(out, tuple) == (op in TWO_OUTPUTS)
    n_out = N if axis == 1 else M
    Fo = (F.transpose(0, 1) if axis == 0 else F).detach()
    for o, r, is_index in zip(outs, refs, [op in INDEX_ONLY, True]):
        assert isinstance(o, torch.Tensor) and o.shape[0] == n_out
        if not is_index:
            assert o.dtype == dtype
            assert_close(o, r, TOL[dtype])
            continue
        assert o.dtype == torch.int64 and not o.requires_grad
        if dtype == torch.float64:
            assert torch.equal(o, r)
        elif op in K_OPS:  # float32 may reorder near-ties: compare the values they select
            assert_close(torch.gather(Fo[..., 0], 1, o), torch.gather(Fo[..., 0], 1, r), 1e-5)
        else:
            assert_close(torch.gather(Fo, 1, o[:, None, :]), torch.gather(Fo, 1, r[:, None, :]), 1e-5)


def test_nan_and_ties():
    case = CASES["sqdist"]
    rng = np.random.default_rng(1)
    x = torch.tensor(rng.integers(-1, 2, size=(N, 3)), dtype=torch.float64)
    y = torch.tensor(rng.integers(-1, 2, size=(M, 3)), dtype=torch.float64)
    y[5, 2] = float("nan")
    for op in ("Min_ArgMin", "Max_ArgMax", "KMin_ArgKMin"):
        v, i = Genred(case.formula, case.aliases, op, opt_arg=K if op in K_OPS else None)(x, y)
        rv, ri = reduce(op, case.F([x, y]), 1, K)
        assert torch.equal(i, ri)
        torch.testing.assert_close(v, rv, rtol=0, atol=0, equal_nan=True)
    assert torch.isnan(v).sum() == 0 and not (i == 5).any()  # KMin ranks NaN last


def test_index_only_outputs_do_not_require_grad():
    args = to_torch(GAUSS.data(N, M), requires_grad=True)
    for op in ("ArgMin", "ArgMax", "ArgKMin"):
        idx = make(op)(*args)
        assert idx.dtype == torch.int64 and not idx.requires_grad
    v, i = make("Min_ArgMin")(*args)
    assert v.requires_grad and not i.requires_grad and i.dtype == torch.int64


# ---- autograd -------------------------------------------------------------------------------------
def grad_args(seed=1, n=6, m=8):
    return to_torch(GAUSS.data(n, m, seed=seed), requires_grad=True)


GRAD_OPS = ["Sum", "LogSumExp", "LogSumExp_weighted", "SumSoftMaxWeight", "Min", "Max",
            "Min_ArgMin", "KMin", "KMin_ArgKMin"]


# Second derivatives run compiled on axis 1 and interpreted on axis 0: the compiled kernels of
# second-order gradients are the bulk of the suite's compile time, and both backends are covered.
SECOND_ORDER_BACKEND = {1: "compiled", 0: "interpreter"}


@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("name", GRAD_OPS)
def test_gradcheck_and_gradgradcheck(name, axis):
    """First and second derivatives in every input: X (Vi), Y and B (Vj) and G (Pm)."""
    args = grad_args()
    fn, _ = build(name, axis)
    assert torch.autograd.gradcheck(fn, args)
    fn, _ = build(name, axis, backend=SECOND_ORDER_BACKEND[axis])
    assert torch.autograd.gradgradcheck(fn, args)


@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("name", GRAD_OPS + ["Max_ArgMax"])
def test_gradients_match_dense_autograd(name, axis):
    fn, dense_fn = build(name, axis)
    args = to_torch(GAUSS.data(N, M, seed=2), requires_grad=True)
    out, ref = fn(*args), dense_fn(*args)
    assert_close(out, ref, 1e-10)
    cot = torch.randn(out.shape, dtype=torch.float64)
    got = torch.autograd.grad((out * cot).sum(), args)
    want = torch.autograd.grad((ref * cot).sum(), args, create_graph=True, allow_unused=True)
    # (The unweighted LogSumExp formula does not use B: dense autograd says None, tessel zeros.)
    want = [torch.zeros_like(a) if w is None else w for a, w in zip(args, want)]
    for a, gr, wr in zip(args, got, want):
        assert gr.shape == a.shape
        assert_close(gr, wr, 1e-10)
    # Second order: the gradient of <grad, v> in every input.
    fn, _ = build(name, axis, backend=SECOND_ORDER_BACKEND[axis])
    got = torch.autograd.grad((fn(*args) * cot).sum(), args, create_graph=True)
    vs = [torch.randn(a.shape, dtype=torch.float64) for a in args]
    got2 = torch.autograd.grad(sum((gr * v).sum() for gr, v in zip(got, vs)), args,
                               allow_unused=True)
    want2 = torch.autograd.grad(sum((wr * v).sum() for wr, v in zip(want, vs)), args,
                                allow_unused=True)
    for a, gr, wr in zip(args, got2, want2):
        gr = torch.zeros_like(a) if gr is None else gr
        wr = torch.zeros_like(a) if wr is None else wr
        assert_close(gr, wr, 1e-10)


VAR = {"X": 0, "Y": 1, "B": 2, "G": 3}


@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("wrt", ["XXX", "XYG", "GGY"])
def test_third_derivative_gaussian_kernel(wrt, axis):
    """grad(grad(grad(.))) with create_graph=True three times, against dense autograd and against
    central finite differences of the second derivative."""
    g = make("Sum", axis=axis)
    args = to_torch(GAUSS.data(7, 9, seed=4), requires_grad=True)
    out_rows = 7 if axis == 1 else 9
    gen = torch.Generator().manual_seed(3)
    u = torch.randn(out_rows, 1, generator=gen, dtype=torch.float64)
    w1, w2, w3 = (torch.randn(args[VAR[c]].shape, generator=gen, dtype=torch.float64) for c in wrt)
    v1, v2, v3 = (VAR[c] for c in wrt)

    def dense_sum(*a):
        return reduce("Sum", GAUSS.F(a), axis)

    def third(fn, a):
        """<w2, d/d(v2) <w1, d/d(v1) <u, fn>>>, and its gradient in variable v3."""
        out = fn(*a)
        g1 = torch.autograd.grad((out * u).sum(), a[v1], create_graph=True)[0]
        g2 = torch.autograd.grad((g1 * w1).sum(), a[v2], create_graph=True)[0]
        s = (g2 * w2).sum()
        g3 = torch.autograd.grad(s, a[v3], create_graph=True)[0]
        return s, g3

    s, g3 = third(g, args)
    assert g3.requires_grad  # the third derivative is itself differentiable
    s_ref, g3_ref = third(dense_sum, args)
    assert_close(s, s_ref, 1e-10)
    assert_close(g3, g3_ref, 1e-10)
    # Finite differences of the second derivative along w3.
    h = 1e-5

    def s_at(t):
        a = [x.detach().clone().requires_grad_(True) for x in args]
        with torch.no_grad():
            a[v3] += t * w3
        return third(g, a)[0].item()

    fd = (s_at(h) - s_at(-h)) / (2 * h)
    exact = (g3 * w3).sum().item()
    assert abs(fd - exact) <= 1e-7 * max(1.0, abs(exact)), (fd, exact)


def test_backward_accumulates_into_grad():
    g = make("Sum")
    x, y, b, gam = to_torch(GAUSS.data(N, M, seed=5), requires_grad=True)
    b.requires_grad_(False)
    g(x, y, b, gam).sum().backward()
    first = [t.grad.clone() for t in (x, y, gam)]
    assert b.grad is None
    ref = reduce("Sum", GAUSS.F([x, y, b, gam]))
    want = torch.autograd.grad(ref.sum(), (x, y, gam))
    for f, w in zip(first, want):
        assert_close(f, w, 1e-10)
    g(x, y, b, gam).sum().backward()
    for t, f in zip((x, y, gam), first):
        torch.testing.assert_close(t.grad, 2 * f, rtol=1e-14, atol=0)
    assert gam.grad.shape == gam.shape == (1,)


def test_float32_gradients():
    fn, dense_fn = build("Sum", 1)
    a64 = to_torch(GAUSS.data(N, M, seed=6, dtype=np.float32), requires_grad=True)
    a32 = [a.detach().float().requires_grad_(True) for a in a64]
    out = fn(*a32)
    assert out.dtype == torch.float32
    out.sum().backward()
    dense_fn(*a64).sum().backward()
    for a, b in zip(a32, a64):
        assert a.grad.dtype == torch.float32
        assert_close(a.grad, b.grad, 1e-5)


def test_gradient_of_unused_and_index_outputs():
    # B is an alias the unweighted LogSumExp formula does not use: its gradient is zero.
    args = grad_args()
    out = make("LogSumExp", lse=True)(*args)
    gx, gb = torch.autograd.grad(out.sum(), (args[0], args[2]))
    assert torch.equal(gb, torch.zeros_like(args[2])) and gx.abs().sum() > 0
    # Using only the values of Min_ArgMin: the gradient goes to the argmin only.
    v, i = make("Min_ArgMin")(*args)
    (gb,) = torch.autograd.grad(v.sum(), args[2])
    counts = torch.bincount(i[:, 0], minlength=gb.shape[0])
    assert torch.equal(gb[:, 0] != 0, counts > 0)


# ---- layouts --------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", ["Sum", "Min_ArgMin", "LogSumExp_weighted"])
def test_non_contiguous_inputs_and_their_gradients(op):
    fn, _ = build(op, 1)
    x0, y0, b0, g0 = to_torch(GAUSS.data(N, M, seed=8))
    base = [t.clone().requires_grad_(True) for t in (x0, y0, b0, g0)]
    ref = fn(*base)
    cot = torch.randn(ref.shape, dtype=torch.float64)
    ref_grads = torch.autograd.grad((ref * cot).sum(), base)

    xt = x0.t().contiguous().requires_grad_(True)          # (3, N): X is its transposed view
    big = torch.zeros(2 * M, 9, dtype=torch.float64)
    big[::2, 1::3] = y0
    big.requires_grad_(True)                                # Y: a slice with steps
    b1 = b0[:, 0].clone().requires_grad_(True)              # B: 1-D for a dim-1 variable
    g1 = g0.clone().requires_grad_(True)                    # G: shape (1,)
    views = [xt.t(), big[::2, 1::3], b1, g1]
    assert not views[0].is_contiguous() and not views[1].is_contiguous()
    out = fn(*views)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    grads = torch.autograd.grad((out * cot).sum(), (xt, big, b1, g1))
    torch.testing.assert_close(grads[0], ref_grads[0].t(), rtol=0, atol=0)
    torch.testing.assert_close(grads[1][::2, 1::3], ref_grads[1], rtol=0, atol=0)
    assert grads[1][1::2].abs().sum() == 0
    torch.testing.assert_close(grads[2], ref_grads[2][:, 0], rtol=0, atol=0)
    assert grads[3].shape == (1,)
    torch.testing.assert_close(grads[3], ref_grads[3], rtol=1e-13, atol=0)


def test_expanded_inputs_with_stride_zero():
    fn, dense_fn = build("Sum", 1)
    x, y, b, gam = to_torch(GAUSS.data(N, M, seed=9))
    y_row = y[:1].clone().requires_grad_(True)
    b_one = torch.ones(1, 1, dtype=torch.float64, requires_grad=True)
    y_exp, b_exp = y_row.expand(M, 3), b_one.expand(M, 1)
    assert y_exp.stride()[0] == 0 and b_exp.stride()[0] == 0
    g2 = gam.reshape(1, 1)  # G as (1, 1)
    out = fn(x, y_exp, b_exp, g2)
    torch.testing.assert_close(out, fn(x, y_exp.contiguous(), b_exp.contiguous(), g2), rtol=0, atol=0)
    assert_close(out, dense_fn(x, y_exp, b_exp, g2), 1e-10)
    got = torch.autograd.grad(out.sum(), (y_row, b_one))
    want = torch.autograd.grad(dense_fn(x, y_exp, b_exp, g2).sum(), (y_row, b_one))
    for gr, wr in zip(got, want):
        assert_close(gr, wr, 1e-10)


def test_vector_parameter_shapes_and_gradients():
    case = CASES["pm"]
    x, y, p = to_torch(case.data(N, M))
    g = Genred(case.formula, case.aliases, "Sum")
    res = []
    for shape in ((3,), (1, 3)):
        q = p.reshape(shape).clone().requires_grad_(True)
        out = g(x, y, q)
        (gq,) = torch.autograd.grad(out.sum(), q)
        assert gq.shape == shape
        res.append((out, gq.reshape(3)))
    torch.testing.assert_close(res[0][0], res[1][0], rtol=0, atol=0)
    torch.testing.assert_close(res[0][1], res[1][1], rtol=0, atol=0)
    q = p.clone().requires_grad_(True)
    ref = reduce("Sum", case.F([x, y, q]))
    assert_close(res[0][0], ref, 1e-10)
    assert_close(res[0][1], torch.autograd.grad(ref.sum(), q)[0], 1e-10)


def test_inputs_untouched_and_outputs_fresh():
    args = to_torch(GAUSS.data(N, M))
    before = [a.clone() for a in args]
    g = make("Min_ArgMin")
    v1, i1 = g(*args)
    v2, _ = g(*args)
    for a, c in zip(args, before):
        assert torch.equal(a, c)
    assert v1.data_ptr() != v2.data_ptr()
    assert all(v1.data_ptr() != a.data_ptr() for a in args)
    v1.fill_(3.0)
    assert not (v2 == 3.0).any()


# ---- errors ---------------------------------------------------------------------------------------
def test_bad_inputs():
    x, y, b, gam = to_torch(GAUSS.data(N, M))
    g = make("Sum")
    with pytest.raises(ValueError, match=r"expected 4 arguments \(Vi\(0,3\), Vj\(1,3\), Vj\(2,1\), "
                                         r"Pm\(3,1\)\), got 2"):
        g(x, y)
    with pytest.raises(ValueError, match=r"input 1 \(Vj\(1,3\)\) has shape \(33, 2\)"):
        g(x, y[:, :2], b, gam)
    with pytest.raises(ValueError, match="input 2 has 32 rows but input 1 has 33"):
        g(x, y, b[1:], gam)
    with pytest.raises(TypeError, match="argument 1 has dtype torch.float32 but argument 0 has "
                                        "torch.float64"):
        g(x, y.float(), b, gam)
    with pytest.raises(TypeError, match="argument 0 has dtype torch.int64"):
        g(x.long(), y, b, gam)
    with pytest.raises(TypeError, match="argument 2 has dtype torch.float16"):
        g(x, y, b.half(), gam)
    with pytest.raises(TypeError, match="argument 1 is a ndarray; expected a torch.Tensor"):
        g(x, y.numpy(), b, gam)
    with pytest.raises(TypeError, match="torch.Tensor"):
        g(x, y, b, 0.5)
    with pytest.raises(ValueError, match=r"K = 4 is larger than the number of j rows \(3\)"):
        make("KMin")(x, y[:3], b[:3], gam)
    with pytest.raises(ValueError, match="KMin_ArgKMin needs opt_arg"):
        Genred(GAUSS.formula, GAUSS.aliases, "KMin_ArgKMin")
    with pytest.raises(ValueError, match="unknown reduction 'Softmax'"):
        Genred(GAUSS.formula, GAUSS.aliases, "Softmax")
    with pytest.raises(TypeError, match="Genred: reduction_op must be a string"):
        Genred(GAUSS.formula, GAUSS.aliases, None)
    with pytest.raises(ValueError, match=r"unknown name 'Q' at column 9"):
        Genred("SqDist(X,Q)*B", GAUSS.aliases)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (or a CPU-only PyTorch)")
def test_cuda_tensors_match_the_cpu():
    x, y, b, gam = to_torch(GAUSS.data(N, M))
    x.requires_grad_()
    k = make("Sum")
    ref = k(x, y, b, gam)
    (gref,) = torch.autograd.grad(ref.sum(), x)
    xc = x.detach().cuda().requires_grad_()
    out = k(xc, y.cuda(), b.cuda(), gam.cuda())
    assert out.device == xc.device
    (g,) = torch.autograd.grad(out.sum(), xc)
    torch.testing.assert_close(out.cpu(), ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(g.cpu(), gref, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (or a CPU-only PyTorch)")
@pytest.mark.parametrize("name", ["Min", "Max", "KMin"])
def test_cuda_selection_gradients_match_the_cpu(name):
    """Gradients through Min, Max and KMin (gathers and scatters over the selected partners),
    first and second order, on CUDA tensors equal the CPU's (float64)."""
    x, y, b, gam = to_torch(GAUSS.data(N, M))
    k = make(name)
    outs = []
    for device in ("cpu", "cuda"):
        xd, yd = (t.to(device).requires_grad_() for t in (x, y))
        out = k(xd, yd, b.to(device), gam.to(device))
        w = torch.linspace(-1, 1, out.numel(), dtype=out.dtype, device=device).view_as(out)
        gx, gy = torch.autograd.grad((out * w).sum(), [xd, yd], create_graph=True)
        (gxx,) = torch.autograd.grad((gx * gx).sum() + gy.sum(), xd)
        assert gx.device.type == device and gxx.device.type == device
        outs.append([t.detach().cpu() for t in (out, gx, gy, gxx)])
    for got, want in zip(outs[1], outs[0]):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)


# ---- pickling, options ----------------------------------------------------------------------------
@pytest.mark.parametrize("name,kw", [("Sum", {}), ("KMin_ArgKMin", dict(axis=0)),
                                     ("SumSoftMaxWeight", dict(sum_scheme="kahan_scheme")),
                                     ("LogSumExp_weighted", dict(backend="interpreter"))])
def test_pickle(name, kw):
    op, f, w = SPECS[name]
    g = Genred(f[0] if f else GAUSS.formula, GAUSS.aliases, op, opt_arg=K if op in K_OPS else None,
               formula2=w[0] if w else None, **kw)
    h = pickle.loads(pickle.dumps(g))
    assert isinstance(h, Genred)
    args = grad_args(n=N, m=M)
    a, b = g(*args), h(*args)
    for x, y in zip(a if isinstance(a, tuple) else (a,), b if isinstance(b, tuple) else (b,)):
        assert torch.equal(x, y)
    va, vb = (o[0] if isinstance(o, tuple) else o for o in (a, b))
    ga = torch.autograd.grad(va.sum(), args)
    gb = torch.autograd.grad(vb.sum(), args)
    for x, y in zip(ga, gb):
        assert torch.equal(x, y)


def test_pickle_formula_objects():
    f, w = tessel.parse(LSE_F[0], GAUSS.aliases), tessel.parse(SOFTMAX_G[0], GAUSS.aliases)
    g = Genred(f, GAUSS.aliases, "SumSoftMaxWeight", formula2=w)
    h = pickle.loads(pickle.dumps(g))
    args = to_torch(GAUSS.data(N, M))
    assert torch.equal(g(*args), h(*args))


@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("name", ["Sum", "LogSumExp_weighted", "SumSoftMaxWeight", "Min_ArgMin",
                                  "KMin_ArgKMin"])
def test_interpreter_matches_compiled_with_gradients(name, axis):
    args = grad_args(n=N, m=M)
    res = {}
    for be in ("interpreter", "compiled"):
        fn, _ = build(name, axis, backend=be)
        out = fn(*args)
        res[be] = [out] + list(torch.autograd.grad(out.sum(), args))
    for a, b in zip(res["interpreter"], res["compiled"]):
        assert_close(a, b, 1e-12)


@pytest.mark.parametrize("kw", [dict(dtype_acc="float64"), dict(sum_scheme="kahan_scheme"),
                                dict(sum_scheme="direct_sum"), dict(sum_scheme="block_sum")])
def test_float32_options(kw):
    fn, dense_fn = build("Sum", 1, **kw)
    a64 = to_torch(GAUSS.data(N, 500, seed=10, dtype=np.float32))
    out = fn(*[a.float() for a in a64])
    assert out.dtype == torch.float32
    # The README's bound for the scheme (dense.reduce_error_bound); for 500 direct float32 terms
    # it is above 1e-5 of the largest value, which only typical, not worst, rounding met.
    bound = reduce_error_bound("Sum", GAUSS.F(a64), GAUSS.F_error(a64), 1, *scheme_of(**kw))
    assert bool(((out.double() - dense_fn(*a64)).abs() <= bound).all())


# ---- empty inputs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("axis", [1, 0])
def test_empty_inputs(axis):
    n, m = (N, 0) if axis == 1 else (0, M)
    args = to_torch(GAUSS.data(n, m), requires_grad=True)
    rows = N if axis == 1 else M
    out = make("Sum", axis=axis)(*args)
    assert out.shape == (rows, 1) and torch.equal(out, torch.zeros(rows, 1, dtype=torch.float64))
    grads = torch.autograd.grad(out.sum(), args)
    for a, gr in zip(args, grads):
        assert gr.shape == a.shape and not gr.abs().sum()
    v, i = make("Min_ArgMin", axis=axis)(*args)
    assert (v == float("inf")).all() and (i == -1).all() and i.dtype == torch.int64
    lse = make("LogSumExp", axis=axis, lse=True)(*args)
    assert (lse == -float("inf")).all()
    # The reduced-over axis is not empty the other way round: the output is (0, dim).
    n, m = (0, M) if axis == 1 else (N, 0)
    args = to_torch(GAUSS.data(n, m))
    assert make("Sum", axis=axis)(*args).shape == (0, 1)
    v, i = make("KMin_ArgKMin", axis=axis)(*args)
    assert v.shape == i.shape == (0, K)


# ---- torch.compile (PyTorch 2.x; torch.func is in test_torch_func.py) ----------------------------
@pytest.mark.skipif(not hasattr(torch, "compile"), reason="torch.compile is PyTorch 2.x")
def test_compiled_function_calling_genred_matches_eager_with_gradients():
    # Traced as the operator tessel::genred (test_torch_func.py checks the graph has no break).
    fn = make("Sum")
    args = to_torch(GAUSS.data(N, M), requires_grad=True)

    def loss(x, *rest):
        return (fn(x.sin(), *rest) ** 2).sum()

    compiled = torch.compile(loss, backend="aot_eager")
    got = compiled(*args)
    ref = loss(*args)
    assert_close(got, ref, 1e-12)
    for g, r in zip(torch.autograd.grad(got, args), torch.autograd.grad(ref, args)):
        assert_close(g, r, 1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_formula_reading_no_array_keeps_the_arrays_dtype(dtype):
    """Zero(3) (what a derivative in an unread variable simplifies to) reads no array: the result
    still takes the call's dtype, with zero gradients for the arguments."""
    x = torch.rand(5, 3, dtype=dtype, requires_grad=True)
    y = torch.rand(4, 3, dtype=dtype)
    out = Genred("Zero(3)", ["x=Vi(3)", "y=Vj(3)"], reduction_op="Sum", axis=1)(x, y)
    assert out.dtype == dtype and out.shape == (5, 3) and not out.any()
    (g,) = torch.autograd.grad(out.sum(), [x])
    assert g.dtype == dtype and not g.any()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_output_specs_let_callers_allocate_what_evaluate_returns(dtype):
    """What CUDA calls do (outputs allocated on the device, then evaluated into), on the CPU:
    the same shapes, dtypes and values as the allocating evaluate, batched and index outputs
    included."""
    from tessel import _core
    g = torch.Generator().manual_seed(0)
    x, y = torch.rand(2, 1, 6, 3, generator=g), torch.rand(3, 8, 3, generator=g)
    for op in ("Sum", "ArgKMin", "Min_ArgMin"):
        kw = dict(opt_arg=2) if op == "ArgKMin" else {}
        red = Genred("SqDist(X,Y)", ["X = Vi(3)", "Y = Vj(3)"], reduction_op=op, **kw)._spec
        for args in ((x, y), (x[0, 0], y[0])):
            args = [a.to(dtype) for a in args]
            want = _core.evaluate(red.reduction, args)
            specs = _core.output_specs(red.reduction, args)
            outs = [torch.empty(s, dtype=getattr(torch, d)) for s, d in specs]
            _core.evaluate(red.reduction, args, outputs=outs)
            assert len(outs) == len(want)
            for o, w in zip(outs, want):
                assert tuple(o.shape) == w.shape and str(o.dtype) == "torch." + str(w.dtype)
                assert torch.equal(o, torch.from_numpy(w))
