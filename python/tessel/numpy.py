"""NumPy front end: Genred on NumPy arrays (float32 or float64, any strides, no copies)."""
import numpy as np

from . import _docstrings
from . import _core
from .lazytensor import ArrayAdapter, LazyTensor, Vi, Vj, Pm, register_adapter  # noqa: F401
from ._genred import GenredBase, check_int
from ._solve import KernelSolveBase

__all__ = ["Genred", "KernelSolve", "LazyTensor", "Vi", "Vj", "Pm"]

# float16: reductions run on float32 copies and their results are rounded back.
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16))


class Genred(GenredBase):
    """A compiled reduction `a_i = Red_j F(x_i, y_j)` (axis=1) or over i (axis=0).

    `formula` is KeOps text (with `aliases` such as "X = Vi(3)") or a tessel.Formula;
    `reduction_op` is one of Sum, Min, Max, ArgMin, ArgMax, Min_ArgMin, Max_ArgMax, KMin,
    ArgKMin, KMin_ArgKMin (K in `opt_arg`), LogSumExp and SumSoftMaxWeight (weights in
    `formula2`). Calling it with one array per alias returns the (N, dim) result, or a tuple
    (values, int64 indices) for the two-output reductions.
    """


    _kind = "numpy"

    def __call__(self, *args, backend=None, ni=None, nj=None, ranges=None):
        spec = self._spec
        arrays, call = spec.prepare(args, "Genred", backend, ni, nj, ranges)
        out = self._bound(arrays, *call)
        if not arrays and args:  # a formula that reads no array: the call's dtype
            dtype = _one_dtype({np.asarray(a).dtype for a in args}, "Genred")
            out = [o if o.dtype == np.int64 else o.astype(dtype) for o in out]
        return out[0] if len(out) == 1 else tuple(out)


def _one_dtype(dtypes, who):
    """The one dtype of a call's arrays (float32 or float64), or a TypeError naming them."""
    if len(dtypes) > 1 or not dtypes <= set(_DTYPES):
        raise TypeError(f"{who}: the arrays have dtypes "
                        f"{', '.join(sorted(str(d) for d in dtypes))}; expected one of "
                        "float32, float64 or float16")
    return next(iter(dtypes), None)


class KernelSolve(KernelSolveBase):
    __doc__ = KernelSolveBase.__doc__ + """
    On NumPy arrays (float32 or float64, one dtype). `KernelSolve.gradient` gives the implicit
    gradient of a solve (what tessel.torch.KernelSolve's backward computes).
    """

    def _arrays(self, args):
        self._spec.check_count(args, self._who)
        arrays = list(args[: self._spec.n_core])
        dtypes = set()
        for k, a in enumerate(arrays):
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{self._who}: argument {k} is a {type(a).__name__}; expected a "
                                "numpy.ndarray")
            dtypes.add(a.dtype)
        return arrays, str(_one_dtype(dtypes, self._who))

    def __call__(self, *args, alpha=0.0, tol=None, atol=0.0, maxiter=None,
                 on_nonconvergence="warn", backend=None, ranges=None, stats=None):
        arrays, dtype = self._arrays(args)
        opts, mode = self._settings(args, dtype, alpha, tol, atol, maxiter, on_nonconvergence,
                                    backend, ranges)
        b = arrays[self.var]
        x = np.empty(b.shape, dtype=b.dtype)
        self._report(_core.kernel_solve(self.reduction, self.var, arrays, x, **opts), mode, stats)
        return x

    def gradient(self, *args, x, grad_x, wrt=None, alpha=0.0, tol=None, atol=0.0, maxiter=None,
                 on_nonconvergence="warn", backend=None, ranges=None, stats=None):
        """Gradients of <grad_x, x> for the solution x of a call with the same arguments: a dict
        {variable index: gradient} for the variables in `wrt` (default: all), and "alpha"."""
        arrays, dtype = self._arrays(args)
        opts, mode = self._settings(args, dtype, alpha, tol, atol, maxiter, on_nonconvergence,
                                    backend, ranges)
        used = [i for i, _, _ in self.reduction.inputs()]
        who = f"{self._who}.gradient"
        wrt = used if wrt is None else [check_int(k, f"wrt[{n}] (a variable index)", who)
                                        for n, k in enumerate(wrt)]
        bad = [k for k in wrt if k not in used]
        if bad:
            raise ValueError(f"{self._who}.gradient: variables {bad} do not occur in the formula")
        outs = [np.zeros_like(arrays[k]) for k in wrt]
        rep = _core.kernel_solve_grad(self.reduction, self.var, arrays, x, grad_x, wrt, outs,
                                      **opts)
        self._report(rep, mode, stats)
        return {**dict(zip(wrt, outs)), "alpha": rep[3]}


def _as_real(x):
    """The float view (..., 2D) of a complex (..., D) array: a copy only when its last axis is
    strided."""
    if x.strides[-1] != x.itemsize:
        x = np.ascontiguousarray(x)
    return x.view(np.float32 if x.dtype == np.complex64 else np.float64)


def _as_complex(a):
    a = a if a.strides[-1] == a.itemsize else np.ascontiguousarray(a)
    return a.view(np.complex64 if a.dtype == np.float32 else np.complex128)


register_adapter(ArrayAdapter(np.ndarray, "NumPy arrays", _DTYPES,
                              lambda values, dtype: np.array(values, dtype=dtype), Genred,
                              KernelSolve, (np.dtype(np.complex64), np.dtype(np.complex128)),
                              _as_real, _as_complex))


Genred.__doc__, KernelSolve.__doc__ = _docstrings.numpy_docs()
