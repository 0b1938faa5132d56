"""tessel.numpy.Genred: every reduction against dense references, layouts, errors, pickling, options."""
import pickle

import numpy as np
import pytest

import torch

import tessel
from tessel import _core
from tessel.numpy import Genred

from dense import CASES, LSE_F, LSE_W, SOFTMAX_G, reduce, reduce_error_bound, scheme_of, to_torch

# Read off the core's reduction table (test_reduction_table.py walks it row by row).
TABLE = {r["name"]: r for r in _core.reduction_table() if r["by_name"]}
K_OPS = tuple(n for n, r in TABLE.items() if r["uses_k"])
INDEX_ONLY = tuple(n for n, r in TABLE.items() if r["outputs"] == "index")
TWO_OUTPUTS = tuple(n for n, r in TABLE.items() if r["outputs"] == "value,index")
# float64: far above its rounding (about 1e-14 here). float32 where no bound is derived (LogSumExp,
# SumSoftMaxWeight, formulas without an error model in dense.py); elsewhere the bound applies.
TOL = {np.float64: 1e-10, np.float32: 1e-5}
N, M, K = 23, 37, 5


def assert_values(out, ref, dtype, tol=None, bound=None):
    """`out` (NumPy, `dtype`) equals the float64 reference to `tol`, relative to the largest value,
    or where `bound` is given (float32: dense.reduce_error_bound), entrywise within it."""
    tol = TOL[dtype] if tol is None else tol
    ref = np.asarray(ref, dtype=np.float64)
    assert isinstance(out, np.ndarray)
    assert out.dtype == dtype, out.dtype
    assert out.shape == ref.shape, (out.shape, ref.shape)
    if bound is not None:
        err = np.abs(out.astype(np.float64) - ref)
        both_nan = np.isnan(out) & np.isnan(ref)
        bound = np.broadcast_to(bound, err.shape)
        bad = ~(both_nan | (out == ref) | (err <= bound))
        assert not bad.any(), (f"{int(bad.sum())} entries beyond the float32 error bound: error "
                               f"{err[bad][:4]}, bound {bound[bad][:4]}")
        return
    finite = np.abs(ref[np.isfinite(ref)])
    scale = max(1.0, finite.max()) if finite.size else 1.0
    np.testing.assert_allclose(out, ref, rtol=tol, atol=tol * scale, equal_nan=True)


def assert_indices(idx, ref_idx, F, dtype, k_family, bound=None):
    """Indices are int64 and exact in float64; in float32 (where rounding may reorder near-ties)
    they must select the reference's values: within twice the selection's bound, as the values
    picked are each within it of their rounded selves."""
    ref_idx = ref_idx.numpy()
    assert isinstance(idx, np.ndarray)
    assert idx.dtype == np.int64, idx.dtype
    assert idx.shape == ref_idx.shape, (idx.shape, ref_idx.shape)
    if dtype == np.float64:
        np.testing.assert_array_equal(idx, ref_idx)
        return
    f = F.detach().numpy()
    if k_family:
        got, want = (np.take_along_axis(f[..., 0], i, 1) for i in (idx, ref_idx))
    else:
        got, want = (np.take_along_axis(f, i[:, None, :], 1)[:, 0] for i in (idx, ref_idx))
    assert_values(got.astype(np.float32), want, np.float32,
                  bound=None if bound is None else 2 * bound)


def check(op, out, ref, F, axis, dtype, bound=None):
    """Compares a Genred result with reduce()'s reference; F is the (N, M, d) formula grid,
    `bound` the float32 error bound of the values (None: TOL)."""
    Fo = F.transpose(0, 1) if axis == 0 else F
    k_family = op in K_OPS
    if op in TWO_OUTPUTS:
        assert isinstance(out, tuple) and len(out) == 2
        assert_values(out[0], ref[0].detach().numpy(), dtype, bound=bound)
        assert_indices(out[1], ref[1], Fo, dtype, k_family, bound)
    elif op in INDEX_ONLY:
        assert_indices(out, ref, Fo, dtype, k_family, bound)
    else:
        assert_values(out, ref.detach().numpy(), dtype, bound=bound)


