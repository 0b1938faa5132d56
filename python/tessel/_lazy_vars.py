"""LazyTensor's variables and shapes: the arrays a formula reads, their roles, and array adapters.

A Variable is one input of a LazyTensor's formula: an array (already in the core's (B..., n, D)
layout) with its role (i-variable, j-variable or parameter), a parameter given by numbers (made an
array of the formula's dtype when a reduction runs), or a placeholder: an argument that the caller
of a reduction supplies (the pykeops layer's symbolic `Vi(index, dim)`).

Array libraries are not imported here: tessel.numpy and tessel.torch register an ArrayAdapter
(the array type, its dtypes, how to make a small parameter array, its Genred and KernelSolve).
"""
import importlib
import importlib.util
import numbers

__all__ = ["ArrayAdapter", "register_adapter", "Variable"]

I, J, P = 0, 1, 2
CAT_WORD = ("i-variable", "j-variable", "parameter")
_SHAPES_HELP = ("accepted shapes are (B..., N, 1, D) for an i-variable, (B..., 1, M, D) for a "
                "j-variable, (B..., 1, 1, D) or (D,) for a parameter; pass a 2-D (N, D) array "
                "through Vi, Vj or Pm (or LazyTensor(x, axis=0|1|2))")


# ---- array adapters ------------------------------------------------------------------------------
class ArrayAdapter:
    """What LazyTensor needs from an array library; its front end module registers one.

    ``tessel.numpy`` and ``tessel.torch`` register theirs when imported; another array library
    (CuPy, JAX...) would add one with :func:`register_adapter`.

    Parameters
    ----------
    array_type : type
        The array class.
    name : str
        The arrays' plural name in messages ("NumPy arrays").
    dtypes : tuple
        The float dtypes accepted.
    scalar : callable
        ``scalar(values, dtype)``: a 1-D array of those numbers.
    genred, kernel_solve : type
        The library's Genred and KernelSolve classes.
    complex_dtypes : tuple, default ()
        The complex dtypes accepted (complex64, complex128): one per float dtype, in order.
    as_real : callable, optional
        ``as_real(x)``: the (..., 2D) float view (re0, im0, re1, ...) of a (..., D) complex
        array, without a copy where its last axis is contiguous.
    as_complex : callable, optional
        ``as_complex(a)``: the (..., D) complex view of a (..., 2D) float result. Gradients flow
        through both views on tensors.

    Examples
    --------
    >>> import numpy as np
    >>> import tessel.numpy
    >>> from tessel._lazy_vars import adapter_of
    >>> adapter_of(np.zeros(3)).name
    'NumPy arrays'
    """

    __slots__ = ("array_type", "name", "dtypes", "scalar", "genred", "kernel_solve",
                 "complex_dtypes", "as_real", "as_complex")

    def __init__(self, array_type, name, dtypes, scalar, genred, kernel_solve, complex_dtypes=(),
                 as_real=None, as_complex=None):
        self.array_type, self.name, self.dtypes = array_type, name, tuple(dtypes)
        self.scalar, self.genred, self.kernel_solve = scalar, genred, kernel_solve
        self.complex_dtypes, self.as_real = tuple(complex_dtypes), as_real
        self.as_complex = as_complex


_adapters = []


def register_adapter(adapter):
    """Make LazyTensor accept the adapter's arrays (a front end calls this when imported).

    Registering the same array type twice keeps the first adapter. An array whose library's
    front end (``tessel.<library>``) is not imported yet makes LazyTensor import it, so
    ``Vi(numpy_array)`` works after ``import tessel.lazytensor`` alone.

    Parameters
    ----------
    adapter : ArrayAdapter
        What LazyTensor needs from the library.

    Returns
    -------
    None
        The adapter is kept in a registry read by every LazyTensor constructor.

    Raises
    ------
    AttributeError
        ``adapter`` lacks ``array_type``.

    Examples
    --------
    >>> import numpy as np
    >>> from tessel.lazytensor import register_adapter
    >>> from tessel._lazy_vars import adapter_of
    >>> import tessel.numpy
    >>> register_adapter(adapter_of(np.zeros(1)))      # already registered: nothing changes
    """
    if not any(a.array_type is adapter.array_type for a in _adapters):
        _adapters.append(adapter)


def adapter_of(x):
    """The adapter whose arrays include x, or None. An array of a library whose front end
    (tessel.<library>) is not imported yet imports it: front ends register themselves."""
    for a in _adapters:
        if isinstance(x, a.array_type):
            return a
    library = getattr(type(x), "__module__", "").partition(".")[0]
    if library and library != __package__ and importlib.util.find_spec(
            f"{__package__}.{library}") is not None:
        before = len(_adapters)
        importlib.import_module(f"{__package__}.{library}")
        if len(_adapters) > before:
            return adapter_of(x)
    return None


