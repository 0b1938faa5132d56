"""pykeops-style Genred, KernelSolve and generic_* shared by the NumPy and PyTorch front ends."""
import math

from ... import _core
from ..._genred import REDUCTIONS, _K_REDUCTIONS, alias_index, read_aliases, reduction_name

__all__ = ["GenredBase", "KernelSolveBase", "check_backend", "make_generic_ops"]

_CAT_TEXT = ("Vi", "Vj", "Pm")

# KeOps's "sum type" reductions: those whose state is a sum (dtype_acc and sum_scheme apply).
_SUM_LIKE = tuple(n for n, r in REDUCTIONS.items() if r["family"] in ("sum", "softmax"))
_CPU_BACKENDS = {"auto": None, "CPU": None, "compiled": "compiled", "interpreter": "interpreter"}
_GPU_BACKENDS = ("GPU", "GPU_1D", "GPU_2D", "GPU_1D_device", "GPU_1D_host", "GPU_2D_device",
                 "GPU_2D_host")


def complete_aliases(formulas, aliases, who):
    """The aliases followed by "Var(index,dim,cat)" for each variable that the formulas name as
    Var(...) and no alias declares: pykeops counts those among the call's arguments too, even
    when simplification removes them from the formula."""
    declared = read_aliases(aliases, who)
    known = {index for _, index, _, _ in declared}
    extra = []
    for f in formulas:
        if f is None:
            continue
        try:
            named = _core.named_variables(f, list(aliases))
        except ValueError as e:
            raise ValueError(f"{who}: {e}") from None
        for index, dim, cat in named:
            if index not in known:
                known.add(index)
                extra.append(f"Var({index},{dim},{cat})")
    return list(aliases) + extra


def check_backend(backend, who):
    """tessel's backend option for a pykeops backend string (None: tessel's default, which runs
    on the GPU of CUDA arrays and on the CPU otherwise). Every GPU backend is tessel's CUDA
    backend (host arrays are copied to the GPU, as pykeops's "_host" schemes do); without a usable
    GPU the reduction raises the core's "CUDA is not usable: <why>" error."""
    if backend in _CPU_BACKENDS:
        return _CPU_BACKENDS[backend]
    if backend in _GPU_BACKENDS:
        return "cuda"
    raise ValueError(f"{who}: invalid backend {backend!r}; expected one of 'auto', 'CPU', "
                     + ", ".join(repr(b) for b in _GPU_BACKENDS))


def accumulation_options(reduction_op, dtype_acc, use_double_acc, sum_scheme, who):
    """KeOps's dtype_acc / use_double_acc / sum_scheme rules, as tessel options."""
    if dtype_acc != "auto" and use_double_acc:
        raise ValueError(f"{who}: you cannot set both options use_double_acc and dtype_acc")
    if use_double_acc:
        dtype_acc = "float64"
    if dtype_acc not in ("auto", "float32", "float64"):
        raise ValueError(f"{who}: dtype_acc {dtype_acc!r} is not 'auto', 'float32' or 'float64' "
                         "(tessel has no float16)")
    sum_like = reduction_op in _SUM_LIKE
    if dtype_acc != "auto" and not sum_like:
        raise ValueError(f"{who}: dtype_acc must be 'auto' for the {reduction_op} reduction (it "
                         "only applies to Sum, LogSumExp and SumSoftMaxWeight)")
    if sum_scheme not in ("auto", "direct_sum", "block_sum", "kahan_scheme"):
        raise ValueError(f"{who}: invalid sum_scheme {sum_scheme!r}; expected 'auto', "
                         "'direct_sum', 'block_sum' or 'kahan_scheme'")
    if sum_scheme in ("block_sum", "kahan_scheme") and not sum_like:
        raise ValueError(f"{who}: sum_scheme={sum_scheme!r} is only valid for sum type "
                         "reductions (Sum, LogSumExp, SumSoftMaxWeight)")
    return dict(dtype_acc=dtype_acc, sum_scheme=sum_scheme)


