"""pykeops-style LazyTensor on tessel's: KeOps axis and shape conventions, symbolic variables.

A GenericLazyTensor wraps a tessel LazyTensor (which builds the core formula and checks dims)
and adds what pykeops code expects: `shape` without a trailing dim of 1 (`_shape` keeps it),
reductions counted after the batch dims with keyword options (`backend=`, `ranges=`, `call=`,
accuracy options), `.ranges` / `.backend` attributes, symbolic variables `Vi(0, 3)` /
`LazyTensor((ind, dim, cat))` that turn a reduction into a callable, and `solve`. The
callables (call=False, symbolic variables) are in _pending. Every pykeops keyword a reduction or
solve takes is honoured or refused by name; those tessel ignores are `_core.ignored_options()`.

Symbolic variables are tessel placeholders (`tessel.lazytensor.Var`); when a reduction runs they
keep their index and the arrays the LazyTensor holds become the arguments after them, as in
pykeops. Only tessel's public LazyTensor API is used here.
"""
import numbers

from ... import lazytensor as _tl
from ..._genred import check_ranges
from ._pending import (SOLVE_CALL_OPTIONS, PendingReduction, PendingSolve,  # noqa: F401
                       _genred_cache, call_formulas, clear_caches, describe, split_options,
                       symbolic_of)

__all__ = ["GenericLazyTensor", "PendingReduction", "PendingSolve"]

_TLT = _tl.LazyTensor
_CAT_TEXT = ("Vi", "Vj", "Pm")
def _is_float(x):
    """A float or complex number: pykeops makes it a parameter."""
    return isinstance(x, numbers.Complex) and not isinstance(x, numbers.Integral)


def _swap_ranges(ranges):
    return None if ranges is None else (*ranges[3:6], *ranges[0:3])