def f32_bound(case, op, t, axis, formula=None, **kw):
    """dense.reduce_error_bound for `case` on the float64 copies `t` of float32 inputs, or None
    where the case has no error model or the reduction no bound there (then TOL applies)."""
    if formula is not None or case.error is None:
        return None
    values_of = {"ArgMin": "Min", "ArgMax": "Max", "ArgKMin": "KMin"}  # the indices select them
    b = reduce_error_bound(values_of.get(op, op), case.F(t), case.F_error(t), axis,
                           *scheme_of(**kw))
    return None if b is None else b.numpy()


def run(case, op, axis, dtype, n=N, m=M, formula=None, formula2=None, seed=0, args=None, **kw):
    """Runs Genred on random data (or `args`) and checks it against the dense reference.

    `formula`/`formula2` are (text, dense function) pairs replacing the case's formula."""
    if args is None:
        args = case.data(n, m, seed=seed, dtype=dtype)
    k = K if op in K_OPS else None
    g = Genred(formula[0] if formula else case.formula, case.aliases, reduction_op=op, axis=axis,
               opt_arg=k, formula2=formula2[0] if formula2 else None, **kw)
    out = g(*args)
    t = to_torch(args)  # float64 copies of the very values Genred saw
    F = case.F(t, formula[1] if formula else None)
    W = case.F(t, formula2[1]) if formula2 else None
    bound = f32_bound(case, op, t, axis, formula, **kw) if dtype == np.float32 else None
    check(op, out, reduce(op, F, axis, k, W), F, axis, dtype, bound)
    return out


ALL_OPS = [n for n, r in TABLE.items() if r["weight"] != "required"]  # SoftMax: below
DTYPES = [np.float64, np.float32]


# ---- values against dense references -------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("op", ALL_OPS)
def test_every_reduction_gaussian_kernel(op, axis, dtype):
    out = run(CASES["gauss"], op, axis, dtype)
    n_out = N if axis == 1 else M
    first = out[0] if isinstance(out, tuple) else out
    assert first.shape[0] == n_out


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("op,formula2", [("LogSumExp", None), ("LogSumExp", LSE_W),
                                         ("SumSoftMaxWeight", SOFTMAX_G)],
                         ids=["lse", "lse_weighted", "softmax"])
def test_logsumexp_and_softmax(op, formula2, axis, dtype):
    out = run(CASES["gauss"], op, axis, dtype, formula=LSE_F, formula2=formula2)
    assert out.shape[1] == (1 if formula2 is None else 3)


@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("op", ["Sum", "Min_ArgMin", "Max_ArgMax", "KMin_ArgKMin", "LogSumExp"])
@pytest.mark.parametrize("case", ["sqdist", "wsqdist", "norm2"])
def test_scalar_formulas(case, op, axis):
    run(CASES[case], op, axis, np.float64)


@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("case,op,dtype", [
    (c, op, np.float64) for c in ("gauss_vec", "concat", "pm")
    for op in ("Sum", "Min_ArgMin", "Max_ArgMax")] + [
    ("gauss_vec", op, dt) for op, dt in (("Min", np.float64), ("ArgMax", np.float64),
                                         ("Sum", np.float32), ("Min_ArgMin", np.float32),
                                         ("Max_ArgMax", np.float32))])
def test_vector_formulas(case, op, axis, dtype):
    out = run(CASES[case], op, axis, dtype)
    first = out[0] if isinstance(out, tuple) else out
    assert first.shape[1] == CASES[case].dim


@pytest.mark.parametrize("axis", [1, 0])
def test_softmax_vector_weights_larger_sizes(axis):
    run(CASES["gauss"], "SumSoftMaxWeight", axis, np.float64, n=60, m=55, seed=3, formula=LSE_F,
        formula2=SOFTMAX_G)


