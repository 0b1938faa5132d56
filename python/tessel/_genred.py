"""What NumPy and PyTorch Genred share: building the reduction, its call signature, options.

Keyword options are read by the core's normaliser (`_core.normalize_options`), aliases by the
core's parser (`_core.parse_aliases`), reduction names by the core's table: no front end keeps a
copy of its own.
"""
import atexit
import numbers

from . import _core
from ._lru import LruCache

# The core's reduction table, by name; the lists below are read off it, never written again.
REDUCTIONS = {r["name"]: r for r in _core.reduction_table() if r["by_name"]}
_K_REDUCTIONS = tuple(n for n, r in REDUCTIONS.items() if r["uses_k"])
_WEIGHTED = tuple(n for n, r in REDUCTIONS.items() if r["weight"] != "none")
_CATEGORY = {0: "Vi", 1: "Vj", 2: "Pm"}
# A call's own settings, (ni, nj, ranges, backend), when it gives none: the reduction's apply.
_NO_CALL_OPTIONS = (-1, -1, None, None)
_INT_MAX, _INT64_MAX = 2**31 - 1, 2**63 - 1


def check_text(text, name, who):
    """`text` (a str) as the core reads it: UTF-8, in which a lone surrogate ("\\ud800", left by a
    bad decode) has no encoding. A ValueError naming it, rather than the binding's "incompatible
    function arguments" (which shows a str parameter refusing a str)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(f"{who}: {name} must be valid Unicode text; it holds the lone surrogate "
                         f"{text[e.start]!r} at position {e.start}") from None
    return text


def check_formula(formula, name, who):
    """A formula argument: KeOps text (valid Unicode) or a tessel.Formula."""
    if isinstance(formula, _core.Formula):
        return formula
    if not isinstance(formula, str):
        raise TypeError(f"{who}: {name} must be a formula string such as 'Exp(-SqDist(X,Y))' or a "
                        f"tessel.Formula, got {type(formula).__name__}")
    return check_text(formula, name, who)


def _check_option_text(who, options):
    """Option names and text values must be valid Unicode (the core cannot read a lone
    surrogate)."""
    for key, value in options.items():
        if isinstance(key, str):
            check_text(key, f"the option name {key!r}", who)
        if isinstance(value, str):
            check_text(value, f"option {key}", who)


def normalize_options(who, options, scope, reduction=None):
    """The core's option normaliser, as a dict of canonical names and values."""
    _check_option_text(who, options)
    return _core.normalize_options(who, options, scope, reduction)


def settings_of(who, options, scope=_core.BUILD_OPTIONS, reduction=None):
    """The options of a reduction read once by the core: the object its calls take."""
    _check_option_text(who, options)
    return _core.Settings(who, options, scope, reduction)


def check_int(value, name, who, low=0, high=_INT64_MAX):
    """An integer argument: TypeError for a non-integer (floats and bools included), ValueError
    outside [low, high]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{who}: {name} must be an integer, got {type(value).__name__} "
                        f"{value!r}")
    if not low <= value <= high:
        raise ValueError(f"{who}: {name} must be in [{low}, {high}], got {value}")
    return int(value)


def check_aliases(aliases, who):
    """The aliases' types: a list of valid Unicode strings (the core reads their syntax)."""
    if isinstance(aliases, str) or not isinstance(aliases, (list, tuple)):
        raise TypeError(f"{who}: aliases must be a list of strings such as ['X = Vi(3)', "
                        f"'Y = Vj(3)'], got {type(aliases).__name__}")
    for k, a in enumerate(aliases):
        if not isinstance(a, str):
            raise TypeError(f"{who}: aliases[{k}] must be a string such as 'X = Vi(3)', got "
                            f"{type(a).__name__}")
        check_text(a, f"aliases[{k}]", who)
    return list(aliases)


