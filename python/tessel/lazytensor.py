"""LazyTensor: symbolic (B..., N, M, D) kernel formulas on NumPy or torch arrays, reduced by Genred.

A LazyTensor is never evaluated on the N x M grid. It holds KeOps formula text over the
placeholders V0, V1, ... and, for each placeholder, the array it stands for (its role: i-variable,
j-variable or parameter, and its dim). Arithmetic and math build new LazyTensors; a reduction
(sum, logsumexp, min, argKmin, ...) over i or j turns the text and the variables into a Genred
(cached, so a formula is parsed once) and calls it on views of the arrays: no copies, and with
PyTorch tensors gradients flow through autograd.

Shapes, as in pykeops: (B..., N, 1, D) is an i-variable, (B..., 1, M, D) a j-variable,
(B..., 1, 1, D) or (D,) a parameter, a Python number a constant; Vi / Vj / Pm take (B..., N, D)
arrays directly. Batch dimensions B... broadcast as in NumPy and are handed to the core in one call.
"""
import atexit
import math
import numbers
import re
import sys

import numpy as np

__all__ = ["LazyTensor", "Vi", "Vj", "Pm"]

_I, _J, _P = 0, 1, 2
_CAT_TEXT = ("Vi", "Vj", "Pm")
_CAT_WORD = ("i-variable", "j-variable", "parameter")
_VREF = re.compile(r"\bV(\d+)\b")
_GENRED_OPTIONS = ("backend", "dtype_acc", "sum_scheme")
_SHAPES_HELP = ("accepted shapes are (B..., N, 1, D) for an i-variable, (B..., 1, M, D) for a "
                "j-variable, (B..., 1, 1, D) or (D,) for a parameter; pass a 2-D (N, D) array "
                "through Vi, Vj or Pm (or LazyTensor(x, axis=0|1|2))")


# ---- arrays --------------------------------------------------------------------------------------
def _backend_of(x):
    if isinstance(x, np.ndarray):
        return "numpy"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return "torch"
    return None


def _is_number(x):
    return isinstance(x, numbers.Real)


def _check_dtype(x, backend, who):
    if backend == "numpy":
        ok = x.dtype in (np.float32, np.float64)
    else:
        import torch
        ok = x.dtype in (torch.float32, torch.float64)
    if not ok:
        raise TypeError(f"{who}: arrays of dtype {x.dtype} are not supported; expected float32 "
                        "or float64")


class _Var:
    """One variable of a formula: the array it reads (already in the core's layout), its role."""

    __slots__ = ("obj", "array", "cat", "dim", "n", "batch", "value", "backend", "key")

    def __init__(self, obj, array, cat, dim, n, batch, backend, value=None):
        self.obj, self.array, self.cat, self.dim, self.n = obj, array, cat, dim, n
        self.batch, self.backend, self.value = tuple(batch), backend, value
        # Identity of the source object (kept alive by `obj`), its role and layout: the same
        # tensor used twice in a formula is one variable. A scalar parameter is its own key.
        self.key = (id(self),) if obj is None else (id(obj), cat, tuple(array.shape))

    def transposed(self):
        if self.cat == _P:
            return self
        return _Var(self.obj, self.array, _J if self.cat == _I else _I, self.dim, self.n,
                    self.batch, self.backend, self.value)

    def materialize(self, backend, dtype):
        if self.obj is not None:
            return self.array
        if backend == "numpy":
            return np.array([self.value], dtype=dtype)
        import torch
        return torch.tensor([self.value], dtype=dtype)


def _var_from_rows(x, cat, who):
    """x: (B..., n, D) for i/j variables (or (n,) for dim 1); (B..., D), (D,) or 0-d for Pm."""
    backend = _backend_of(x)
    if backend is None:
        raise TypeError(f"{who}: expected a numpy.ndarray or a torch.Tensor, got "
                        f"{type(x).__name__}")
    _check_dtype(x, backend, who)
    if cat == _P:
        a = x.reshape(1) if x.ndim == 0 else x
        return _Var(x, a, _P, int(a.shape[-1]), None, a.shape[:-1], backend)
    a = x[..., None] if x.ndim == 1 else x
    if a.ndim < 2:
        raise ValueError(f"{who}: expected an (N, D) array, got shape {tuple(x.shape)}")
    return _Var(x, a, cat, int(a.shape[-1]), int(a.shape[-2]), a.shape[:-2], backend)


