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

    Nothing is computed when LazyTensors are combined: operators and methods build a formula. A
    reduction over axis 0 (i) or 1 (j) (``sum``, ``logsumexp``, ``min``, ``argmin``, ``Kmin``,
    ``argKmin``, ``sumsoftmaxweight``, ``@``, ``solve``...) evaluates it with the C++ core, never
    storing the (N, M) array, and returns an array of the inputs' library (NumPy or PyTorch,
    with autograd). Batch dims count first, as in pykeops: axis -3 is i, -2 is j, -1 the D
    components. ``tessel.numpy.LazyTensor`` and ``tessel.torch.LazyTensor`` are this class.

    Parameters
    ----------
    x : array, tensor or number
        Shape (B..., N, 1, D): an i-variable; (B..., 1, M, D): a j-variable; (B..., 1, 1, D)
        or (D,): a parameter; a Python number: a constant. float32 or float64 (float16 and
        complex arrays too).
    axis : {0, 1, 2}, optional
        Reads a 2-D (N, D) array as an i-variable (0), a j-variable (1) or a parameter (2).

    Raises
    ------
    TypeError
        An object that is not an array of a supported library, a number or a LazyTensor.
    ValueError
        A shape that is neither an i-, j-variable nor a parameter, or an ``axis`` out of range.

    See Also
    --------
    Vi, Vj, Pm : The same, saying the variable's kind explicitly.

    Examples
    --------
    >>> import torch
    >>> from tessel.torch import LazyTensor
    >>> x = torch.rand(100, 3, dtype=torch.float64)
    >>> y, b = torch.rand(80, 3, dtype=torch.float64), torch.rand(80, 1, dtype=torch.float64)
    >>> x_i, y_j = LazyTensor(x[:, None, :]), LazyTensor(y[None, :, :])
    >>> K = (-4 * ((x_i - y_j) ** 2).sum(-1)).exp()       # symbolic (100, 80)
    >>> a = K @ b                                           # (100, 1), evaluated here
    >>> dense = torch.exp(-4 * torch.cdist(x, y) ** 2) @ b
    >>> bool(torch.allclose(a, dense))
    True
    >>> ((x_i - y_j) ** 2).sum(-1).argmin(dim=1).shape     # nearest y of each x
    torch.Size([100, 1])
    >>> import numpy as np                                 # the same class on NumPy arrays
    >>> xn, yn = x.numpy(), y.numpy()
    >>> nn = LazyTensor(xn[:, None, :]).sqdist(LazyTensor(yn[None, :, :])).argmin(axis=1)
    >>> type(nn).__name__, nn.dtype, bool((nn[:, 0] == torch.cdist(x, y).argmin(1).numpy()).all())
    ('ndarray', dtype('int64'), True)
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
        """The number of batch dimensions (the B... of (B..., N, M, D))."""
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
        """The variables' declarations in KeOps's syntax ("V0 = Vi(3)", ...), in index order."""
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
        """The transpose: i and j exchanged (as t())."""
        return self.t()


#: The names (a tuple of str) of the LazyTensor methods made from the core's op table: ``exp``,
#: ``sqdist``, ``matvecmult``, ``keops_tensordot``... one per op that no hand-written method
#: spells. Front ends that wrap LazyTensor (the pykeops layer) forward each of them.
TABLE_METHODS = add_table_methods(LazyTensor)


class ComplexLazyTensor(ComplexOps, LazyTensor):
    """A LazyTensor of complex values.

    Made by LazyTensor, Vi, Vj and Pm from complex64 / complex128 arrays (viewed as interleaved
    reals, no copy) or complex numbers, and by ``real2complex``, ``imag2complex`` and
    ``exp1j``. ``shape`` and ndim count complex numbers; ``+ - * /`` with complex, real and
    numbers, ``real``, ``imag``, ``conj``, ``angle``, ``abs``, ``sqabs``, ``exp``; a sum over i
    or j (or ``@``) gives a complex array. Other reductions of complex values raise an error.

    Parameters
    ----------
    x : complex array, tensor or number
        As for LazyTensor.
    axis : {0, 1, 2}, optional
        As for LazyTensor.

    Raises
    ------
    TypeError
        A reduction other than a sum, or an unsupported operand.

    Examples
    --------
    >>> import numpy as np
    >>> from tessel.numpy import LazyTensor
    >>> t = np.linspace(0, 1, 5)[:, None]
    >>> z = (LazyTensor(t[:, None, :]) * LazyTensor(t[None, :, :])).exp1j()   # e^{i t_i t_j}
    >>> s = z.sum(axis=1)
    >>> s.dtype, bool(np.allclose(s[:, 0], np.exp(1j * t * t.T).sum(1)))
    (dtype('complex128'), True)
    """

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
    """An i-variable: one row per output row i (the index a reduction over j keeps).

    ``Vi(x)`` is ``LazyTensor(x[:, None, :])`` said explicitly: row i of ``x`` is the value of
    the variable at every pair (i, j). A formula of i- and j-variables is the (N, M) matrix
    of its values at every pair, never stored; ``K.sum(axis=1)`` sums over j and gives one row
    per i. The array is used in place (no copy); with PyTorch tensors gradients flow to it.

    Parameters
    ----------
    x : (N, D) or (B..., N, D) array or tensor
        float32 or float64 (float16, bfloat16 and complex too), a NumPy array or a PyTorch
        tensor; ``(N,)`` means D = 1. Leading batch dims B... broadcast against the other
        variables'.

    Returns
    -------
    LazyTensor
        The symbolic (B..., N, 1, D) variable.

    Raises
    ------
    TypeError
        ``x`` is not an array of a supported library (a list, a number), or its dtype is not a
        float or complex one.
    ValueError
        ``x`` has no row axis (a 0-d array) or D = 0.

    Examples
    --------
    >>> import numpy as np
    >>> from tessel.numpy import Vi, Vj
    >>> x, y = np.random.rand(5, 2), np.random.rand(7, 2)
    >>> d = Vi(x).sqdist(Vj(y))          # symbolic (5, 7)
    >>> d.min(axis=1).shape
    (5, 1)
    """
    return LazyTensor._leaf(lv.from_rows(x, lv.I, "Vi"))


