"""The docstrings of the names pykeops.numpy and pykeops.torch share: one text per name, written
with each front end's spelling, whose examples run as doctests on that front end's arrays."""

# Each front end's words and example lines; the texts below are str.format templates over them.
_FRONTENDS = {
    "numpy": dict(
        lib="numpy", array="array", arrays="NumPy arrays", xp="np",
        float="float32 or float64 array", int64="int64 array", f64="dtype('float64')",
        setup=""">>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> x, y = rng.standard_normal((100, 3)), rng.standard_normal((80, 3))
>>> b = rng.standard_normal((80, 2))""",
        complex_setup=""">>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> z = rng.standard_normal((50, 1)) + 1j * rng.standard_normal((50, 1))
>>> w = rng.standard_normal((40, 1)) + 1j * rng.standard_normal((40, 1))""",
        c128="dtype('complex128')", equal="np.array_equal", square_b="x[:, :2]",
        grad="", grad_solve="", g="np.array([2.0])"),
    "torch": dict(
        lib="torch", array="tensor", arrays="torch tensors", xp="torch",
        float="float32 or float64 tensor", int64="int64 tensor", f64="torch.float64",
        setup=""">>> import torch
>>> _ = torch.manual_seed(0)
>>> x = torch.randn(100, 3, dtype=torch.float64)
>>> y = torch.randn(80, 3, dtype=torch.float64)
>>> b = torch.randn(80, 2, dtype=torch.float64)""",
        complex_setup=""">>> import torch
>>> _ = torch.manual_seed(0)
>>> z = torch.randn(50, 1, dtype=torch.complex128)
>>> w = torch.randn(40, 1, dtype=torch.complex128)""",
        c128="torch.complex128", equal="torch.equal", square_b="x[:, :2].clone()",
        grad="""
Results are differentiable: gradients flow to every input that requires them.
""", grad_solve="""
The solution is differentiable with respect to b, to alpha given as a one-element tensor, and to
every other argument, by implicit differentiation (which assumes K symmetric, as pykeops does).
""", g="torch.tensor([2.0], dtype=torch.float64)"),
}

_DENSE = """>>> K = {xp}.exp(-((x[:, None, :] - y[None, :, :]) ** 2).sum(-1))  # dense reference"""

