"""LazyTensor's formula building: core Formulas made through the op table, operators and methods.

Every operation calls the core (`_core.make` and friends), which checks dims and simplifies: the
dim rules live in the core only, and their errors are re-raised naming the LazyTensor method
the user called. Variables of different operands are merged by identity and renumbered by the
core (`Formula.relabel`). Methods for the table's plain ops (exp, sinxdivx, atan2, sqdist, ...) are
generated from `_core.op_table()`, so a new core op needs no edit here.
"""
import math
import numbers

from . import _core
from . import _lazy_vars as lv
from ._lazy_opdocs import table_method_doc

__all__ = ["FormulaOps", "add_table_methods", "joint"]

_make, _var = _core.make, _core.var


def _plain(e):
    """A core error message without its "tessel::" prefix."""
    m = str(e)
    return m[len("tessel::"):] if m.startswith("tessel::") else m


def _core_call(who, fn, *args):
    """fn(*args) on the core; its user errors name the LazyTensor method `who`."""
    try:
        return fn(*args)
    except (ValueError, TypeError) as e:
        raise type(e)(f"LazyTensor.{who}: {_plain(e)}") from None


def joint(*lts):
    """The LazyTensors' formulas over one shared list of variables, each variable once.

    Front ends use it to evaluate several LazyTensors in one reduction (the weights of a
    SumSoftMaxWeight, a weighted LogSumExp).

    Parameters
    ----------
    *lts : LazyTensor
        At least one.

    Returns
    -------
    formulas : list of tessel.Formula
        One per LazyTensor, variable k of each being ``variables[k]``.
    variables : list of Variable
        The inputs, each once.

    Raises
    ------
    IndexError
        No LazyTensor is given.

    Examples
    --------
    >>> import numpy as np
    >>> from tessel.lazytensor import Vi, Vj, joint
    >>> x, y = Vi(np.ones((3, 2))), Vj(np.zeros((4, 2)))
    >>> formulas, variables = joint(x.sqdist(y), x.sum(-1))
    >>> formulas
    [tessel.Formula(SqDist(Vi(0,2),Vj(1,2))), tessel.Formula(Sum(Vi(0,2)))]
    >>> [(v.cat, v.dim) for v in variables]
    [(0, 2), (1, 2)]
    """
    first = lts[0]
    variables, formulas, where = list(first._vars), [first._f], None
    for lt in lts[1:]:
        if not lt._vars or lt._vars is first._vars:
            formulas.append(lt._f)
            continue
        if where is None:
            where = {v.key: k for k, v in enumerate(variables)}
        mapping, same = [], True
        for m, v in enumerate(lt._vars):
            k = where.get(v.key)
            if k is None:
                k = where[v.key] = len(variables)
                variables.append(v)
            mapping.append(k)
            same = same and k == m
        formulas.append(lt._f if same else lt._f.relabel(mapping))
    return formulas, variables


