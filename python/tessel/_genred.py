"""What NumPy and PyTorch Genred share: building the reduction, checking calls, options."""
import atexit
import numbers

from . import _core

_K_REDUCTIONS = ("KMin", "ArgKMin", "KMin_ArgKMin")
_SUM_SCHEMES = {"auto": "block", "block_sum": "block", "block": "block",
                "kahan_scheme": "kahan", "kahan": "kahan", "direct_sum": "direct",
                "direct": "direct"}
_CATEGORY = {0: "Vi", 1: "Vj", 2: "Pm"}
_INT_MAX, _INT64_MAX = 2**31 - 1, 2**63 - 1


def check_int(value, name, who, low=0, high=_INT64_MAX):
    """An integer argument: TypeError for a non-integer (floats and bools included), ValueError
    outside [low, high]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{who}: {name} must be an integer, got {type(value).__name__} "
                        f"{value!r}")
    if not low <= value <= high:
        raise ValueError(f"{who}: {name} must be in [{low}, {high}], got {value}")
    return int(value)


def call_sizes(ni, nj, who):
    """The ni / nj call options for the core (-1: inferred from the i / j inputs)."""
    return dict(ni=-1 if ni is None else check_int(ni, "ni (the number of i rows)", who),
                nj=-1 if nj is None else check_int(nj, "nj (the number of j rows)", who))


def read_aliases(aliases, who):
    """The aliases as the core's parser reads them: [(name or "", index, dim, category)], the
    category 0 = i, 1 = j, 2 = parameter. Every front end reads aliases through this."""
    if isinstance(aliases, str) or not isinstance(aliases, (list, tuple)):
        raise TypeError(f"{who}: aliases must be a list of strings such as ['X = Vi(3)', "
                        f"'Y = Vj(3)'], got {type(aliases).__name__}")
    for k, a in enumerate(aliases):
        if not isinstance(a, str):
            raise TypeError(f"{who}: aliases[{k}] must be a string such as 'X = Vi(3)', got "
                            f"{type(a).__name__}")
    try:
        return _core.parse_aliases(list(aliases))
    except ValueError as e:
        raise ValueError(f"{who}: {_plain(e)}") from None


def _plain(e):
    """A core error message without the core's own "tessel::parse: " prefix."""
    m = str(e)
    return m.split(": ", 1)[1] if m.startswith("tessel::") else m


def reduction_name(name, who):
    """tessel's name of a reduction given by any of its KeOps spellings ("Min_ArgMin",
    "MinArgMin", "LogSumExpWeight", ...); the core's table is the only one."""
    if not isinstance(name, str):
        raise TypeError(f"{who}: reduction_op must be a string such as 'Sum', got "
                        f"{type(name).__name__}")
    try:
        return _core.reduction_name(name)
    except ValueError as e:
        raise ValueError(f"{who}: reduction_op {name!r}: {_plain(e)}") from None


def alias_index(aliases, which, who):
    """The variable index that `which` stands for: an alias name ("B"), or an alias text of its
    own ("Var(2,3,1)", "Vj(2,3)")."""
    declared = read_aliases(aliases, who)
    for name, index, _, _ in declared:
        if name and name == which.strip():
            return index
    try:
        (_, index, _, _), = _core.parse_aliases([which])
        return index
    except ValueError:
        raise ValueError(f"{who}: {which!r} is neither one of the alias names "
                         f"{[a[0] for a in declared if a[0]]} nor a variable such as "
                         "'Var(2,3,1)'") from None


