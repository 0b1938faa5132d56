"""Docstring text written once: Genred's and KernelSolve's for tessel.numpy and tessel.torch,
and the parts that several of the package's docstrings share (`fill`).

Each front end formats Genred's and KernelSolve's with its own words and example, so that every
example runs on that front end's arrays (the test suite runs them as doctests).
"""

GENRED = """A compiled reduction ``a_i = Red_j F(p, x_i, y_j)`` (axis=1) or over i (axis=0).

The formula ``F`` is compiled once into a tiled, multi-threaded SIMD kernel (or a CUDA kernel
for device arrays) that streams over the reduced index: the N x M matrix of ``F`` is never
stored, so memory stays O(N + M). {extra}

Parameters
----------
formula : str or tessel.Formula
    ``F`` in KeOps's syntax, e.g. ``"Exp(-G*SqDist(X,Y)) * B"``, or a formula built with
    :func:`tessel.parse`.
aliases : list of str
    One declaration per variable: ``"X = Vi(3)"`` (one row per output row i, dimension 3),
    ``"Y = Vj(3)"`` (one row per reduced index j), ``"G = Pm(1)"`` (a parameter vector);
    ``"X = Vi(0, 3)"`` gives the argument position explicitly. A call takes one array per
    alias, in this order.
reduction_op : str, default "Sum"
    ``Sum``, ``LogSumExp``, ``SumSoftMaxWeight``, ``Min``, ``Max``, ``ArgMin``, ``ArgMax``,
    ``Min_ArgMin``, ``Max_ArgMax``, ``KMin``, ``ArgKMin`` or ``KMin_ArgKMin``.
axis : {{0, 1}}, default 1
    1 reduces over j (one output row per i), 0 over i.
dtype : str, optional
    Accepted for pykeops compatibility and ignored: the arrays' dtype (float32 or float64;
    float16 / bfloat16 computed in float32) decides.
opt_arg : int, optional
    K of ``KMin``, ``ArgKMin`` and ``KMin_ArgKMin`` (required by them, refused by the others).
formula2 : str, optional
    The weights ``G`` of ``SumSoftMaxWeight`` (required) or of a weighted ``LogSumExp``.
**options
    ``backend`` ("auto", "compiled", "interpreter", "cuda"), ``sum_scheme`` ("block",
    "kahan", "direct"), ``dtype_acc="float64"`` (float64 accumulation for float32 data),
    ``threads``, ``gpu_memory_budget``, ``gpu_devices`` and pykeops's spellings of these;
    options that do not apply are listed by ``tessel._core.ignored_options()``.

Returns
-------
Genred
    A callable: ``g(*arrays, backend=None, ni=None, nj=None, ranges=None)`` returns the
    ``(N, dim)`` result ({array}), or a tuple (values, int64 indices) for ``Min_ArgMin``,
    ``Max_ArgMax`` and ``KMin_ArgKMin``; indices are int64. Batch dimensions ``(B..., N, D)``
    broadcast; ``ranges`` (KeOps's six index arrays) makes the reduction block-sparse.

Raises
------
ValueError
    A malformed formula or alias, an unknown reduction, a missing or unexpected ``opt_arg`` /
    ``formula2``, and at call time an array whose shape does not match its alias (the message
    names the argument and the expected shape).
TypeError
    At call time, an argument that is not {array_kind}, or arrays of different dtypes.

See Also
--------
tessel.lazytensor.LazyTensor : the same reductions written as array code.

Examples
--------
{example}
"""

