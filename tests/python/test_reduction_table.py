"""Walks _core.reduction_table(): every row's names, and its values against dense NumPy and pykeops.

Each row built by name runs through tessel.numpy.Genred (every spelling of its name) against a
dense float64 NumPy reference chosen by the row's family, and through the pykeops layer against
the real pykeops 2.3 when it is installed; a row whose family this file does not know fails.
"""
import os

import numpy as np
import pytest

os.environ.setdefault("PYKEOPS_VERBOSE", "0")

from tessel import _core  # noqa: E402
from tessel.compat.pykeops import numpy as tn  # noqa: E402
from tessel.numpy import Genred  # noqa: E402

try:  # compiles each new formula with g++ (a few seconds, cached across runs)
    import pykeops.numpy as rn
except ImportError:
    rn = None

TABLE = _core.reduction_table()
BY_NAME = [r for r in TABLE if r["by_name"]]
ALIASES = ["X = Vi(2)", "Y = Vj(2)", "B = Vj(3)", "S = Pm(1)"]
SCALAR_F, VECTOR_F = "S * SqDist(X, Y) - Sum(B)", "S * (X - Y) * Elem(B, 0)"
N, M, K = 9, 14, 3
VECTOR_DIM = 2  # the dim of VECTOR_F


def cases():
    """(row, weighted) for every row built by name, both weightings where the weight is optional."""
    out = []
    for r in BY_NAME:
        weights = {"none": [False], "required": [True], "optional": [False, True]}[r["weight"]]
        out += [pytest.param(r, w, id=r["name"] + ("-weighted" if w else "")) for w in weights]
    return out


def data(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-2, 2, (N, 2)), rng.uniform(-2, 2, (M, 2)), rng.uniform(0.2, 1, (M, 3)),
            rng.uniform(0.5, 1.5, (1,))]


def dense(row, weighted, x, y, b, s):
    """The reduction over j of F (N, M, d), by the row's family, in float64: (values, indices)."""
    F = (s[0] * ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1) - b.sum(-1)[None, :])[..., None] \
        if row["scalar_formula"] else s[0] * (x[:, None, :] - y[None, :, :]) * b[None, :, :1]
    fam = row["family"]
    if fam == "sum":
        return F.sum(1), None
    if fam == "select":
        idx = F.argmax(1) if row["is_max"] else F.argmin(1)  # first extremum, as the table says
        return np.take_along_axis(F, idx[:, None, :], 1)[:, 0], idx
    if fam == "kselect":  # per component, column q * d + c (KeOps's layout)
        idx = np.argsort(F, axis=1, kind="stable")[:, :K]
        return np.take_along_axis(F, idx, 1).reshape(N, -1), idx.reshape(N, -1)
    if fam == "softmax":
        f = F[..., 0]
        m = f.max(1, keepdims=True)
        e = np.exp(f - m)
        w = b[None, :, :] if weighted else np.ones((1, M, 1))
        sums = (e[..., None] * w).sum(1)
        if row["name"] == "LogSumExp":
            return m + np.log(sums), None
        return sums / e.sum(1)[:, None], None
    raise AssertionError(f"no dense reference for the {fam!r} family of {row['name']}")


def split(row, out):
    """(values, indices) of a Genred result, by the row's outputs."""
    if row["outputs"] == "value,index":
        return out
    return (None, out) if row["outputs"] == "index" else (out, None)


def test_table_names_round_trip():
    names = [r["name"] for r in TABLE]
    assert len(set(names)) == len(names)
    for r in TABLE:
        for spelling in [r["name"]] + r["spellings"]:
            if r["by_name"]:
                assert _core.reduction_name(spelling) == r["name"]
            else:
                with pytest.raises(ValueError, match="unknown reduction"):
                    _core.reduction_name(spelling)
    with pytest.raises(ValueError, match="unknown reduction"):
        _core.reduction_name("Max_SumShiftExpWeight")


@pytest.mark.parametrize("row,weighted", cases())
def test_every_row_against_dense_numpy(row, weighted):
    x, y, b, s = data()
    want_v, want_i = dense(row, weighted, x, y, b, s)
    formula = SCALAR_F if row["scalar_formula"] else VECTOR_F
    for spelling in [row["name"]] + row["spellings"]:
        g = Genred(formula, ALIASES, reduction_op=spelling, axis=1,
                   opt_arg=K if row["uses_k"] else None, formula2="B" if weighted else None)
        got_v, got_i = split(row, g(x, y, b, s))
        d = 1 if row["scalar_formula"] else VECTOR_DIM
        cols = {"formula": d, "k_times_formula": K * d, "weight_or_1": 3 if weighted else 1}
        if got_v is not None:
            assert got_v.shape == (N, cols[row["dim_rule"]])
            np.testing.assert_allclose(got_v, want_v, rtol=1e-12, atol=1e-12)
        if got_i is not None:
            assert got_i.dtype == np.int64 and got_i.shape == want_i.shape
            np.testing.assert_array_equal(got_i, want_i)


@pytest.mark.skipif(rn is None, reason="pykeops is not installed")
@pytest.mark.parametrize("row,weighted", cases())
def test_every_row_against_pykeops(row, weighted):
    x, y, b, s = data(1)
    # Scalar formulas: pykeops's K-reductions then give (N, K) as ours do.
    kw = dict(reduction_op=row["name"], axis=1, opt_arg=K if row["uses_k"] else None)
    if weighted:
        kw["formula2"] = "B"
    ours = tn.Genred(SCALAR_F, ALIASES, **kw)(x, y, b, s)
    real = rn.Genred(SCALAR_F, ALIASES, **kw)(x, y, b, s)
    ours, real = (o if isinstance(o, tuple) else (o,) for o in (ours, real))
    assert len(ours) == len(real)
    for o, r in zip(ours, real):
        assert o.shape == r.shape
        if np.issubdtype(o.dtype, np.integer):
            np.testing.assert_array_equal(o, np.asarray(r).astype(np.int64))
        else:
            np.testing.assert_allclose(o, r, rtol=1e-10, atol=1e-12)
