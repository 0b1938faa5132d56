"""pykeops's callable LazyTensors: reductions and solves built with call=False or symbolic variables.

A reduction (or solve) of a LazyTensor runs at once unless it has symbolic variables or was built
with call=False; then, as in pykeops, it is an object that prints like a LazyTensor (formula,
symbolic variables, shape, reduction) and that a call evaluates: `red(*arrays, **call_options)`
with one array per symbolic variable, `cfun()` for a solve whose right-hand side is known. Its
Genred / KernelSolve is `callfun`, as in pykeops.
"""
import atexit

from ... import _core
from ... import lazytensor as _tl
from ..._genred import check_ranges, normalize_options
from ..._lru import LruCache

__all__ = ["PendingReduction", "PendingSolve", "describe", "split_options", "call_formulas",
           "symbolic_of", "clear_caches"]

INIT_OPTIONS = ("dtype_acc", "use_double_acc", "sum_scheme", "enable_chunks", "use_fast_math")
CALL_OPTIONS = ("backend", "device_id", "ranges", "out")
# LazyTensor.solve's call options: KernelSolve's call takes no `out` (as in pykeops).
SOLVE_CALL_OPTIONS = ("backend", "device_id", "ranges", "alpha", "eps")

# The Genred objects of the reductions asked for, least recently used dropped first.
_genred_cache = LruCache(1024)
atexit.register(_genred_cache.clear)  # as tessel.lazytensor's: nothing core left at exit


def _cached_genred(cls, f, f2, aliases, op, axis, k, init):
    """The pykeops Genred of core formulas `f`, `f2` (hash-consed: equal formulas are one object,
    so they key the cache without being printed)."""
    key = (cls, f, f2, aliases, op, axis, k, init)
    return _genred_cache.get_or_make(
        key, lambda: cls(f, list(aliases), reduction_op=op, axis=axis, opt_arg=k, formula2=f2,
                         **dict(init)))


def clear_caches():
    _genred_cache.clear()


def split_options(who, kwargs, call_keys=CALL_OPTIONS):
    """pykeops's split of a reduction's keywords into Genred's build and call options. The core's
    normaliser checks their types and values here, so that an error names the method called
    (`K.__matmul__(v, sum_scheme=...)`) rather than the Genred built behind it."""
    init, call = {}, {}
    for key, value in kwargs.items():
        if key in INIT_OPTIONS:
            init[key] = value
        elif key in call_keys:
            call[key] = value
        else:
            raise TypeError(f"LazyTensor.{who}: unexpected keyword argument {key!r}; accepted: "
                            + ", ".join(INIT_OPTIONS + call_keys + ("call",)))
    if init:
        normalize_options(f"LazyTensor.{who}", init, _core.BUILD_OPTIONS)
    # A tensor alpha is learnt (KernelSolve checks it); the normaliser takes numbers.
    checked = {k: v for k, v in call.items() if not (k == "alpha" and hasattr(v, "shape"))}
    if checked:
        normalize_options(f"LazyTensor.{who}", checked, _core.CALL_OPTIONS | _core.SOLVE_OPTIONS)
    check_ranges(call.get("ranges"), f"LazyTensor.{who}")
    return init, call


def symbolic_of(lt):
    """(index, dim, cat) of each placeholder (symbolic variable) of a tessel LazyTensor."""
    return tuple((v.placeholder, v.dim, v.cat) for v in lt.variables if v.placeholder is not None)


def call_formulas(lts):
    """The formulas of tessel LazyTensors over one numbering in which each placeholder keeps its
    index and the other variables follow them; returns (core Formulas, the other variables,
    their aliases, the number of symbolic arguments). Nothing is printed: the pykeops Genred
    takes the Formulas as they are."""
    formulas, variables = _tl.joint(*lts)
    symbolic = [v.placeholder for v in variables if v.placeholder is not None]
    nsym = 1 + max(symbolic) if symbolic else 0
    index, arrays = [], []
    for v in variables:
        if v.placeholder is not None:
            index.append(v.placeholder)
        else:
            index.append(nsym + len(arrays))
            arrays.append(v)
    relabelled = [f.relabel(index) for f in formulas]
    aliases = [f"Var({nsym + k},{v.dim},{v.cat})" for k, v in enumerate(arrays)]
    return relabelled, arrays, aliases, nsym


def describe(formula, symbolic, shape, reduction=None):
    """pykeops's text of a LazyTensor: formula (in the numbering of the call's arguments),
    symbolic variables, shape and, for a pending reduction, (op, axis, formula2, opt_arg)."""
    s = f"KeOps LazyTensor (tessel)\n    formula: {formula}"
    if symbolic:
        s += "\n    symbolic variables: " + ", ".join(f"Var{v}" for v in sorted(set(symbolic)))
    s += f"\n    shape: {shape}"
    if reduction is not None:
        op, axis, formula2, opt_arg = reduction
        s += f"\n    reduction: {op} (axis={axis})"
        if formula2 is not None:
            s += f"\n        formula2: {formula2}"
        if opt_arg is not None:
            s += f"\n        opt_arg: {opt_arg}"
    return s