def read_aliases(aliases, who):
    """The aliases as the core's parser reads them: [(name or "", index, dim, category)], the
    category 0 = i, 1 = j, 2 = parameter. Every front end reads aliases through this."""
    aliases = check_aliases(aliases, who)
    try:
        return _core.parse_aliases(aliases)
    except ValueError as e:
        raise ValueError(f"{who}: {_plain(e)}") from None


def read_texts(texts, aliases, who):
    """One pass of the core's parser over a reduction's formula texts and aliases: (declared
    aliases as read_aliases gives them, each text's Formula, the variables the texts name)."""
    try:
        return _core.parse_texts(texts, aliases)
    except ValueError as e:
        if "in aliases[" in str(e):  # an alias error reads as read_aliases reports it
            raise ValueError(f"{who}: {_plain(e)}") from None
        raise


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
    check_text(name, "reduction_op", who)
    try:
        return _core.reduction_name(name)
    except ValueError as e:
        raise ValueError(f"{who}: reduction_op {name!r}: {_plain(e)}") from None


def alias_index(aliases, which, who):
    """The variable index that `which` stands for: an alias name ("B"), or an alias text of its
    own ("Var(2,3,1)", "Vj(2,3)")."""
    declared = read_aliases(aliases, who)
    check_text(which, "varinvalias", who)
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
    """The reduction behind a Genred object, rebuilt from its arguments (which pickle).

    Its call signature is the formula text's, as in KeOps: one argument per variable that the
    aliases declare or the text names, even one that simplification removes (0 * x folds to 0);
    such arguments are not read, but their shapes are checked and give the sizes the core cannot
    infer. `options` are the keyword options as the user wrote them (any tessel or pykeops
    spelling, read by the core's normaliser).
    """

    def __init__(self, formula, aliases, reduction_op="Sum", axis=1, opt_arg=None,
                 formula2=None, options=None, who="Genred"):
        aliases = check_aliases(aliases, who)
        check_formula(formula, "formula", who)
        if formula2 is not None:
            check_formula(formula2, "formula2", who)
        reduction_op = reduction_name(reduction_op, who)
        check_int(axis, "axis (0: reduce over i, 1: reduce over j)", who, 0, 1)
        if reduction_op in _K_REDUCTIONS:
            if opt_arg is None:
                raise ValueError(f"{who}: {reduction_op} needs opt_arg = K, a positive integer")
            check_int(opt_arg, f"opt_arg (the K of {reduction_op})", who, 1, _INT_MAX)
        elif opt_arg is not None:
            raise ValueError(f"{who}: opt_arg is only used by {', '.join(_K_REDUCTIONS)}")
        if REDUCTIONS[reduction_op]["weight"] == "required" and formula2 is None:
            raise ValueError(f"{who}: {reduction_op} needs formula2 (the weights G)")
        if formula2 is not None and reduction_op not in _WEIGHTED:
            raise ValueError(f"{who}: formula2 is only used by {' and '.join(_WEIGHTED)}")
        options = dict(options or {})
        self.settings = settings_of(who, options, _core.BUILD_OPTIONS, reduction_op)
        self._args = dict(formula=formula, aliases=aliases, reduction_op=reduction_op,
                          axis=axis, opt_arg=opt_arg, formula2=formula2, options=options)
        # One pass of the parser over the texts given; tessel.Formula objects are used as they are.
        texts = [t for t in (formula, formula2) if isinstance(t, str)]
        declared, parsed, named = read_texts(texts, aliases, who)
        parsed = iter(parsed)
        f = formula if isinstance(formula, _core.Formula) else next(parsed)
        w = None
        if formula2 is not None:
            w = formula2 if isinstance(formula2, _core.Formula) else next(parsed)
        self.reduction = _core.Reduction(reduction_op, f, axis, opt_arg or 0, w)
        self._signature(declared, named)

    @property
    def args(self):
        """The arguments as they pickle: a tessel.Formula does not, its text does (and parses back
        to the same formula). Printed when asked for, never on a call's path."""
        text = lambda f: str(f) if isinstance(f, _core.Formula) else f  # noqa: E731
        return dict(self._args, formula=text(self._args["formula"]),
                    formula2=text(self._args["formula2"]))

    def _signature(self, declared, named):
        inputs = self.reduction.inputs()
        self.slots = {index: (cat, dim) for _, index, dim, cat in declared}
        for index, dim, cat in named:
            self.slots.setdefault(index, (cat, dim))
        self.slots.update({i: (c, d) for i, c, d in inputs})
        self.used = {i for i, _, _ in inputs}
        self.n_core = max(self.used) + 1 if self.used else 0  # what the core reads: a prefix
        self.n_inputs = max(self.slots) + 1 if self.slots else 0
        self.unread = [(i, c, d) for i, (c, d) in sorted(self.slots.items())
                       if i not in self.used]
        self._core_cats = {c for _, c, _ in inputs}

    def describe_inputs(self):
        return ", ".join(f"{_CATEGORY[c]}({i},{d})" for i, (c, d) in sorted(self.slots.items()))

    def check_count(self, args, who):
        if len(args) != self.n_inputs:
            raise ValueError(f"{who}: expected {self.n_inputs} arguments "
                             f"({self.describe_inputs()}), got {len(args)}")

    def prepare(self, args, who, backend=None, ni=None, nj=None, ranges=None):
        """The arguments the core reads and the call's own settings (ni, nj, ranges, backend),
        checked: the reduction's options were read when it was built."""
        if len(args) != self.n_inputs:
            self.check_count(args, who)
        call = _NO_CALL_OPTIONS
        if backend is not None or ni is not None or nj is not None or ranges is not None:
            given = normalize_options(who, dict(backend=backend, ni=ni, nj=nj),
                                      _core.CALL_OPTIONS)
            call = (given.get("ni", -1), given.get("nj", -1), ranges_arg(ranges, who),
                    given.get("backend"))
        if self.unread:
            call = self.check_unread(args, call, who)
        return args[: self.n_core], call

    def check_unread(self, args, call, who):
        """Checks the arguments the simplified formula does not read against their declared
        dims and the row counts of the others; returns the call's settings with ni / nj set
        where only they give it."""
        opts = dict(ni=call[0], nj=call[1])
        rows = {}
        for i, c, _ in self.reduction.inputs():
            shape = getattr(args[i], "shape", None)
            if c != 2 and shape is not None and len(shape) >= 2:
                rows.setdefault(c, (shape[-2], i))
        batches = {tuple(getattr(args[i], "shape", (0, 0))[: -1 if c == 2 else -2])
                   for i, c, _ in self.reduction.inputs()}
        for i, c, d in self.unread:
            a = args[i]
            shape = getattr(a, "shape", None)
            if shape is None:
                raise TypeError(f"{who}: argument {i} is a {type(a).__name__}; expected an array")
            shape, nd = tuple(shape), 1 if c == 2 else 2
            if len(shape) < nd or shape[-1] != d:
                want = f"({d},)" if c == 2 else f"(n, {d})"
                raise ValueError(f"{who}: argument {i} ({_CATEGORY[c]}({i},{d}), which the "
                                 f"simplified formula does not read) has shape {shape}; "
                                 f"expected {want}")
            if shape[:-nd] and shape[:-nd] not in batches:
                raise NotImplementedError(
                    f"{who}: argument {i} ({_CATEGORY[c]}({i},{d})) has batch dims "
                    f"{shape[:-nd]} that no argument the simplified formula reads has; "
                    "broadcasting the result over them is not supported")
            if c == 2:
                continue
            key = "ni" if c == 0 else "nj"
            n = shape[-2]
            if c in rows and rows[c][0] != n:
                raise ValueError(f"{who}: argument {i} has {n} rows but argument {rows[c][1]} "
                                 f"has {rows[c][0]}; all {_CATEGORY[c]} variables must agree")
            if opts[key] >= 0 and opts[key] != n:
                raise ValueError(f"{who}: argument {i} has {n} rows but {key} = {opts[key]}")
            rows[c] = (n, i)
            if c not in self._core_cats:
                opts[key] = n
        return (opts["ni"], opts["nj"], *call[2:])