_GENRED = """Compile a generic reduction of a KeOps formula, as pykeops's ``Genred``.

``Genred(formula, aliases, reduction_op, axis)`` describes the reduction
``out_i = Reduction_j F(x_i, y_j, p)`` over j (``axis=1``), or over i (``axis=0``), of a
formula F written as a KeOps string over the variables that ``aliases`` declares: i-variables
(``Vi``, one row per output row), j-variables (``Vj``, one row per reduced index) and parameters
(``Pm``). Calling the object with one {array} per alias computes the reduction without ever
storing the N x M matrix of F: the kernel is compiled once per formula and dtype (tessel's kernel
cache keeps it across runs) and runs on the CPU's threads, or on the GPU for CUDA tensors and
the ``"GPU"`` backends. This is pykeops's ``pykeops.{lib}.Genred``; with
``tessel.compat.install()``, ``from pykeops.{lib} import Genred`` gives it.

Calling ``g(*args, backend="auto", device_id=-1, ranges=None, out=None)`` returns the (N, E)
{array} of the reduction over j (or (M, E) over i, E the formula's dim), with the arguments'
batch dimensions in front; Min_ArgMin and Max_ArgMax return (values, indices), KMin, ArgKMin and
KMin_ArgKMin shapes (N, K, E) (squeezed to (N, K) when E = 1), and indices are int64, as in
pykeops. ``ranges`` (the 6 {arrays} of ``pykeops.{lib}.cluster.from_matrix``) makes it
block-sparse; ``out`` receives the result.
{grad}
Differences from pykeops: the KeOps-internal ``Max_SumShiftExp*`` reductions are not offered;
``opt_arg`` given to a reduction that takes no K is refused rather than ignored; ``ranges`` does
not combine with batch dimensions; ``out=`` is refused for the two-output reductions; and the
options that only steer KeOps's own code generation (``dtype``, ``cuda_type``,
``enable_chunks``, ``rec_multVar_highdim``, ``use_fast_math``) are checked and ignored:
``tessel._core.ignored_options()`` says why for each.

Parameters
----------
formula : str
    The KeOps formula, such as ``"Exp(-SqDist(x, y)) * b"``.
aliases : list of str
    One declaration per argument, in call order: ``"x = Vi(3)"`` (an i-variable of dim 3),
    ``"y = Vj(3)"``, ``"p = Pm(1)"``, or ``"Var(index, dim, cat)"``.
reduction_op : str, default "Sum"
    The reduction: ``"Sum"``, ``"LogSumExp"``, ``"LogSumExpWeight"``, ``"SumSoftMaxWeight"``,
    ``"Min"``, ``"Max"``, ``"ArgMin"``, ``"ArgMax"``, ``"Min_ArgMin"``, ``"Max_ArgMax"``,
    ``"KMin"``, ``"ArgKMin"`` or ``"KMin_ArgKMin"``.
axis : {{0, 1}}, default 0
    0 reduces over i (the output has one row per j), 1 over j.
dtype, cuda_type : str, optional
    Ignored: the arguments' dtype (float32 or float64) decides the precision.
opt_arg : int, optional
    K of the KMin, ArgKMin and KMin_ArgKMin reductions.
formula2 : str, optional
    The weight formula of LogSumExpWeight and SumSoftMaxWeight.
dtype_acc : {{"auto", "float32", "float64"}}, default "auto"
    The accumulator's precision ("auto": that of the arguments).
use_double_acc : bool, default False
    pykeops's older spelling of ``dtype_acc="float64"``.
sum_scheme : {{"auto", "direct_sum", "block_sum", "kahan_scheme"}}, default "auto"
    How sums accumulate: blockwise partial sums or Kahan compensation limit rounding errors.
enable_chunks, rec_multVar_highdim, use_fast_math : bool
    Accepted and ignored (KeOps code generation switches; see above).

Raises
------
TypeError
    If ``formula`` is not a string or ``aliases`` not a list of strings.
ValueError
    If the formula or an alias does not parse, ``axis`` is not 0 or 1, ``opt_arg`` is given to a
    reduction that takes no K, or LogSumExpWeight lacks ``formula2``; when called, if the number
    of arguments differs from the aliases', their shapes or dims disagree with the aliases, or
    ``out`` is given to a two-output reduction.
NotImplementedError
    If ``reduction_op`` is unknown or one of KeOps's internal ``Max_SumShiftExp*``.

See Also
--------
generic_sum : The same reduction, declared by its output.
LazyTensor : The same reductions written as array expressions.

Examples
--------
A Gaussian kernel product ``a_i = sum_j exp(-|x_i - y_j|^2) b_j``, written as in pykeops:

>>> from tessel.compat.pykeops.{lib} import Genred
{setup}
>>> gauss = Genred("Exp(-SqDist(x, y)) * b", ["x = Vi(3)", "y = Vj(3)", "b = Vj(2)"],
...                reduction_op="Sum", axis=1)
>>> a = gauss(x, y, b)
>>> tuple(a.shape), a.dtype
((100, 2), {f64})
{dense}
>>> bool({xp}.allclose(a, K @ b))
True
"""