def is_number(x):
    return isinstance(x, numbers.Real)


def is_complex_number(x):
    """A complex number that is not a real one (1j, np.complex64(2))."""
    return isinstance(x, numbers.Complex) and not isinstance(x, numbers.Real)


# ---- variables -----------------------------------------------------------------------------------
class Variable:
    """One input of a LazyTensor's formula, as :func:`joint` returns them.

    Variable k of a LazyTensor's ``formula`` (``Vi(k, D)`` in its text) reads
    ``variables[k]``: an array with its role (``cat``) and dim, a parameter given as numbers
    (``value``), or a placeholder whose array comes with the reduction's call. The same array
    used twice in one role is one Variable. A front end builds them; users read them to see
    what a formula takes.

    Parameters
    ----------
    source : object
        The object given (None for numbers and placeholders).
    array : array
        ``source`` in the core's layout.
    cat : {0, 1, 2}
        0: i-variable, 1: j-variable, 2: parameter.
    dim : int
        The dimension D.
    n : int or None
        Its rows (None for parameters).
    batch : tuple of int
        Its batch shape.
    adapter : ArrayAdapter
        Its library's adapter.
    value : list of float, optional
        The numbers of a parameter given as numbers.
    placeholder : int, optional
        The argument index of a placeholder (:func:`Var`), else None.
    is_complex : bool, default False
        Whether ``source`` holds complex values.

    Examples
    --------
    >>> import numpy as np
    >>> from tessel.lazytensor import Vi, joint
    >>> (v,) = joint(Vi(np.ones((5, 3))))[1]
    >>> v.cat, v.dim, v.n
    (0, 3, 5)
    """

    __slots__ = ("source", "array", "cat", "dim", "n", "batch", "adapter", "value", "placeholder",
                 "key", "is_complex")

    def __init__(self, source, array, cat, dim, n, batch, adapter, value=None, placeholder=None,
                 is_complex=False):
        self.source, self.array, self.cat, self.dim, self.n = source, array, cat, dim, n
        self.batch, self.adapter, self.value = tuple(batch), adapter, value
        self.placeholder = placeholder
        # A complex array is read through its float view: dim counts reals (2 per number).
        self.is_complex = is_complex
        # The same tensor used twice in a formula (in one role and layout) is one variable, as is
        # a placeholder named twice; numbers given as a parameter are their own variable.
        if placeholder is not None:
            self.key = ("placeholder", placeholder, dim, cat)
        elif source is None:
            self.key = (id(self),)
        else:
            self.key = (id(source), cat, tuple(array.shape))

    def transposed(self):
        """The same variable with i and j exchanged (for LazyTensor.t())."""
        if self.cat == P:
            return self
        return Variable(self.source, self.array, J if self.cat == I else I, self.dim, self.n,
                        self.batch, self.adapter, self.value, self.placeholder, self.is_complex)

    def materialize(self, adapter, dtype):
        """The array a reduction reads for this variable."""
        if self.source is not None:
            return self.array
        return adapter.scalar(self.value, dtype)

    def __repr__(self):
        what = (f"placeholder {self.placeholder}" if self.placeholder is not None else
                f"values {self.value}" if self.source is None else f"array {tuple(self.array.shape)}")
        return f"Variable({CAT_WORD[self.cat]}, dim {self.dim}, {what})"


def check_array(x, who):
    a = adapter_of(x)
    if a is None:
        raise TypeError(f"{who}: expected an array ({', '.join(d.name for d in _adapters)}), got "
                        f"{type(x).__name__}")
    if x.dtype not in a.dtypes and x.dtype not in a.complex_dtypes:
        raise TypeError(f"{who}: arrays of dtype {x.dtype} are not supported; expected float32, "
                        "float64, float16 or bfloat16 (or complex64 / complex128)")
    return a


def _real_view(x, adapter):
    """(the float view of x, True) for a complex array, (x, False) for a real one."""
    if x.dtype not in adapter.complex_dtypes:
        return x, False
    return adapter.as_real(x.reshape(1) if x.ndim == 0 else x), True