class GenredBase:
    """pykeops Genred: `Genred(formula, aliases, reduction_op="Sum", axis=0, ...)`, called as
    `g(*args, backend="auto", device_id=-1, ranges=None, out=None)`.

    axis=0 reduces over i (the output is indexed by j), axis=1 over j. `ranges` (the 6 arrays of
    pykeops.torch.cluster.from_matrix) makes it block-sparse (not with batch dims). Index outputs
    are int64 and the multi-output reductions are laid out as in pykeops 2.x: Min_ArgMin /
    Max_ArgMax give (values, indices) of shape (N, D); KMin / ArgKMin / KMin_ArgKMin give
    (N, K, D), squeezed to (N, K) when D = 1. Subclasses set `_frontend` (tessel.torch or
    tessel.numpy).
    """

    _frontend = None
    _who = "Genred"

    def __init__(self, formula, aliases, reduction_op="Sum", axis=0, dtype=None, opt_arg=None,
                 formula2=None, cuda_type=None, dtype_acc="auto", use_double_acc=False,
                 sum_scheme="auto", enable_chunks=True, rec_multVar_highdim=False,
                 use_fast_math=True):
        who = self._who
        read_aliases(aliases, who)
        self._init_args = dict(formula=formula, aliases=list(aliases), reduction_op=reduction_op,
                               axis=axis, opt_arg=opt_arg, formula2=formula2,
                               dtype_acc=dtype_acc, use_double_acc=use_double_acc,
                               sum_scheme=sum_scheme)
        try:  # the core's table of reductions and their KeOps spellings
            op = reduction_name(reduction_op, who)
        except ValueError as e:
            raise NotImplementedError(f"{e} (the KeOps-internal Max_SumShiftExp* reductions are "
                                      "not offered)") from None
        if reduction_op == "LogSumExpWeight" and not formula2:
            raise ValueError(f"{who}: LogSumExpWeight needs a weight formula (formula2)")
        if axis not in (0, 1):
            raise ValueError(f"{who}: axis should be 0 (reduction over i) or 1 (reduction over "
                             f"j), got {axis!r}")
        if not isinstance(formula, str):
            raise TypeError(f"{who}: formula must be a string, got {type(formula).__name__}")
        self.reduction_op, self.axis, self.opt_arg = reduction_op, axis, opt_arg
        self.formula, self.formula2 = formula, formula2
        options = accumulation_options(op, dtype_acc, use_double_acc, sum_scheme, who)
        self.aliases = complete_aliases([formula, formula2], aliases, who)
        self._parsed = read_aliases(self.aliases, who)  # [(name, index, dim, cat)]
        self.nargs = len(self._parsed)
        names = self.aliases
        k = opt_arg if op in _K_REDUCTIONS else None
        if op not in _K_REDUCTIONS and opt_arg:
            raise ValueError(f"{who}: opt_arg is only used by the KMin, ArgKMin and KMin_ArgKMin "
                             f"reductions, got opt_arg={opt_arg!r} with {reduction_op}")
        dim = _core.parse(formula, names).dim
        # tessel's K-reductions take a scalar formula; KeOps reduces each component separately.
        if op in _K_REDUCTIONS and dim > 1:
            formulas = [f"Elem({formula},{d})" for d in range(dim)]
        else:
            formulas = [formula]
        Genred = self._frontend.Genred
        self._genreds = [Genred(f, names, reduction_op=op, axis=axis, opt_arg=k,
                                formula2=formula2, **options) for f in formulas]
        self._op, self._dim = op, dim
        # Sizes the core cannot infer (a formula without i- or j-variable) come from the aliases,
        # else are 1, as in pykeops.
        used = {c for _, c, _ in self._genreds[0]._spec.reduction.inputs()}
        self._size_from = {}
        for cat, key in ((0, "ni"), (1, "nj")):
            if cat not in used:
                self._size_from[key] = next((p for _, p, _, c in self._parsed if c == cat), None)

    # -- library hooks -------------------------------------------------------------------------
    def _stack(self, arrays):
        raise NotImplementedError

    def _copy_into(self, out, result):
        raise NotImplementedError

    # -- call ----------------------------------------------------------------------------------
    def __call__(self, *args, backend="auto", device_id=-1, ranges=None, out=None):
        who = self._who
        tb = check_backend(backend, who)
        if len(args) != self.nargs:
            raise ValueError(f"{who}: invalid number of arguments: expected {self.nargs} (one "
                             f"per alias: {', '.join(self.aliases)}), got {len(args)}")
        kw = {}
        if tb is not None:
            kw["backend"] = tb
        if ranges is not None:
            kw["ranges"] = ranges
        for key, pos in self._size_from.items():
            kw[key] = 1 if pos is None else int(args[pos].shape[-2])
        results = [g(*args, **kw) for g in self._genreds]
        if len(results) == 1:
            res = results[0]
        elif isinstance(results[0], tuple):
            res = tuple(self._stack([r[k] for r in results]) for k in range(2))
        else:
            res = self._stack(results)
        if out is not None:
            if isinstance(res, tuple):
                raise ValueError(f"{who}: out= is not supported for the two-output reduction "
                                 f"{self.reduction_op}")
            return self._copy_into(out, res)
        return res

    def __repr__(self):
        return (f"{type(self).__module__}.{type(self).__name__}({self.formula!r}, "
                f"{self.aliases}, reduction_op={self.reduction_op!r}, axis={self.axis})")

    def __getstate__(self):
        return dict(self._init_args)

    def __setstate__(self, state):
        self.__init__(**state)