class GenredSpec:
    """The reduction behind a Genred object, rebuilt from its arguments (which pickle)."""

    def __init__(self, formula, aliases, reduction_op="Sum", axis=1, opt_arg=None,
                 formula2=None, dtype_acc="auto", sum_scheme="auto", backend="auto",
                 who="Genred"):
        declared = read_aliases(aliases, who)
        reduction_op = reduction_name(reduction_op, who)
        check_int(axis, "axis (0: reduce over i, 1: reduce over j)", who, 0, 1)
        if reduction_op in _K_REDUCTIONS:
            if opt_arg is None:
                raise ValueError(f"{who}: {reduction_op} needs opt_arg = K, a positive integer")
            check_int(opt_arg, f"opt_arg (the K of {reduction_op})", who, 1, _INT_MAX)
        elif opt_arg is not None:
            raise ValueError(f"{who}: opt_arg is only used by {', '.join(_K_REDUCTIONS)}")
        if reduction_op == "SumSoftMaxWeight" and formula2 is None:
            raise ValueError(f"{who}: SumSoftMaxWeight needs formula2 (the weights G)")
        if formula2 is not None and reduction_op not in ("LogSumExp", "SumSoftMaxWeight"):
            raise ValueError(f"{who}: formula2 is only used by LogSumExp and SumSoftMaxWeight")
        if sum_scheme not in _SUM_SCHEMES:
            raise ValueError(f"{who}: sum_scheme {sum_scheme!r} is not one of "
                             f"{', '.join(sorted(_SUM_SCHEMES))}")
        if dtype_acc not in ("auto", "float32", "float64"):
            raise ValueError(f"{who}: dtype_acc {dtype_acc!r} is not 'auto', 'float32' or "
                             "'float64'")
        # A tessel.Formula does not pickle; its text does (and parses back to the same formula).
        text = lambda f: str(f) if isinstance(f, _core.Formula) else f  # noqa: E731
        self.args = dict(formula=text(formula), aliases=list(aliases), reduction_op=reduction_op,
                         axis=axis, opt_arg=opt_arg, formula2=text(formula2), dtype_acc=dtype_acc,
                         sum_scheme=sum_scheme, backend=backend)
        aliases = list(aliases)
        f = formula if isinstance(formula, _core.Formula) else _core.parse(formula, aliases)
        w = None
        if formula2 is not None:
            w = formula2 if isinstance(formula2, _core.Formula) else _core.parse(formula2, aliases)
        self.reduction = _core.Reduction(reduction_op, f, axis, opt_arg or 0, w)
        self.options = dict(backend=backend, sum_scheme=_SUM_SCHEMES[sum_scheme],
                            accumulate_f64=dtype_acc == "float64")
        # Every variable the aliases declare is an input, even one the formula does not use, so
        # that calls take the arguments in alias order, as in KeOps.
        used = [i for i, _, _ in self.reduction.inputs()]
        self.n_core = max(used) + 1 if used else 0  # what the core reads: a prefix of the call
        self.n_inputs = max([self.n_core] + [index + 1 for _, index, _, _ in declared])
        self.used = set(used)

    def describe_inputs(self):
        return ", ".join(f"{_CATEGORY[c]}({i},{d})" for i, c, d in self.reduction.inputs())

    def check_count(self, args, who):
        if len(args) != self.n_inputs:
            raise ValueError(f"{who}: expected {self.n_inputs} arguments "
                             f"({self.describe_inputs()}), got {len(args)}")


_grad_cache = {}
# Emptied at exit: torch never frees an autograd graph alive then, and through its Function
# classes it keeps this module's globals alive; core objects left here would leak.
atexit.register(_grad_cache.clear)


def grad_of(reduction, var):
    """The gradient reduction for `var`, built once per reduction and variable."""
    key = (reduction.hash, var)
    g = _grad_cache.get(key)
    if g is None:
        g = _grad_cache[key] = reduction.grad(var)
    return g


def ranges_arg(ranges):
    """KeOps block-sparse ranges (6 integer arrays or tensors) as lists of int64 for the core."""
    if ranges is None:
        return None
    if len(ranges) != 6:
        raise ValueError("ranges must be the 6 arrays (ranges_i, slices_i, redranges_j, ranges_j, "
                         f"slices_j, redranges_i) of a block-sparse reduction; got {len(ranges)}")
    out = []
    for a in ranges:
        if hasattr(a, "detach"):  # torch
            a = a.detach().cpu().reshape(-1).tolist()
        elif hasattr(a, "ravel"):  # numpy
            a = a.ravel().tolist()
        out.append([int(v) for v in a])
    return out


class GenredBase:
    """Construction and pickling shared by tessel.numpy.Genred and tessel.torch.Genred."""

    def __init__(self, formula, aliases, reduction_op="Sum", axis=1, dtype=None, opt_arg=None,
                 formula2=None, dtype_acc="auto", sum_scheme="auto", backend="auto", **unused):
        self._spec = GenredSpec(formula, aliases, reduction_op, axis, opt_arg, formula2,
                                dtype_acc, sum_scheme, backend)
        self.dtype = dtype

    def __getstate__(self):
        return {"args": self._spec.args, "dtype": self.dtype}

    def __setstate__(self, state):
        self._spec = GenredSpec(**state["args"])
        self.dtype = state["dtype"]