# Gradient and forward-mode reductions, one per (reduction, variable) met: bounded, as a program that builds new
# formulas in a loop must not grow without bound. 512 covers the gradients of any realistic
# working set (a reduction has a few variables, each gradient of order k adds one entry).
GRAD_CACHE_SIZE = 512
_grad_cache = LruCache(GRAD_CACHE_SIZE)
# Emptied at exit: torch never frees an autograd graph alive then, and through its Function
# classes it keeps this module's globals alive; core objects left here would leak.
atexit.register(_grad_cache.clear)


def grad_of(reduction, var):
    """The gradient reduction for `var`, built once per reduction and variable."""
    return _grad_cache.get_or_make((reduction.hash, var), lambda: reduction.grad(var))


def fused_grads_of(reduction, ks):
    """One Sum reduction whose formula is the gradients of inputs `ks` side by side (a Concat),
    so that what they share (a kernel's exponential, the distance under it) is computed once per
    pair instead of once per input; None unless every gradient is a plain Sum over the same axis.
    Returns (reduction, [output dim of each input's gradient])."""
    def make():
        parts = [grad_of(reduction, k) for k in ks]
        if any(p.op != "Sum" or p.num_outputs != 1 or p.full_sum for p in parts) or \
                len({p.axis for p in parts}) != 1:
            return None
        f = parts[0].formula
        for p in parts[1:]:
            f = _core.make("Concat", [f, p.formula])
        try:
            fused = _core.Reduction("Sum", f, parts[0].axis)
        except ValueError:
            # Gradients that read the forward's outputs (LogSumExp's, through reserved slot
            # variables) are reductions the public constructor cannot rebuild: kept separate.
            return None
        # The fused reduction reads the variables its formula names: where a part's gradient
        # formula dropped some (a constant or zero gradient), the row counts and inputs the
        # separate reductions carry would be lost, so those stay separate.
        if any(sorted(p.inputs()) != sorted(fused.inputs()) for p in parts):
            return None
        return fused, [p.output_dim(0) for p in parts]
    return _grad_cache.get_or_make((reduction.hash, "fused", tuple(ks)), make)


