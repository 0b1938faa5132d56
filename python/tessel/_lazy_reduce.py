"""LazyTensor's reductions: sum, logsumexp, min, argKmin, ... over i or j, matrix products, solve.

A reduction hands the core Formula (never text) and one alias per variable to the Genred of the
arrays' library (found through their adapter), cached by formula, variables and options, and
calls it on views of the arrays: no copies, and with PyTorch tensors gradients flow through
autograd.
"""
import atexit

from . import _lazy_vars as lv
from ._lazy_build import joint
from ._lru import LruCache

__all__ = ["Reductions", "GENRED_OPTIONS"]

GENRED_OPTIONS = ("backend", "dtype_acc", "sum_scheme")

# The Genred / KernelSolve objects of the reductions LazyTensors ask for, least recently used
# dropped first (a loop that builds new formulas must not grow the process).
_genred_cache = LruCache(1024)
# Emptied at exit: torch never frees an autograd graph alive then, and through its Function
# classes it keeps this module's globals alive; core objects left here would leak.
atexit.register(_genred_cache.clear)


def cached(key, make):
    """The Genred / KernelSolve object for `key`, built by make() on first use."""
    return _genred_cache.get_or_make(key, make)


def _common_dtype(variables, who):
    dtypes = {v.array.dtype for v in variables if v.source is not None}
    if len(dtypes) > 1:
        given = {v.source.dtype for v in variables if v.source is not None}
        shown = " and ".join(sorted(str(d) for d in given))
        pairs = (" (complex64 goes with float32, complex128 with float64)"
                 if any(v.is_complex for v in variables) else "")
        raise TypeError(f"LazyTensor.{who}: the arrays have dtypes {shown}; all must share one "
                        "precision" + pairs)
    return dtypes.pop()


def _aliases(variables):
    # Unnamed aliases: they declare each variable, those that simplification removed included.
    return [f"Var({k},{v.dim},{v.cat})" for k, v in enumerate(variables)]


def _signature(variables):
    return tuple((v.cat, v.dim) for v in variables)