class KernelSolveBase:
    """pykeops KernelSolve: `KernelSolve(formula, aliases, varinvalias, axis=0, ...)` solves
    (alpha * Id + K) a = b, where `formula` is linear in the variable `varinvalias` and
    K(v) = Sum reduction of formula; called as `ks(*args, backend="auto", device_id=-1,
    alpha=1e-10, eps=1e-6, ranges=None)` with b at the position of `varinvalias`.
    """

    _genred_class = None
    _who = "KernelSolve"

    def __init__(self, formula, aliases, varinvalias, axis=0, dtype_acc="auto",
                 use_double_acc=False, sum_scheme="auto", enable_chunks=True,
                 rec_multVar_highdim=None, dtype=None, cuda_type=None, use_fast_math=True):
        read_aliases(aliases, self._who)
        self._init_args = dict(formula=formula, aliases=list(aliases), varinvalias=varinvalias,
                               axis=axis, dtype_acc=dtype_acc, use_double_acc=use_double_acc,
                               sum_scheme=sum_scheme)
        self.genred = self._genred_class(formula, list(aliases), reduction_op="Sum", axis=axis,
                                         dtype_acc=dtype_acc, use_double_acc=use_double_acc,
                                         sum_scheme=sum_scheme)
        self.formula, self.aliases, self.axis = formula, self.genred.aliases, axis
        if not isinstance(varinvalias, str):
            raise TypeError(f"{self._who}: varinvalias must be an alias name or 'Var(index,dim,"
                            f"cat)', got {type(varinvalias).__name__}")
        pos = alias_index(self.aliases, varinvalias, self._who)
        found = [p for p in self.genred._parsed if p[1] == pos]
        if not found:
            raise ValueError(f"{self._who}: {varinvalias!r} is not one of the aliases "
                             f"{self.aliases}")
        _, _, dim, cat = found[0]
        if cat != axis:
            raise ValueError(f"{self._who}: the unknown {varinvalias!r} is a {_CAT_TEXT[cat]} "
                             f"variable, but axis={axis} reduces over "
                             f"{'ij'[axis]}: the unknown must be indexed by the reduced index")
        self.varinvpos = pos

    def _solver(self):
        """The tessel KernelSolve on the translated formula (built once, on first call)."""
        if getattr(self, "_tessel_solver", None) is None:
            spec = self.genred._genreds[0]._spec.args
            self._tessel_solver = self._genred_class._frontend.KernelSolve(
                spec["formula"], spec["aliases"], self.varinvpos, axis=spec["axis"],
                dtype_acc=spec["dtype_acc"], sum_scheme=spec["sum_scheme"])
        return self._tessel_solver

    def __call__(self, *args, backend="auto", device_id=-1, alpha=1e-10, eps=1e-6, ranges=None):
        return self._solve(args, backend, alpha, eps, ranges)

    def _solve(self, args, backend, alpha, eps, ranges):
        """pykeops's stopping rule |r|^2 < size eps^2, i.e. an absolute tolerance."""
        tb = check_backend(backend, self._who)
        if len(args) != self.genred.nargs:
            raise ValueError(f"{self._who}: invalid number of arguments: expected "
                             f"{self.genred.nargs}, got {len(args)}")
        size = math.prod(args[self.varinvpos].shape)
        return self._solver()(*args, alpha=alpha, tol=0.0, atol=eps * math.sqrt(size),
                              maxiter=max(100, 10 * size), backend=tb, ranges=ranges)

    def __getstate__(self):
        return dict(self._init_args)

    def __setstate__(self, state):
        self.__init__(**state)


