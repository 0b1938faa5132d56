"""tessel.compat.pykeops LazyTensor: the pykeops keywords of reductions and solve (ranges, call=False,
...) honoured or refused by name, never ignored; printing as informative as pykeops's."""
import numpy as np
import pytest
import torch

from tessel.compat.pykeops import numpy as tn
from tessel.compat.pykeops import torch as tk
from tessel.compat.pykeops.numpy import cluster as tnc
from tessel.compat.pykeops.torch import cluster as tkc

F64 = torch.float64


def _kernel(n=6, m=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    x, y = torch.rand(n, 2, generator=g, dtype=F64), torch.rand(m, 2, generator=g, dtype=F64)
    K = (-((tk.Vi(x) - tk.Vj(y)) ** 2).sum(-1)).exp()
    return x, y, K


def _full(n, m, make):
    return (make([[0, n]]), make([1]), make([[0, m]]), make([[0, m]]), make([1]), make([[0, n]]))


# ---- ranges ------------------------------------------------------------------------------------
def test_lazytensor_float_ranges_name_the_reduction():
    """Float ranges were truncated (j = 5 of [0.5, 5.9] dropped); now the reduction called says
    which array holds floats, whether ranges come as a keyword or as the .ranges attribute."""
    x, y, K = _kernel()
    ranges = list(_full(6, 7, torch.tensor))
    ranges[2] = torch.tensor([[0.5, 6.9]])
    with pytest.raises(TypeError, match=r"LazyTensor.sum: ranges\[2\] \(redranges_j\) must hold "
                                        "integers.*got dtype float32"):
        K.sum(1, ranges=tuple(ranges))
    K.ranges = tuple(ranges)
    with pytest.raises(TypeError, match=r"LazyTensor.logsumexp: ranges\[2\]"):
        K.logsumexp(1)
    with pytest.raises(TypeError, match="LazyTensor.sum: ranges must be a tuple of 6 integer"):
        _kernel()[2].sum(1, ranges=5)
    K.ranges = _full(6, 7, torch.tensor)
    torch.testing.assert_close(K.sum(1), _kernel()[2].sum(1))


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_from_matrix_refuses_float_cluster_ranges(lib):
    cluster, make = (tnc, np.array) if lib == "numpy" else (tkc, torch.tensor)
    keep = make([[True]])
    with pytest.raises(TypeError, match=r"from_matrix: ranges_i must hold integers.*float"):
        cluster.from_matrix(make([[0.5, 5.9]]), make([[0, 7]]), keep)
    with pytest.raises(ValueError, match=r"from_matrix: ranges_j must have shape \(n, 2\)"):
        cluster.from_matrix(make([[0, 6]]), make([0, 7]), keep)
    ranges = cluster.from_matrix(make([[0, 6]]), make([[0, 7]]), keep)
    assert [tuple(r.shape) for r in ranges] == [(1, 2), (1,), (1, 2), (1, 2), (1,), (1, 2)]
