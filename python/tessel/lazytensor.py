"""LazyTensor: symbolic (B..., N, M, D) kernel formulas on NumPy or torch arrays, reduced by Genred.

A LazyTensor is never evaluated on the N x M grid. It holds a core Formula whose variable k
stands for `variables[k]`: an array with its role (i-variable, j-variable or parameter) and dim.
Arithmetic and math build new LazyTensors through the core's op table; a reduction (sum,
logsumexp, min, argKmin, ...) over i or j hands the Formula to a cached Genred and calls it on
views of the arrays: no copies, and with PyTorch tensors gradients flow through autograd.

Shapes, as in pykeops: (B..., N, 1, D) is an i-variable, (B..., 1, M, D) a j-variable,
(B..., 1, 1, D) or (D,) a parameter, a Python number a constant; Vi / Vj / Pm take (B..., N, D)
arrays directly. Batch dimensions B... broadcast as in NumPy and are handed to the core in one call.

The code is split by concern: _lazy_vars (variables, shapes, array adapters), _lazy_build
(formula building), _lazy_reduce (reductions). tessel.numpy and tessel.torch register their
arrays with `register_adapter`.
"""
import math
import numbers

from . import _core
from . import _lazy_vars as lv
from ._lazy_build import FormulaOps, add_table_methods, joint
from ._lazy_complex import ComplexOps, ToComplex, as_class, block_real_methods
from ._lazy_reduce import Reductions, _genred_cache  # noqa: F401  (tests watch the cache)
from ._lazy_vars import ArrayAdapter, Variable, register_adapter

__all__ = ["LazyTensor", "ComplexLazyTensor", "Vi", "Vj", "Pm", "Var", "joint", "ArrayAdapter",
           "Variable", "register_adapter", "TABLE_METHODS"]

_CAT_TEXT = ("Vi", "Vj", "Pm")


class LazyTensor(ToComplex, Reductions, FormulaOps):
    """A symbolic (B..., N, M, D) array: a formula of i-, j-variables, parameters and constants.

    LazyTensor(x) for x of shape (B..., N, 1, D) is an i-variable, (B..., 1, M, D) a j-variable,
    (B..., 1, 1, D) or (D,) a parameter, and a Python number a constant; `axis=0|1|2` reads a 2-D
    (N, D) array as an i-, j-variable or parameter. Operators and methods build new LazyTensors;
    reductions over axis 0 (i) or 1 (j) evaluate them (counting batch dims first, as in pykeops:
    axis -3 is i, -2 is j, -1 the D components).
    """

    __slots__ = ()

    def __new__(cls, x=None, axis=None):
        who = "LazyTensor"
        if isinstance(x, FormulaOps):  # immutable: the same one, or its fields in class cls
            return as_class(x, cls if cls._is_complex == x._is_complex else type(x))
        if lv.is_number(x) or lv.is_complex_number(x):
            if axis is not None:
                raise ValueError(f"{who}: axis is only used with arrays, not with the number {x!r}")
            return cls._constant(x)
        if lv.adapter_of(x) is None:
            raise TypeError(f"{who}: expected a numpy.ndarray, a torch.Tensor or a number, got "
                            f"{type(x).__name__}")
        if axis is None:
            return cls._leaf(lv.from_grid(x, who))
        if axis in (0, 1, 2):
            return cls._leaf(lv.from_rows(x, axis, who))
        raise ValueError(f"{who}: axis must be 0 (i-variable), 1 (j-variable) or 2 "
                         f"(parameter), got {axis!r}")

    # ---- description ---------------------------------------------------------------------------
    @property
    def ndim(self):
        """The inner dim D (as in pykeops)."""
        return self._f.dim

    @property
    def ni(self):
        """N, the rows of the i-variables (None when there is none)."""
        return self._ni

    @property
    def nj(self):
        """M, the rows of the j-variables (None when there is none)."""
        return self._nj

    @property
    def batch(self):
        """The batch shape B... (broadcast over the variables)."""
        return self._batch

    @property
    def shape(self):
        """(B..., N, M, D), with 1 for an index no variable follows."""
        return self._batch + (self._ni or 1, self._nj or 1, self._f.dim)

    @property
    def nbatchdims(self):
        return len(self._batch)

    def dim(self):
        """The number of axes of `shape` (as torch.Tensor.dim)."""
        return len(self.shape)

    @property
    def dtype(self):
        """The arrays' dtype (None when the formula holds no array)."""
        dtypes = {v.array.dtype for v in self._vars if v.source is not None}
        return dtypes.pop() if len(dtypes) == 1 else None

    @property
    def formula(self):
        """The core Formula; its variable k is `variables[k]`."""
        return self._f

    @property
    def variables(self):
        """The Variables the formula reads, in the formula's numbering."""
        return self._vars

    @property
    def variable(self):
        """The Variable when this LazyTensor is just one variable, else None."""
        if len(self._vars) == 1:
            v = self._vars[0]
            if self._f == _core.var(0, v.dim, v.cat):
                return v
        return None

    @property
    def aliases(self):
        return [f"V{k} = {_CAT_TEXT[v.cat]}({v.dim})" for k, v in enumerate(self._vars)]

    def __repr__(self):
        return f"LazyTensor(formula={str(self._f)!r}, aliases={self.aliases}, shape={self.shape})"

    def __str__(self):
        """What pykeops prints (formula, shape), and what each variable of the formula holds."""
        lines = [f"tessel {type(self).__name__}", f"    formula: {self._f}", "    variables:"]
        for k, v in enumerate(self._vars):
            if v.placeholder is not None:
                what = f"argument {v.placeholder} of the reduction's call"
            elif v.source is None:
                what = f"the numbers {v.value}"
            else:
                what = (f"{type(v.source).__name__} of dtype {v.source.dtype}, shape "
                        f"{tuple(v.source.shape)}")
            lines.append(f"        {_CAT_TEXT[v.cat]}({k},{v.dim}): {what}")
        if not self._vars:
            lines[-1] += " none (a constant)"
        lines.append(f"    shape: {self.shape}")
        return "\n".join(lines)

    def __bool__(self):
        raise TypeError("LazyTensor: the truth value of a symbolic tensor is undefined (a "
                        "comparison gives a 0/1 LazyTensor; reduce it to get numbers)")

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
        d = self.ndim
        if isinstance(key, numbers.Integral) and not isinstance(key, bool):
            i = int(key) + (d if key < 0 else 0)
            if not 0 <= i < d:
                raise IndexError(f"LazyTensor: index {int(key)} is out of range for dim {d}")
            return self.elem(i)
        if isinstance(key, slice):
            start, stop, step = key.indices(d)
            if step != 1:
                raise IndexError("LazyTensor: slices of the D axis must have step 1")
            if stop <= start:
                raise IndexError(f"LazyTensor: the slice {key} of dim {d} is empty")
            return self.extract(start, stop - start)
        raise TypeError(f"LazyTensor: indices must be integers or slices, got "
                        f"{type(key).__name__}")

    def sinc(self):
        """sinc(x) = sin(pi x) / (pi x), 1 at 0: the normalised sinc of NumPy, PyTorch, pykeops and
        C++ `tessel::sinc` (the unnormalised sin(x) / x is `sinxdivx`, C++ `sin_x_div_x`)."""
        return (math.pi * self).sinxdivx()

    # ---- transpose -----------------------------------------------------------------------------
    def t(self):
        """The transpose: i-variables become j-variables and j-variables i-variables."""
        lt = object.__new__(type(self))
        lt._f = self._f.relabel(swap_ij=True)
        lt._vars = tuple(v.transposed() for v in self._vars)
        lt._ni, lt._nj, lt._batch, lt._adapter = self._nj, self._ni, self._batch, self._adapter
        return lt

    @property
    def T(self):
        return self.t()