def make_generic_ops(Genred):
    """generic_sum / generic_logsumexp / generic_argmin / generic_argkmin for a Genred class."""

    def _axis(output, who):
        if not isinstance(output, str):
            raise TypeError(f"{who}: the output must be an alias string such as 'a = Vi(3)', got "
                            f"{type(output).__name__}")
        (_, _, dim, cat), = read_aliases([output], who)
        if cat == 2:
            raise ValueError(f"{who}: the output {output!r} must be a Vi or Vj variable")
        return 1 - cat, dim

    def _checked(g, output, dim, who):
        """pykeops ignores a wrong output dim; tessel says so rather than return another shape."""
        have = g._genreds[0]._spec.reduction.output_dim(0)
        if dim != have:
            raise ValueError(f"{who}: the output {output!r} declares dim {dim} but the formula "
                             f"{g.formula!r} gives dim {have}")
        return g

    def generic_sum(formula, output, *aliases, **kwargs):
        """Genred with a Sum reduction; `output` ("a = Vi(dim)") says the output's category and
        dim (which must be the formula's)."""
        axis, dim = _axis(output, "generic_sum")
        g = Genred(formula, list(aliases), reduction_op="Sum", axis=axis, **kwargs)
        return _checked(g, output, dim, "generic_sum")

    def generic_logsumexp(formula, output, *aliases, **kwargs):
        """Genred with a LogSumExp reduction; `output` is "a = Vi(1)" or "a = Vj(1)"."""
        axis, dim = _axis(output, "generic_logsumexp")
        g = Genred(formula, list(aliases), reduction_op="LogSumExp", axis=axis, **kwargs)
        return _checked(g, output, dim, "generic_logsumexp")

    def generic_argmin(formula, output, *aliases, **kwargs):
        """Genred with an ArgMin reduction (int64 indices)."""
        axis, dim = _axis(output, "generic_argmin")
        g = Genred(formula, list(aliases), reduction_op="ArgMin", axis=axis, **kwargs)
        return _checked(g, output, dim, "generic_argmin")

    def generic_argkmin(formula, output, *aliases, **kwargs):
        """Genred with an ArgKMin reduction; K is the dim of `output` ("a = Vi(K)")."""
        axis, k = _axis(output, "generic_argkmin")
        return Genred(formula, list(aliases), reduction_op="ArgKMin", axis=axis, opt_arg=k,
                      **kwargs)

    return generic_sum, generic_logsumexp, generic_argmin, generic_argkmin