KERNEL_SOLVE = """Solves ``(alpha I + K) x = b`` by conjugate gradient, K a kernel never stored.

``K(v) = Sum_j F(..., v_j)`` must be linear in the unknown ``v`` and symmetric positive
(semi-)definite, as conjugate gradient requires (a positive definite kernel on the same points
for i and j). The CG loop runs in the C++ core on float64 vectors, each product one reduction:
memory O(N). {extra}

Parameters
----------
formula : str
    ``F`` in KeOps's syntax, e.g. ``"Exp(-G*SqDist(X,Y)) * B"``: a Sum reduction.
aliases : list of str
    The variables, as for :class:`Genred`; a call takes one array per alias, ``b`` at the
    unknown's position.
varinvalias : str or int
    The unknown: an alias name (``"B"``), its variable index, or ``"Var(k,d,c)"``. It must be
    indexed by the reduced index and have the output's dimension.
axis : {{0, 1}}, default 1
    The reduced index, as for :class:`Genred`.
**options
    Build options, as for :class:`Genred` (``backend``, ``sum_scheme``, ...).

Returns
-------
KernelSolve
    A callable: ``s(*arrays, alpha=0.0, tol=None, atol=0.0, maxiter=None,
    on_nonconvergence="warn", backend=None, ranges=None, stats=None)`` returns x, shaped like
    b. ``tol`` is the relative residual ``norm(b - A x) <= tol norm(b)`` (default 1e-6 in
    float64, 1e-5 in float32); ``stats`` (a dict) receives the iterations, the residual and
    whether it converged.

Raises
------
ValueError
    A formula that is not a Sum linear in the unknown, an unknown that is not a j-variable of
    the output's dimension, ``alpha < 0``, or shapes that do not match the aliases.
RuntimeError
    CG breaks down (K not positive definite), or does not converge with
    ``on_nonconvergence="raise"`` (``"warn"``, the default, warns instead).

Examples
--------
{example}
"""

NUMPY_GENRED_EXAMPLE = """>>> import numpy as np
>>> from tessel.numpy import Genred
>>> rng = np.random.default_rng(0)
>>> x, y, b = rng.random((100, 3)), rng.random((150, 3)), rng.random((150, 1))
>>> gauss = Genred("Exp(-G*SqDist(X,Y)) * B",
...                ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)", "G = Pm(1)"])
>>> a = gauss(x, y, b, np.array([4.0]))
>>> a.shape, a.dtype
((100, 1), dtype('float64'))
>>> dense = np.exp(-4 * ((x[:, None, :] - y[None]) ** 2).sum(-1)) @ b
>>> bool(np.allclose(a, dense))
True
>>> knn = Genred("SqDist(X,Y)", ["X = Vi(3)", "Y = Vj(3)"], reduction_op="ArgKMin", opt_arg=2)
>>> nearest = knn(x, y)                  # (100, 2) int64: the 2 nearest y of each x
>>> d2 = ((x[:, None] - y[None]) ** 2).sum(-1)
>>> nearest.shape, bool((nearest[:, 0] == d2.argmin(1)).all())
((100, 2), True)"""

TORCH_GENRED_EXAMPLE = """>>> import torch
>>> from tessel.torch import Genred
>>> x = torch.rand(100, 3, dtype=torch.float64, requires_grad=True)
>>> y, b = torch.rand(150, 3, dtype=torch.float64), torch.rand(150, 1, dtype=torch.float64)
>>> gauss = Genred("Exp(-G*SqDist(X,Y)) * B",
...                ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)", "G = Pm(1)"])
>>> g = torch.tensor([4.0], dtype=torch.float64)
>>> a = gauss(x, y, b, g)
>>> (gx,) = torch.autograd.grad(a.sum(), x)
>>> dense = torch.exp(-4 * ((x[:, None, :] - y[None]) ** 2).sum(-1)) @ b
>>> (gx_dense,) = torch.autograd.grad(dense.sum(), x)
>>> bool(torch.allclose(a, dense)), bool(torch.allclose(gx, gx_dense))
(True, True)"""

NUMPY_SOLVE_EXAMPLE = """>>> import numpy as np
>>> from tessel.numpy import KernelSolve
>>> rng = np.random.default_rng(0)
>>> x, b = rng.random((200, 2)), rng.random((200, 1))
>>> solve = KernelSolve("Exp(-G*SqDist(X,Y)) * B",
...                     ["X = Vi(2)", "Y = Vj(2)", "B = Vj(1)", "G = Pm(1)"], "B")
>>> g = np.array([10.0])
>>> sol = solve(x, x, b, g, alpha=0.1)
>>> k = np.exp(-10 * ((x[:, None] - x[None]) ** 2).sum(-1))
>>> bool(np.allclose((0.1 * np.eye(200) + k) @ sol, b, atol=1e-5))
True"""