def _var_from_grid(x, who):
    """x shaped like the N x M grid: (B..., N, 1, D), (B..., 1, M, D), (B..., 1, 1, D) or (D,)."""
    backend = _backend_of(x)
    _check_dtype(x, backend, who)
    if x.ndim <= 1:
        return _var_from_rows(x, _P, who)
    if x.ndim == 2:
        raise ValueError(f"{who}: a 2-D array of shape {tuple(x.shape)} is ambiguous; "
                         + _SHAPES_HELP)
    n, m, d = (int(s) for s in x.shape[-3:])
    batch = x.shape[:-3]
    if m == 1 and n == 1:
        return _Var(x, x.squeeze(-2).squeeze(-2), _P, d, None, batch, backend)
    if m == 1:
        return _Var(x, x.squeeze(-2), _I, d, n, batch, backend)
    if n == 1:
        return _Var(x, x.squeeze(-3), _J, d, m, batch, backend)
    raise ValueError(f"{who}: shape {tuple(x.shape)} is neither an i-, a j- nor a parameter "
                     f"shape (both axes -3 and -2 are > 1); " + _SHAPES_HELP)


def _broadcast_batch(a, b, who):
    if len(a) < len(b):
        a, b = b, a
    b = (1,) * (len(a) - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"{who}: batch shapes {tuple(a)} and {tuple(b)} do not broadcast")
        out.append(max(x, y) if 1 in (x, y) else x)
    return tuple(out)


# ---- formula text --------------------------------------------------------------------------------
def _const_text(v):
    if isinstance(v, (bool, np.bool_)):
        v = int(v)
    if isinstance(v, numbers.Integral):
        return f"IntCst({int(v)})"
    f = float(v)
    if not math.isfinite(f):
        raise ValueError(f"LazyTensor: the constant {f} is not finite")
    s = repr(abs(f))
    return s if math.copysign(1.0, f) > 0 else f"(-{s})"


def _merge(operands):
    """The union of the operands' variables (deduplicated) and each operand's text renumbered."""
    variables, where, texts = [], {}, []
    for lt in operands:
        mapping = []
        for v in lt._vars:
            k = where.get(v.key)
            if k is None:
                k = where[v.key] = len(variables)
                variables.append(v)
            mapping.append(k)
        if mapping == list(range(len(mapping))):
            texts.append(lt._text)
        else:
            texts.append(_VREF.sub(lambda m: f"V{mapping[int(m.group(1))]}", lt._text))
    return texts, variables


def _bcast_dims(who, *dims):
    out = 1
    for d in dims:
        if d != out and d != 1 and out != 1:
            shown = " and ".join(str(x) for x in dims)
            raise ValueError(f"LazyTensor.{who}: incompatible dims {shown}; dims must be equal "
                             "or 1 (a dim-1 operand broadcasts)")
        out = max(out, d) if 1 in (d, out) else d
    return out


def _same_dims(who, a, b):
    if a != b:
        raise ValueError(f"LazyTensor.{who}: incompatible dims {a} and {b}; both operands must "
                         "have the same dim")
    return a


def _int_tuple(who, name, v):
    """An int or a sequence of ints (as pykeops accepts them) as a tuple."""
    seq = (v,) if isinstance(v, numbers.Integral) else v
    try:
        out = tuple(seq)
    except TypeError:
        out = None
    if out is None or any(isinstance(x, bool) or not isinstance(x, numbers.Integral)
                          for x in out):
        raise TypeError(f"LazyTensor.{who}: {name} must be an integer or a sequence of integers, "
                        f"got {v!r}")
    return tuple(int(x) for x in out)