class GenericLazyTensor:
    """Symbolic (B..., N, M, D) array with pykeops's API; see pykeops.torch / pykeops.numpy."""

    __GenericLazyTensor__ = True
    is_complex = False  # ComplexGenericLazyTensor says True
    __array_ufunc__ = None
    __array_priority__ = 1000
    __iter__ = None
    __hash__ = object.__hash__

    _array_type = None     # the library's array class
    _genred_class = None   # the compat Genred of that library
    _kernelsolve_class = None

    ranges = None   # block-sparsity pattern (pykeops's 6 arrays) of the reductions
    backend = None  # default backend of the reductions
    # The library's real and complex classes (see _complex.py): results take their values' class.
    _real_class = _complex_class = None

    # ---- construction ------------------------------------------------------------------------
    def __init__(self, x=None, axis=None):
        self._batchdims = None
        if x is None:
            raise TypeError("LazyTensor: expected an array, a number, a list of numbers or an "
                            "(ind, dim, cat) tuple, got None")
        if isinstance(x, tuple):
            if (len(x) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in x)
                    or x[2] not in (0, 1, 2) or x[0] < 0 or x[1] < 1):
                raise ValueError("LazyTensor((ind, dim, cat)) needs three integers: an index >= 0, "
                                 f"a dim >= 1 and a category 0, 1 or 2; got {x!r}")
            if axis is not None:
                raise ValueError("LazyTensor: 'axis' should not be given with an (ind, dim, cat) "
                                 "tuple")
            self._t = _tl.Var(*x)
            return
        if isinstance(x, list):
            if axis not in (None, 2):
                raise ValueError("LazyTensor: a list of numbers is a parameter; axis must be None "
                                 "or 2")
            if not x or not all(isinstance(v, numbers.Complex) for v in x):
                raise TypeError("LazyTensor: a list must hold numbers (a parameter vector)")
            self._t = _tl.Pm(x)
            return
        if isinstance(x, numbers.Complex):
            if axis == 2 or (axis is None and _is_float(x)):
                self._t = _tl.Pm(x)  # a float is a parameter, as in pykeops
            elif axis is None:
                self._t = _TLT(x)  # an integer is IntCst(x)
            else:
                raise ValueError(f"LazyTensor: a number is a parameter; axis must be None or 2, "
                                 f"got {axis!r}")
            return
        if not isinstance(x, self._array_type):
            kind = f"{self._array_type.__module__}.{self._array_type.__name__}"
            raise TypeError(f"LazyTensor: this LazyTensor takes arrays of type {kind}; expected a "
                            f"{kind}, a number, a list of numbers or an (ind, dim, cat) tuple, got "
                            f"{type(x).__name__}")
        self._t = _TLT(x, axis=axis)

    @classmethod
    def _materialize(cls, v, dtype):
        if v.source is not None:
            return v.array
        return cls._array(v.value, dtype)

    @classmethod
    def _array(cls, values, dtype):
        raise NotImplementedError

    def _new(self, t, operands=()):
        """A LazyTensor of this class around the tessel LazyTensor `t`, inheriting symbolic
        variables, ranges, backend and batchdims from self and the LazyTensor operands."""
        res = object.__new__((self._complex_class if t._is_complex else self._real_class)
                             or type(self))
        res._t = t
        sources = [self] + [o for o in operands if isinstance(o, GenericLazyTensor)]
        res._batchdims = next((s._batchdims for s in sources if s._batchdims is not None), None)
        r = next((s.ranges for s in sources if s.ranges is not None), None)
        if r is not None:
            res.ranges = r
        b = next((s.backend for s in sources if s.backend is not None), None)
        if b is not None:
            res.backend = b
        return res

    def _forward(self, name, *args, **kwargs):
        # Float numbers become parameters, as in pykeops: a new value is a new argument, not a
        # new formula to compile. (Powers keep tessel's Square / Sqrt / Pow for special values.)
        lift = name not in ("__pow__", "power")
        inner = [a._t if isinstance(a, GenericLazyTensor) else
                 _tl.Pm(a) if lift and _is_float(a) else a for a in args]
        out = getattr(self._t, name)(*inner, **kwargs)
        if out is NotImplemented:
            return out
        return self._new(out, args)

    # ---- description -------------------------------------------------------------------------
    @property
    def ndim(self):
        """The inner dim D of the formula (as in pykeops)."""
        return self._t.ndim

    @property
    def ni(self):
        """The number of rows of the i-variables (None when none is bound to an array)."""
        return self._t.ni

    @property
    def nj(self):
        """The number of rows of the j-variables (None when none is bound to an array)."""
        return self._t.nj

    @property
    def batchdims(self):
        """The batch dimensions B... in front of (N, M, D), or None without any; settable."""
        if self._batchdims is not None:
            return self._batchdims
        return self._t.batch or None

    @batchdims.setter
    def batchdims(self, value):
        self._batchdims = None if value is None else tuple(value)

    @property
    def nbatchdims(self):
        """The number of batch dimensions (0 without any)."""
        b = self.batchdims
        return 0 if b is None else len(b)

    @property
    def _shape(self):
        """(B..., N, M, D), with 1 for an index no variable follows."""
        return (self.batchdims or ()) + (self.ni or 1, self.nj or 1, self.ndim)

    @property
    def shape(self):
        """_shape without its last entry when D = 1 (as in pykeops)."""
        s = self._shape
        return s[:-1] if s[-1] == 1 else s

    def dim(self):
        """The number of dimensions of ``_shape``: batch dims + 3 (as in pykeops)."""
        return len(self._shape)

    @property
    def dtype(self):
        """'float32' or 'float64' (None for a formula without arrays)."""
        dtype = self._t.dtype
        return None if dtype is None else str(dtype).replace("torch.", "")

    @property
    def formula(self):
        """The formula's text (the core's printer)."""
        return str(self._t.formula)

    @property
    def variables(self):
        """The arrays (and parameter values, as lists) the formula holds, in argument order."""
        return tuple(v.source if v.source is not None else list(v.value)
                     for v in self._t.variables if v.placeholder is None)

    @property
    def _symbolic(self):
        return symbolic_of(self._t)

    @property
    def symbolic_variables(self):
        """The symbolic variables (``Vi(0, 3)`` ...) whose arrays a reduction's call takes."""
        return self._symbolic

    @property
    def axis(self):
        """The category (0: i, 1: j, 2: parameter) of a LazyTensor that is one variable."""
        v = self._t.variable
        return None if v is None else v.cat

    def __str__(self):
        # The formula in the numbering of a reduction's call: symbolic variables keep their
        # index, the arrays follow (as pykeops prints it).
        (text,), _, _, _ = call_formulas([self._t])
        return describe(text, self._symbolic, self.shape)

    __repr__ = __str__

    def __bool__(self):
        raise TypeError("LazyTensor: the truth value of a symbolic tensor is undefined")

    def __call__(self, *args, **kwargs):
        """Refused, as in pykeops: only a reduction's result (a callable) is called."""
        raise ValueError("A LazyTensor object may be called only if it corresponds to the output "
                         "of a reduction operation or solve operation.")

    def __pos__(self):
        return self

    # ---- pykeops extras ----------------------------------------------------------------------
    def grad(self, other, gradin):
        """Symbolic gradient of <self, gradin> with respect to the variable `other`."""
        o = other if isinstance(other, GenericLazyTensor) else type(self)(other)
        e = gradin if isinstance(gradin, GenericLazyTensor) else type(self)(gradin)
        return self._new(self._t.grad(o._t, e._t), (o, e))

    @staticmethod
    def concatenate(tuple_of_lt, axis=-1):
        """Concatenation along the last (D) axis."""
        if not isinstance(tuple_of_lt, tuple) or not tuple_of_lt:
            raise ValueError("LazyTensor.concatenate is implemented on non-empty *tuples* of "
                             "LazyTensors")
        first = tuple_of_lt[0]
        if axis not in (-1, len(first._shape) - 1):
            raise ValueError("LazyTensor only supports concatenation along the last axis")
        res = first
        for lt in tuple_of_lt[1:]:
            res = res.concat(lt)
        return res

    @staticmethod
    def cat(tuple_of_lt, dim):
        """pykeops's other name for ``concatenate``: along the last (D) axis."""
        return GenericLazyTensor.concatenate(tuple_of_lt, dim)

    def t(self):
        """The transpose: i- and j-variables (symbolic ones too) swap roles; so do the ranges."""
        res = self._new(self._t.t())  # the core swaps the categories, placeholders included
        if self.ranges is not None:
            res.ranges = _swap_ranges(self.ranges)
        return res

    @property
    def T(self):
        """The transpose, ``t()``: i- and j-variables swap roles."""
        return self.t()

    def __matmul__(self, v, **kwargs):
        """K @ v = sum_j K_ij v_j for K with D = 1 and v of shape (M,), (M, E) or (B..., M, E);
        `K.__matmul__(v, **options)` passes the reduction's options (backend, out, ...)."""
        if isinstance(v, GenericLazyTensor) or not isinstance(v, self._array_type):
            return NotImplemented
        if self.ndim != 1:
            raise ValueError("The 'K @ v' syntax is only supported for LazyTensors 'K' whose "
                             f"trailing dimension is equal to 1. Here, K.shape = {self.shape}.")
        prod = self * type(self)(v, axis=1)
        out = prod._reduction("Sum", axis=prod.nbatchdims + 1, who="__matmul__", **kwargs)
        return out.reshape(-1) if v.ndim == 1 else out

    def matvec(self, v):
        """``self @ v``: the product of this (N, M) kernel matrix with an array v."""
        return self @ v

    def rmatvec(self, v):
        """``self.T @ v``: the transposed product (scipy's LinearOperator interface)."""
        return self.T @ v

    # ---- reductions --------------------------------------------------------------------------
    def _reduction(self, op, axis=None, dim=None, opt_arg=None, weight=None, call=True, who=None,
                   **kwargs):
        who = who or op
        if axis is None:
            axis = dim
        nb = self.nbatchdims
        if axis is None or isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
            raise ValueError(f"LazyTensor.{who}: pass axis (or dim) = {nb} (reduction over i) or "
                             f"{nb + 1} (reduction over j)")
        a = int(axis) - nb if axis >= 0 else int(axis) + 3
        if a not in (0, 1):
            raise ValueError("Reductions must be called with 'axis' (or 'dim') equal to the number "
                             f"of batch dimensions + 0 or 1: here {nb} or {nb + 1}, got {axis}")
        init, call_kw = split_options(who, kwargs)
        out = call_kw.get("out")
        if out is not None and not isinstance(out, self._array_type):
            raise TypeError(f"LazyTensor.{who}: out must be a {self._array_type.__name__} (the "
                            f"result is written into it), got {type(out).__name__}")
        if self.ranges is not None and "ranges" not in call_kw:
            call_kw["ranges"] = self.ranges
        if self.backend is not None and "backend" not in call_kw:
            call_kw["backend"] = self.backend
        check_ranges(call_kw.get("ranges"), f"LazyTensor.{who}")
        operands = [self] if weight is None else [self, weight]
        pending = PendingReduction(type(self), [o._t for o in operands], op, a, opt_arg,
                                   tuple(sorted(init.items())), call_kw, self.shape)
        if call and not pending._nsym:
            return pending()
        return pending

    def sum(self, axis=-1, dim=None, **kwargs):
        """Over the D components (axis -1, a LazyTensor) or a Sum reduction over i or j."""
        if dim is not None:
            axis = dim
        if axis in (-1, len(self._shape) - 1):
            return self._forward("sum", -1)
        return self._reduction("Sum", axis, who="sum", **kwargs)

    def logsumexp(self, axis=None, dim=None, weight=None, **kwargs):
        """log sum_j exp(self) (or log sum_j exp(self) * weight) over i or j; pykeops also takes
        the weight as `other`."""
        if weight is None:
            weight = kwargs.pop("other", None)
        w = None
        if weight is not None:
            w = weight if isinstance(weight, GenericLazyTensor) else type(self)(weight)
        return self._reduction("LogSumExp", axis, dim, weight=w, who="logsumexp", **kwargs)

    def sumsoftmaxweight(self, weight, axis=None, dim=None, **kwargs):
        """sum_j softmax_j(self) * weight over i or j: an attention-style weighted average."""
        w = weight if isinstance(weight, GenericLazyTensor) else type(self)(weight)
        return self._reduction("SumSoftMaxWeight", axis, dim, weight=w, who="sumsoftmaxweight",
                               **kwargs)

    def _extreme(self, op, axis, dim, kwargs):
        if dim is not None:
            axis = dim
        if axis in (-1, len(self._shape) - 1):
            return self._forward(op.lower(), -1)
        return self._reduction(op, axis, who=op.lower(), **kwargs)

    def min(self, axis=-1, dim=None, **kwargs):
        """Over the D components (axis -1, a LazyTensor) or a Min reduction over i or j."""
        return self._extreme("Min", axis, dim, kwargs)

    def max(self, axis=-1, dim=None, **kwargs):
        """Over the D components (axis -1, a LazyTensor) or a Max reduction over i or j."""
        return self._extreme("Max", axis, dim, kwargs)

    def argmin(self, axis=-1, dim=None, **kwargs):
        """Over the D components (axis -1) or an ArgMin reduction over i or j (int64)."""
        return self._extreme("ArgMin", axis, dim, kwargs)

    def argmax(self, axis=-1, dim=None, **kwargs):
        """Over the D components (axis -1) or an ArgMax reduction over i or j (int64)."""
        return self._extreme("ArgMax", axis, dim, kwargs)

    def solve(self, other, var=None, call=True, **kwargs):
        """Solves (alpha * Id + self) a = other by conjugate gradient, self being a (symmetric,
        positive) kernel matrix of dim 1 and `other` an (N, D) array indexed like the output, a
        LazyTensor that is one i- or j-variable, or a symbolic one (Vi(0, D)) whose array a call
        gives. Options: alpha, eps, backend, device_id, ranges and the build options (dtype_acc,
        sum_scheme, ...). With call=False (or a symbolic `other`) the result is a callable
        (PendingSolve): `cfun()` solves, as in pykeops."""
        if var is not None:
            raise NotImplementedError("LazyTensor.solve: the var= form is not supported by tessel "
                                      "yet; use KernelSolve")
        if self._symbolic or self.ndim != 1:
            raise NotImplementedError("LazyTensor.solve: supported for a kernel matrix of dim 1 "
                                      "built from arrays only (no symbolic variables)")
        if isinstance(other, GenericLazyTensor):
            if other.axis not in (0, 1):
                raise ValueError("LazyTensor.solve: 'other' must be an array or a LazyTensor that "
                                 "is one i- or j-variable")
            cat = other.axis
            if other._symbolic:  # its array comes with the call
                b, dim = None, other.ndim
            else:
                b = other._t.variable.array  # (B..., N, D), whatever the input
        else:
            b, cat = other, 0
        if b is not None:
            dim = 1 if b.ndim == 1 else int(b.shape[-1])
        init, call_kw = split_options("solve", kwargs, SOLVE_CALL_OPTIONS)
        if self.ranges is not None and "ranges" not in call_kw:
            call_kw["ranges"] = self.ranges
        if self.backend is not None and "backend" not in call_kw:
            call_kw["backend"] = self.backend
        check_ranges(call_kw.get("ranges"), "LazyTensor.solve")
        # The unknown is indexed like the reduced index: 1 - the output's.
        pending = PendingSolve(type(self), self._t, b, dim, 1 - cat, init, call_kw, self.shape)
        return pending() if call and b is not None else pending


