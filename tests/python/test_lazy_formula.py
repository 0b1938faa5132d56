"""LazyTensor builds core Formulas: the op table drives its methods, the core relabels and pickles."""
import ast
import pathlib
import pickle

import numpy as np
import pytest

from tessel import _core, lazytensor
from tessel.numpy import LazyTensor, Pm, Vi, Vj

RNG = np.random.default_rng(3)
X, Y = RNG.standard_normal((7, 3)), RNG.standard_normal((9, 3))
PACKAGE = pathlib.Path(lazytensor.__file__).parent


def test_formula_equality_hash_and_pickle():
    x, y = _core.var(0, 3, 0), _core.var(1, 3, 1)
    f = _core.make("Exp", [_core.make("Minus", [_core.make("SqDist", [x, y])])])
    g = _core.make("Exp", [_core.make("Minus", [_core.make("SqDist", [x, y])])])
    assert f == g and hash(f) == hash(g) and f != x and f != "Exp"
    back = pickle.loads(pickle.dumps(f))
    assert back == f and back.hash == f.hash and back.dim == 1
    assert f.variables() == [(0, 0, 3), (1, 1, 3)]


def test_relabel_and_substitute_are_the_cores():
    x, y = _core.var(0, 3, 0), _core.var(1, 3, 1)
    f = _core.make("SqDist", [x, y])
    assert f.relabel([4, 2]) == _core.make("SqDist", [_core.var(4, 3, 0), _core.var(2, 3, 1)])
    assert f.relabel(swap_ij=True) == _core.make("SqDist", [_core.var(0, 3, 1),
                                                           _core.var(1, 3, 0)])
    p = _core.var(5, 3, 2)
    assert f.substitute([x], [p]) == _core.make("SqDist", [p, y])
    with pytest.raises(ValueError, match="relabel"):
        f.relabel([0])
    with pytest.raises(ValueError, match="dim"):
        f.substitute([x], [_core.var(0, 2, 0)])
    with pytest.raises(ValueError, match="not an op"):
        _core.make("NoSuchOp", [x])
    with pytest.raises(ValueError, match="integer parameters"):
        _core.make("Elem", [x])


def test_parameters_are_written_as_the_table_says():
    """make, the parser and the generated methods read an op's parameters from the table: how
    many, integers or tuples, defaults (Round), names; Kron is a composite of the table."""
    table = {o[0]: o[6] for o in _core.op_table()}
    assert table["TensorDot"] == (True, 4, 5, "dimfa dimfb contfa contfb permute")
    assert table["Kron"] == (True, 2, 2, "dimfself dimfother")
    assert table["Round"] == (False, 0, 1, "decimals")
    assert table["Elem"][:3] == (False, 1, 1)
    a, b = _core.var(0, 6, 0), _core.var(1, 4, 1)
    aliases = ["a = Vi(0, 6)", "b = Vj(1, 4)"]
    kron = _core.make("Kron", [a, b], [(2, 3), (2, 2)])
    assert kron == _core.parse("Kron(a, b, (2, 3), (2, 2))", aliases)
    assert kron == _core.make("TensorDot", [a, b], [(2, 3), (2, 2), (), (), (0, 2, 1, 3)])
    dot = _core.make("TensorDot", [a, b], [[2, 3], [2, 2], [0], [1]])
    assert dot == _core.parse("TensorDot(a, b, (2, 3), (2, 2), (0,), (1,))", aliases)
    assert _core.make("Round", [a]) == _core.make("Round", [a], [0])
    with pytest.raises(ValueError, match="Kron: expected 2 tuples of integers, got 1"):
        _core.make("Kron", [a, b], [(2, 3)])
    with pytest.raises(ValueError, match="Elem: expected integer parameters, got a tuple"):
        _core.make("Elem", [a], [(1, 2)])
    x, y = Vi(np.ones((2, 6))), Vj(np.ones((3, 4)))
    assert x.keops_kron(y, (2, 3), dimfother=[2, 2]).formula == kron
    with pytest.raises(TypeError, match="keops_kron: dimfself must be an integer or a sequence"):
        x.keops_kron(y, "ab", (2, 2))
    with pytest.raises(TypeError, match="keops_tensordot: takes 1 operand"):
        x.keops_tensordot(y, (6,))