_KERNEL_SOLVE = """Solve ``(alpha Id + K) a = b`` for a kernel K, as pykeops's ``KernelSolve``.

K is the linear operator of a Sum reduction, ``(K a)_i = sum_j F(x_i, y_j, a_j)`` with the
formula F linear in the variable ``varinvalias``: for kernel interpolation or regression,
``F = k(x_i, x_j) * a_j`` with a positive definite kernel k on one point cloud, and the solution
``a`` gives the interpolant ``f(x) = sum_j k(x, x_j) a_j``. The system is solved by conjugate
gradient, each product K a being one reduction (no N x N matrix is stored), so K must be
symmetric positive (semi-)definite and ``alpha >= 0`` regularises it. This is
``pykeops.{lib}.KernelSolve``.

Calling ``ks(*args, backend="auto", device_id=-1, alpha=1e-10, eps=1e-6, ranges=None)``, with
one {array} per alias and b at the position of ``varinvalias``, returns the solution a, shaped
as b; it stops, as pykeops does, once the residual's squared norm is below ``size * eps ** 2``.
{grad_solve}
Differences from pykeops: the conjugate gradient is tessel's (float64 vectors whatever the
dtype, at most ``max(100, 10 * size)`` iterations); ``dtype``, ``cuda_type``,
``enable_chunks``, ``rec_multVar_highdim`` and ``use_fast_math`` are accepted and ignored.

Parameters
----------
formula : str
    The KeOps formula of K's product, linear in ``varinvalias``.
aliases : list of str
    One declaration per argument, as for :class:`Genred`.
varinvalias : str
    The unknown: an alias name (``"b"``) or ``"Var(index, dim, cat)"``, indexed by the reduced
    index (a ``Vj`` variable for ``axis=1``).
axis : {{0, 1}}, default 0
    The reduction's axis: 1 sums over j (the unknown is a Vj variable), 0 over i.
dtype_acc : {{"auto", "float32", "float64"}}, default "auto"
    The reductions' accumulator precision.
use_double_acc : bool, default False
    pykeops's older spelling of ``dtype_acc="float64"``.
sum_scheme : {{"auto", "direct_sum", "block_sum", "kahan_scheme"}}, default "auto"
    How the reductions' sums accumulate.
enable_chunks, rec_multVar_highdim, use_fast_math : bool
    Accepted and ignored (KeOps code generation switches).
dtype, cuda_type : str, optional
    Ignored: the arguments' dtype decides the precision.

Raises
------
TypeError
    If ``varinvalias`` is not a string, or the formula or aliases have the wrong types.
ValueError
    If ``varinvalias`` is not an alias, or not indexed by the reduced index, or the formula does
    not parse; when called, if the number of arguments is wrong, their shapes disagree with the
    aliases, or conjugate gradient breaks down (K not positive definite).

See Also
--------
Genred : The reduction whose operator is inverted.

Examples
--------
Gaussian kernel interpolation on 100 points, checked against the dense system:

>>> from tessel.compat.pykeops.{lib} import KernelSolve
{setup}
>>> formula = "Exp(-g * SqDist(x, y)) * b"
>>> aliases = ["x = Vi(3)", "y = Vj(3)", "b = Vj(2)", "g = Pm(1)"]
>>> Kinv = KernelSolve(formula, aliases, "b", axis=1)
>>> rhs = {square_b}
>>> a = Kinv(x, x, rhs, {g}, alpha=0.1)
>>> tuple(a.shape)
(100, 2)
>>> Kxx = {xp}.exp(-2.0 * ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
>>> bool({xp}.allclose(0.1 * a + Kxx @ a, rhs, atol=1e-4))
True
"""