class Reductions:
    """Reductions of a LazyTensor; mixed into LazyTensor with the formula building."""

    __slots__ = ()
    # The options a reduction takes; a subclass that evaluates elsewhere may add its own.
    _OPTIONS = GENRED_OPTIONS

    def _evaluator(self, adapter):
        """The adapter whose Genred / KernelSolve evaluate this LazyTensor's reductions: the
        arrays' own (tessel.distributed's LazyTensor shards them instead)."""
        return adapter

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

    def _inputs(self, operands, who):
        """The operands' formulas, variables, adapter and dtype, checked for a reduction."""
        whole = operands[0] if len(operands) == 1 else operands[0]._new(
            operands[0]._f, (), operands)
        for size, cat in ((whole._ni, lv.I), (whole._nj, lv.J)):
            if size is None:
                raise ValueError(f"LazyTensor.{who}: the formula has no {lv.CAT_WORD[cat]}, so the "
                                 f"size of index {'ij'[cat]} is unknown; a reduction needs at "
                                 "least one i-variable and one j-variable")
        formulas, variables = joint(*operands)
        if any(v.placeholder is not None for v in variables):
            raise ValueError(f"LazyTensor.{who}: the formula has placeholder variables (Var(index, "
                             "dim, cat)), whose arrays come with a call; reduce it through a "
                             "front end that takes them (tessel.compat.pykeops)")
        return formulas, variables, whole._adapter, _common_dtype(variables, who)

    def _reduce(self, op, axis, k=None, weight=None, who=None, **options):
        who = who or op
        bad = [o for o in options if o not in self._OPTIONS]
        if bad:
            raise TypeError(f"LazyTensor.{who}: unexpected option(s) {', '.join(bad)}; accepted: "
                            f"{', '.join(self._OPTIONS)}")
        operands = [self] if weight is None else [self, weight]
        formulas, variables, adapter, dtype = self._inputs(operands, who)
        run = self._evaluator(adapter)
        f, f2 = formulas[0], (formulas[1] if weight is not None else None)
        key = (run, f, f2, _signature(variables), op, axis, k, tuple(sorted(options.items())))
        g = cached(key, lambda: run.genred(f, _aliases(variables), reduction_op=op, axis=axis,
                                           opt_arg=k, formula2=f2, **options))
        return g(*[v.materialize(adapter, dtype) for v in variables])

    def __matmul__(self, v):
        """K @ v = sum_j K_ij v_j for K of dim 1 and v of shape (M,), (M, E) or (B..., M, E)."""
        if isinstance(v, Reductions) or lv.adapter_of(v) is None:
            return NotImplemented
        if self.ndim != 1:
            raise ValueError(f"LazyTensor @: the LazyTensor must have dim 1 (a kernel matrix), "
                             f"got dim {self.ndim}")
        vec = v.ndim == 1
        out = (self * type(self)(v, axis=1))._reduce("Sum", 1, who="__matmul__")
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
        if self.ndim != 1:
            raise ValueError(f"LazyTensor.solve: the LazyTensor must have dim 1 (a kernel "
                             f"matrix), got dim {self.ndim}")
        if self._batch:
            raise ValueError("LazyTensor.solve: batch dimensions are not supported; solve each "
                             "batch entry separately")
        kernel = self
        if isinstance(b, Reductions):
            v = b.variable
            if v is None or v.cat == lv.P or v.source is None or v.batch:
                raise ValueError("LazyTensor.solve: b must be an array or a LazyTensor that is one "
                                 "i- or j-variable without batch dims (e.g. LazyTensor(b[:, None, "
                                 f":])), got {b!r}")
            if v.cat == lv.J:
                kernel = self.t()  # sum over i of K_ij x_i = sum over j of K^T_ij x_j
            b = v.array
        elif lv.adapter_of(b) is None or b.ndim not in (1, 2):
            raise ValueError("LazyTensor.solve: b must be a NumPy array or tensor of shape (M,) or "
                             f"(M, E), or a LazyTensor that is one i- or j-variable; got "
                             f"{type(b).__name__} of shape {getattr(b, 'shape', '?')}")
        init = {k: options.pop(k) for k in self._OPTIONS if k in options}
        vec = b.ndim == 1
        bv = type(self)(b.reshape(-1, 1) if vec else b, axis=1)
        prod = kernel * bv
        (f,), variables, adapter, dtype = self._inputs([prod], "solve")
        run = self._evaluator(adapter)
        var = next(k for k, v in enumerate(variables) if v.key == bv._vars[0].key)
        key = ("solve", run, f, _signature(variables), var, tuple(sorted(init.items())))
        ks = cached(key, lambda: run.kernel_solve(f, _aliases(variables), var, axis=1, **init))
        out = ks(*[v.materialize(adapter, dtype) for v in variables], alpha=alpha, **options)
        return out.reshape(-1) if vec else out

    # ---- the reductions --------------------------------------------------------------------------
    def sum(self, axis=-1, dim=None, **options):
        """Over the D components (axis=-1, a LazyTensor) or a reduction over i (0) or j (1)."""
        a = self._axis(axis, dim, "sum", True)
        if a == "c":
            return self._apply("sum", "Sum", [self])
        return self._reduce("Sum", a, who="sum", **options)

    def sum_reduction(self, axis=None, dim=None, **options):
        """The sum over i (axis=0) or j (axis=1): pykeops's name for sum over an index."""
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
            return self._apply(who, component_op, [self])
        return self._reduce(op, a, who=who, **options)

    def min(self, axis=-1, dim=None, **options):
        """The minimum over i (axis=0) or j (axis=1), or over the D components (axis=-1)."""
        return self._extreme("Min", "Min", axis, dim, "min", options)

    def max(self, axis=-1, dim=None, **options):
        """The maximum over i (axis=0) or j (axis=1), or over the D components (axis=-1)."""
        return self._extreme("Max", "Max", axis, dim, "max", options)

    def argmin(self, axis=-1, dim=None, **options):
        """The int64 index of the minimum over i, j or the D components (NaN wins, ties: lowest)."""
        return self._extreme("ArgMin", "ArgMin", axis, dim, "argmin", options)

    def argmax(self, axis=-1, dim=None, **options):
        """The int64 index of the maximum over i, j or the D components (NaN wins, ties: lowest)."""
        return self._extreme("ArgMax", "ArgMax", axis, dim, "argmax", options)

    def min_argmin(self, axis=None, dim=None, **options):
        """(minimum, int64 index of the minimum) over i or j, in one reduction."""
        return self._extreme("Min_ArgMin", None, axis, dim, "min_argmin", options)

    def max_argmax(self, axis=None, dim=None, **options):
        """(maximum, int64 index of the maximum) over i or j, in one reduction."""
        return self._extreme("Max_ArgMax", None, axis, dim, "max_argmax", options)

    def _kred(self, op, K, axis, dim, who, options):
        K = lv.positive_int(who, "K", K)
        out = self._reduce(op, self._axis(axis, dim, who, False), k=K, who=who, **options)
        if self.ndim == 1:
            return out
        # Each component has its own K best: the core's column k * D + c becomes [..., k, c].
        shape = (K, self.ndim)
        if isinstance(out, tuple):
            return tuple(o.reshape(*o.shape[:-1], *shape) for o in out)
        return out.reshape(*out.shape[:-1], *shape)

    def Kmin(self, K, axis=None, dim=None, **options):
        """The K smallest values over i or j, sorted (NaN last, ties to the lowest index): shape
        (..., N, K) for dim 1, (..., N, K, D) for dim D, each component reduced on its own."""
        return self._kred("KMin", K, axis, dim, "Kmin", options)

    def argKmin(self, K, axis=None, dim=None, **options):
        """The int64 indices of the K smallest values over i or j (K nearest neighbours), shaped
        as Kmin's values."""
        return self._kred("ArgKMin", K, axis, dim, "argKmin", options)

    def Kmin_argKmin(self, K, axis=None, dim=None, **options):
        """(K smallest values, their int64 indices) over i or j, in one reduction, shaped as
        Kmin's values."""
        return self._kred("KMin_ArgKMin", K, axis, dim, "Kmin_argKmin", options)
