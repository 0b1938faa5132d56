"""What NumPy and PyTorch Genred share: building the reduction, checking calls, options."""
from . import _core

_REDUCTIONS = (
    "Sum", "Min", "Max", "ArgMin", "ArgMax", "Min_ArgMin", "Max_ArgMax", "KMin", "ArgKMin",
    "KMin_ArgKMin", "LogSumExp", "SumSoftMaxWeight",
)
_K_REDUCTIONS = ("KMin", "ArgKMin", "KMin_ArgKMin")
_SUM_SCHEMES = {"auto": "block", "block_sum": "block", "block": "block",
                "kahan_scheme": "kahan", "kahan": "kahan", "direct_sum": "direct",
                "direct": "direct"}
_CATEGORY = {0: "Vi", 1: "Vj", 2: "Pm"}


class GenredSpec:
    """The reduction behind a Genred object, rebuilt from its arguments (which pickle)."""

    def __init__(self, formula, aliases, reduction_op="Sum", axis=1, opt_arg=None,
                 formula2=None, dtype_acc="auto", sum_scheme="auto", backend="auto"):
        if reduction_op not in _REDUCTIONS:
            raise ValueError(f"Genred: reduction_op {reduction_op!r} is not one of "
                             f"{', '.join(_REDUCTIONS)}")
        if axis not in (0, 1):
            raise ValueError(f"Genred: axis must be 0 (reduce over i) or 1 (reduce over j), "
                             f"got {axis!r}")
        if reduction_op in _K_REDUCTIONS:
            if not isinstance(opt_arg, int) or opt_arg < 1:
                raise ValueError(f"Genred: {reduction_op} needs opt_arg = K, a positive integer; "
                                 f"got {opt_arg!r}")
        elif opt_arg is not None:
            raise ValueError(f"Genred: opt_arg is only used by {', '.join(_K_REDUCTIONS)}")
        if reduction_op == "SumSoftMaxWeight" and formula2 is None:
            raise ValueError("Genred: SumSoftMaxWeight needs formula2 (the weights G)")
        if formula2 is not None and reduction_op not in ("LogSumExp", "SumSoftMaxWeight"):
            raise ValueError("Genred: formula2 is only used by LogSumExp and SumSoftMaxWeight")
        if sum_scheme not in _SUM_SCHEMES:
            raise ValueError(f"Genred: sum_scheme {sum_scheme!r} is not one of "
                             f"{', '.join(sorted(_SUM_SCHEMES))}")
        if dtype_acc not in ("auto", "float32", "float64"):
            raise ValueError(f"Genred: dtype_acc {dtype_acc!r} is not 'auto', 'float32' or "
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
        self.n_inputs = max(self.n_core, _count(aliases))
        self.used = set(used)

    def describe_inputs(self):
        return ", ".join(f"{_CATEGORY[c]}({i},{d})" for i, c, d in self.reduction.inputs())

    def check_count(self, args, who):
        if len(args) != self.n_inputs:
            raise ValueError(f"{who}: expected {self.n_inputs} arguments "
                             f"({self.describe_inputs()}), got {len(args)}")


def _count(aliases):
    return len([a for a in aliases if a.strip()])


_grad_cache = {}


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