def from_rows(x, cat, who):
    """x: (B..., n, D) for i/j variables (or (n,) for dim 1); (B..., D), (D,) or 0-d for Pm."""
    adapter = check_array(x, who)
    source = x
    if cat == P:
        a, cplx = _real_view(x.reshape(1) if x.ndim == 0 else x, adapter)
        return Variable(source, a, P, int(a.shape[-1]), None, a.shape[:-1], adapter,
                        is_complex=cplx)
    a, cplx = _real_view(x[..., None] if x.ndim == 1 else x, adapter)
    if a.ndim < 2:
        raise ValueError(f"{who}: expected an (N, D) array, got shape {tuple(x.shape)}")
    return Variable(source, a, cat, int(a.shape[-1]), int(a.shape[-2]), a.shape[:-2], adapter,
                    is_complex=cplx)


def from_grid(x, who):
    """x shaped like the N x M grid: (B..., N, 1, D), (B..., 1, M, D), (B..., 1, 1, D) or (D,)."""
    adapter = check_array(x, who)
    if x.ndim <= 1:
        return from_rows(x, P, who)
    source = x
    x, cplx = _real_view(x, adapter)
    if x.ndim == 2:
        raise ValueError(f"{who}: a 2-D array of shape {tuple(x.shape)} is ambiguous; "
                         + _SHAPES_HELP)
    n, m, d = (int(s) for s in x.shape[-3:])
    batch = x.shape[:-3]
    if m == 1 and n == 1:
        return Variable(source, x.squeeze(-2).squeeze(-2), P, d, None, batch, adapter,
                        is_complex=cplx)
    if m == 1:
        return Variable(source, x.squeeze(-2), I, d, n, batch, adapter, is_complex=cplx)
    if n == 1:
        return Variable(source, x.squeeze(-3), J, d, m, batch, adapter, is_complex=cplx)
    raise ValueError(f"{who}: shape {tuple(x.shape)} is neither an i-, a j- nor a parameter "
                     f"shape (both axes -3 and -2 are > 1); " + _SHAPES_HELP)


def from_numbers(values, who):
    """A parameter given by numbers: one number or a non-empty sequence of numbers. Complex
    numbers among them make a complex parameter (its values interleaved: re0, im0, ...)."""
    seq = (values,) if isinstance(values, numbers.Complex) else values
    try:
        seq = tuple(seq)
    except TypeError:
        seq = None
    if not seq or not all(isinstance(v, numbers.Complex) for v in seq):
        raise TypeError(f"{who}: expected an array, a number or a sequence of numbers, got "
                        f"{values!r}")
    if any(is_complex_number(v) for v in seq):
        flat = tuple(float(p) for v in seq for p in (complex(v).real, complex(v).imag))
        return Variable(None, None, P, len(flat), None, (), None, value=flat, is_complex=True)
    return Variable(None, None, P, len(seq), None, (), None, value=tuple(float(v) for v in seq))


def placeholder(index, dim, cat, who):
    """An argument of the reduction's call, standing at position `index`."""
    ok = all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in (index, dim, cat))
    if not ok or index < 0 or dim < 1 or cat not in (I, J, P):
        raise ValueError(f"{who}: needs an index >= 0, a dim >= 1 and a category 0 (i), 1 (j) or "
                         f"2 (parameter); got ({index!r}, {dim!r}, {cat!r})")
    return Variable(None, None, int(cat), int(dim), None, (), None, placeholder=int(index))


# ---- shapes --------------------------------------------------------------------------------------
def broadcast_batch(a, b, who):
    if a == b or not b:
        return a
    if not a:
        return b
    if len(a) < len(b):
        a, b = b, a
    b = (1,) * (len(a) - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x != y and x != 1 and y != 1:
            raise ValueError(f"{who}: batch shapes {tuple(a)} and {tuple(b)} do not broadcast")
        out.append(max(x, y) if 1 in (x, y) else x)
    return tuple(out)


def join_sizes(have, n, cat):
    """The common row count of index i (cat 0) or j (cat 1): None when no variable tells it."""
    if have is None or n is None or have == n:
        return n if have is None else have
    word = "N (rows of i-variables)" if cat == I else "M (rows of j-variables)"
    raise ValueError(f"LazyTensor: {CAT_WORD[cat]}s with {have} and {n} rows; all must share "
                     f"{word}")


def join_adapters(a, b):
    if a is None or b is None or a is b:
        return a or b
    raise TypeError(f"LazyTensor: cannot mix {a.name} and {b.name} in one formula; convert them "
                    "to one library first")


def int_tuple(who, name, v):
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


def positive_int(who, name, v):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 1:
        raise ValueError(f"LazyTensor.{who}: {name} must be a positive integer, got {v!r}")
    return int(v)
