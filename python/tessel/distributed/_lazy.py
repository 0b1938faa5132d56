"""LazyTensor with sharded reductions: tessel's LazyTensor, reduced by tessel.distributed.

`from tessel.distributed import LazyTensor, Vi, Vj, Pm` and the same code that reduces a
symbolic matrix in one process reduces it over the ranks of a process group: each rank builds
its LazyTensors from its rows of x and y and gets its rows of the result, with gradients (see
tessel.distributed.Genred for what every rank receives). Reductions take one more option,
`group=` (default: the world). An expression that mixes plain and sharded LazyTensors is sharded.
"""
import torch

from .. import lazytensor as _lt
from .. import _lazy_vars as lv
from .._docstrings import ONE_RANK_GROUP, fill
from .._lazy_reduce import GENRED_OPTIONS
from ._genred import Genred

__all__ = ["LazyTensor", "Vi", "Vj", "Pm"]

_WHO = "tessel.distributed.LazyTensor"


def _kernel_solve(formula, aliases, var, axis=1, **options):
    from ._solve import KernelSolve  # the solver sits above the reductions it runs
    return KernelSolve(formula, aliases, var, axis=axis, **options)


class _Sharded(lv.ArrayAdapter):
    """PyTorch tensors, with tessel.distributed's Genred and KernelSolve."""

    def __init__(self, plain):
        super().__init__(plain.array_type, plain.name, plain.dtypes, plain.scalar, Genred,
                         _kernel_solve)


_SHARDED = {}

# Vi's and Vj's argument, result, errors and neighbours, in the words of the index each follows.
_ROWS_SECTIONS = """Parameters
----------
x : ({n}, D) float32 or float64 tensor
    This rank's rows (an ({n},) tensor is read as dim 1).

Returns
-------
LazyTensor
    The sharded {index}-variable, of shape {shape}.

Raises
------
TypeError
    If ``x`` is not an array.
ValueError
    If ``x`` has no rows dimension (a 0-d tensor).
NotImplementedError
    If ``x`` is complex.

See Also
--------
{others}, LazyTensor"""


@fill(one_rank_group=ONE_RANK_GROUP)
class LazyTensor(_lt.LazyTensor):
    """A symbolic (N, M, D) tensor whose reductions are sharded over torch.distributed.

    tessel.lazytensor.LazyTensor, with the same operators, maths and reductions (``sum``,
    ``logsumexp``, ``min``, ``argKmin``, ``@``, ``solve``, ...), each run by
    tessel.distributed.Genred or KernelSolve: every rank builds its LazyTensors from its own rows
    of x (i-variables) and y (j-variables), makes the same reductions in the same order, and
    gets its rows of the results, with gradients (Genred's semantics). The code that reduces a
    symbolic matrix in one process thus reduces it over the ranks of a process group unchanged.
    Reductions take one more option, ``group=`` (default: the world); an expression that mixes
    plain and sharded LazyTensors is sharded. Only real torch tensors without batch dimensions
    are sharded.

    Parameters
    ----------
    x : torch.Tensor or number, optional
        This rank's rows as an (N_r, 1, D) i-variable or a (1, M_r, D) j-variable, a (D,)
        parameter, a number, or a 2-D (rows, D) tensor read by ``axis``; as for
        tessel.lazytensor.LazyTensor.
    axis : {0, 1, 2}, optional
        How to read a 2-D tensor: 0 as an i-variable, 1 as a j-variable, 2 as a parameter.

    Raises
    ------
    TypeError
        If ``x`` is not a tensor or a number; when reducing, if the arrays are not torch tensors.
    ValueError
        If ``x``'s shape does not fit ``axis`` (as for tessel.lazytensor.LazyTensor); when
        reducing, as tessel.distributed.Genred.
    NotImplementedError
        For a complex tensor, and when reducing, as tessel.distributed.Genred (batch
        dimensions, a formula without i- or j-variables...).
    RuntimeError
        When reducing, if another rank of the group refused, skipped or died in the reduction.

    See Also
    --------
    tessel.lazytensor.LazyTensor : The same LazyTensor in one process.
    Vi, Vj, Pm : Variables from this rank's (rows, D) tensors.

    Examples
    --------
    A Gaussian kernel product in a one-rank gloo group, equal to the one-process result:

    {one_rank_group}
    >>> f64 = torch.float64
    >>> x, y = torch.randn(100, 3, dtype=f64), torch.randn(80, 3, dtype=f64)  # rank's rows
    >>> b = torch.randn(80, 2, dtype=f64)
    >>> import tessel.lazytensor
    >>> from tessel.distributed import LazyTensor
    >>> x_i, y_j = LazyTensor(x[:, None, :]), LazyTensor(y[None, :, :])
    >>> a = (-((x_i - y_j) ** 2).sum(-1)).exp() @ b  # this rank's rows of sum_j K_ij b_j
    >>> a.shape
    torch.Size([100, 2])
    >>> X_i = tessel.lazytensor.LazyTensor(x[:, None, :])
    >>> Y_j = tessel.lazytensor.LazyTensor(y[None, :, :])
    >>> one = (-((X_i - Y_j) ** 2).sum(-1)).exp() @ b  # one process
    >>> bool(torch.allclose(a, one))
    True
    >>> dist.destroy_process_group()
    """

    __slots__ = ()
    _OPTIONS = GENRED_OPTIONS + ("group",)

    @classmethod
    def _leaf(cls, v):
        if v.is_complex:
            raise NotImplementedError(f"{_WHO}: complex arrays are not sharded; use "
                                      "tessel.LazyTensor in one process")
        return super()._leaf(v)

    def _evaluator(self, adapter):
        if adapter.array_type is not torch.Tensor:
            raise TypeError(f"{_WHO}: reductions are sharded over torch.distributed, so the "
                            f"arrays must be torch tensors, got {adapter.name}")
        if adapter not in _SHARDED:
            _SHARDED[adapter] = _Sharded(adapter)
        return _SHARDED[adapter]