_LAZY_TENSOR = """A symbolic (B..., N, M, D) {array} of KeOps formulas, as pykeops's ``LazyTensor``.

A LazyTensor stands for a matrix ``F(x_i, y_j)`` that is never stored: wrap an (N, D) {array}
x as ``LazyTensor(x[:, None, :])`` (an i-variable, shape (N, 1, D)), an (M, D) {array} y as
``LazyTensor(y[None, :, :])`` (a j-variable, shape (1, M, D)), and a number or a (D,) {array}
as a parameter; arithmetic, comparisons and maths functions (``exp``, ``sqdist``, ``sum(-1)``,
...) then build a formula without computing anything, and a reduction over i or j (``sum``,
``logsumexp``, ``min``, ``argKmin``, ``@``, ``solve``, ...) compiles it into one kernel and
returns a {array}. Memory stays O(N + M) however large N x M is, which is what makes kernel
methods, nearest neighbours or optimal transport on 10^6 points tractable. Axes count the batch
dimensions first, as in pykeops: for an (N, M, D) LazyTensor, ``axis=0`` reduces over i and
``axis=1`` over j. ``shape`` drops a trailing D of 1 (``_shape`` keeps it).

Symbolic variables, ``LazyTensor((index, dim, cat))`` or :func:`Vi` / :func:`Vj` / :func:`Pm`
with an index, make a reduction return a callable that takes their {arrays} at those
positions, as pykeops does. A complex {array}, a complex number or a list holding one gives a
:class:`ComplexLazyTensor` instead. This is ``pykeops.{lib}.LazyTensor``.

Differences from pykeops: ``solve`` handles a kernel matrix of dim 1 built from {arrays} (no
symbolic variables, no ``var=``), else NotImplementedError; a keyword a reduction does not know
is a TypeError naming the accepted ones; pykeops options that only steer KeOps's code generation
are accepted and ignored (``tessel._core.ignored_options()``).

Parameters
----------
x : {array}, number, list of numbers or tuple of 3 ints
    The data: a (B..., N, 1, D) or (B..., 1, M, D) {float}, or an (N, D) one
    with ``axis``; a float, complex or list of numbers (a parameter; an int is an integer
    constant); or
    ``(index, dim, cat)`` for a symbolic variable (cat 0: i, 1: j, 2: parameter).
axis : {{0, 1, 2}}, optional
    How to read a 2-D (N, D) {array}: 0 as an i-variable, 1 as a j-variable, 2 as a
    parameter. Not with a tuple.
is_complex : bool, default False
    Make a :class:`ComplexLazyTensor` even from real data.

Raises
------
TypeError
    If ``x`` is None, an {array} of another library, or a list that does not hold numbers; when
    reducing, for an unknown keyword or an ``out`` that is no {array}.
ValueError
    If the tuple is not three valid integers, ``axis`` is given with a tuple, or a number or
    list comes with ``axis`` other than None or 2; when reducing, if ``axis`` is neither i's nor
    j's, or shapes and dims disagree.
NotImplementedError
    From ``solve``, for a formula with symbolic variables, of dim other than 1, or ``var=``.

See Also
--------
Vi, Vj, Pm : The same variables from (N, D) {arrays}, without the reshapes.
Genred : The reductions as KeOps formula strings.

Examples
--------
A Gaussian kernel product and 3 nearest neighbours, as pykeops code writes them:

>>> from tessel.compat.pykeops.{lib} import LazyTensor
{setup}
>>> x_i = LazyTensor(x[:, None, :])  # (100, 1, 3): an i-variable
>>> y_j = LazyTensor(y[None, :, :])  # (1, 80, 3): a j-variable
>>> D_ij = ((x_i - y_j) ** 2).sum(-1)  # symbolic (100, 80) squared distances
>>> D_ij.shape
(100, 80)
>>> a = (-D_ij).exp() @ b  # sum_j exp(-|x_i - y_j|^2) b_j, no 100 x 80 matrix stored
{dense}
>>> bool({xp}.allclose(a, K @ b))
True
>>> nn = D_ij.argKmin(3, axis=1)  # the 3 nearest y_j of each x_i, int64
>>> bool({equal}(nn, {xp}.argsort(-K, 1)[:, :3]))
True
"""

_COMPLEX = """A symbolic complex (B..., N, M, D) {array}, as pykeops's ``ComplexLazyTensor``.

``LazyTensor(z)`` of a complex {array}, a complex number or a list holding one returns a
ComplexLazyTensor (a class of its own, not a LazyTensor subclass, as in pykeops), and so does
this class called on real data. Arithmetic, ``exp``, ``abs``, ``real``, ``imag``, ``angle``,
``sqabs``, ``conj``, ``exp1j`` ... build complex formulas, and a Sum reduction returns a complex
{array} of the inputs' precision (complex64 with float32, complex128 with float64), computed
without storing the N x M matrix: Fourier-type sums ``sum_j exp(i <x_i, y_j>) c_j`` are the
typical use. ``shape`` counts complex numbers while ``_shape`` and ``ndim`` count the reals of
KeOps's (re, im) layout, as in pykeops. This is ``pykeops.{lib}.ComplexLazyTensor``.

Difference from pykeops: Sum is the only reduction with a complex meaning, so the others (Min,
LogSumExp, ArgKMin, ...) raise a TypeError, where pykeops would reduce the interleaved reals;
reduce ``.real``, ``.imag`` or ``abs()`` instead.

Parameters
----------
x : {array}, number, list of numbers or tuple of 3 ints
    As for :class:`LazyTensor`; real data are read as complex numbers.
axis : {{0, 1, 2}}, optional
    As for :class:`LazyTensor`.
is_complex : bool, default True
    Always complex here; kept for the signature LazyTensor shares.

Raises
------
TypeError
    As :class:`LazyTensor`'s; when reducing, for a reduction other than Sum, or {arrays} of
    different precisions.
ValueError
    As :class:`LazyTensor`'s.

See Also
--------
LazyTensor : The real LazyTensor, which dispatches complex data here.

Examples
--------
>>> from tessel.compat.pykeops.{lib} import ComplexLazyTensor, LazyTensor
{complex_setup}
>>> z_i, w_j = LazyTensor(z[:, None, :]), LazyTensor(w[None, :, :])
>>> isinstance(z_i, ComplexLazyTensor), z_i.shape
(True, (50, 1))
>>> s = (z_i * w_j).exp().sum(axis=1)  # sum_j exp(z_i w_j)
>>> tuple(s.shape), s.dtype
((50, 1), {c128})
>>> bool({xp}.allclose(s, {xp}.exp(z * w.T).sum(1)[:, None]))
True
"""

