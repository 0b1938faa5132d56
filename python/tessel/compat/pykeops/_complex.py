"""pykeops's ComplexLazyTensor on tessel's complex LazyTensors, and LazyTensor(x)'s dispatch to it.

As in pykeops, `LazyTensor(x)` of a complex array, a complex number or a list holding one is a
ComplexLazyTensor (a class of its own, not a LazyTensor subclass), `shape` counts complex
numbers while `_shape` and `ndim` count the reals of KeOps's (re, im) layout, and a reduction's
result is viewed back as a complex array of the inputs' precision. Sum is the one reduction with a
complex meaning; the others raise an error naming them (pykeops would reduce the interleaved reals).
"""
import numbers

from ._lazytensor import GenericLazyTensor, PendingReduction

__all__ = ["ComplexDispatch", "ComplexGenericLazyTensor", "complex_class"]


def _is_complex_number(x):
    return isinstance(x, numbers.Complex) and not isinstance(x, numbers.Real)


def is_complex_input(x):
    """Complex numbers, a list holding one, or a complex array (pykeops's detect_complex)."""
    if isinstance(x, list):
        return any(_is_complex_number(v) for v in x)
    return _is_complex_number(x) or "complex" in str(getattr(x, "dtype", ""))


class ComplexDispatch:
    """Mixin of a library's LazyTensor: complex input, or is_complex=True, gives a
    ComplexLazyTensor."""

    def __new__(cls, x=None, axis=None, is_complex=False):
        if is_complex or is_complex_input(x):
            return cls._complex_class(x, axis)
        return object.__new__(cls)

    def __init__(self, x=None, axis=None, is_complex=False):
        super().__init__(x, axis)


class _ComplexPending:
    """A pending reduction (symbolic variables, or call=False) whose result is viewed as complex."""

    def __init__(self, pending, as_complex):
        self._pending, self._as_complex = pending, as_complex

    def __call__(self, *args, **kwargs):
        return self._as_complex(self._pending(*args, **kwargs))

    def __getattr__(self, name):
        return getattr(self._pending, name)

    def __str__(self):
        return str(self._pending)

    __repr__ = __str__


class ComplexGenericLazyTensor(GenericLazyTensor):
    """Symbolic complex (B..., N, M, D) array with pykeops's API; see pykeops.torch / .numpy."""

    is_complex = True
    _as_complex = None  # the library's view of a (..., 2D) float array as (..., D) complex

    def __init__(self, x=None, axis=None, is_complex=True):
        super().__init__(x, axis)
        if not self._t._is_complex:  # real numbers or arrays, seen as complex ones
            self._t = self._t.real2complex()

    @property
    def ndim(self):
        """The reals of the (re, im) layout: twice the complex dim (as in pykeops)."""
        return 2 * self._t.ndim

    @property
    def shape(self):
        """(B..., N, M, D) in complex numbers, without a trailing D of 1 (as in pykeops)."""
        s = self._shape
        s = s[:-1] + (s[-1] // 2,)
        return s[:-1] if s[-1] == 1 else s

    @property
    def real(self):
        """The real part, a real LazyTensor (as in pykeops)."""
        return self._new(self._t.real)

    @property
    def imag(self):
        """The imaginary part, a real LazyTensor (as in pykeops)."""
        return self._new(self._t.imag)

    def angle(self):
        """The argument (phase) in radians, a real LazyTensor (as in pykeops)."""
        return self._new(self._t.angle())

    def sqabs(self):
        """The squared modulus ``re^2 + im^2``, a real LazyTensor (as in pykeops)."""
        return self._new(self._t.sqabs())

    def _reduction(self, op, axis=None, dim=None, opt_arg=None, weight=None, call=True, who=None,
                   **kwargs):
        if op != "Sum":
            raise TypeError(f"LazyTensor.{who or op}: the {op} reduction is not defined for complex "
                            "LazyTensors, only Sum is; reduce .real, .imag or abs() instead")
        arrays = [v for v in self._t.variables if v.source is not None]
        if len({v.array.dtype for v in arrays}) > 1:
            shown = " and ".join(sorted({str(v.source.dtype).replace("torch.", "")
                                         for v in arrays}))
            raise TypeError(f"LazyTensor.{who or op}: the arrays have dtypes {shown}; all must "
                            "share one precision (complex64 goes with float32, complex128 with "
                            "float64)")
        res = super()._reduction(op, axis, dim, opt_arg, weight, call, who, **kwargs)
        if isinstance(res, PendingReduction):
            return _ComplexPending(res, self._as_complex)
        return self._as_complex(res)


def complex_class(real_cls, as_complex, what):
    """The ComplexLazyTensor class that goes with a library's LazyTensor class real_cls (`what`
    names its arrays); results of either class then take the class of their values."""
    cls = type("ComplexLazyTensor", (ComplexGenericLazyTensor,), {
        "__doc__": f"A symbolic complex (B..., N, M, D) {what}, as pykeops's ComplexLazyTensor.",
        "__module__": real_cls.__module__, "_array_type": real_cls._array_type,
        "_genred_class": real_cls._genred_class, "_kernelsolve_class": real_cls._kernelsolve_class,
        "_array": real_cls._array, "_as_complex": staticmethod(as_complex)})
    for c in (real_cls, cls):
        c._real_class, c._complex_class = real_cls, cls
    return cls