def jvp_of(reduction, var):
    """The forward-mode derivative of output 0 along a tangent of `var` (read as the input after
    the reduction's own), built once per reduction and variable."""
    return _grad_cache.get_or_make((reduction.hash, "jvp", var), lambda: reduction.jvp(var))


RANGES_NAMES = ("ranges_i", "slices_i", "redranges_j", "ranges_j", "slices_j", "redranges_i")
_RANGES_WANT = ("a tuple of 6 integer arrays (ranges_i, slices_i, redranges_j, ranges_j, "
                "slices_j, redranges_i), e.g. from cluster.from_matrix")


def int_array_shape(a, name, who):
    """The shape of `a`, which must hold integers: a NumPy / torch array of an integer dtype or
    (nested) Python ints. A float would be truncated to an index without a word, so it is a
    TypeError (an empty array of any real dtype holds no index to truncate)."""
    if hasattr(a, "detach") and hasattr(a, "dtype"):  # torch
        dt = a.dtype
        is_int = not (dt.is_floating_point or dt.is_complex or str(dt) == "torch.bool")
        is_float, shape = dt.is_floating_point, tuple(a.shape)
        dtype = str(dt).replace("torch.", "")
    else:
        import numpy as np
        arr = None
        if a is not None and not isinstance(a, (str, bytes)):
            try:
                arr = a if isinstance(a, np.ndarray) else np.asarray(a)
            except (TypeError, ValueError):  # ragged nesting
                pass
        if arr is None or arr.dtype == object:
            raise TypeError(f"{who}: {name} must be an integer array, got "
                            f"{type(a).__name__} {a!r:.60}")
        is_int, is_float = arr.dtype.kind in "iu", arr.dtype.kind == "f"
        shape, dtype = arr.shape, str(arr.dtype)
    if not is_int and not (is_float and 0 in shape):
        raise TypeError(f"{who}: {name} must hold integers (an integer dtype such as int64 or "
                        f"int32), got dtype {dtype}")
    return shape


