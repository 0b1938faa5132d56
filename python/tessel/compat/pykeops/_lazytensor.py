"""pykeops-style LazyTensor on tessel's: KeOps axis and shape conventions, symbolic variables.

A GenericLazyTensor wraps a tessel LazyTensor (which builds the formula text and checks dims) and
adds what pykeops code expects: `shape` without a trailing dim of 1 (`_shape` keeps it),
reductions counted after the batch dims with keyword options (`backend=`, `ranges=`, `call=`,
accuracy options), `.ranges` / `.backend` attributes, symbolic variables `Vi(0, 3)` /
`LazyTensor((ind, dim, cat))` that turn a reduction into a callable, and `solve`.

Symbolic variables sit in the formula text as `Var(ind,dim,cat)`; the arrays the LazyTensor holds
become the arguments after the symbolic ones, as in pykeops.
"""
import atexit
import numbers
import re

from ... import lazytensor as _tl

__all__ = ["GenericLazyTensor", "PendingReduction"]

_TLT = _tl.LazyTensor
_SYMB = re.compile(r"\bVar\((\d+),(\d+),([01])\)")
_INIT_OPTIONS = ("dtype_acc", "use_double_acc", "sum_scheme", "enable_chunks", "use_fast_math")
_CALL_OPTIONS = ("backend", "device_id", "ranges", "out")
_UNSUPPORTED = ("sinc", "sinxdivx", "bspline", "difference_matrix", "softdtw_sqdist", "keops_kron",
                "diff", "factorize", "auto_factorize", "grad_matrix", "trace_operator",
                "divergence", "laplacian", "real2complex", "imag2complex", "exp1j")

_genred_cache = {}
_GENRED_CACHE_MAX = 1024
atexit.register(_genred_cache.clear)  # as tessel.lazytensor's: nothing core left at exit


def _cached_genred(cls, text, text2, aliases, op, axis, k, init):
    key = (cls, text, text2, aliases, op, axis, k, init)
    g = _genred_cache.get(key)
    if g is None:
        if len(_genred_cache) >= _GENRED_CACHE_MAX:
            _genred_cache.clear()
        g = _genred_cache[key] = cls(text, list(aliases), reduction_op=op, axis=axis, opt_arg=k,
                                     formula2=text2, **dict(init))
    return g


def clear_caches():
    _genred_cache.clear()


def _split_options(who, kwargs):
    init, call = {}, {}
    for key, value in kwargs.items():
        if key in _INIT_OPTIONS:
            init[key] = value
        elif key in _CALL_OPTIONS:
            call[key] = value
        else:
            raise TypeError(f"LazyTensor.{who}: unexpected keyword argument {key!r}; accepted: "
                            + ", ".join(_INIT_OPTIONS + _CALL_OPTIONS + ("call",)))
    return init, call


def _is_float(x):
    return isinstance(x, numbers.Real) and not isinstance(x, numbers.Integral)


def _swap_ij(text):
    return _SYMB.sub(lambda m: f"Var({m[1]},{m[2]},{1 - int(m[3])})", text)


def _swap_ranges(ranges):
    return None if ranges is None else (*ranges[3:6], *ranges[0:3])


class PendingReduction:
    """A reduction of a LazyTensor with symbolic variables (or built with call=False): calling
    it with one array per symbolic variable (in index order) runs the Genred."""

    def __init__(self, lt_cls, text, text2, variables, n_symbolic, op, axis, k, init, call):
        self._cls, self.formula, self.formula2 = lt_cls, text, text2
        self._vars, self._nsym = variables, n_symbolic
        self.reduction_op, self.axis, self.opt_arg = op, axis, k
        self._init, self.kwargs = init, dict(call)
        self.aliases = [f"V{k} = {_tl._CAT_TEXT[v.cat]}({n_symbolic + k},{v.dim})"
                        for k, v in enumerate(variables)]

    def __call__(self, *args, **kwargs):
        init, call = _split_options("__call__", kwargs)
        call = {**self.kwargs, **call}
        if len(args) != self._nsym:
            raise ValueError(f"LazyTensor reduction: expected {self._nsym} argument(s), one per "
                             f"symbolic variable, got {len(args)}")
        dtypes = {v.array.dtype for v in self._vars if v.obj is not None}
        dtype = dtypes.pop() if dtypes else (args[0].dtype if args else None)
        if dtype is None:
            raise ValueError("LazyTensor reduction: the formula holds no array, so its dtype is "
                             "unknown; build it from at least one array")
        arrays = [self._cls._materialize(v, dtype) for v in self._vars]
        g = _cached_genred(self._cls._genred_class, self.formula, self.formula2,
                           tuple(self.aliases), self.reduction_op, self.axis, self.opt_arg,
                           tuple(sorted({**dict(self._init), **init}.items())))
        return g(*args, *arrays, **call)

    def __repr__(self):
        return (f"PendingReduction({self.reduction_op}, axis={self.axis}, "
                f"formula={self.formula!r}, {self._nsym} symbolic argument(s))")


