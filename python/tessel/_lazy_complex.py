"""Complex LazyTensors: formulas on complex arrays, stored as KeOps stores them.

A complex vector of dim D is 2D reals (re0, im0, re1, im1, ...): a complex64 / complex128 array
enters through its float32 / float64 view (no copy when its last axis is contiguous) and a
reduction's result is viewed back as complex. The arithmetic uses the core's complex ops
(ComplexMult, ComplexDivide, ...), whose gradients follow PyTorch's convention for complex
tensors (the conjugate Wirtinger derivative), so autograd through a reduction agrees with
autograd on the dense complex computation.

Real operands mix in as pykeops mixes them: a real LazyTensor or number becomes complex through
Real2Complex, and a real scalar (dim 1) multiplies through ComplexRealScal. Operations without a
complex meaning (comparisons, min, logsumexp, sqrt, ...) raise an error that names them.
"""
import math

from . import _core

__all__ = ["ComplexOps", "ToComplex", "as_class", "block_real_methods"]

_make = _core.make
# The core's complex op for each real arithmetic op.
_COMPLEX_OP = {"Add": "ComplexAdd", "Subtract": "ComplexSubtract", "Mult": "ComplexMult",
               "Divide": "ComplexDivide"}


def as_class(lt, cls):
    """The LazyTensor lt (same formula and variables) as an instance of cls."""
    if type(lt) is cls:
        return lt
    out = object.__new__(cls)
    out._f, out._vars, out._ni, out._nj = lt._f, lt._vars, lt._ni, lt._nj
    out._batch, out._adapter = lt._batch, lt._adapter
    return out


class ToComplex:
    """The methods of a real LazyTensor that make a complex one."""

    __slots__ = ()

    def _lift(self, who, op):
        return as_class(self._apply(who, op, [self]), self._complex_class)

    def real2complex(self):
        """x + 0i, elementwise."""
        return self._lift("real2complex", "Real2Complex")

    def imag2complex(self):
        """0 + xi, elementwise."""
        return self._lift("imag2complex", "Imag2Complex")

    def exp1j(self):
        """exp(i x) = cos x + i sin x, elementwise."""
        return self._lift("exp1j", "ComplexExp1j")


