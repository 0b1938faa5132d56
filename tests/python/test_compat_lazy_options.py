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


# ---- solve(call=False) -------------------------------------------------------------------------
def _gauss(x, sigma=0.3):
    return tk.LazyTensor.exp(-tk.LazyTensor.sum((tk.Vi(x) - tk.Vj(x)) ** 2, dim=2)
                             / (2 * sigma ** 2))


def _dense_solve(x, b, alpha, sigma=0.3):
    K = torch.exp(-((x[:, None] - x[None]) ** 2).sum(-1) / (2 * sigma ** 2))
    return torch.linalg.solve(K + alpha * torch.eye(len(x), dtype=x.dtype), b)


def test_solve_call_false_returns_a_callable_as_keops_example():
    """KeOps's plot_test_invkernel_torch_helper: solve(Vi(b), alpha=..., call=False) returned
    the solution (call=False ignored), so `cfun()` raised "'Tensor' object is not callable"."""
    x = torch.rand(40, 2, dtype=F64, requires_grad=True)
    b = torch.rand(40, 2, dtype=F64)
    cfun = tk.LazyTensor.solve(_gauss(x), tk.Vi(b), alpha=0.1, eps=1e-10, call=False)
    assert not isinstance(cfun, torch.Tensor) and callable(cfun)
    assert type(cfun.callfun).__name__ == "KernelSolve"
    c = cfun()
    ref = _dense_solve(x, b, 0.1)
    torch.testing.assert_close(c, ref, rtol=1e-5, atol=1e-6)
    e = torch.randn(40, 2, dtype=F64)
    (u,), (u_ref,) = torch.autograd.grad(c, x, e), torch.autograd.grad(ref, x, e)
    torch.testing.assert_close(u, u_ref, rtol=1e-4, atol=1e-5)
    # Call options override those given to solve; a b was given, so the call takes none.
    torch.testing.assert_close(cfun(alpha=0.5), _dense_solve(x, b, 0.5), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"LazyTensor.solve\(call=False\): expected 0 "
                                         r"argument\(s\) \(b was given to solve\), got 1"):
        cfun(b)
    with pytest.raises(TypeError, match="sum_scheme configure the solver: pass them to solve"):
        cfun(sum_scheme="kahan_scheme")
    # The call=True form is unchanged; a 1-D b gives a 1-D solution.
    torch.testing.assert_close(_gauss(x).solve(tk.Vi(b), alpha=0.1, eps=1e-10), c)
    assert tuple(_gauss(x).solve(b[:, 0], alpha=0.1, call=False)().shape) == (40,)


def test_solve_with_a_symbolic_right_hand_side_takes_it_at_the_call():
    x, b = torch.rand(30, 2, dtype=F64), torch.rand(30, 3, dtype=F64)
    cfun = _gauss(x).solve(tk.Vi(0, 3), alpha=0.2, eps=1e-10)  # pykeops: symbolic b means a callable
    torch.testing.assert_close(cfun(b), _dense_solve(x, b, 0.2), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"expected 1 argument\(s\) \(b, the right-hand side"):
        cfun()


def test_solve_keywords_are_honoured_or_refused():
    """`out` was dropped without a word by solve (pykeops's KernelSolve takes none): refused by
    name; eps, ranges and backend reach the solver."""
    x, b = torch.rand(20, 2, dtype=F64), torch.rand(20, 1, dtype=F64)
    with pytest.raises(TypeError, match="LazyTensor.solve: unexpected keyword argument 'out'"):
        _gauss(x).solve(tk.Vi(b), alpha=0.1, out=torch.empty(20, 1, dtype=F64))
    loose = _gauss(x).solve(tk.Vi(b), alpha=0.1, eps=1e-1)
    tight = _gauss(x).solve(tk.Vi(b), alpha=0.1, eps=1e-12)
    ref = _dense_solve(x, b, 0.1)
    assert (loose - ref).abs().max() > 100 * (tight - ref).abs().max()
    # One diagonal block: K restricted to the first 10 and the last 10 points.
    r = (torch.tensor([[0, 10], [10, 20]]), torch.tensor([1, 2]),
         torch.tensor([[0, 10], [10, 20]]))
    got = _gauss(x).solve(tk.Vi(b), alpha=0.1, eps=1e-12, ranges=r + r, call=False)()
    want = torch.cat([_dense_solve(x[:10], b[:10], 0.1), _dense_solve(x[10:], b[10:], 0.1)])
    torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-9)
    with pytest.raises(TypeError, match=r"LazyTensor.solve: ranges\[0\] \(ranges_i\) must hold"):
        _gauss(x).solve(tk.Vi(b), alpha=0.1, ranges=(r[0].double(),) + r[1:] + r)
    with pytest.raises(ValueError, match="LazyTensor.solve: .*backend"):
        _gauss(x).solve(tk.Vi(b), alpha=0.1, backend="nonsense")


# ---- printing ----------------------------------------------------------------------------------
def test_printed_lazytensors_and_pending_reductions_read_like_pykeops():
    """A pending reduction printed as one line "PendingReduction(...)"; pykeops prints the
    formula, symbolic variables, shape and reduction (with formula2 / opt_arg)."""
    x, y, K = _kernel()
    assert str(K) == repr(K) == ("KeOps LazyTensor (tessel)\n"
                                 "    formula: Exp((-Sum(Square((Vi(0,2)-Vj(1,2))))))\n"
                                 "    shape: (6, 7)")
    assert str(K.sum(1, call=False)) == str(K) + "\n    reduction: Sum (axis=1)"
    assert repr(K.argKmin(3, dim=1, call=False)).endswith(
        "    shape: (6, 7)\n    reduction: ArgKMin (axis=1)\n        opt_arg: 3")
    assert str(K.logsumexp(0, weight=tk.Vi(x[:, :1]), call=False)).endswith(
        "    reduction: LogSumExp (axis=0)\n        formula2: Vi(2,1)")
    # Symbolic variables keep their index in the formula; the arrays follow them.
    S = tk.Vj(y) * tk.Vi(0, 2)
    assert str(S.sum(0)) == ("KeOps LazyTensor (tessel)\n    formula: (Vj(1,2)*Vi(0,2))\n"
                             "    symbolic variables: Var(0, 2, 0)\n    shape: (1, 7, 2)\n"
                             "    reduction: Sum (axis=0)")
    assert "symbolic variables: Var(0, 2, 0)" in str(S)
    cfun = _gauss(x).solve(tk.Vi(x), alpha=0.1, call=False)
    assert str(cfun).endswith("    symbolic variables: Var(0, 2, 1)\n    shape: (6, 6)\n"
                              "    reduction: Solve (axis=1)")
    z = tn.Vi(np.ones((3, 1), dtype=np.complex128)) * tn.Vj(np.ones((4, 1)))
    assert str(z.sum(1, call=False)).splitlines()[-1] == "    reduction: Sum (axis=1)"
