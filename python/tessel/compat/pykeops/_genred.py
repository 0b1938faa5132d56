"""pykeops-style Genred, KernelSolve and generic_* shared by the NumPy and PyTorch front ends."""
import math

from ... import _core
from ..._genred import (_K_REDUCTIONS, alias_index, check_aliases, check_formula, check_text,
                        normalize_options, read_aliases, read_texts, reduction_name)

__all__ = ["GenredBase", "KernelSolveBase", "make_generic_ops"]

_CAT_TEXT = ("Vi", "Vj", "Pm")



def call_options(who, backend, device_id, **more):
    """The tessel call keywords for pykeops's backend / device_id (and solve) options, read by
    the core's normaliser; nothing for the defaults, so that a plain call does no work here."""
    if backend == "auto" and device_id == -1 and not more:
        return {}
    return normalize_options(who, dict(backend=backend, device_id=device_id, **more),
                             _core.SOLVE_OPTIONS if more else _core.CALL_OPTIONS)


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
        check_aliases(aliases, who)
        self._init_args = dict(formula=formula, aliases=list(aliases), reduction_op=reduction_op,
                               axis=axis, opt_arg=opt_arg, formula2=formula2,
                               dtype_acc=dtype_acc, use_double_acc=use_double_acc,
                               sum_scheme=sum_scheme, enable_chunks=enable_chunks,
                               use_fast_math=use_fast_math)
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
        # KeOps text, or (tessel's LazyTensors hand it over) a tessel.Formula, read as it is.
        check_formula(formula, "formula", who)
        if formula2 is not None:
            check_formula(formula2, "formula2", who)
        self.reduction_op, self.axis, self.opt_arg = reduction_op, axis, opt_arg
        self._formulas = (formula, formula2)
        # Every pykeops option goes to the core's normaliser (the ignored ones too, so that their
        # types are checked).
        options = dict(dtype=dtype, cuda_type=cuda_type, dtype_acc=dtype_acc,
                       use_double_acc=use_double_acc, sum_scheme=sum_scheme,
                       enable_chunks=enable_chunks, rec_multVar_highdim=rec_multVar_highdim,
                       use_fast_math=use_fast_math)
        k = opt_arg if op in _K_REDUCTIONS else None
        if op not in _K_REDUCTIONS and opt_arg:
            raise ValueError(f"{who}: opt_arg is only used by the KMin, ArgKMin and KMin_ArgKMin "
                             f"reductions, got opt_arg={opt_arg!r} with {reduction_op}")
        # One pass of the core's parser; the tessel Genreds behind this one take its formulas.
        # Variables that only the text names (simplified away, as Grad(x, y, e) = 0 drops them)
        # still take an argument, as in pykeops: they join the aliases as Var(index,dim,cat).
        aliases = check_aliases(aliases, who)
        texts = [t for t in (formula, formula2) if isinstance(t, str)]
        declared, parsed, named = read_texts(texts, aliases, who)
        parsed = iter(parsed)
        f = formula if isinstance(formula, _core.Formula) else next(parsed)
        w = [] if formula2 is None else [formula2 if isinstance(formula2, _core.Formula)
                                         else next(parsed)]
        have = {index for _, index, _, _ in declared}
        self.aliases = aliases + [f"Var({i},{d},{c})" for i, d, c in named if i not in have]
        Genred = self._frontend.Genred
        self._genreds = [Genred(f, self.aliases, reduction_op=op, axis=axis, opt_arg=k,
                                formula2=w[0] if w else None, **options)]
        # The core gives a K-reduction of a formula of dim D > 1 as (N, K * D), column k * D + c
        # for component c's k-th best; pykeops shows it as (N, K, D).
        self._unflatten = (k, f.dim) if op in _K_REDUCTIONS and f.dim > 1 else None
        spec = self._genreds[0]._spec
        self.nargs = spec.n_inputs
        # A formula with no i- (j-) variable at all has 1 row along i (j), as in pykeops.
        cats = {c for c, _ in spec.slots.values()}
        self._size_from = {key: 1 for cat, key in ((0, "ni"), (1, "nj")) if cat not in cats}

    @property
    def formula(self):
        """The formula's text (a tessel.Formula given is printed when asked for, not before)."""
        return str(self._formulas[0])

    @property
    def formula2(self):
        """The weight formula's text, or None."""
        return None if self._formulas[1] is None else str(self._formulas[1])

    # -- library hooks -------------------------------------------------------------------------
    def _copy_into(self, out, result):
        raise NotImplementedError

    # -- call ----------------------------------------------------------------------------------
    def __call__(self, *args, backend="auto", device_id=-1, ranges=None, out=None):
        """The reduction of `args` (one array per alias): see the class for its shapes."""
        who = self._who
        kw = call_options(who, backend, device_id)
        kw.pop("device_id", None)
        if len(args) != self.nargs:
            raise ValueError(f"{who}: invalid number of arguments: expected {self.nargs} (one "
                             f"per alias: {', '.join(self.aliases)}), got {len(args)}")
        if ranges is not None:
            kw["ranges"] = ranges
        kw.update(self._size_from)
        res = self._genreds[0](*args, **kw)
        if self._unflatten is not None:
            res = tuple(r.reshape(*r.shape[:-1], *self._unflatten) for r in res) \
                if isinstance(res, tuple) else res.reshape(*res.shape[:-1], *self._unflatten)
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
        options = dict(dtype_acc=dtype_acc, use_double_acc=use_double_acc, sum_scheme=sum_scheme,
                       enable_chunks=enable_chunks, rec_multVar_highdim=rec_multVar_highdim,
                       dtype=dtype, cuda_type=cuda_type, use_fast_math=use_fast_math)
        self._init_args = dict(formula=formula, aliases=list(aliases), varinvalias=varinvalias,
                               axis=axis, **options)
        self.genred = self._genred_class(formula, list(aliases), reduction_op="Sum", axis=axis,
                                         **options)
        self.aliases, self.axis = self.genred.aliases, axis
        if not isinstance(varinvalias, str):
            raise TypeError(f"{self._who}: varinvalias must be an alias name or 'Var(index,dim,"
                            f"cat)', got {type(varinvalias).__name__}")
        pos = alias_index(self.aliases, varinvalias, self._who)
        slots = self.genred._genreds[0]._spec.slots
        if pos not in slots:
            raise ValueError(f"{self._who}: {varinvalias!r} is not one of the aliases "
                             f"{self.aliases}")
        cat, dim = slots[pos]
        if cat != axis:
            raise ValueError(f"{self._who}: the unknown {varinvalias!r} is a {_CAT_TEXT[cat]} "
                             f"variable, but axis={axis} reduces over "
                             f"{'ij'[axis]}: the unknown must be indexed by the reduced index")
        self.varinvpos = pos

    @property
    def formula(self):
        """The formula's text."""
        return self.genred.formula

    def _solver(self):
        """The tessel KernelSolve on the translated formula (built once, on first call)."""
        if getattr(self, "_tessel_solver", None) is None:
            spec = self.genred._genreds[0]._spec._args  # its Formula: no text parsed again
            self._tessel_solver = self._genred_class._frontend.KernelSolve(
                spec["formula"], spec["aliases"], self.varinvpos, axis=spec["axis"],
                **spec["options"])
        return self._tessel_solver

    def __call__(self, *args, backend="auto", device_id=-1, alpha=1e-10, eps=1e-6, ranges=None):
        """pykeops's stopping rule |r|^2 < size eps^2, i.e. an absolute tolerance."""
        who = self._who
        # alpha may be a tensor (tessel learns it; tessel's KernelSolve checks it), else a number.
        more = dict(eps=eps) if hasattr(alpha, "shape") else dict(eps=eps, alpha=alpha)
        kw = call_options(who, backend, device_id, **more)
        if len(args) != self.genred.nargs:
            raise ValueError(f"{who}: invalid number of arguments: expected "
                             f"{self.genred.nargs}, got {len(args)}")
        size = math.prod(args[self.varinvpos].shape)
        return self._solver()(*args, alpha=alpha, tol=0.0,
                              atol=kw["eps"] * math.sqrt(size), maxiter=max(100, 10 * size),
                              backend=kw.get("backend"), ranges=ranges)

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
        check_text(output, "output", who)
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