_VARIABLE = """Make {a_what}, as pykeops's ``{name}``.

``{name}(x)`` wraps {data} as a LazyTensor of shape {lazy_shape}:
{role}.
``{name}(index, dim)`` is a symbolic {what} of dim ``dim``: the reductions of formulas that hold
it return a callable whose argument at position ``index`` is its {array}, as pykeops's
symbolic variables do. This is ``pykeops.{lib}.{name}``.

Parameters
----------
x_or_ind : {x_type} or int
    The data, or the position of a symbolic variable's argument.
dim : int, optional
    The dim D of a symbolic variable; None (the default) for data.

Returns
-------
LazyTensor
    The variable, to combine into formulas and reduce.

Raises
------
TypeError
    If the data is not a {lib} {array}{numbers}.
ValueError
    If a symbolic variable has an index < 0 or a dim < 1,
    {extra_error}.

See Also
--------
LazyTensor : What it returns, with the operations and reductions.

Examples
--------
>>> from tessel.compat.pykeops.{lib} import Pm, Vi, Vj
{setup}
{dense}
{example}"""

_VARIABLES = {
    "Vi": dict(a_what="an i-variable", what="i-variable", data="an (N, D) {array}",
               lazy_shape="(N, 1, D)", x_type="(N, D) {float}", numbers="",
               role="its rows are indexed by i, the output's index of a reduction over j",
               extra_error="or the data is a number (a parameter: use Pm)",
               example=""">>> Vi(x).shape
(100, 1, 3)
>>> f = (-Vi(0, 3).sqdist(Vj(1, 3))).exp().sum(axis=1)  # symbolic: a function of (x, y)
>>> bool({xp}.allclose(f(x, y), K.sum(1)[:, None]))
True
"""),
    "Vj": dict(a_what="a j-variable", what="j-variable", data="an (M, D) {array}",
               lazy_shape="(1, M, D)", x_type="(M, D) {float}", numbers="",
               role="its rows are indexed by j, the index a reduction over j sums",
               extra_error="or the data is a number (a parameter: use Pm)",
               example=""">>> Vj(y).shape
(1, 80, 3)
>>> a = ((-Vi(x).sqdist(Vj(y))).exp() * Vj(b)).sum(axis=1)  # sum_j exp(-|x_i - y_j|^2) b_j
>>> bool({xp}.allclose(a, K @ b))
True
"""),
    "Pm": dict(a_what="a parameter", what="parameter", data="a number or a (D,) {array}",
               lazy_shape="(1, 1, D)", x_type="(D,) {float}, number, list of numbers",
               numbers=", a number or a list of numbers",
               role="the same for every i and j; a new value needs no new kernel",
               extra_error="or data comes with a dim",
               example=""">>> s = (-Pm(0.5) * Vi(x).sqdist(Vj(y))).exp().sum(axis=1)
>>> bool({xp}.allclose(s, (K ** 0.5).sum(1)[:, None]))
True
"""),
}

_GENERIC = """Declare {a_op} reduction by its output, as pykeops's ``{name}``.

``{name}(formula, output, *aliases)`` is
``Genred(formula, aliases, reduction_op="{op}", axis=...)``
with the axis read from the output's declaration: ``"{out} = Vi({dim})"`` gives one
row per i (a reduction over j), ``"{out} = Vj({dim})"`` one row per j (a reduction over i).
{meaning}
This is ``pykeops.{lib}.{name}``.
{difference}
Parameters
----------
formula : str
    The KeOps formula, such as ``"{formula}"``.
output : str
    The output's declaration, such as ``"{out} = Vi({dim})"``{output_note}.
*aliases : str
    One declaration per argument of the call, such as ``"x = Vi(3)"``.
**kwargs
    :class:`Genred`'s other options (``dtype_acc``, ``sum_scheme``, ...).

Returns
-------
Genred
    The reduction; call it with one {array} per alias.

Raises
------
TypeError
    If ``output`` is not a string, or the formula or aliases have the wrong types.
ValueError
    If the formula, an alias or ``output`` does not parse, or ``output`` is a ``Pm``
    variable{dim_error}.

See Also
--------
Genred : The reduction it builds.

Examples
--------
>>> from tessel.compat.pykeops.{lib} import {name}
{setup}
{dense}
{example}"""