@fill(one_rank_group=ONE_RANK_GROUP,
      rows_sections=_ROWS_SECTIONS.format(n="N_r", index="i", shape="(N_r, 1, D)",
                                          others="Vj, Pm"))
def Vi(x):
    """Make an i-variable of a sharded LazyTensor from this rank's (N_r, D) rows.

    The rows are indexed by i, the index that a reduction over j (``axis=1``) keeps: each rank
    gets the result's rows of its own points.

    {rows_sections}

    Examples
    --------
    The 3 nearest neighbours of each of this rank's x among every rank's y:

    {one_rank_group}
    >>> f64 = torch.float64
    >>> x, y = torch.randn(100, 3, dtype=f64), torch.randn(80, 3, dtype=f64)  # rank's rows
    >>> from tessel.distributed import Vi, Vj
    >>> nn = Vi(x).sqdist(Vj(y)).argKmin(3, axis=1)  # global indices into y
    >>> nn.shape, bool(torch.equal(nn, torch.cdist(x, y).argsort(1)[:, :3]))
    (torch.Size([100, 3]), True)
    >>> dist.destroy_process_group()
    """
    return LazyTensor._leaf(lv.from_rows(x, lv.I, "Vi"))


@fill(one_rank_group=ONE_RANK_GROUP,
      rows_sections=_ROWS_SECTIONS.format(n="M_r", index="j", shape="(1, M_r, D)",
                                          others="Vi, Pm"))
def Vj(x):
    """Make a j-variable of a sharded LazyTensor from this rank's (M_r, D) rows.

    The rows are indexed by j, the index that a reduction over j sums: every rank's rows of y
    reach every rank's reduction, block by block around the ring, and their gradients come home.

    {rows_sections}

    Examples
    --------
    A Gaussian kernel product: this rank's rows of a sum over every rank's j:

    {one_rank_group}
    >>> f64 = torch.float64
    >>> x, y = torch.randn(100, 3, dtype=f64), torch.randn(80, 3, dtype=f64)  # rank's rows
    >>> b = torch.randn(80, 2, dtype=f64)
    >>> from tessel.distributed import Vi, Vj
    >>> a = ((-Vi(x).sqdist(Vj(y))).exp() * Vj(b)).sum(axis=1)  # sum_j exp(-|x_i-y_j|^2) b_j
    >>> bool(torch.allclose(a, torch.exp(-torch.cdist(x, y) ** 2) @ b))
    True
    >>> dist.destroy_process_group()
    """
    return LazyTensor._leaf(lv.from_rows(x, lv.J, "Vj"))


@fill(one_rank_group=ONE_RANK_GROUP)
def Pm(x):
    """Make a parameter of a sharded LazyTensor: the same values on every rank.

    A parameter enters every (i, j) term alike; its gradient is the full sum over every rank's
    terms, the same on every rank (so that replicated parameters stay equal after a step).

    Parameters
    ----------
    x : (D,) float32 or float64 tensor, number or sequence of numbers
        The values, equal on every rank.

    Returns
    -------
    LazyTensor
        The parameter, of shape (1, 1, D).

    Raises
    ------
    TypeError
        If ``x`` is neither an array nor a number or a non-empty sequence of numbers.
    NotImplementedError
        If ``x`` is complex.

    See Also
    --------
    Vi, Vj, LazyTensor

    Examples
    --------
    A Gaussian kernel's scale as a parameter, the same on every rank:

    {one_rank_group}
    >>> f64 = torch.float64
    >>> x, y = torch.randn(100, 3, dtype=f64), torch.randn(80, 3, dtype=f64)  # rank's rows
    >>> from tessel.distributed import Pm, Vi, Vj
    >>> s = (-Pm(torch.tensor([0.5], dtype=f64)) * Vi(x).sqdist(Vj(y))).exp().sum(axis=1)
    >>> ref = torch.exp(-0.5 * torch.cdist(x, y) ** 2).sum(1, keepdim=True)
    >>> bool(torch.allclose(s, ref))
    True
    >>> dist.destroy_process_group()
    """
    if lv.adapter_of(x) is not None:
        return LazyTensor._leaf(lv.from_rows(x, lv.P, "Pm"))
    return LazyTensor._leaf(lv.from_numbers(x, "Pm"))