class FormulaOps:
    """A core Formula over the variables `_vars` (variable k of the formula is `_vars[k]`), with
    the sizes, batch shape and array adapter they share."""

    __slots__ = ("_f", "_vars", "_ni", "_nj", "_batch", "_adapter", "__weakref__")
    __array_ufunc__ = None  # numpy_array * LazyTensor defers to LazyTensor.__rmul__
    __array_priority__ = 1000
    __iter__ = None
    __hash__ = object.__hash__
    # Complex LazyTensors (a formula on (re, im) pairs) are their own class; lazytensor.py names
    # the two classes here so that a leaf or a constant gets the class of its values.
    _is_complex = False
    _real_class = _complex_class = None

    @classmethod
    def _leaf(cls, v):
        if v.is_complex != cls._is_complex:
            cls = cls._complex_class if v.is_complex else cls._real_class
        lt = object.__new__(cls)
        try:
            lt._f = _var(0, v.dim, v.cat)
        except ValueError as e:  # a 0-wide array
            raise ValueError(f"LazyTensor: {_plain(e)}") from None
        lt._vars = (v,)
        lt._ni = v.n if v.cat == lv.I else None
        lt._nj = v.n if v.cat == lv.J else None
        lt._batch, lt._adapter = v.batch, v.adapter
        return lt

    @classmethod
    def _constant(cls, x):
        if lv.is_complex_number(x):
            return cls._complex_class._complex_constant(x)
        cls = cls._real_class if cls._is_complex else cls
        if isinstance(x, numbers.Integral):
            f = _core.int_cst(int(x))
        else:
            if not math.isfinite(float(x)):
                raise ValueError(f"LazyTensor: the constant {float(x)} is not finite")
            f = _core.constant(float(x))
        lt = object.__new__(cls)
        lt._f, lt._vars, lt._ni, lt._nj, lt._batch, lt._adapter = f, (), None, None, (), None
        return lt

    def _new(self, f, variables, operands):
        """A LazyTensor of formula f over `variables`, the union of the operands' variables."""
        cls = type(self)
        for o in operands:  # a subclass's operand (a sharded LazyTensor) keeps its class
            if type(o) is not cls and issubclass(type(o), cls) and o._is_complex == cls._is_complex:
                cls = type(o)
        lt = object.__new__(cls)
        lt._f, lt._vars = f, tuple(variables)
        ni, nj, batch, adapter = self._ni, self._nj, self._batch, self._adapter
        for o in operands:
            if o is not self and o._vars:
                if o._ni != ni:
                    ni = lv.join_sizes(ni, o._ni, lv.I)
                if o._nj != nj:
                    nj = lv.join_sizes(nj, o._nj, lv.J)
                if o._batch != batch:
                    batch = lv.broadcast_batch(batch, o._batch, "LazyTensor")
                if o._adapter is not adapter:
                    adapter = lv.join_adapters(adapter, o._adapter)
        lt._ni, lt._nj, lt._batch, lt._adapter = ni, nj, batch, adapter
        return lt

    def _apply(self, who, op, operands, params=()):
        """Op `op` of the core's table on the operands (self among them), with integer params."""
        formulas, variables = joint(*operands)
        try:
            f = _make(op, formulas, params)
        except (ValueError, TypeError) as e:
            raise type(e)(f"LazyTensor.{who}: {_plain(e)}") from None
        return self._new(f, variables, operands)

    def _build(self, who, fn, operands, *extra):
        """fn(formulas..., *extra) for a core builder other than make (tensordot, grad, ...)."""
        formulas, variables = joint(*operands)
        return self._new(_core_call(who, fn, *formulas, *extra), variables, operands)

    def _wrap(self, other):
        """A LazyTensor for an operand (LazyTensor, array or number), or None for anything else."""
        if isinstance(other, FormulaOps):
            return other
        if lv.is_number(other) or lv.is_complex_number(other):
            return self._constant(other)
        if lv.adapter_of(other) is not None:
            return type(self)(other)
        return None

    def _operand(self, x, who):
        o = self._wrap(x)
        if o is None:
            raise TypeError(f"LazyTensor.{who}: expected a LazyTensor, an array or a number, got "
                            f"{type(x).__name__}")
        return o

    def _binary(self, other, who, op, reverse=False):
        o = self._wrap(other)
        if o is None:
            return NotImplemented
        if o._is_complex and not self._is_complex:  # complex arithmetic, on the complex side
            return o._binary(self, who, op, not reverse)
        return self._apply(who, op, [o, self] if reverse else [self, o])

    # ---- arithmetic; comparisons give 1 where true, 0 elsewhere; | is the scalar product -------
    def __neg__(self):
        return self._apply("__neg__", "Minus", [self])

    def __pos__(self):
        return self

    def __abs__(self):
        return self._apply("abs", "Abs", [self])

    def __pow__(self, other):
        """Integer powers use Pow (2: Square), 0.5 Sqrt, -0.5 Rsqrt, other exponents Powf."""
        if isinstance(other, bool):
            other = int(other)
        if lv.is_number(other):
            e = float(other)
            special = {2.0: "Square", 0.5: "Sqrt", -0.5: "Rsqrt"}.get(e)
            if special is not None:
                return self._apply("__pow__", special, [self])
            if e.is_integer() and abs(e) < 2 ** 31:
                return self._apply("__pow__", "Pow", [self], (int(e),))
        return self._binary(other, "__pow__", "Powf")

    def __rpow__(self, other):
        return self._binary(other, "__pow__", "Powf", reverse=True)

    def power(self, other):
        """self ** other elementwise (pykeops's name)."""
        return self.__pow__(other)

    # ---- ops whose Python spelling differs from the table's -------------------------------------
    # (round(decimals=0) is the table's: Round's decimals are optional and named there.)
    def mod(self, modulus, offset=0):
        """self - modulus * floor((self - offset) / modulus), elementwise."""
        return self._apply("mod", "Mod", [self, self._operand(modulus, "mod"),
                                          self._operand(offset, "mod")])

    def clamp(self, a, b):
        """min(max(self, a), b) elementwise; integer bounds use ClampInt."""
        if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in (a, b)):
            return self._apply("clamp", "ClampInt", [self], (a, b))
        return self._apply("clamp", "Clamp", [self, self._operand(a, "clamp"),
                                              self._operand(b, "clamp")])

    def one_hot(self, D):
        """The one-hot vector of dim D of a scalar LazyTensor holding an integer."""
        return self._apply("one_hot", "OneHot", [self], (lv.positive_int("one_hot", "D", D),))

    def bspline(self, x, k=0):
        """The dim - k - 1 B-spline basis functions of order k for the knots `self`, at the
        scalar `x` (KeOps's BSpline)."""
        if not isinstance(k, numbers.Integral) or isinstance(k, bool):
            raise TypeError(f"LazyTensor.bspline: the order k must be an int, got {k!r}")
        return self._apply("bspline", "BSpline", [self, self._operand(x, "bspline")], (k,))

    def difference_matrix(self, other):
        """self[a] - other[b] at a * other.dim + b (dim self.dim * other.dim)."""
        return self._apply("difference_matrix", "DifferenceMatrix",
                           [self, self._operand(other, "difference_matrix")])

    def norm(self, dim=-1):
        """The Euclidean norm over the D components (dim=-1 only), as norm2."""
        if dim not in (-1, self.dim() - 1):
            raise ValueError("LazyTensor.norm: only the norm over the D components (dim=-1) is "
                             "symbolic")
        return self._apply("norm", "Norm2", [self])

    def weightedsqnorm(self, other):
        """self^T S self with S = `other`: a scalar (dim 1), a diagonal (dim D) or a full D x D
        matrix (dim D*D, row-major)."""
        s = self._operand(other, "weightedsqnorm")
        return self._build("weightedsqnorm", _core.weighted_sqnorm, [s, self])

    def weightedsqdist(self, g, s):
        """(self - g)^T S (self - g), S = `s` as in weightedsqnorm."""
        y, w = self._operand(g, "weightedsqdist"), self._operand(s, "weightedsqdist")
        return self._build("weightedsqdist", _core.weighted_sqdist, [w, self, y])

    def elem(self, i):
        """The component i (0 <= i < D), a LazyTensor of dim 1."""
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(f"LazyTensor.elem: the index must be an integer, got {i!r}")
        if not 0 <= i < self.ndim:
            raise IndexError(f"LazyTensor.elem: index {i} is out of range for dim {self.ndim}")
        return self._apply("elem", "Elem", [self], (i,))

    def extract(self, start, length):
        """The components start .. start + length - 1, a LazyTensor of dim length."""
        if not (0 <= start and length >= 1 and start + length <= self.ndim):
            raise IndexError(f"LazyTensor.extract: range [{start}, {start + length}) does not fit "
                             f"in dim {self.ndim}")
        return self._apply("extract", "Extract", [self], (start, length))

    def grad(self, other, gradin):
        """The symbolic gradient of <self, gradin> with respect to `other`, a LazyTensor that is
        one variable (of self or not: the gradient is then 0)."""
        v, e = self._variable_arg("grad", "other", other), self._operand(gradin, "grad")
        return self._build("grad", _core.grad_formula, [self, v, e])

    # ---- KeOps's derivative operators and factorisation hints (pykeops's names and arguments) --
    # grad_matrix, diff, divergence, laplacian and trace_operator call the core's operators of
    # the same KeOps names (GradMatrix, Diff, ...), which expand them into plain formulas through
    # the formula VJPs: any backend evaluates them and their reductions differentiate to any
    # order. The arguments are checked here so that an error names the method and the argument
    # (pykeops's spelling: other, diffin, var). The variable must be one variable (Vi, Vj, Pm or
    # a symbolic Var); one that the formula does not read gives derivatives 0, as in KeOps.
    # factorize / auto_factorize are KeOps's hints to compute a repeated sub-formula once: the
    # formulas are hash-consed (equal sub-formulas are one node) and every code generator emits
    # each node once (the C++ test DerivativeOps.RepeatedSubformulaIsEmittedOnce counts the
    # emitted exponentials), so they return the same formula.
    def _variable_arg(self, who, name, v):
        o = self._operand(v, who)
        if o.variable is None:
            raise ValueError(f"LazyTensor.{who}: {name} must be a LazyTensor that is one variable "
                             f"(Vi, Vj, Pm or a symbolic Var), got {o!r}")
        return o

    def grad_matrix(self, other):
        """The Jacobian of self with respect to the variable `other`, as KeOps lays it out: a
        LazyTensor of dim self.ndim * other.ndim whose entry k * other.ndim + l is
        d self_k / d other_l (the gradients of self's components, concatenated)."""
        v = self._variable_arg("grad_matrix", "other", other)
        return self._build("grad_matrix", _core.grad_matrix, [self, v])

    def diff(self, other, diffin):
        """The differential of self with respect to the variable `other`, applied to `diffin`
        (forward mode: the directional derivative, of dim self.ndim; diffin has other's dim)."""
        v = self._variable_arg("diff", "other", other)
        u = self._operand(diffin, "diff")
        if u.ndim != v.ndim:
            raise ValueError(f"LazyTensor.diff: diffin has dim {u.ndim}; expected the dim "
                             f"{v.ndim} of the variable 'other'")
        return self._build("diff", _core.diff, [self, v, u])

    def divergence(self, var):
        """sum_k d self_k / d var_k, the trace of the Jacobian (self and var of one dim)."""
        v = self._variable_arg("divergence", "var", var)
        if self.ndim != v.ndim:
            raise ValueError(f"LazyTensor.divergence: self has dim {self.ndim} and var dim "
                             f"{v.ndim}; the divergence needs equal dims")
        return self._build("divergence", _core.divergence, [self, v])

    def laplacian(self, var):
        """sum_k d^2 self / d var_k^2, the divergence of the gradient of a scalar self."""
        v = self._variable_arg("laplacian", "var", var)
        if self.ndim != 1:
            raise ValueError(f"LazyTensor.laplacian: self has dim {self.ndim}; the laplacian "
                             "needs a scalar formula (dim 1)")
        return self._build("laplacian", _core.laplacian, [self, v])

    def trace_operator(self, var):
        """The trace of self, a linear function of the variable `var` of the same dim (refused
        when self is not linear in var). The result no longer depends on var. As in pykeops, an
        array var stays an argument of the reduction (its rows still give N or M) and a symbolic
        var does not."""
        v = self._variable_arg("trace_operator", "var", var)
        if self.ndim != v.ndim:
            raise ValueError(f"LazyTensor.trace_operator: self has dim {self.ndim} and var dim "
                             f"{v.ndim}; the trace needs equal dims")
        res = self._build("trace_operator", _core.trace_operator, [self, v])
        if v.variable.placeholder is None:
            return res
        gone = next(k for k, w in enumerate(res._vars) if w.key == v.variable.key)
        index = [k - (k > gone) for k in range(len(res._vars))]
        res._f = res._f.relabel(index)  # var is not in the formula: index[gone] is never read
        res._vars = res._vars[:gone] + res._vars[gone + 1:]
        return res

    def factorize(self, other):
        """KeOps's hint to compute the sub-formula `other` once: tessel already does (equal
        sub-formulas are one node of a hash-consed graph, emitted once), so the formula is self's;
        other's variables join the result's, as in pykeops."""
        o = self._operand(other, "factorize")
        formulas, variables = joint(self, o)
        return self._new(formulas[0], variables, [self, o])

    def auto_factorize(self):
        """KeOps's hint to share repeated sub-formulas: tessel always does (see factorize)."""
        return self