def _named(method, name, doc):
    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc
    return method


def _make_forwarder(name):
    def method(self, *args, **kwargs):
        return self._forward(name, *args, **kwargs)
    return _named(method, name, f"As tessel's LazyTensor.{name} (pykeops semantics).")


def _make_reduction(name, op, takes_k):
    if takes_k:
        def method(self, K, axis=None, dim=None, **kwargs):
            return self._reduction(op, axis, dim, opt_arg=K, who=name, **kwargs)
    else:
        def method(self, axis=None, dim=None, **kwargs):
            return self._reduction(op, axis, dim, who=name, **kwargs)
    return _named(method, name, f"The {op} reduction over i or j (axis or dim 0 or 1).")


def _make_alias(name, target):
    def method(self, **kwargs):
        return getattr(self, target)(**kwargs)  # getattr: a subclass's override is the one called
    return _named(method, name, f"pykeops's other name for {target}.")


# pykeops's reduction methods that only name the reduction: (method, op, takes K first), and its
# second names for reduction methods. Before the forwarders below, as methods of the class body.
for _name, _op, _k in (("sum_reduction", "Sum", False), ("min_reduction", "Min", False),
                       ("max_reduction", "Max", False), ("argmin_reduction", "ArgMin", False),
                       ("argmax_reduction", "ArgMax", False), ("min_argmin", "Min_ArgMin", False),
                       ("max_argmax", "Max_ArgMax", False), ("Kmin", "KMin", True),
                       ("argKmin", "ArgKMin", True), ("Kmin_argKmin", "KMin_ArgKMin", True)):
    setattr(GenericLazyTensor, _name, _make_reduction(_name, _op, _k))