TABLE_METHODS = add_table_methods(LazyTensor)
"""The LazyTensor methods made from the core's op table (front ends forward them)."""


class ComplexLazyTensor(ComplexOps, LazyTensor):
    """A LazyTensor of complex values (see tessel._lazy_complex): made by LazyTensor, Vi, Vj and
    Pm from complex64 / complex128 arrays or complex numbers, and by real2complex, imag2complex
    and exp1j. `shape` and `ndim` count complex numbers; sum over i or j gives a complex array."""

    __slots__ = ()


FormulaOps._real_class, FormulaOps._complex_class = LazyTensor, ComplexLazyTensor
# Every real method without a complex meaning here raises on a complex LazyTensor.
block_real_methods(ComplexLazyTensor, TABLE_METHODS + (
    "__pow__", "__rpow__", "power", "round", "mod", "clamp", "one_hot", "norm", "weightedsqnorm",
    "weightedsqdist", "elem", "extract", "__getitem__", "keops_tensordot", "grad", "sinc",
    "__lt__", "__le__", "__gt__", "__ge__", "__or__", "__ror__", "logsumexp",
    "sumsoftmaxweight", "min", "max", "argmin", "argmax", "min_argmin", "max_argmax", "Kmin",
    "argKmin", "Kmin_argKmin", "solve"))


# ---- constructors --------------------------------------------------------------------------------
def Vi(x):
    """An i-variable from an (N, D) array (or (B..., N, D) batched; (N,) means D = 1)."""
    return LazyTensor._leaf(lv.from_rows(x, lv.I, "Vi"))


def Vj(x):
    """A j-variable from an (M, D) array (or (B..., M, D) batched; (M,) means D = 1)."""
    return LazyTensor._leaf(lv.from_rows(x, lv.J, "Vj"))


def Pm(x):
    """A parameter: a (D,) or (B..., D) array, or numbers (one, or a sequence: dim D), which
    become an array of the other arrays' dtype when a reduction runs."""
    if lv.adapter_of(x) is not None:
        return LazyTensor._leaf(lv.from_rows(x, lv.P, "Pm"))
    return LazyTensor._leaf(lv.from_numbers(x, "Pm"))


def Var(index, dim, cat):
    """A placeholder: variable `index` of dim `dim` and category `cat` (0: i, 1: j, 2: parameter)
    whose array a reduction's caller passes (the pykeops layer's symbolic variables)."""
    return LazyTensor._leaf(lv.placeholder(index, dim, cat, "Var"))