class GenericLazyTensor:
    """Symbolic (B..., N, M, D) array with pykeops's API; see pykeops.torch / pykeops.numpy."""

    __GenericLazyTensor__ = True
    __array_ufunc__ = None
    __array_priority__ = 1000
    __iter__ = None
    __hash__ = object.__hash__

    _library = None        # "torch" or "numpy"
    _genred_class = None   # the compat Genred of that library
    _kernelsolve_class = None

    ranges = None   # block-sparsity pattern (pykeops's 6 arrays) of the reductions
    backend = None  # default backend of the reductions

    # ---- construction ------------------------------------------------------------------------
    def __init__(self, x=None, axis=None, is_complex=False):
        self._symbolic, self._batchdims = (), None
        if is_complex:
            raise NotImplementedError("LazyTensor: complex LazyTensors are not supported by tessel")
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
            ind, dim, cat = x
            self._t = _TLT._make(f"Var({ind},{dim},{cat})", [], dim)
            self._symbolic = ((ind, dim, cat),)
            return
        if isinstance(x, list):
            if axis not in (None, 2):
                raise ValueError("LazyTensor: a list of numbers is a parameter; axis must be None "
                                 "or 2")
            if not x or not all(_tl._is_number(v) for v in x):
                raise TypeError("LazyTensor: a list must hold numbers (a parameter vector)")
            self._t = self._param(tuple(float(v) for v in x))
            return
        if _tl._is_number(x):
            if axis == 2 or (axis is None and _is_float(x)):
                self._t = self._param((float(x),))  # a float is a parameter, as in pykeops
            elif axis is None:
                self._t = _TLT(x)  # an integer is IntCst(x)
            else:
                raise ValueError(f"LazyTensor: a number is a parameter; axis must be None or 2, "
                                 f"got {axis!r}")
            return
        if _tl._backend_of(x) != self._library:
            raise TypeError(f"LazyTensor: this is the {self._library} LazyTensor; expected a "
                            f"{'torch.Tensor' if self._library == 'torch' else 'numpy.ndarray'}"
                            f", a number, a list of numbers or an (ind, dim, cat) tuple, got "
                            f"{type(x).__name__}")
        self._t = _TLT(x, axis=axis)

    @staticmethod
    def _param(values):
        lt = _TLT.__new__(_TLT)
        lt._set("V0", [_tl._Var(None, None, _tl._P, len(values), None, (), None,
                                value=values)], len(values))
        return lt

    @classmethod
    def _materialize(cls, v, dtype):
        if v.obj is not None:
            return v.array
        values = v.value if isinstance(v.value, tuple) else (v.value,)
        return cls._array(values, dtype)

    @classmethod
    def _array(cls, values, dtype):
        raise NotImplementedError

    def _new(self, t, operands=()):
        """A LazyTensor of this class around the tessel LazyTensor `t`, inheriting symbolic
        variables, ranges, backend and batchdims from self and the LazyTensor operands."""
        res = type(self).__new__(type(self))
        res._t = t
        sources = [self] + [o for o in operands if isinstance(o, GenericLazyTensor)]
        symbolic = []
        for s in sources:
            for v in s._symbolic:
                if v not in symbolic:
                    symbolic.append(v)
        res._symbolic = tuple(symbolic)
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
                 self._param((float(a),)) if lift and _is_float(a) else a for a in args]
        out = getattr(self._t, name)(*inner, **kwargs)
        if out is NotImplemented:
            return out
        return self._new(out, args)

    # ---- description -------------------------------------------------------------------------
    @property
    def ndim(self):
        """The inner dim D of the formula (as in pykeops)."""
        return self._t._dim

    @property
    def ni(self):
        return self._t._ni

    @property
    def nj(self):
        return self._t._nj

    @property
    def batchdims(self):
        if self._batchdims is not None:
            return self._batchdims
        return self._t._batch or None

    @batchdims.setter
    def batchdims(self, value):
        self._batchdims = None if value is None else tuple(value)

    @property
    def nbatchdims(self):
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
        return len(self._shape)

    @property
    def dtype(self):
        """'float32' or 'float64' (None for a formula without arrays)."""
        dtypes = {str(v.array.dtype).replace("torch.", "") for v in self._t._vars
                  if v.obj is not None}
        return dtypes.pop() if len(dtypes) == 1 else None

    @property
    def formula(self):
        return self._t._text

    @property
    def variables(self):
        return tuple(v.obj if v.obj is not None else list(v.value if isinstance(v.value, tuple)
                                                          else (v.value,))
                     for v in self._t._vars)

    @property
    def symbolic_variables(self):
        return self._symbolic

    @property
    def axis(self):
        """The category (0: i, 1: j, 2: parameter) of a LazyTensor that is one variable."""
        if len(self._t._vars) == 1 and not self._symbolic and self._t._text == "V0":
            return self._t._vars[0].cat
        if not self._t._vars and len(self._symbolic) == 1:
            return self._symbolic[0][2]
        return None

    def __str__(self):
        s = f"KeOps LazyTensor (tessel)\n    formula: {self.formula}"
        if self._symbolic:
            s += "\n    symbolic variables: " + ", ".join(f"Var{v}" for v in self._symbolic)
        return s + f"\n    shape: {self.shape}"

    __repr__ = __str__

    def __bool__(self):
        raise TypeError("LazyTensor: the truth value of a symbolic tensor is undefined")

    def __call__(self, *args, **kwargs):
        raise ValueError("A LazyTensor object may be called only if it corresponds to the output "
                         "of a reduction operation or solve operation.")

    def __pos__(self):
        return self

    # ---- pykeops extras ----------------------------------------------------------------------
    def grad(self, other, gradin):
        """Symbolic gradient of <self, gradin> with respect to the variable `other`."""
        o = other if isinstance(other, GenericLazyTensor) else type(self)(other)
        e = gradin if isinstance(gradin, GenericLazyTensor) else type(self)(gradin)
        t = _TLT._apply([self._t, o._t, e._t], lambda a, v, g: f"Grad({a},{v},{g})", o.ndim)
        return self._new(t, (o, e))

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
        return GenericLazyTensor.concatenate(tuple_of_lt, dim)

    def t(self):
        """The transpose: i- and j-variables (symbolic ones too) swap roles; so do the ranges."""
        t = self._t.t()
        if self._symbolic:
            t = _TLT._make(_swap_ij(t._text), t._vars, t._dim)
        res = self._new(t)
        res._symbolic = tuple((i, d, 1 - c if c in (0, 1) else c) for i, d, c in self._symbolic)
        if self.ranges is not None:
            res.ranges = _swap_ranges(self.ranges)
        return res

    @property
    def T(self):
        return self.t()

    def __matmul__(self, v, **kwargs):
        """K @ v = sum_j K_ij v_j for K with D = 1 and v of shape (M,), (M, E) or (B..., M, E);
        `K.__matmul__(v, **options)` passes the reduction's options (backend, out, ...)."""
        if isinstance(v, GenericLazyTensor) or _tl._backend_of(v) != self._library:
            return NotImplemented
        if self.ndim != 1:
            raise ValueError("The 'K @ v' syntax is only supported for LazyTensors 'K' whose "
                             f"trailing dimension is equal to 1. Here, K.shape = {self.shape}.")
        prod = self * type(self)(v, axis=1)
        out = prod._reduction("Sum", axis=prod.nbatchdims + 1, who="__matmul__", **kwargs)
        return out.reshape(-1) if v.ndim == 1 else out

    def matvec(self, v):
        return self @ v

    def rmatvec(self, v):
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
        init, call_kw = _split_options(who, kwargs)
        if self.ranges is not None and "ranges" not in call_kw:
            call_kw["ranges"] = self.ranges
        if self.backend is not None and "backend" not in call_kw:
            call_kw["backend"] = self.backend
        operands = [self] if weight is None else [self, weight]
        texts, variables = _tl._merge([o._t for o in operands])
        symbolic = list(self._symbolic)
        if weight is not None:
            symbolic += [v for v in weight._symbolic if v not in symbolic]
        nsym = 1 + max(v[0] for v in symbolic) if symbolic else 0
        # The arrays' placeholders V0, V1, ... become the arguments after the symbolic ones.
        pending = PendingReduction(type(self), texts[0], texts[1] if weight is not None else None,
                                   variables, nsym, op, a, opt_arg, tuple(sorted(init.items())),
                                   call_kw)
        if call and not symbolic:
            return pending()
        return pending

    def sum(self, axis=-1, dim=None, **kwargs):
        """Over the D components (axis -1, a LazyTensor) or a Sum reduction over i or j."""
        if dim is not None:
            axis = dim
        if axis in (-1, len(self._shape) - 1):
            return self._forward("sum", -1)
        return self._reduction("Sum", axis, who="sum", **kwargs)

    def sum_reduction(self, axis=None, dim=None, **kwargs):
        return self._reduction("Sum", axis, dim, who="sum_reduction", **kwargs)

    def logsumexp(self, axis=None, dim=None, weight=None, **kwargs):
        """log sum_j exp(self) (or log sum_j exp(self) * weight) over i or j."""
        w = None
        if weight is not None:
            w = weight if isinstance(weight, GenericLazyTensor) else type(self)(weight)
        return self._reduction("LogSumExp", axis, dim, weight=w, who="logsumexp", **kwargs)

    def logsumexp_reduction(self, **kwargs):
        return self.logsumexp(**kwargs)

    def sumsoftmaxweight(self, weight, axis=None, dim=None, **kwargs):
        w = weight if isinstance(weight, GenericLazyTensor) else type(self)(weight)
        return self._reduction("SumSoftMaxWeight", axis, dim, weight=w, who="sumsoftmaxweight",
                               **kwargs)

    def sumsoftmaxweight_reduction(self, **kwargs):
        return self.sumsoftmaxweight(**kwargs)

    def _extreme(self, op, axis, dim, kwargs):
        if dim is not None:
            axis = dim
        if axis in (-1, len(self._shape) - 1):
            return self._forward(op.lower(), -1)
        return self._reduction(op, axis, who=op.lower(), **kwargs)

    def min(self, axis=-1, dim=None, **kwargs):
        return self._extreme("Min", axis, dim, kwargs)

    def max(self, axis=-1, dim=None, **kwargs):
        return self._extreme("Max", axis, dim, kwargs)

    def argmin(self, axis=-1, dim=None, **kwargs):
        return self._extreme("ArgMin", axis, dim, kwargs)

    def argmax(self, axis=-1, dim=None, **kwargs):
        return self._extreme("ArgMax", axis, dim, kwargs)

    def min_reduction(self, axis=None, dim=None, **kwargs):
        return self._reduction("Min", axis, dim, who="min_reduction", **kwargs)

    def max_reduction(self, axis=None, dim=None, **kwargs):
        return self._reduction("Max", axis, dim, who="max_reduction", **kwargs)

    def argmin_reduction(self, axis=None, dim=None, **kwargs):
        return self._reduction("ArgMin", axis, dim, who="argmin_reduction", **kwargs)

    def argmax_reduction(self, axis=None, dim=None, **kwargs):
        return self._reduction("ArgMax", axis, dim, who="argmax_reduction", **kwargs)

    def __min__(self, **kwargs):
        return self.min(**kwargs)

    def __max__(self, **kwargs):
        return self.max(**kwargs)

    def min_argmin(self, axis=None, dim=None, **kwargs):
        return self._reduction("Min_ArgMin", axis, dim, who="min_argmin", **kwargs)

    def max_argmax(self, axis=None, dim=None, **kwargs):
        return self._reduction("Max_ArgMax", axis, dim, who="max_argmax", **kwargs)

    def min_argmin_reduction(self, **kwargs):
        return self.min_argmin(**kwargs)

    def max_argmax_reduction(self, **kwargs):
        return self.max_argmax(**kwargs)

    def Kmin(self, K, axis=None, dim=None, **kwargs):
        return self._reduction("KMin", axis, dim, opt_arg=K, who="Kmin", **kwargs)

    def argKmin(self, K, axis=None, dim=None, **kwargs):
        return self._reduction("ArgKMin", axis, dim, opt_arg=K, who="argKmin", **kwargs)

    def Kmin_argKmin(self, K, axis=None, dim=None, **kwargs):
        return self._reduction("KMin_ArgKMin", axis, dim, opt_arg=K, who="Kmin_argKmin",
                               **kwargs)

    def Kmin_reduction(self, **kwargs):
        return self.Kmin(**kwargs)

    def argKmin_reduction(self, **kwargs):
        return self.argKmin(**kwargs)

    def Kmin_argKmin_reduction(self, **kwargs):
        return self.Kmin_argKmin(**kwargs)

    def solve(self, other, var=None, call=True, **kwargs):
        """Solves (alpha * Id + self) a = other by conjugate gradient, self being a (symmetric,
        positive) kernel matrix of dim 1 and `other` an (N, D) array indexed like the output."""
        if var is not None:
            raise NotImplementedError("LazyTensor.solve: the var= form is not supported by tessel "
                                      "yet; use KernelSolve")
        if self._symbolic or self.ndim != 1:
            raise NotImplementedError("LazyTensor.solve: supported for a kernel matrix of dim 1 "
                                      "built from arrays only (no symbolic variables)")
        if isinstance(other, GenericLazyTensor):
            if other.axis not in (0, 1) or other._symbolic:
                raise ValueError("LazyTensor.solve: 'other' must be an array or a LazyTensor that "
                                 "is one i- or j-variable")
            b, cat = other._t._vars[0].array, other.axis  # (B..., N, D), whatever the input
        else:
            b, cat = other, 0
        alpha = kwargs.pop("alpha", 1e-10)
        eps = kwargs.pop("eps", 1e-6)
        init, call_kw = _split_options("solve", kwargs)
        call_kw.pop("out", None)
        if self.ranges is not None and "ranges" not in call_kw:
            call_kw["ranges"] = self.ranges
        if self.backend is not None and "backend" not in call_kw:
            call_kw["backend"] = self.backend
        dim = 1 if b.ndim == 1 else int(b.shape[-1])
        red_axis = 1 - cat  # the unknown is indexed like the reduced index
        unknown = f"Var(0,{dim},{red_axis})"
        prod = _TLT._apply([self._t], lambda a: f"({a}*{unknown})", dim)
        aliases = [f"V{k} = {_tl._CAT_TEXT[v.cat]}({1 + k},{v.dim})"
                   for k, v in enumerate(prod._vars)]
        ks = self._kernelsolve_class(prod._text, aliases, unknown, axis=red_axis, **init)
        dtype = b.dtype
        arrays = [self._materialize(v, dtype) for v in prod._vars]
        b2 = b.reshape(-1, 1) if b.ndim == 1 else b
        out = ks(b2, *arrays, alpha=alpha, eps=eps, **call_kw)
        return out.reshape(-1) if b.ndim == 1 else out