# ---- ties, NaN -----------------------------------------------------------------------------------
def tie_data(dtype, seed=1):
    rng = np.random.default_rng(seed)
    return [rng.integers(-1, 2, size=(N, 3)).astype(dtype),
            rng.integers(-1, 2, size=(M, 3)).astype(dtype)]


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("op", ["ArgMin", "Min_ArgMin", "Max_ArgMax", "KMin_ArgKMin"])
def test_ties_go_to_lowest_index(op, axis, dtype):
    case = CASES["sqdist"]
    args = tie_data(dtype)
    out = Genred(case.formula, case.aliases, op, axis=axis, opt_arg=K if op in K_OPS else None)(*args)
    F = case.F(to_torch(args))
    ref = reduce(op, F, axis, K)
    # Integer data: exact values, so indices must match exactly in both precisions.
    idx, ref_idx = (out[1], ref[1]) if isinstance(out, tuple) else (out, ref)
    assert idx.dtype == np.int64
    np.testing.assert_array_equal(idx, ref_idx.numpy())
    # The data really has ties: some row's optimum is reached at more than one index.
    Fo = (F.transpose(0, 1) if axis == 0 else F)[..., 0].numpy()
    best = Fo.min(1, keepdims=True) if "Max" not in op else Fo.max(1, keepdims=True)
    assert ((Fo == best).sum(1) > 1).any()


def nan_data(dtype):
    x, y = CASES["sqdist"].data(N, M, seed=2, dtype=dtype)
    x[2, 0] = np.nan     # row i = 2: every F(2, j) is NaN
    y[4, 1] = np.nan     # columns j = 4 and 9: NaN for every i
    y[9, 0] = np.nan
    return [x, y]


@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("op,dtype", [
    (op, np.float64) for op in ("Min_ArgMin", "Max_ArgMax", "KMin_ArgKMin", "Sum", "LogSumExp")] + [
    (op, np.float32) for op in ("Min_ArgMin", "KMin_ArgKMin")])
def test_nan(op, axis, dtype):
    case = CASES["sqdist"]
    args = nan_data(dtype)
    out = run(case, op, axis, dtype, args=args)
    vals = out[0] if isinstance(out, tuple) else out
    if op in ("Min_ArgMin", "Max_ArgMax"):
        # Min/Max propagate NaN and report the first NaN's index.
        assert np.isnan(vals).all()
        if axis == 1:   # row i = 2 is all NaN; elsewhere the first NaN is at j = 4
            first_nan = np.full(N, 4)
            first_nan[2] = 0
        else:           # columns j = 4, 9 are all NaN; elsewhere the first NaN is at i = 2
            first_nan = np.full(M, 2)
            first_nan[[4, 9]] = 0
        np.testing.assert_array_equal(out[1][:, 0], first_nan)
    if op == "KMin_ArgKMin":
        # NaN ranks last: no NaN among the K smallest unless the row is all NaN.
        idx = out[1]
        rows_ok = np.arange(N if axis == 1 else M) != (2 if axis == 1 else -1)
        if axis == 1:
            assert not np.isnan(vals[rows_ok]).any()
            assert not np.isin(idx[rows_ok], [4, 9]).any()
            np.testing.assert_array_equal(idx[2], np.arange(K))
            assert np.isnan(vals[2]).all()
        else:
            # Reducing over i: column j = 4 or 9 is all NaN; elsewhere i = 2 is never chosen.
            assert not np.isin(np.delete(idx, [4, 9], axis=0), [2]).any()
            np.testing.assert_array_equal(idx[4], np.arange(K))


# ---- layouts, zero copy ---------------------------------------------------------------------------
def gauss_args(dtype=np.float64, n=N, m=M):
    return CASES["gauss"].data(n, m, dtype=dtype)