def _positive_int(who, name, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise ValueError(f"LazyTensor.{who}: {name} must be a positive integer, got {v!r}")
    return int(v)


# ---- the Genred cache ----------------------------------------------------------------------------
_genred_cache = {}
_GENRED_CACHE_MAX = 1024
# Emptied at exit: torch never frees an autograd graph alive then, and through its Function
# classes it keeps this module's globals alive; core objects left here would leak.
atexit.register(_genred_cache.clear)


def _cached(key, make):
    """The Genred / KernelSolve object for `key`, built by make() on first use."""
    g = _genred_cache.get(key)
    if g is None:
        if len(_genred_cache) >= _GENRED_CACHE_MAX:
            _genred_cache.clear()
        g = _genred_cache[key] = make()
    return g


def _common_dtype(variables, who):
    dtypes = {v.array.dtype for v in variables if v.obj is not None}
    if len(dtypes) > 1:
        shown = " and ".join(sorted(str(d) for d in dtypes))
        raise TypeError(f"LazyTensor.{who}: the arrays have dtypes {shown}; all must share one "
                        "dtype")
    return dtypes.pop()


def _front_end(backend):
    if backend == "numpy":
        from . import numpy as front
    else:
        from . import torch as front
    return front


def _genred(backend, text, text2, aliases, op, axis, k, options):
    return _cached((backend, text, text2, aliases, op, axis, k, options),
                   lambda: _front_end(backend).Genred(text, list(aliases), reduction_op=op,
                                                      axis=axis, opt_arg=k, formula2=text2,
                                                      **dict(options)))



# ---- LazyTensor ----------------------------------------------------------------------------------
class LazyTensor:
    """A symbolic (B..., N, M, D) array: a formula of i-, j-variables, parameters and constants.

    LazyTensor(x) for x of shape (B..., N, 1, D) is an i-variable, (B..., 1, M, D) a j-variable,
    (B..., 1, 1, D) or (D,) a parameter, and a Python number a constant; `axis=0|1|2` reads a 2-D
    (N, D) array as an i-, j-variable or parameter. Operators and methods build new LazyTensors;
    reductions over axis 0 (i) or 1 (j) evaluate them (counting batch dims first, as in pykeops:
    axis -3 is i, -2 is j, -1 the D components).
    """

    __array_ufunc__ = None  # numpy_array * LazyTensor defers to LazyTensor.__rmul__
    __array_priority__ = 1000
    __iter__ = None

    def __init__(self, x, axis=None):
        who = "LazyTensor"
        if isinstance(x, LazyTensor):
            self._set(x._text, x._vars, x._dim)
            return
        if _is_number(x):
            if axis is not None:
                raise ValueError(f"{who}: axis is only used with arrays, not with the number {x!r}")
            self._set(_const_text(x), [], 1)
            return
        if _backend_of(x) is None:
            raise TypeError(f"{who}: expected a numpy.ndarray, a torch.Tensor or a number, got "
                            f"{type(x).__name__}")
        if axis is None:
            v = _var_from_grid(x, who)
        elif axis in (0, 1, 2):
            v = _var_from_rows(x, axis, who)
        else:
            raise ValueError(f"{who}: axis must be 0 (i-variable), 1 (j-variable) or 2 "
                             f"(parameter), got {axis!r}")
        self._set("V0", [v], v.dim)

    @classmethod
    def _make(cls, text, variables, dim):
        lt = cls.__new__(cls)
        lt._set(text, variables, dim)
        return lt

    def _set(self, text, variables, dim):
        backends = {v.backend for v in variables if v.backend is not None}
        if len(backends) > 1:
            raise TypeError("LazyTensor: cannot mix NumPy arrays and PyTorch tensors in one "
                            "formula; convert them to one library first")
        sizes = [None, None]
        batch = ()
        for v in variables:
            if v.cat != _P:
                have = sizes[v.cat]
                if have is not None and have != v.n:
                    word = "N (rows of i-variables)" if v.cat == _I else "M (rows of j-variables)"
                    raise ValueError(f"LazyTensor: {_CAT_WORD[v.cat]}s with {have} and {v.n} "
                                     f"rows; all must share {word}")
                sizes[v.cat] = v.n
            batch = _broadcast_batch(batch, v.batch, "LazyTensor")
        self._text, self._vars, self._dim = text, list(variables), int(dim)
        self._backend = backends.pop() if backends else None
        self._ni, self._nj = sizes
        self._batch = batch

    # ---- description ---------------------------------------------------------------------------
    @property
    def ndim(self):
        """The inner dim D (as in pykeops)."""
        return self._dim

    @property
    def shape(self):
        """(B..., N, M, D), with 1 for an index no variable follows."""
        return self._batch + (self._ni or 1, self._nj or 1, self._dim)

    @property
    def nbatchdims(self):
        return len(self._batch)

    def dim(self):
        """The number of axes of `shape` (as torch.Tensor.dim)."""
        return len(self.shape)

    @property
    def formula(self):
        """The KeOps text over V0, V1, ... (see `aliases`)."""
        return self._text

    @property
    def aliases(self):
        return [f"V{k} = {_CAT_TEXT[v.cat]}({v.dim})" for k, v in enumerate(self._vars)]

    def __repr__(self):
        return (f"LazyTensor(formula={self._text!r}, aliases={self.aliases}, "
                f"shape={self.shape})")

    def __bool__(self):
        raise TypeError("LazyTensor: the truth value of a symbolic tensor is undefined (a "
                        "comparison gives a 0/1 LazyTensor; reduce it to get numbers)")

    __hash__ = object.__hash__

    # ---- building blocks -----------------------------------------------------------------------
    @staticmethod
    def _wrap(other):
        """A LazyTensor for an operand (LazyTensor, array or number), or None for anything else."""
        if isinstance(other, LazyTensor):
            return other
        if _is_number(other) or _backend_of(other) is not None:
            return LazyTensor(other)
        return None

    @staticmethod
    def _apply(operands, fmt, dim):
        texts, variables = _merge(operands)
        return LazyTensor._make(fmt(*texts), variables, dim)

    def _unary(self, name, dim=None, params=()):
        extra = "".join(f",{int(p)}" for p in params)
        return LazyTensor._apply([self], lambda a: f"{name}({a}{extra})",
                                 self._dim if dim is None else dim)

    def _binary(self, other, who, fmt, dims="bcast", reverse=False):
        o = self._wrap(other)
        if o is None:
            return NotImplemented
        a, b = (o, self) if reverse else (self, o)
        if dims == "bcast":
            dim = _bcast_dims(who, a._dim, b._dim)
        elif dims == "same":
            _same_dims(who, a._dim, b._dim)
            dim = 1
        else:
            dim = dims(a._dim, b._dim)
        return LazyTensor._apply([a, b], fmt, dim)

    def _operand(self, x, who):
        o = self._wrap(x)
        if o is None:
            raise TypeError(f"LazyTensor.{who}: expected a LazyTensor, an array or a number, got "
                            f"{type(x).__name__}")
        return o

    # ---- arithmetic ----------------------------------------------------------------------------
    def __add__(self, o):
        return self._binary(o, "__add__", lambda a, b: f"({a}+{b})")

    def __radd__(self, o):
        return self._binary(o, "__add__", lambda a, b: f"({a}+{b})", reverse=True)

    def __sub__(self, o):
        return self._binary(o, "__sub__", lambda a, b: f"({a}-{b})")

    def __rsub__(self, o):
        return self._binary(o, "__sub__", lambda a, b: f"({a}-{b})", reverse=True)

    def __mul__(self, o):
        return self._binary(o, "__mul__", lambda a, b: f"({a}*{b})")

    def __rmul__(self, o):
        return self._binary(o, "__mul__", lambda a, b: f"({a}*{b})", reverse=True)

    def __truediv__(self, o):
        return self._binary(o, "__truediv__", lambda a, b: f"({a}/{b})")

    def __rtruediv__(self, o):
        return self._binary(o, "__truediv__", lambda a, b: f"({a}/{b})", reverse=True)

    def __neg__(self):
        return LazyTensor._apply([self], lambda a: f"(-{a})", self._dim)

    def __pos__(self):
        return self

    def __or__(self, o):
        """Scalar product <self, o> (same dims), dim 1."""
        return self._binary(o, "__or__", lambda a, b: f"({a}|{b})", dims="same")

    def __ror__(self, o):
        return self._binary(o, "__or__", lambda a, b: f"({a}|{b})", dims="same", reverse=True)

    def __pow__(self, other):
        """Integer powers use Pow (2: Square), 0.5 Sqrt, -0.5 Rsqrt, other exponents Powf."""
        if isinstance(other, (bool, np.bool_)):
            other = int(other)
        if _is_number(other):
            if float(other) == 2:
                return self.square()
            if float(other) == 0.5:
                return self.sqrt()
            if float(other) == -0.5:
                return self.rsqrt()
            if float(other).is_integer() and abs(float(other)) < 2 ** 31:
                return self._unary("Pow", params=(int(other),))
        return self._binary(other, "__pow__", lambda a, b: f"Powf({a},{b})")

    def __rpow__(self, other):
        return self._binary(other, "__pow__", lambda a, b: f"Powf({a},{b})", reverse=True)

    def power(self, other):
        return self.__pow__(other)

    # ---- comparisons: 1 where true, 0 elsewhere ------------------------------------------------
    def __lt__(self, o):
        return self._binary(o, "__lt__", lambda a, b: f"Less({a},{b})")

    def __le__(self, o):
        return self._binary(o, "__le__", lambda a, b: f"LessEq({a},{b})")

    def __gt__(self, o):
        return self._binary(o, "__gt__", lambda a, b: f"Greater({a},{b})")

    def __ge__(self, o):
        return self._binary(o, "__ge__", lambda a, b: f"GreaterEq({a},{b})")

    def __eq__(self, o):
        return self._binary(o, "__eq__", lambda a, b: f"Equal({a},{b})")

    def __ne__(self, o):
        return self._binary(o, "__ne__", lambda a, b: f"NotEqual({a},{b})")

    # ---- elementwise math ----------------------------------------------------------------------
    def __abs__(self):
        return self._unary("Abs")

    def abs(self):
        return self._unary("Abs")

    def exp(self):
        return self._unary("Exp")

    def log(self):
        return self._unary("Log")

    def xlogx(self):
        return self._unary("XLogX")

    def sqrt(self):
        return self._unary("Sqrt")

    def rsqrt(self):
        return self._unary("Rsqrt")

    def inv(self):
        return self._unary("Inv")

    def square(self):
        return self._unary("Square")

    def sin(self):
        return self._unary("Sin")

    def cos(self):
        return self._unary("Cos")

    def asin(self):
        return self._unary("Asin")

    def acos(self):
        return self._unary("Acos")

    def atan(self):
        return self._unary("Atan")

    def atan2(self, other):
        return self._binary(self._operand(other, "atan2"), "atan2",
                            lambda a, b: f"Atan2({a},{b})")

    def sign(self):
        return self._unary("Sign")

    def relu(self):
        return self._unary("ReLU")

    def step(self):
        return self._unary("Step")

    def floor(self):
        return self._unary("Floor")

    def round(self, decimals=0):
        return self._unary("Round", params=(decimals,))

    def mod(self, modulus, offset=0):
        """self - modulus * floor((self - offset) / modulus), elementwise."""
        n, d = self._operand(modulus, "mod"), self._operand(offset, "mod")
        dim = _bcast_dims("mod", self._dim, n._dim, d._dim)
        return LazyTensor._apply([self, n, d], lambda a, b, c: f"Mod({a},{b},{c})", dim)

    def clamp(self, a, b):
        """min(max(self, a), b) elementwise; integer bounds use ClampInt."""
        ints = [isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in (a, b)]
        if all(ints):
            return self._unary("ClampInt", params=(a, b))
        lo, hi = self._operand(a, "clamp"), self._operand(b, "clamp")
        dim = _bcast_dims("clamp", self._dim, lo._dim, hi._dim)
        return LazyTensor._apply([self, lo, hi], lambda x, y, z: f"Clamp({x},{y},{z})", dim)

    def ifelse(self, a, b):
        """a where self >= 0, b elsewhere."""
        x, y = self._operand(a, "ifelse"), self._operand(b, "ifelse")
        dim = _bcast_dims("ifelse", self._dim, x._dim, y._dim)
        return LazyTensor._apply([self, x, y], lambda c, p, q: f"IfElse({c},{p},{q})", dim)

    # ---- vector ops ----------------------------------------------------------------------------
    def sqnorm2(self):
        return self._unary("SqNorm2", dim=1)

    def norm2(self):
        return self._unary("Norm2", dim=1)

    def norm(self, dim=-1):
        if dim not in (-1, self.dim() - 1):
            raise ValueError("LazyTensor.norm: only the norm over the D components (dim=-1) is "
                             "symbolic")
        return self.norm2()

    def normalize(self):
        return self._unary("Normalize")

    def sqdist(self, other):
        return self._binary(self._operand(other, "sqdist"), "sqdist",
                            lambda a, b: f"SqDist({a},{b})", dims="same")

    def weightedsqnorm(self, other):
        """self^T S self with S = `other`: a scalar (dim 1), a diagonal (dim D) or a full D x D
        matrix (dim D*D, row-major)."""
        s = self._operand(other, "weightedsqnorm")
        d = self._dim
        if s._dim not in (1, d, d * d):
            raise ValueError(f"LazyTensor.weightedsqnorm: incompatible dims {s._dim} (the weight) "
                             f"and {d}; the weight must have dim 1, {d} or {d * d}")
        return LazyTensor._apply([s, self], lambda w, a: f"WeightedSqNorm({w},{a})", 1)

    def weightedsqdist(self, g, s):
        """(self - g)^T S (self - g), S = `s` as in weightedsqnorm."""
        y, w = self._operand(g, "weightedsqdist"), self._operand(s, "weightedsqdist")
        d = _same_dims("weightedsqdist", self._dim, y._dim)
        if w._dim not in (1, d, d * d):
            raise ValueError(f"LazyTensor.weightedsqdist: incompatible dims {w._dim} (the weight) "
                             f"and {d}; the weight must have dim 1, {d} or {d * d}")
        return LazyTensor._apply([w, self, y], lambda p, a, b: f"WeightedSqDist({p},{a},{b})", 1)

    def elem(self, i):
        if isinstance(i, bool) or not isinstance(i, numbers.Integral):
            raise TypeError(f"LazyTensor.elem: the index must be an integer, got {i!r}")
        if not 0 <= i < self._dim:
            raise IndexError(f"LazyTensor.elem: index {i} is out of range for dim {self._dim}")
        return self._unary("Elem", dim=1, params=(i,))

    def extract(self, start, length):
        if not (0 <= start and length >= 1 and start + length <= self._dim):
            raise IndexError(f"LazyTensor.extract: range [{start}, {start + length}) does not fit "
                             f"in dim {self._dim}")
        return self._unary("Extract", dim=length, params=(start, length))

    def __getitem__(self, key):
        """x[..., k] is Elem(x, k); x[..., a:b] is Extract(x, a, b - a) (on the D axis)."""
        if isinstance(key, tuple):
            if not key:
                return self
            *lead, key = key
            for k in lead:
                if k is not Ellipsis and k != slice(None):
                    raise IndexError("LazyTensor: only the last (D) axis can be indexed; use "
                                     "':' or '...' for the others")
            # Without '...' the last index names the D axis only if every axis has an entry:
            # x[:, k] on an (N, M, D) LazyTensor means the M axis, which is not indexable.
            n_axes = len(self.shape)
            if not any(k is Ellipsis for k in lead) and len(lead) != n_axes - 1:
                raise IndexError(f"LazyTensor: {len(lead) + 1} indices for the {n_axes} axes of "
                                 f"shape {self.shape}; index the D axis as x[..., k] or give "
                                 f"one entry per axis")
        if isinstance(key, numbers.Integral) and not isinstance(key, bool):
            i = int(key) + (self._dim if key < 0 else 0)
            if not 0 <= i < self._dim:
                raise IndexError(f"LazyTensor: index {int(key)} is out of range for dim "
                                 f"{self._dim}")
            return self.elem(i)
        if isinstance(key, slice):
            start, stop, step = key.indices(self._dim)
            if step != 1:
                raise IndexError("LazyTensor: slices of the D axis must have step 1")
            if stop <= start:
                raise IndexError(f"LazyTensor: the slice {key} of dim {self._dim} is empty")
            return self.extract(start, stop - start)
        raise TypeError(f"LazyTensor: indices must be integers or slices, got "
                        f"{type(key).__name__}")

    def concat(self, other):
        o = self._operand(other, "concat")
        return LazyTensor._apply([self, o], lambda a, b: f"Concat({a},{b})", self._dim + o._dim)

    def one_hot(self, D):
        D = _positive_int("one_hot", "D", D)
        if self._dim != 1:
            raise ValueError(f"LazyTensor.one_hot: needs a LazyTensor of dim 1, got dim "
                             f"{self._dim}")
        return self._unary("OneHot", dim=D, params=(D,))

    def matvecmult(self, other):
        """self is an (m x n) matrix (dim m*n, row-major), other a vector of dim n: dim m."""
        v = self._operand(other, "matvecmult")
        if self._dim % v._dim:
            raise ValueError(f"LazyTensor.matvecmult: incompatible dims {self._dim} (the matrix) "
                             f"and {v._dim} (the vector); the matrix dim must be a multiple")
        return LazyTensor._apply([self, v], lambda a, b: f"MatVecMult({a},{b})",
                                 self._dim // v._dim)

    def vecmatmult(self, other):
        """self is a vector of dim m, other an (m x n) matrix (dim m*n, row-major): dim n."""
        m = self._operand(other, "vecmatmult")
        if m._dim % self._dim:
            raise ValueError(f"LazyTensor.vecmatmult: incompatible dims {self._dim} (the vector) "
                             f"and {m._dim} (the matrix); the matrix dim must be a multiple")
        return LazyTensor._apply([self, m], lambda a, b: f"VecMatMult({a},{b})",
                                 m._dim // self._dim)

    def tensorprod(self, other):
        o = self._operand(other, "tensorprod")
        return LazyTensor._apply([self, o], lambda a, b: f"TensorProd({a},{b})",
                                 self._dim * o._dim)

    def keops_tensordot(self, other, dimfa, dimfb, contfa, contfb, *args):
        """KeOps TensorDot: self and other are row-major tensors of shapes dimfa and dimfb; the
        axes contfa of self are contracted with the axes contfb of other. The free axes, self's
        then other's, come out in that order, or, given a permutation `permute` (one more
        argument), free axis q goes to output position permute[q], as in KeOps:
        torch.tensordot(a, b, (contfa, contfb)).permute(argsort(permute))."""
        o = self._operand(other, "keops_tensordot")
        dimfa, dimfb, contfa, contfb = (_int_tuple("keops_tensordot", name, v) for name, v in (
            ("dimfa", dimfa), ("dimfb", dimfb), ("contfa", contfa), ("contfb", contfb)))
        if math.prod(dimfa) != self._dim or math.prod(dimfb) != o._dim:
            raise ValueError(f"LazyTensor.keops_tensordot: incompatible dims {self._dim} and "
                             f"{o._dim} for tensor shapes {dimfa} and {dimfb}")
        in_range = all(0 <= a < len(dimfa) for a in contfa) and all(
            0 <= b < len(dimfb) for b in contfb)
        if (len(contfa) != len(contfb) or not in_range
                or any(dimfa[a] != dimfb[b] for a, b in zip(contfa, contfb))):
            raise ValueError(f"LazyTensor.keops_tensordot: axes {contfa} of {dimfa} and {contfb} "
                             f"of {dimfb} cannot be contracted")
        free = [d for k, d in enumerate(dimfa) if k not in contfa]
        free += [d for k, d in enumerate(dimfb) if k not in contfb]
        # KeOps's permute: free axis q (a's, then b's) goes to output position permute[q].
        tuples = [dimfa, dimfb, contfa, contfb] + [_int_tuple("keops_tensordot", "permute", a)
                                                   for a in args]
        params = ",".join("(" + "".join(f"{x}," for x in t) + ")" for t in tuples)
        return LazyTensor._apply([self, o], lambda a, b: f"TensorDot({a},{b},{params})",
                                 math.prod(free))

    # ---- transpose, matrix-vector product ------------------------------------------------------
    def t(self):
        """The transpose: i-variables become j-variables and j-variables i-variables."""
        return LazyTensor._make(self._text, [v.transposed() for v in self._vars], self._dim)

    @property
    def T(self):
        return self.t()

    def __matmul__(self, v):
        """K @ v = sum_j K_ij v_j for K of dim 1 and v of shape (M,), (M, E) or (B..., M, E)."""
        if isinstance(v, LazyTensor) or _backend_of(v) is None:
            return NotImplemented
        if self._dim != 1:
            raise ValueError(f"LazyTensor @: the LazyTensor must have dim 1 (a kernel matrix), "
                             f"got dim {self._dim}")
        vec = v.ndim == 1
        out = (self * Vj(v))._reduce("Sum", 1, who="__matmul__")
        return out[..., 0] if vec else out

    def solve(self, b, alpha=1e-10, **options):
        """x with (alpha I + K) x = b, by conjugate gradient: K = self is a kernel matrix of dim 1
        (symmetric positive semi-definite: a positive definite kernel on the same points for i
        and j). b is an array of shape (M,) or (M, E), or, as in pykeops, a LazyTensor that is one
        variable: an i-variable (`LazyTensor(b[:, None, :])`, `Vi(b)`: K x = b, the sum runs over
        j) or a j-variable (the sum runs over i: K^T x = b); x is (M,) or (M, E) as in pykeops. On
        tensors the result is differentiable (implicitly, to any order) in b, the kernel's arrays
        and alpha.

        Options: tol, atol, maxiter, on_nonconvergence, stats (see tessel.torch.KernelSolve) and
        the reductions' backend, dtype_acc, sum_scheme.
        """
        if self._dim != 1:
            raise ValueError(f"LazyTensor.solve: the LazyTensor must have dim 1 (a kernel "
                             f"matrix), got dim {self._dim}")
        if self._batch:
            raise ValueError("LazyTensor.solve: batch dimensions are not supported; solve each "
                             "batch entry separately")
        kernel = self
        if isinstance(b, LazyTensor):
            v = b._vars[0] if len(b._vars) == 1 and b._text == "V0" else None
            if v is None or v.cat == _P or v.batch:
                raise ValueError("LazyTensor.solve: b must be an array or a LazyTensor that is one "
                                 "i- or j-variable without batch dims (e.g. LazyTensor(b[:, None, "
                                 f":])), got {b!r}")
            if v.cat == _J:
                kernel = self.t()  # sum over i of K_ij x_i = sum over j of K^T_ij x_j
            b = v.array
        elif _backend_of(b) is None or b.ndim not in (1, 2):
            raise ValueError("LazyTensor.solve: b must be a NumPy array or tensor of shape (M,) or "
                             f"(M, E), or a LazyTensor that is one i- or j-variable; got "
                             f"{type(b).__name__} of shape {getattr(b, 'shape', '?')}")
        init = {k: options.pop(k) for k in _GENRED_OPTIONS if k in options}
        vec = b.ndim == 1
        bv = Vj(b.reshape(-1, 1) if vec else b)
        prod = kernel * bv
        texts, variables = _merge([prod])
        whole = LazyTensor._make(texts[0], variables, prod._dim)
        backend = whole._backend
        var = next(k for k, v in enumerate(variables) if v is bv._vars[0])
        dtype = _common_dtype(variables, "solve")
        key = ("solve", backend, texts[0], tuple(whole.aliases), var, tuple(sorted(init.items())))
        ks = _cached(key, lambda: _front_end(backend).KernelSolve(texts[0], list(whole.aliases),
                                                                  var, axis=1, **init))
        out = ks(*[v.materialize(backend, dtype) for v in variables], alpha=alpha, **options)
        return out.reshape(-1) if vec else out

    # ---- reductions ----------------------------------------------------------------------------
    def _axis(self, axis, dim, who, component_ok):
        if dim is not None:
            axis = dim
        nb = len(self._batch)
        if axis is None:
            if component_ok:
                return "c"
            raise ValueError(f"LazyTensor.{who}: pass axis=0 (reduce over i) or axis=1 (reduce "
                             "over j)" + (f", counted after the {nb} batch dims" if nb else ""))
        if axis in (nb, -3):
            return 0
        if axis in (nb + 1, -2):
            return 1
        if component_ok and axis in (nb + 2, -1):
            return "c"
        allowed = f"{nb} or -3 (over i), {nb + 1} or -2 (over j)" + (
            f", {nb + 2} or -1 (over the D components)" if component_ok else "")
        raise ValueError(f"LazyTensor.{who}: axis {axis!r} is not one of {allowed}")

    def _reduce(self, op, axis, k=None, weight=None, who=None, **options):
        who = who or op
        bad = [o for o in options if o not in _GENRED_OPTIONS]
        if bad:
            raise TypeError(f"LazyTensor.{who}: unexpected option(s) {', '.join(bad)}; accepted: "
                            f"{', '.join(_GENRED_OPTIONS)}")
        operands = [self] if weight is None else [self, weight]
        texts, variables = _merge(operands)
        whole = LazyTensor._make(texts[0], variables, self._dim)
        for size, cat in ((whole._ni, _I), (whole._nj, _J)):
            if size is None:
                letter = "ij"[cat]
                raise ValueError(f"LazyTensor.{who}: the formula has no {_CAT_WORD[cat]}, so the "
                                 f"size of index {letter} is unknown; a reduction needs at least "
                                 "one i-variable and one j-variable")
        backend = whole._backend
        dtype = _common_dtype(variables, who)
        aliases = tuple(whole.aliases)
        g = _genred(backend, texts[0], texts[1] if weight is not None else None, aliases, op,
                    axis, k, tuple(sorted(options.items())))
        return g(*[v.materialize(backend, dtype) for v in variables])

    def sum(self, axis=-1, dim=None, **options):
        """Over the D components (axis=-1, a LazyTensor) or a reduction over i (0) or j (1)."""
        a = self._axis(axis, dim, "sum", True)
        if a == "c":
            return self._unary("Sum", dim=1)
        return self._reduce("Sum", a, who="sum", **options)

    def sum_reduction(self, axis=None, dim=None, **options):
        return self._reduce("Sum", self._axis(axis, dim, "sum_reduction", False), **options)

    def logsumexp(self, axis=None, dim=None, weight=None, **options):
        """log sum exp(self) over i or j (self of dim 1), or log sum exp(self) * weight."""
        w = None if weight is None else self._operand(weight, "logsumexp")
        return self._reduce("LogSumExp", self._axis(axis, dim, "logsumexp", False), weight=w,
                            who="logsumexp", **options)

    def sumsoftmaxweight(self, weight, axis=None, dim=None, **options):
        """sum softmax(self) * weight over i or j (self of dim 1)."""
        w = self._operand(weight, "sumsoftmaxweight")
        return self._reduce("SumSoftMaxWeight", self._axis(axis, dim, "sumsoftmaxweight", False),
                            weight=w, who="sumsoftmaxweight", **options)

    def _extreme(self, op, component_op, axis, dim, who, options):
        a = self._axis(axis, dim, who, component_op is not None)
        if a == "c":
            return self._unary(component_op, dim=1)
        return self._reduce(op, a, who=who, **options)

    def min(self, axis=-1, dim=None, **options):
        return self._extreme("Min", "Min", axis, dim, "min", options)

    def max(self, axis=-1, dim=None, **options):
        return self._extreme("Max", "Max", axis, dim, "max", options)

    def argmin(self, axis=-1, dim=None, **options):
        return self._extreme("ArgMin", "ArgMin", axis, dim, "argmin", options)

    def argmax(self, axis=-1, dim=None, **options):
        return self._extreme("ArgMax", "ArgMax", axis, dim, "argmax", options)

    def min_argmin(self, axis=None, dim=None, **options):
        return self._extreme("Min_ArgMin", None, axis, dim, "min_argmin", options)

    def max_argmax(self, axis=None, dim=None, **options):
        return self._extreme("Max_ArgMax", None, axis, dim, "max_argmax", options)

    def _kred(self, op, K, axis, dim, who, options):
        K = _positive_int(who, "K", K)
        if self._dim != 1:
            raise ValueError(f"LazyTensor.{who}: needs a LazyTensor of dim 1, got dim {self._dim}")
        return self._reduce(op, self._axis(axis, dim, who, False), k=K, who=who, **options)

    def Kmin(self, K, axis=None, dim=None, **options):
        return self._kred("KMin", K, axis, dim, "Kmin", options)

    def argKmin(self, K, axis=None, dim=None, **options):
        return self._kred("ArgKMin", K, axis, dim, "argKmin", options)

    def Kmin_argKmin(self, K, axis=None, dim=None, **options):
        return self._kred("KMin_ArgKMin", K, axis, dim, "Kmin_argKmin", options)


# ---- helpers -------------------------------------------------------------------------------------
def Vi(x):
    """An i-variable from an (N, D) array (or (B..., N, D) batched; (N,) means D = 1)."""
    lt = LazyTensor.__new__(LazyTensor)
    v = _var_from_rows(x, _I, "Vi")
    lt._set("V0", [v], v.dim)
    return lt


def Vj(x):
    """A j-variable from an (M, D) array (or (B..., M, D) batched; (M,) means D = 1)."""
    lt = LazyTensor.__new__(LazyTensor)
    v = _var_from_rows(x, _J, "Vj")
    lt._set("V0", [v], v.dim)
    return lt


def Pm(x):
    """A parameter: a number (dim 1, in the other arrays' dtype), a (D,) or (B..., D) array."""
    lt = LazyTensor.__new__(LazyTensor)
    if _is_number(x):
        v = _Var(None, None, _P, 1, None, (), None, value=float(x))
    else:
        v = _var_from_rows(x, _P, "Pm")
    lt._set("V0", [v], v.dim)
    return lt