def check_ranges(ranges, who):
    """Checks KeOps block-sparse `ranges`: their types, dtypes and shapes (the core checks the
    values: intervals within [0, n), slices non-decreasing)."""
    if ranges is None:
        return
    if not isinstance(ranges, (tuple, list)):
        raise TypeError(f"{who}: ranges must be {_RANGES_WANT}; got {type(ranges).__name__}")
    if len(ranges) != 6:
        raise ValueError(f"{who}: ranges must be the 6 arrays (ranges_i, slices_i, redranges_j, "
                         f"ranges_j, slices_j, redranges_i) of a block-sparse reduction; got "
                         f"{len(ranges)}")
    for k, (name, a) in enumerate(zip(RANGES_NAMES, ranges)):
        shape = int_array_shape(a, f"ranges[{k}] ({name})", who)
        if name.startswith("slices"):
            if len(shape) != 1:
                raise ValueError(f"{who}: ranges[{k}] ({name}) must be 1-D (one end per block), "
                                 f"got shape {shape}")
        elif len(shape) != 2 or shape[1] != 2:
            raise ValueError(f"{who}: ranges[{k}] ({name}) must have shape (n, 2) ([start, end) "
                             f"pairs), got shape {shape}")


def ranges_arg(ranges, who):
    """KeOps block-sparse ranges (6 integer arrays or tensors), checked, as lists of int64 for
    the core."""
    if ranges is None:
        return None
    check_ranges(ranges, who)
    out = []
    for a in ranges:
        if hasattr(a, "detach"):  # torch
            a = a.detach().cpu().reshape(-1).tolist()
        else:
            import numpy as np
            a = np.asarray(a).reshape(-1).tolist()
        out.append([int(v) for v in a])  # integers already (checked): no truncation
    return out


class GenredBase:
    """Construction and pickling shared by tessel.numpy.Genred and tessel.torch.Genred.

    `_bound` is the core's Bound: the reduction with its settings, which a call hands arrays.
    """

    _kind = "any"  # the arrays the front end takes: "numpy" or "torch"
    _cuda_io = (None, None)  # (alloc, stream) of CUDA results: see _core.Bound

    def __init__(self, formula, aliases, reduction_op="Sum", axis=1, dtype=None, opt_arg=None,
                 formula2=None, **options):
        """`options`: backend, dtype_acc, sum_scheme and the pykeops options (use_double_acc,
        enable_chunks, ...; see `_core.ignored_options()` for those tessel ignores)."""
        self._spec = GenredSpec(formula, aliases, reduction_op, axis, opt_arg, formula2, options)
        self.dtype = dtype
        self._bind()

    def _bind(self):
        self._bound = _core.Bound(self._spec.reduction, self._spec.settings, "Genred", self._kind,
                                  *self._cuda_io)

    def __getstate__(self):
        return {"args": self._spec.args, "dtype": self.dtype}

    def __setstate__(self, state):
        args = dict(state["args"])
        if "options" not in args:  # pickled before options were kept as the user wrote them
            args["options"] = {k: args.pop(k) for k in ("dtype_acc", "sum_scheme", "backend")
                               if k in args}
        self._spec = GenredSpec(**args)
        self.dtype = state["dtype"]
        self._bind()