class PendingReduction:
    """A reduction of a LazyTensor with symbolic variables (or built with call=False): calling
    it with one array per symbolic variable (in index order) runs the Genred."""

    def __init__(self, lt_cls, lts, op, axis, k, init, call, shape=None):
        formulas, self._vars, self.aliases, self._nsym = call_formulas(lts)
        self._cls, self._f = lt_cls, formulas[0]
        self._f2 = formulas[1] if len(formulas) > 1 else None
        self.reduction_op, self.axis, self.opt_arg = op, axis, k
        self._init, self.kwargs, self.shape = init, dict(call), shape
        self.symbolic_variables = tuple(sorted({s for lt in lts for s in symbolic_of(lt)}))

    @property
    def formula(self):
        """The formula's text, as pykeops shows it (printed when asked for)."""
        return str(self._f)

    @property
    def formula2(self):
        return None if self._f2 is None else str(self._f2)

    def _genred(self, init=()):
        return _cached_genred(self._cls._genred_class, self._f, self._f2,
                              tuple(self.aliases), self.reduction_op, self.axis, self.opt_arg,
                              tuple(sorted({**dict(self._init), **dict(init)}.items())))

    @property
    def callfun(self):
        """The Genred a call runs (as pykeops's `callfun`)."""
        return self._genred()

    def __call__(self, *args, **kwargs):
        init, call = split_options("__call__", kwargs)
        call = {**self.kwargs, **call}
        if len(args) != self._nsym:
            raise ValueError(f"LazyTensor reduction: expected {self._nsym} argument(s), one per "
                             f"symbolic variable, got {len(args)}")
        dtypes = {v.array.dtype for v in self._vars if v.source is not None}
        dtype = dtypes.pop() if dtypes else (args[0].dtype if args else None)
        if dtype is None:
            raise ValueError("LazyTensor reduction: the formula holds no array, so its dtype is "
                             "unknown; build it from at least one array")
        arrays = [self._cls._materialize(v, dtype) for v in self._vars]
        return self._genred(init.items())(*args, *arrays, **call)

    def __str__(self):
        return describe(self.formula, self.symbolic_variables, self.shape,
                        (self.reduction_op, self.axis, self.formula2, self.opt_arg))

    __repr__ = __str__


class PendingSolve:
    """LazyTensor.solve built with call=False, or with a symbolic right-hand side: a call runs
    the conjugate gradient (pykeops's callable solve). `cfun()` solves for the b given to solve;
    with a symbolic b (`Vi(0, D)`), `cfun(b)` takes it. Call options: alpha, eps, backend,
    device_id, ranges (those given to solve are the defaults)."""

    reduction_op = "Solve"

    def __init__(self, lt_cls, kernel, b, dim, axis, init, call, shape):
        """kernel: the tessel LazyTensor K of dim 1; the unknown, Var(0, dim, axis), is indexed
        by the reduced index `axis`; b: the right-hand side, None when the call gives it."""
        unknown = _tl.Var(0, dim, axis)
        (self._f,), self._vars, self.aliases, _ = call_formulas([kernel * unknown])
        self._cls, self._b, self.axis, self.shape = lt_cls, b, axis, shape
        self.kwargs = dict(call)
        self.symbolic_variables = ((0, dim, axis),)
        # Built once per formula and options, as the reductions' Genreds are: a solve's call
        # path parses nothing.
        cls = lt_cls._kernelsolve_class
        key = (cls, self._f, tuple(self.aliases), dim, axis, tuple(sorted(dict(init).items())))
        self.callfun = _genred_cache.get_or_make(
            key, lambda: cls(self._f, self.aliases, f"Var(0,{dim},{axis})", axis=axis, **init))

    @property
    def formula(self):
        """The formula's text, as pykeops shows it (printed when asked for)."""
        return str(self._f)

    def __call__(self, *args, **kwargs):
        who = "solve(call=False)"
        init, call = split_options(who, kwargs, SOLVE_CALL_OPTIONS)
        if init:
            raise TypeError(f"LazyTensor.{who}: {', '.join(init)} configure the solver: pass "
                            "them to solve(), not to its call")
        want = 0 if self._b is not None else 1
        if len(args) != want:
            raise ValueError(f"LazyTensor.{who}: expected {want} argument(s) "
                             + ("(b was given to solve)" if want == 0 else
                                "(b, the right-hand side of the symbolic variable Var"
                                f"{self.symbolic_variables[0]})") + f", got {len(args)}")
        b = self._b if self._b is not None else args[0]
        call = {**self.kwargs, **call}
        alpha, eps = call.pop("alpha", 1e-10), call.pop("eps", 1e-6)
        arrays = [self._cls._materialize(v, b.dtype) for v in self._vars]
        out = self.callfun(b.reshape(-1, 1) if b.ndim == 1 else b, *arrays, alpha=alpha,
                           eps=eps, **call)
        return out.reshape(-1) if b.ndim == 1 else out

    def __str__(self):
        return describe(self.formula, self.symbolic_variables, self.shape,
                        (self.reduction_op, self.axis, None, None))

    __repr__ = __str__