for _name, _target in (("__min__", "min"), ("__max__", "max"),
                       ("logsumexp_reduction", "logsumexp"),
                       ("sumsoftmaxweight_reduction", "sumsoftmaxweight"),
                       ("min_argmin_reduction", "min_argmin"),
                       ("max_argmax_reduction", "max_argmax"), ("Kmin_reduction", "Kmin"),
                       ("argKmin_reduction", "argKmin"),
                       ("Kmin_argKmin_reduction", "Kmin_argKmin")):
    setattr(GenericLazyTensor, _name, _make_alias(_name, _target))


# The operators and methods with pykeops's spelling, and every method tessel's LazyTensor makes
# from the core's op table (so a new core op reaches this layer without an edit here).
for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__or__", "__ror__", "__pow__", "__rpow__", "__lt__", "__le__",
              "__gt__", "__ge__", "__eq__", "__ne__", "__neg__", "__abs__", "round", "mod",
              "clamp", "power", "norm", "weightedsqnorm", "weightedsqdist", "elem", "extract",
              "__getitem__", "one_hot", "sinc", "grad_matrix", "diff", "divergence",
              "laplacian", "trace_operator", "factorize", "auto_factorize", "real2complex",
              "imag2complex", "exp1j", "bspline", "difference_matrix") + _tl.TABLE_METHODS:
    if _name not in GenericLazyTensor.__dict__:
        setattr(GenericLazyTensor, _name, _make_forwarder(_name))


def variable_constructors(lazy_tensor_class, what):
    """Var, Vi, Vj, Pm for one library's LazyTensor (`what` names its arrays in docstrings)."""

    def Var(x_or_ind, dim=None, cat=None):
        """A variable from data (dim=None: `cat` is the axis) or the symbolic Var(ind, dim, cat)."""
        if dim is None:
            return lazy_tensor_class(x_or_ind, axis=cat)
        return lazy_tensor_class((x_or_ind, dim, cat))

    def Vi(x_or_ind, dim=None):
        return Var(x_or_ind, dim, 0)

    def Vj(x_or_ind, dim=None):
        return Var(x_or_ind, dim, 1)

    def Pm(x_or_ind, dim=None):
        return Var(x_or_ind, dim, 2)

    Vi.__doc__ = f"i-variable: Vi(x) for an (N, D) {what}, or the symbolic Vi(index, dim)."
    Vj.__doc__ = f"j-variable: Vj(y) for an (M, D) {what}, or the symbolic Vj(index, dim)."
    Pm.__doc__ = f"Parameter: Pm(p) for a number or a (D,) {what}, or the symbolic Pm(index, dim)."
    return Var, Vi, Vj, Pm