# Python operators and the core ops they build (the reflected forms swap the operands).
_OPERATORS = {"add": "Add", "sub": "Subtract", "mul": "Mult", "truediv": "Divide",
              "or": "Scalprod", "lt": "Less", "le": "LessEq", "gt": "Greater",
              "ge": "GreaterEq", "eq": "Equal", "ne": "NotEqual"}
_REFLECTED = ("add", "sub", "mul", "truediv", "or")


def _operator(op, who, reverse):
    def method(self, o):
        return self._binary(o, who, op, reverse)

    method.__name__ = method.__qualname__ = who.replace("__", "__r", 1) if reverse else who
    return method


for _py, _op in _OPERATORS.items():
    setattr(FormulaOps, f"__{_py}__", _operator(_op, f"__{_py}__", False))
    if _py in _REFLECTED:
        setattr(FormulaOps, f"__r{_py}__", _operator(_op, f"__{_py}__", True))


def _table_method(op, arity, params, name):
    """A method for op `op` of the table: operands, then its parameters as the table writes them
    (integers, or tuples such as TensorDot's and Kron's axes; by position, or by the table's
    names where it gives them)."""
    tuples, least, most, names = params
    names = names.split()
    n_operands = arity - 1
    what = "tuple(s) of integers" if tuples else "integer parameter(s)"
    count = str(most) if least == most else f"{least} to {most}"

    def method(self, *args, **kwargs):
        given = list(args[n_operands:])
        for key, v in kwargs.items():
            if key not in names or names.index(key) != len(given):
                raise TypeError(f"LazyTensor.{name}: unexpected keyword argument {key!r}")
            given.append(v)
        if len(args) < n_operands or not least <= len(given) <= most:
            raise TypeError(f"LazyTensor.{name}: takes {n_operands} operand(s) and {count} "
                            f"{what}, got {len(args) + len(kwargs)} argument(s)")
        if tuples:
            given = [list(lv.int_tuple(name, names[k] if k < len(names) else f"parameter {k + 1}",
                                       v)) for k, v in enumerate(given)]
        operands = [self] + [self._operand(a, name) for a in args[:n_operands]]
        return self._apply(name, op, operands, given)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = table_method_doc(op, arity, params)
    return method


def add_table_methods(cls):
    """A method per op of the core's table that cls does not spell itself (exp, sinxdivx, atan2,
    sqdist, matvecmult, keops_tensordot, keops_kron, ...): the table's method name (the
    lower-case op name unless the op says otherwise; none for internal ops), operands then the
    parameters as the table says they are written. Returns the names added."""
    added = []
    for op, arity, _, infix, _, name, params in _core.op_table():
        if not name or infix or hasattr(cls, name):
            continue
        setattr(cls, name, _table_method(op, arity, params, name))
        added.append(name)
    return tuple(added)