_GENERICS = {
    "generic_sum": dict(
        op="Sum", a_op="a Sum", out="a", dim="2", formula="Exp(-SqDist(x, y)) * b",
        meaning="The output's dim must be the formula's.",
        difference="""
Difference from pykeops: a declared dim other than the formula's is a ValueError; pykeops
ignores it and returns the formula's.
""",
        output_note="", dim_error="\n    or declares a dim other than the formula's",
        example=""">>> f = {name}("Exp(-SqDist(x, y)) * b", "a = Vi(2)", "x = Vi(3)", "y = Vj(3)",
...           "b = Vj(2)")
>>> bool({xp}.allclose(f(x, y, b), K @ b))
True
"""),
    "generic_logsumexp": dict(
        op="LogSumExp", a_op="a LogSumExp", out="a", dim="1", formula="-SqDist(x, y)",
        meaning="It computes ``log sum_j exp(F_ij)`` without overflow: the log-domain sum\nof "
                "softmax weights and Sinkhorn iterations.",
        difference="""
Difference from pykeops: a declared dim other than the formula's is a ValueError; pykeops
ignores it.
""",
        output_note="", dim_error="\n    or declares a dim other than the formula's",
        example=""">>> f = {name}("-SqDist(x, y)", "a = Vi(1)", "x = Vi(3)", "y = Vj(3)")
>>> bool({xp}.allclose(f(x, y)[:, 0], {xp}.log(K.sum(1))))
True
"""),
    "generic_argmin": dict(
        op="ArgMin", a_op="an ArgMin", out="ind", dim="1", formula="SqDist(x, y)",
        meaning="It returns int64 indices (the nearest neighbour's, for a distance).",
        difference="""
Difference from pykeops: a declared dim other than the formula's is a ValueError; pykeops
ignores it.
""",
        output_note="", dim_error="\n    or declares a dim other than the formula's",
        example=""">>> f = {name}("SqDist(x, y)", "ind = Vi(1)", "x = Vi(3)", "y = Vj(3)")
>>> ind = f(x, y)  # the nearest y_j of each x_i
>>> tuple(ind.shape), bool({equal}(ind[:, 0], {xp}.argmax(K, 1)))
((100, 1), True)
"""),
    "generic_argkmin": dict(
        op="ArgKMin", a_op="an ArgKMin", out="ind", dim="K", formula="SqDist(x, y)",
        meaning="K is the output's dim; it returns the (N, K) int64 indices of the K\nsmallest "
                "values, in increasing order (K nearest neighbours, for a distance).",
        difference="", output_note=": K is its dim", dim_error="",
        example=""">>> f = {name}("SqDist(x, y)", "ind = Vi(3)", "x = Vi(3)", "y = Vj(3)")
>>> ind = f(x, y)  # the 3 nearest y_j of each x_i
>>> tuple(ind.shape), bool({equal}(ind, {xp}.argsort(-K, 1)[:, :3]))
((100, 3), True)
"""),
}

_TEXTS = {"Genred": _GENRED, "KernelSolve": _KERNEL_SOLVE, "LazyTensor": _LAZY_TENSOR,
          "ComplexLazyTensor": _COMPLEX}


def document(namespace, lib):
    """Sets the docstrings of a front end's names (its module's globals) for `lib`."""
    words = dict(_FRONTENDS[lib])
    words["dense"] = _DENSE.format(**words)
    for name, text in _TEXTS.items():
        namespace[name].__doc__ = text.format(**words)
    for table, text in ((_VARIABLES, _VARIABLE), (_GENERICS, _GENERIC)):
        for name, more in table.items():
            local = dict(words, name=name)
            local.update({k: v.format(**local) for k, v in more.items()})
            namespace[name].__doc__ = text.format(**local)