def _make_forwarder(name):
    def method(self, *args, **kwargs):
        return self._forward(name, *args, **kwargs)
    method.__name__ = name
    method.__doc__ = f"As tessel's LazyTensor.{name} (pykeops semantics)."
    return method


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
              "__rtruediv__", "__or__", "__ror__", "__pow__", "__rpow__", "__lt__", "__le__",
              "__gt__", "__ge__", "__eq__", "__ne__", "__neg__", "__abs__", "abs", "exp", "log",
              "xlogx", "sqrt", "rsqrt", "inv", "square", "sin", "cos", "asin", "acos", "atan",
              "atan2", "sign", "relu", "step", "floor", "round", "mod", "clamp", "ifelse", "power",
              "sqnorm2", "norm2", "norm", "normalize", "sqdist", "weightedsqnorm",
              "weightedsqdist", "elem", "extract", "__getitem__", "concat", "one_hot",
              "matvecmult", "vecmatmult", "tensorprod", "keops_tensordot"):
    setattr(GenericLazyTensor, _name, _make_forwarder(_name))


def _make_unsupported(name):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"LazyTensor.{name} is not supported by tessel yet")
    method.__name__ = name
    return method


for _name in _UNSUPPORTED:
    setattr(GenericLazyTensor, _name, _make_unsupported(_name))


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


def ComplexLazyTensor(x=None, axis=None):
    raise NotImplementedError("ComplexLazyTensor: complex LazyTensors are not supported by tessel")