@pytest.mark.parametrize("op", ["Sum", "Min_ArgMin", "KMin_ArgKMin"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
def test_non_contiguous_inputs(op, dtype):
    case = CASES["gauss"]
    x, y, b, gam = gauss_args(dtype)
    g = Genred(case.formula, case.aliases, op, opt_arg=K if op in K_OPS else None)
    ref = g(x, y, b, gam)

    xt = np.ascontiguousarray(x.T).T                   # transposed view (Fortran order)
    big = np.zeros((2 * M, 9), dtype=dtype)
    big[::2, 1::3] = y
    ys = big[::2, 1::3]                                 # slice with steps in both axes
    bb = np.zeros((M, 3), dtype=dtype)
    bb[:, 2] = b[:, 0]
    bs = bb[:, 2]                                       # 1-D strided column for a Vj(1)
    assert not xt.flags.c_contiguous and not ys.flags.c_contiguous and bs.strides[0] != 8
    for got in (g(xt, ys, b, gam), g(x, y, b[:, 0], gam), g(x, y, bs, gam),
                g(x, y, b, gam.reshape(1, 1)), g(x, y, bb[:, 2:3], gam)):
        for o, r in zip(got if isinstance(got, tuple) else (got,), ref if isinstance(ref, tuple) else (ref,)):
            np.testing.assert_array_equal(o, r)

    # Reversed rows (negative strides): the same as the reversed contiguous copy.
    got = g(x[::-1], y[::-1], b[::-1], gam)
    want = g(x[::-1].copy(), y[::-1].copy(), b[::-1].copy(), gam)
    for o, r in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_array_equal(o, r)


@pytest.mark.parametrize("op", ["Sum", "Max_ArgMax"])
def test_vector_parameter_layouts(op):
    case = CASES["pm"]
    x, y, p = case.data(N, M)
    g = Genred(case.formula, case.aliases, op)
    ref = run(case, op, 1, np.float64, args=[x, y, p])
    pbig = np.zeros(7)
    pbig[1::2] = p
    for q in (p.reshape(1, 3), pbig[1::2], p[::-1].copy()[::-1]):
        got = g(x, y, q)
        for o, r in zip(got if isinstance(got, tuple) else (got,), ref if isinstance(ref, tuple) else (ref,)):
            np.testing.assert_array_equal(o, r)
    with pytest.raises(ValueError, match=r"input 2 \(Pm\(2,3\)\)"):
        g(x, y, np.zeros(4))


@pytest.mark.parametrize("kind", ["broadcast_to", "read_only"])
def test_read_only_and_broadcast_inputs(kind):
    case = CASES["gauss"]
    x, y, b, gam = gauss_args()
    g = Genred(case.formula, case.aliases)
    if kind == "broadcast_to":
        y = np.broadcast_to(y[:1], y.shape)  # stride 0, read-only
        assert y.strides[0] == 0 and not y.flags.writeable
    else:
        x = x.copy()
        x.setflags(write=False)
    np.testing.assert_array_equal(g(x, y, b, gam), g(x.copy(), y.copy(), b, gam))


def test_result_is_fresh_and_inputs_untouched():
    case = CASES["gauss"]
    args = gauss_args()
    before = [a.copy() for a in args]
    g = Genred(case.formula, case.aliases, "Min_ArgMin")
    v1, i1 = g(*args)
    v2, i2 = g(*args)
    for a, c in zip(args, before):
        np.testing.assert_array_equal(a, c)
    for o in (v1, i1):
        assert o.flags.c_contiguous and o.flags.writeable
        assert not any(np.shares_memory(o, a) for a in args)
    assert not np.shares_memory(v1, v2) and not np.shares_memory(i1, i2)
    v1[:] = 7.0
    assert not (v2 == 7.0).any()
    np.testing.assert_array_equal(v2, g(*args)[0])


def test_unused_alias_and_sizes_without_vi():
    # An alias the formula does not use still takes its place in the call.
    g = Genred("SqDist(X,Y)", ["X = Vi(3)", "U = Vi(5)", "Y = Vj(3)"], "Sum")
    x, y = CASES["sqdist"].data(N, M)
    with pytest.raises(ValueError, match="expected 3 arguments"):
        g(x, y)
    got = g(x, np.zeros((N, 5)), y)
    ref = reduce("Sum", CASES["sqdist"].F(to_torch([x, y])))
    assert_values(got, ref.numpy(), np.float64)
    # No Vi input: the number of i rows comes from ni.
    g = Genred("B", ["B = Vj(1)"])
    b = np.arange(1.0, 5.0)
    np.testing.assert_array_equal(g(b, ni=3), np.full((3, 1), 10.0))
    with pytest.raises(ValueError, match="number of i rows"):
        g(b)


# ---- errors ---------------------------------------------------------------------------------------
def gauss_genred(op="Sum", **kw):
    case = CASES["gauss"]
    return Genred(case.formula, case.aliases, op, **kw)


def test_wrong_number_of_arguments():
    x, y, b, gam = gauss_args()
    with pytest.raises(ValueError, match=r"expected 4 arguments .*got 3"):
        gauss_genred()(x, y, b)
    with pytest.raises(ValueError, match=r"expected 4 arguments .*got 5"):
        gauss_genred()(x, y, b, gam, gam)


@pytest.mark.parametrize("which,bad,match", [
    (0, np.zeros((N, 2)), r"input 0 \(Vi\(0,3\)\) has shape \(23, 2\)"),
    (1, np.zeros((M, 3, 1)), r"input 1 \(Vj\(1,3\)\)"),
    (0, np.zeros(N), r"input 0 \(Vi\(0,3\)\)"),
    (2, np.zeros((M + 1, 1)), r"input 2 has 38 rows but input 1 has 37"),
    (3, np.zeros(2), r"input 3 \(Pm\(3,1\)\)"),
])
def test_wrong_shapes(which, bad, match):
    args = gauss_args()
    args[which] = bad
    with pytest.raises(ValueError, match=match):
        gauss_genred()(*args)


def test_bad_dtypes_and_types():
    x, y, b, gam = gauss_args()
    g = gauss_genred()
    with pytest.raises(TypeError, match="dtype float64 but input 0 has float32"):
        g(x.astype(np.float32), y, b, gam)
    with pytest.raises(TypeError, match="argument 0 has dtype int64; expected float32, float64 or float16"):
        g(x.astype(np.int64), y, b, gam)
    with pytest.raises((TypeError, ValueError)):
        g(x.astype(np.int32), y, b, gam)
    with pytest.raises(TypeError, match="argument 1 is a list"):
        g(x, y.tolist(), b, gam)
    with pytest.raises(TypeError, match="numpy.ndarray"):
        g(x, y, b, 0.5)
    with pytest.raises(TypeError, match="numpy.ndarray"):
        g(torch.from_numpy(x), y, b, gam)


def test_bad_construction():
    case = CASES["gauss"]
    with pytest.raises(ValueError, match="reduction_op 'Mean': unknown reduction 'Mean'; expected one of Sum, "):
        Genred(case.formula, case.aliases, "Mean")
    with pytest.raises(ValueError, match="KMin needs opt_arg"):
        Genred(case.formula, case.aliases, "KMin")
    with pytest.raises(ValueError, match=r"opt_arg \(the K of ArgKMin\) must be in .* got 0"):
        Genred(case.formula, case.aliases, "ArgKMin", opt_arg=0)
    with pytest.raises(ValueError, match="opt_arg is only used"):
        Genred(case.formula, case.aliases, "Sum", opt_arg=3)
    with pytest.raises(ValueError, match="needs formula2"):
        Genred(case.formula, case.aliases, "SumSoftMaxWeight")
    with pytest.raises(ValueError, match="formula2 is only used"):
        Genred(case.formula, case.aliases, "Sum", formula2="B")
    with pytest.raises(ValueError, match="axis"):
        Genred(case.formula, case.aliases, "Sum", axis=2)
    with pytest.raises(ValueError, match="sum_scheme"):
        Genred(case.formula, case.aliases, "Sum", sum_scheme="pairwise")
    with pytest.raises(ValueError, match="dtype_acc"):
        Genred(case.formula, case.aliases, "Sum", dtype_acc="float16")
    with pytest.raises(ValueError, match="backend"):
        gauss_genred(backend="tpu")(*gauss_args())
    if "no CUDA driver" in _core.cuda_status() or "cuInit" in _core.cuda_status():
        with pytest.raises(ValueError, match="CUDA is not usable"):
            gauss_genred(backend="gpu")(*gauss_args())


def test_k_larger_than_rows():
    x, y, b, gam = gauss_args(m=4)
    with pytest.raises(ValueError, match=r"K = 5 is larger than the number of j rows \(4\)"):
        gauss_genred("KMin", opt_arg=5)(x, y, b, gam)
    with pytest.raises(ValueError, match=r"K = 30 is larger than the number of i rows \(23\)"):
        gauss_genred("ArgKMin", opt_arg=30, axis=0)(*gauss_args())
    # K equal to the number of rows is fine: a full sort.
    v, i = gauss_genred("KMin_ArgKMin", opt_arg=4)(x, y, b, gam)
    np.testing.assert_array_equal(np.sort(i, axis=1), np.tile(np.arange(4), (N, 1)))


@pytest.mark.parametrize("text,column", [("Exp(-SqDist(X,Y)*B", 18), ("SqDist(X,Z)", 9),
                                         ("SqDist(X,Y) +* B", 13)])
def test_parse_error_names_column(text, column):
    with pytest.raises(ValueError, match=f"at column {column}"):
        Genred(text, CASES["gauss"].aliases)


# ---- pickling -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kw", [
    dict(reduction_op="Sum"),
    dict(reduction_op="KMin_ArgKMin", opt_arg=3, axis=0),
    dict(reduction_op="SumSoftMaxWeight", formula2=SOFTMAX_G[0], sum_scheme="kahan_scheme"),
    dict(reduction_op="LogSumExp", formula2=LSE_W[0], dtype_acc="float64", backend="interpreter"),
], ids=["sum", "kmin_argkmin", "softmax", "lse_weighted"])
def test_pickle(kw):
    case = CASES["gauss"]
    g = Genred(case.formula if "formula2" not in kw else LSE_F[0], case.aliases, **kw)
    h = pickle.loads(pickle.dumps(g))
    assert isinstance(h, Genred) and h is not g
    args = gauss_args(np.float32)
    for a, b in zip(*(o if isinstance(o, tuple) else (o,) for o in (g(*args), h(*args)))):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_pickle_formula_object():
    case = CASES["gauss"]
    f = tessel.parse(case.formula, case.aliases)
    g = Genred(f, case.aliases, "Min_ArgMin")
    h = pickle.loads(pickle.dumps(g))
    args = gauss_args()
    for a, b in zip(g(*args), h(*args)):
        np.testing.assert_array_equal(a, b)