def Vj(x):
    """A j-variable: one row per reduced index j (summed over by a reduction over j).

    ``Vj(y)`` is ``LazyTensor(y[None, :, :])``: row j of ``y`` is the value of the variable at
    every pair (i, j). In a kernel sum a_i = sum_j k(x_i, y_j) b_j, the points y and weights b
    are j-variables. The array is used in place (no copy); with PyTorch tensors gradients flow
    to it.

    Parameters
    ----------
    x : (M, D) or (B..., M, D) array or tensor
        float32 or float64 (float16, bfloat16 and complex too), a NumPy array or a PyTorch
        tensor; ``(M,)`` means D = 1. Leading batch dims B... broadcast against the other
        variables'.

    Returns
    -------
    LazyTensor
        The symbolic (B..., 1, M, D) variable.

    Raises
    ------
    TypeError
        ``x`` is not an array of a supported library (a list, a number), or its dtype is not a
        float or complex one.
    ValueError
        ``x`` has no row axis (a 0-d array) or D = 0.

    Examples
    --------
    >>> import torch
    >>> from tessel.torch import Vi, Vj
    >>> x, y = torch.rand(5, 3), torch.rand(7, 3)
    >>> s = (Vi(x) - Vj(y)).norm2().sum(dim=1)     # sum_j |x_i - y_j|
    >>> s.shape, bool(torch.allclose(s[:, 0], torch.cdist(x, y).sum(1)))
    (torch.Size([5, 1]), True)
    """
    return LazyTensor._leaf(lv.from_rows(x, lv.J, "Vj"))


def Pm(x):
    """A parameter: one vector shared by every (i, j) pair.

    Parameters are the constants of a formula that may change between calls or need a
    gradient: a kernel's bandwidth, a weight matrix. A Python number written in a formula
    (``-10 * d``) is a constant compiled into the kernel; ``Pm(10.0)`` is an input instead,
    so one compiled kernel serves every value. With a PyTorch tensor gradients flow to it.

    Parameters
    ----------
    x : (D,) or (B..., D) array or tensor, or a number or sequence of numbers
        An array (float32 or float64, float16, bfloat16 or complex too) is used as it is. A
        number or a sequence of D numbers becomes an array of the other arrays' dtype when a
        reduction runs.

    Returns
    -------
    LazyTensor
        The symbolic (B..., 1, 1, D) parameter.

    Raises
    ------
    TypeError
        ``x`` is neither an array of a supported library nor numbers (an empty sequence, a
        string), or an array of a dtype that is not a float or complex one.
    ValueError
        An array with D = 0.

    Examples
    --------
    >>> import numpy as np
    >>> from tessel.numpy import Pm, Vi, Vj
    >>> x, y = np.random.rand(4, 2), np.random.rand(6, 2)
    >>> k = (-Pm(10.0) * Vi(x).sqdist(Vj(y))).exp()
    >>> bool(np.allclose(k.sum(axis=1)[:, 0],
    ...                  np.exp(-10 * ((x[:, None] - y[None]) ** 2).sum(-1)).sum(1)))
    True
    """
    if lv.adapter_of(x) is not None:
        return LazyTensor._leaf(lv.from_rows(x, lv.P, "Pm"))
    return LazyTensor._leaf(lv.from_numbers(x, "Pm"))


def Var(index, dim, cat):
    """A placeholder variable whose array is passed when the reduction is called.

    The pykeops layer's symbolic variables (``Vi(0, 3)`` in pykeops): a LazyTensor built on
    placeholders becomes a reusable reduction taking the arrays as arguments.

    Parameters
    ----------
    index : int
        The position of the variable's array among the call's arguments.
    dim : int
        Its dimension D.
    cat : {0, 1, 2}
        0: an i-variable, 1: a j-variable, 2: a parameter.

    Returns
    -------
    LazyTensor
        The symbolic variable.

    Raises
    ------
    ValueError
        A negative index, a dimension below 1 or a category outside 0-2.

    Examples
    --------
    >>> from tessel.lazytensor import Var
    >>> d = Var(0, 2, 0).sqdist(Var(1, 2, 1))           # x_i, y_j given at call time
    >>> d.formula
    tessel.Formula(SqDist(Vi(0,2),Vj(1,2)))
    """
    return LazyTensor._leaf(lv.placeholder(index, dim, cat, "Var"))