class ComplexOps:
    """What a complex LazyTensor changes: its description in complex numbers, complex arithmetic
    and functions, and the one reduction that is defined on complex values (Sum)."""

    __slots__ = ()
    _is_complex = True

    @classmethod
    def _complex_constant(cls, z):
        z = complex(z)
        if not (math.isfinite(z.real) and math.isfinite(z.imag)):
            raise ValueError(f"LazyTensor: the constant {z} is not finite")
        f = _make("ComplexAdd", [_make("Real2Complex", [_core.constant(z.real)], ()),
                                 _make("Imag2Complex", [_core.constant(z.imag)], ())], ())
        lt = object.__new__(cls)
        lt._f, lt._vars, lt._ni, lt._nj, lt._batch, lt._adapter = f, (), None, None, (), None
        return lt

    # ---- description: dims count complex numbers -----------------------------------------------
    @property
    def ndim(self):
        """The inner dim D, in complex numbers (the formula has 2D reals)."""
        return self._f.dim // 2

    @property
    def shape(self):
        """(B..., N, M, D), D counting complex numbers."""
        return self._batch + (self._ni or 1, self._nj or 1, self.ndim)

    @property
    def dtype(self):
        """The complex dtype of the arrays (None when the formula holds no complex array)."""
        dtypes = {v.source.dtype for v in self._vars if v.source is not None and v.is_complex}
        return dtypes.pop() if len(dtypes) == 1 else None

    def __repr__(self):
        return (f"ComplexLazyTensor(formula={str(self._f)!r}, aliases={self.aliases}, "
                f"shape={self.shape})")

    # ---- arithmetic --------------------------------------------------------------------------
    def _binary(self, other, who, op, reverse=False):
        o = self._wrap(other)
        if o is None:
            return NotImplemented
        cop = _COMPLEX_OP.get(op)
        if cop is None:
            raise TypeError(f"LazyTensor.{who}: not defined for complex LazyTensors; apply it "
                            "to .real, .imag or abs()")
        if not o._is_complex:
            if op == "Mult" and o._f.dim == 1:
                return self._apply(who, "ComplexRealScal", [o, self])
            o = o._apply(who, "Real2Complex", [o])
        return self._apply(who, cop, [o, self] if reverse else [self, o])

    def _to_real(self, who, op):
        return as_class(self._apply(who, op, [self]), self._real_class)

    @property
    def real(self):
        """The real part, a real LazyTensor."""
        return self._to_real("real", "ComplexReal")

    @property
    def imag(self):
        """The imaginary part, a real LazyTensor."""
        return self._to_real("imag", "ComplexImag")

    def angle(self):
        """atan2(imag, real) elementwise; 0 at 0, where its gradient is 0 (as PyTorch's)."""
        return self._to_real("angle", "ComplexAngle")

    def abs(self):
        """|z| elementwise; its gradient at 0 is 0 (PyTorch's sgn(0) = 0)."""
        return self._to_real("abs", "ComplexAbs")

    __abs__ = abs

    def sqabs(self):
        """|z|^2 elementwise."""
        return self._to_real("sqabs", "ComplexSquareAbs")

    def conj(self):
        """The complex conjugate, elementwise."""
        return self._apply("conj", "Conj", [self])

    def exp(self):
        """exp(z) elementwise."""
        return self._apply("exp", "ComplexExp", [self])

    def _not_real(self, who):
        raise TypeError(f"LazyTensor.{who}: cannot be applied to a complex LazyTensor (it takes a "
                        "real one)")

    def real2complex(self):
        """Not for complex LazyTensors (a TypeError): it takes a real one."""
        self._not_real("real2complex")

    def imag2complex(self):
        """Not for complex LazyTensors (a TypeError): it takes a real one."""
        self._not_real("imag2complex")

    def exp1j(self):
        """Not for complex LazyTensors (a TypeError): it takes a real one."""
        self._not_real("exp1j")

    # ---- reductions: Sum only ------------------------------------------------------------------
    def sum(self, axis=-1, dim=None, **options):
        """Over the D components (axis=-1: a complex LazyTensor of dim 1) or the complex sum over
        i (0) or j (1): an array of the inputs' complex dtype."""
        if self._axis(axis, dim, "sum", True) == "c":
            return self._apply("sum", "ComplexSum", [self])
        return super().sum(axis, dim, **options)

    def _reduce(self, op, axis, k=None, weight=None, who=None, **options):
        """Every reduction (sum, sum_reduction, K @ v with a complex K or v) comes here."""
        if op != "Sum":
            raise TypeError(f"LazyTensor.{who or op}: the {op} reduction is not defined for "
                            "complex LazyTensors, only Sum is; reduce .real, .imag or abs()")
        out = super()._reduce(op, axis, k, weight, who, **options)
        return self._adapter.as_complex(out)


def block_real_methods(cls, names):
    """Makes each method in `names` raise a clear error on the complex class cls: those of real
    LazyTensors (exp is replaced, sqrt, min, logsumexp, ... have no complex meaning here)."""
    for name in names:
        if name in ComplexOps.__dict__:
            continue

        def method(self, *args, _name=name, **kwargs):
            raise TypeError(f"LazyTensor.{_name}: not defined for complex LazyTensors; apply it "
                            "to .real, .imag, abs() or angle()")

        method.__name__ = method.__qualname__ = name
        method.__doc__ = (f"Not defined for complex LazyTensors (a TypeError says so): apply "
                          f"{name} to .real, .imag, abs() or angle().")
        setattr(cls, name, method)