# ---- options --------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("op,formula2", [("Sum", None), ("Min_ArgMin", None),
                                         ("KMin_ArgKMin", None), ("LogSumExp", LSE_W[0]),
                                         ("SumSoftMaxWeight", SOFTMAX_G[0])])
@pytest.mark.parametrize("axis", [1, 0])
def test_interpreter_matches_compiled(op, formula2, axis, dtype):
    case = CASES["gauss"]
    args = gauss_args(dtype)
    g = Genred(case.formula if formula2 is None else LSE_F[0], case.aliases, op, axis=axis,
               opt_arg=K if op in K_OPS else None, formula2=formula2)
    outs = {}
    for be in ("interpreter", "compiled"):
        o = g(*args, backend=be)
        outs[be] = o if isinstance(o, tuple) else (o,)
    # Both at the same precision, so they agree to rounding; indices exactly in float64.
    for a, b in zip(outs["interpreter"], outs["compiled"]):
        assert a.dtype == b.dtype and a.shape == b.shape
        if a.dtype == np.int64:
            if dtype == np.float64:
                np.testing.assert_array_equal(a, b)
        else:
            assert_values(a, b, dtype, tol=1e-12 if dtype == np.float64 else 2e-6)
    # And the constructor option does the same as the call option.
    o = Genred(case.formula if formula2 is None else LSE_F[0], case.aliases, op, axis=axis,
               opt_arg=K if op in K_OPS else None, formula2=formula2, backend="interpreter")(*args)
    for a, b in zip(o if isinstance(o, tuple) else (o,), outs["interpreter"]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("scheme", ["auto", "kahan_scheme", "direct_sum", "block_sum"])
@pytest.mark.parametrize("op", ["Sum", "SumSoftMaxWeight"])
def test_sum_schemes(scheme, op, dtype):
    kw = dict(formula=LSE_F, formula2=SOFTMAX_G) if op == "SumSoftMaxWeight" else {}
    run(CASES["gauss"], op, 1, dtype, sum_scheme=scheme, n=20, m=60, **kw)


LONG = 50_000  # a long float32 sum: plain float32 accumulation drifts, compensated ones do not


@pytest.fixture(scope="module")
def long_sum():
    rng = np.random.default_rng(5)
    x = rng.uniform(0, 1, size=(4, 1))
    y = rng.uniform(0, 1, size=(LONG, 1))
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    ref = (1.0 + x32.astype(np.float64) * y32.astype(np.float64).T).sum(1, keepdims=True)
    return x32, y32, ref


# The README's first-order bounds ("Accuracy of sums") for positive terms (Σ|x_i| = s), relative:
# float32 result rounding u plus the scheme's term; 2u covers the second-order remainders here.
U, UD, L = 2.0**-24, 2.0**-53, 64
ACC_BOUND = U + 2 * U + (2 * LONG + 18) * UD
@pytest.mark.parametrize("kw,tol", [(dict(dtype_acc="float64"), ACC_BOUND),
                                    (dict(sum_scheme="kahan_scheme"), U + 2 * U + 2 * U),
                                    (dict(sum_scheme="block_sum"),
                                     U + (L - 1) * U + (2 * LONG // L + 18) * UD + 2 * U),
                                    (dict(sum_scheme="direct_sum", dtype_acc="float64"), ACC_BOUND)])
def test_accurate_float32_accumulation(long_sum, kw, tol):
    x, y, ref = long_sum
    out = Genred("1 + X*Y", ["X = Vi(1)", "Y = Vj(1)"], **kw)(x, y)
    assert out.dtype == np.float32
    # Each term 1 + x*y is itself computed in float32 (two roundings, at most 2u relative).
    np.testing.assert_allclose(out, ref, rtol=tol + 2 * U)


# ---- empty inputs ---------------------------------------------------------------------------------
NEUTRAL = {"Sum": 0.0, "Min": np.inf, "Max": -np.inf, "ArgMin": -1, "ArgMax": -1,
           "Min_ArgMin": (np.inf, -1), "Max_ArgMax": (-np.inf, -1), "LogSumExp": -np.inf,
           "SumSoftMaxWeight": np.nan}  # no weights there (0 / 0), as pykeops


@pytest.mark.parametrize("dtype", DTYPES, ids=["f64", "f32"])
@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("op", list(NEUTRAL))
def test_empty_reduced_axis_gives_neutral_values(op, axis, dtype):
    case = CASES["gauss"]
    n, m = (N, 0) if axis == 1 else (0, M)
    args = case.data(n, m, dtype=dtype)
    soft = op in ("LogSumExp", "SumSoftMaxWeight")
    g = Genred(LSE_F[0] if soft else case.formula, case.aliases, op, axis=axis,
               formula2=SOFTMAX_G[0] if op == "SumSoftMaxWeight" else None)
    out = g(*args)
    want = NEUTRAL[op] if isinstance(NEUTRAL[op], tuple) else (NEUTRAL[op],)
    outs = out if isinstance(out, tuple) else (out,)
    assert len(outs) == len(want)
    dim = 3 if op == "SumSoftMaxWeight" else 1
    for o, w in zip(outs, want):
        assert o.shape == (N if axis == 1 else M, dim)
        assert o.dtype == (np.int64 if isinstance(w, int) else dtype)
        assert (o == w).all() or (np.isnan(w) and np.isnan(o).all())


@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("op", ["Sum", "Min_ArgMin", "KMin_ArgKMin", "SumSoftMaxWeight"])
def test_empty_output_axis(op, axis):
    case = CASES["gauss"]
    n, m = (0, M) if axis == 1 else (N, 0)
    g = Genred(case.formula if op != "SumSoftMaxWeight" else LSE_F[0], case.aliases, op,
               axis=axis, opt_arg=K if op in K_OPS else None,
               formula2=SOFTMAX_G[0] if op == "SumSoftMaxWeight" else None)
    out = g(*case.data(n, m))
    outs = out if isinstance(out, tuple) else (out,)
    dims = {"Sum": (1,), "Min_ArgMin": (1, 1), "KMin_ArgKMin": (K, K), "SumSoftMaxWeight": (3,)}[op]
    assert [o.shape for o in outs] == [(0, d) for d in dims]
    assert [o.dtype for o in outs][1:] == [np.int64] * (len(outs) - 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_formula_reading_no_array_keeps_the_arrays_dtype(dtype):
    x, y = np.ones((5, 3), dtype), np.ones((4, 3), dtype)
    g = Genred("Zero(3)", ["x=Vi(3)", "y=Vj(3)"], reduction_op="Sum", axis=1)
    out = g(x, y)
    assert out.dtype == dtype and out.shape == (5, 3) and not out.any()
    other = np.float32 if dtype == np.float64 else np.float64
    with pytest.raises(TypeError, match="Genred: the arrays have dtypes"):
        g(x, y.astype(other))