TORCH_SOLVE_EXAMPLE = """>>> import torch
>>> from tessel.torch import KernelSolve
>>> x = torch.rand(200, 2, dtype=torch.float64)
>>> b = torch.rand(200, 1, dtype=torch.float64, requires_grad=True)
>>> solve = KernelSolve("Exp(-G*SqDist(X,Y)) * B",
...                     ["X = Vi(2)", "Y = Vj(2)", "B = Vj(1)", "G = Pm(1)"], "B")
>>> g = torch.tensor([10.0], dtype=torch.float64)
>>> sol = solve(x, x, b, g, alpha=0.1, tol=1e-10)
>>> a = 0.1 * torch.eye(200, dtype=torch.float64) + torch.exp(-10 * torch.cdist(x, x) ** 2)
>>> bool(torch.allclose(sol, torch.linalg.solve(a, b)))
True
>>> (gb,) = torch.autograd.grad(sol.sum(), b)    # implicit: A^-1 1
>>> bool(torch.allclose(gb, torch.linalg.solve(a, torch.ones(200, 1, dtype=torch.float64))))
True"""


def numpy_docs():
    """(Genred's, KernelSolve's) docstrings for tessel.numpy."""
    genred = GENRED.format(
        extra="On NumPy arrays (float32 or float64, any strides, no copy).",
        array="a NumPy array", array_kind="a NumPy array", example=NUMPY_GENRED_EXAMPLE)
    solve = KERNEL_SOLVE.format(
        extra="On NumPy arrays; ``KernelSolve.gradient`` gives the implicit gradient of a "
              "solve (what tessel.torch.KernelSolve's backward computes).",
        example=NUMPY_SOLVE_EXAMPLE)
    return genred, solve


def torch_docs():
    """(Genred's, KernelSolve's) docstrings for tessel.torch."""
    genred = GENRED.format(
        extra="On PyTorch tensors (CPU or CUDA), with autograd: gradients flow to every input "
              "that requires them, through Min/Max/KMin and LogSumExp too, to any order, "
              "under ``torch.func`` and ``torch.compile`` as well.",
        array="a tensor on the inputs' device", array_kind="a torch.Tensor",
        example=TORCH_GENRED_EXAMPLE)
    solve = KERNEL_SOLVE.format(
        extra="On tensors, differentiable to any order with respect to b, every other argument "
              "and ``alpha`` (a float, or a one-element tensor to learn it), by implicit "
              "differentiation; not under ``torch.func`` transforms (an error says so).",
        example=TORCH_SOLVE_EXAMPLE)
    return genred, solve


# tessel.distributed's examples each run in a one-rank gloo group of their own, so that each runs
# alone; an in-process store needs no free port. Under torchrun, each process runs the lines that
# follow after its own dist.init_process_group("gloo").
ONE_RANK_GROUP = """>>> import torch
>>> import torch.distributed as dist
>>> dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
>>> _ = torch.manual_seed(0)"""
# tessel.shapes' examples compare, register or average two closed curves: a 20-segment unit circle
# and the ellipse it stretches into.
CIRCLE_AND_ELLIPSE = """>>> import torch
>>> from tessel.shapes import Curve
>>> t = torch.linspace(0, 2 * torch.pi, 21, dtype=torch.float64)[:-1]
>>> circle = Curve.polyline(torch.stack([t.cos(), t.sin()], 1), closed=True)  # 20 segments
>>> ellipse = circle.with_points(circle.points * torch.tensor([1.5, 0.7]).double())"""

# The parameters that a sharded class adds to its one-process twin's, or passes on to it.
SHARDED_PARAMETERS = """group : torch.distributed.ProcessGroup, optional
    The ranks that share the rows; None (the default) is the world.
**options
    tessel.torch.{twin}'s build options (``dtype_acc``, ``sum_scheme``, ...)."""


def fill(obj=None, **parts):
    """Puts each part where the docstring of obj has a line that is only ``{name}``, indented as
    that line, and returns obj; without obj, returns the decorator that does so.

    Text that several docstrings share (an example's setup, a parameter's description) is thus
    written once, and every docstring still shows it whole.
    """
    if obj is None:
        return lambda o: fill(o, **parts)
    lines, used = [], set()
    for line in obj.__doc__.split("\n"):
        name = line.strip()[1:-1] if line.strip().startswith("{") else None
        if name not in parts:
            lines.append(line)
            continue
        used.add(name)
        indent = line[:len(line) - len(line.lstrip())]
        lines.extend(indent + p if p else p for p in parts[name].split("\n"))
    if used != set(parts):  # a misspelt placeholder would show the part nowhere
        raise ValueError(f"fill: the docstring of {obj.__qualname__} has no line "
                         f"{{{sorted(set(parts) - used)[0]}}}")
    obj.__doc__ = "\n".join(lines)
    return obj