def test_every_table_op_is_a_method():
    """Each op of the core's table is reachable from LazyTensor: operators, hand-written methods
    for ops whose Python spelling differs, and generated methods for the rest (lower-case)."""
    spelled = {"Add", "Subtract", "Mult", "Divide", "Minus", "Scalprod", "Round",
               "Mod", "ClampInt", "Clamp", "Pow", "Powf", "Less", "LessEq", "Greater",
               "GreaterEq", "Equal", "NotEqual", "Sum", "Max", "Min", "ArgMax", "ArgMin", "Elem",
               "Extract", "OneHot", "Real2Complex", "Imag2Complex", "BSpline",
               "DifferenceMatrix"}
    for op, arity, n_params, infix, _, name, _ in _core.op_table():
        if op in spelled or not name:
            continue
        assert name in lazytensor.TABLE_METHODS, op
        special = {"SymSqNorm": [Pm(np.ones(9)), Vi(X)], "SqNormIso": [Pm(np.ones(1)), Vi(X)],
                   "MatVecMult": [Pm(np.ones(9)), Vi(X)], "VecMatMult": [Vi(X), Pm(np.ones(9))],
                   "ComplexRealScal": [Pm(np.ones(1)), Vi(X[:, :2])],
                   "ComplexSumT": [Vi(X[:, :2])],
                   "ElemT": [Vi(X[:, :1])], "SumT": [Vi(X[:, :1])]}
        if (op.startswith("Complex") or op == "Conj") and op not in special and op != "ComplexExp1j":
            special[op] = [Vi(X[:, :2])] + [Vj(Y[:, :2])] * (arity - 1)  # (re, im) pairs
        series = [Vi(X), Vj(Y), Pm(np.ones(1))]  # SoftDTW_SqDist and its derivative ops
        special.update({"SoftDTW_SqDist": series, "SoftDTW_SqDist_Grad": series,
                        "SoftDTW_SqDist_GradDir": series + [Pm(np.ones(2 * X.shape[1] + 1))]})
        # TensorDot and Kron take tuples of axes (the table's params say so).
        params = {"ElemT": [3, 1], "ExtractT": [1, 4], "SumT": [2], "ComplexSumT": [4],
                  "TensorDot": [(3,), (3,), (0,), (0,)], "Kron": [(3,), (3,)]}.get(
                      op, [1] * n_params)
        operands = special.get(op, [Vi(X)] + [Vj(Y)] * (arity - 1))
        out = getattr(operands[0], name)(*operands[1:], *params)
        assert isinstance(out, LazyTensor) and out.formula.dim == out.ndim


def test_generated_methods_name_the_method_in_dim_errors():
    with pytest.raises(ValueError, match=r"LazyTensor\.atan2: .*dims 3 and 2"):
        Vi(X).atan2(Vj(Y[:, :2]))
    with pytest.raises(TypeError, match=r"LazyTensor\.exp: takes 0 operand"):
        Vi(X).exp(2)
    with pytest.raises(ValueError, match=r"LazyTensor\.matvecmult: "):
        Vi(X).matvecmult(Vj(Y[:, :2]))


def test_transpose_is_the_cores_relabel():
    k = (-Vi(X).sqdist(Vj(Y))).exp()
    kt = k.t()
    assert kt.formula == k.formula.relabel(swap_ij=True)
    assert kt.shape == (9, 7, 1)
    dense = np.exp(-((X[:, None] - Y[None]) ** 2).sum(-1))
    np.testing.assert_allclose(kt.sum(axis=1), dense.T.sum(1, keepdims=True), rtol=1e-12)


def test_placeholders_keep_their_index_and_numbers_become_parameters():
    f = Vi(X) * lazytensor.Var(2, 3, 1) + Pm([1.0, 2.0, 3.0])
    (g,), variables = lazytensor.joint(f)
    assert [v.placeholder for v in variables] == [None, 2, None]
    assert variables[2].value == (1.0, 2.0, 3.0)
    assert [v.cat for v in f.t().variables] == [1, 0, 2]
    with pytest.raises(ValueError, match="placeholder"):
        (f.sqnorm2() * Vj(Y).sqnorm2()).sum(axis=1)


def test_lazytensor_modules_import_no_front_end():
    """The LazyTensor modules reach array libraries through registered adapters only."""
    for name in ("lazytensor.py", "_lazy_vars.py", "_lazy_build.py", "_lazy_reduce.py"):
        tree = ast.parse((PACKAGE / name).read_text())
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                imported |= {node.module or ""} | {a.name for a in node.names}
            elif isinstance(node, ast.Import):
                imported |= {a.name for a in node.names}
        assert not imported & {"numpy", "torch"}, (name, imported)


def test_a_new_op_needs_no_python_edit(monkeypatch):
    """Methods come from the op table: an op the table gains becomes a LazyTensor method."""
    table = _core.op_table() + [("Exp2ForTest", 1, 0, "", "elementwise", "exp2fortest",
                                 (False, 0, 0, ""))]
    monkeypatch.setattr(_core, "op_table", lambda: table)

    class Fresh(LazyTensor):
        __slots__ = ()

    added = lazytensor.add_table_methods(Fresh)
    assert added == ("exp2fortest",)
    with pytest.raises(ValueError, match=r"LazyTensor\.exp2fortest: .*Exp2ForTest"):
        Fresh(X, axis=0).exp2fortest()
