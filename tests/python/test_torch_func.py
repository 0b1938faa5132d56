"""torch.func (grad, vjp, jvp, jacrev, jacfwd, hessian, vmap) and torch.compile through tessel.torch
Genred and LazyTensor reductions, against dense float64 torch (PyTorch 2.x only)."""
import pytest
import torch

if int(torch.__version__.split(".")[0]) < 2:
    pytest.skip(f"torch.func and torch.compile need PyTorch 2.x; this is torch {torch.__version__} "
                "(scripts/test_torch2.sh runs this file on 2.x)", allow_module_level=True)

from torch import func  # noqa: E402

from tessel.torch import Genred, LazyTensor  # noqa: E402

N, M, D, E = 5, 7, 3, 2
F64 = torch.float64
GAUSS = ("Exp(-G * SqDist(X, Y)) * B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(2)", "G = Pm(1)"])
LSE = ("-G * SqDist(X, Y) + B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)", "G = Pm(1)"])


def inputs(e=E, batch=()):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(*batch, N, D, dtype=F64, generator=gen)
    y = torch.randn(*batch, M, D, dtype=F64, generator=gen)
    b = torch.randn(*batch, M, e, dtype=F64, generator=gen)
    g = torch.rand(*batch, 1, dtype=F64, generator=gen) + 0.5
    return x, y, b, g


def sqdist(x, y):
    return ((x[..., :, None, :] - y[..., None, :, :]) ** 2).sum(-1)


def dense_sum(x, y, b, g):
    return (-g[..., None] * sqdist(x, y)).exp() @ b


def dense_lse(x, y, b, g):
    return torch.logsumexp(-g[..., None] * sqdist(x, y) + b[..., None, :, 0], dim=-1,
                           keepdim=True)


CASES = {
    "Sum": (Genred(GAUSS[0], GAUSS[1], "Sum", axis=1), dense_sum, E),
    "LogSumExp": (Genred(LSE[0], LSE[1], "LogSumExp", axis=1), dense_lse, 1),
}


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


def scalar(fn):
    """A scalar function of the inputs whose second derivatives are not trivial."""
    return lambda *a: (fn(*a) ** 2).sum().sqrt()


@pytest.fixture(params=sorted(CASES))
def case(request):
    red, dense, e = CASES[request.param]
    return red, dense, inputs(e)


def test_grad_and_vjp(case):
    red, dense, args = case
    got = func.grad(scalar(red), argnums=(0, 1, 2, 3))(*args)
    ref = func.grad(scalar(dense), argnums=(0, 1, 2, 3))(*args)
    for a, b in zip(got, ref):
        close(a, b)
    cot = torch.randn(N, CASES["Sum"][2] if red is CASES["Sum"][0] else 1, dtype=F64)
    close(func.vjp(red, *args)[1](cot)[2], func.vjp(dense, *args)[1](cot)[2])


def test_jvp(case):
    red, dense, args = case
    tangents = tuple(torch.randn_like(a) for a in args)
    out, tan = func.jvp(red, args, tangents)
    ref_out, ref_tan = func.jvp(dense, args, tangents)
    close(out, ref_out)
    close(tan, ref_tan)
    # A tangent on one input only (the others' are zero): the rule skips their reductions.
    part = lambda x: red(x, *args[1:])  # noqa: E731
    close(func.jvp(part, args[:1], tangents[:1])[1],
          func.jvp(lambda x: dense(x, *args[1:]), args[:1], tangents[:1])[1])


def test_jacrev_jacfwd(case):
    red, dense, args = case
    for jac in (func.jacrev, func.jacfwd):
        got = jac(red, argnums=(0, 3))(*args)
        ref = jac(dense, argnums=(0, 3))(*args)
        for a, b in zip(got, ref):
            close(a, b)


def test_hessian(case):
    red, dense, args = case
    for k in (0, 3):
        close(func.hessian(scalar(red), argnums=k)(*args),
              func.hessian(scalar(dense), argnums=k)(*args))


@pytest.mark.parametrize("in_dims", [(0, 0, 0, 0), (0, None, None, 0), (1, None, 0, None)])
def test_vmap(case, in_dims):
    red, dense, args = case
    V = 3
    batched = []
    for a, d in zip(args, in_dims):
        if d is None:
            batched.append(a)
        else:
            batched.append(torch.stack([a * (1 + 0.1 * v) for v in range(V)], d))
    close(torch.vmap(red, in_dims=in_dims)(*batched), torch.vmap(dense, in_dims=in_dims)(*batched))
    # The vmapped result is differentiable: its backward maps back through the batch dims.
    x = batched[0].clone().requires_grad_()
    rest = batched[1:]
    out = torch.vmap(red, in_dims=in_dims)(x, *rest)
    ref = torch.vmap(dense, in_dims=in_dims)(x, *rest)
    u = torch.randn_like(ref)
    close(torch.autograd.grad(out, x, u)[0], torch.autograd.grad(ref, x, u)[0])


def test_vmap_over_batched_inputs():
    """Inputs that already have batch dims (and broadcast along one) get the vmapped dim on top."""
    red, dense, _ = CASES["Sum"]
    x, y, b, g = inputs(batch=(2,))
    y = y[:1]  # broadcast along the batch dim
    xs = torch.stack([x, 2 * x])
    close(torch.vmap(red, in_dims=(0, None, None, None))(xs, y, b, g),
          torch.vmap(dense, in_dims=(0, None, None, None))(xs, y, b, g))


def test_vmap_with_ranges_loops():
    """Block-sparse ranges index one batch entry: the vmap rule loops, with the right result."""
    red, dense, _ = CASES["Sum"]
    x, y, b, g = inputs()
    half = M // 2  # every i reduces over the first half of the j's only
    ranges = (torch.tensor([[0, N]]), torch.tensor([1]), torch.tensor([[0, half]]),
              torch.tensor([[0, M]]), torch.tensor([1]), torch.tensor([[0, N]]))
    xs = torch.stack([x, x + 1, x - 1])
    got = torch.vmap(lambda x: red(x, y, b, g, ranges=ranges))(xs)
    ref = torch.vmap(lambda x: dense(x, y[:half], b[:half], g))(xs)
    close(got, ref)


def test_min_argmin_jvp_and_vmap():
    """Two outputs, one of them indices: the value has a tangent, the indices none."""
    red = Genred("SqDist(X, Y)", ["X = Vi(3)", "Y = Vj(3)"], "Min_ArgMin", axis=1)
    x, y, _, _ = inputs()
    tx = torch.randn_like(x)
    (val, idx), (tval, _) = func.jvp(red, (x, y), (tx, torch.zeros_like(y)))
    d = sqdist(x, y)
    close(val, d.min(-1, keepdim=True).values)
    ref_t = func.jvp(lambda x: sqdist(x, y).gather(-1, idx.long()), (x,), (tx,))[1]
    close(tval, ref_t)
    xs = torch.stack([x, -x])
    vals, idxs = torch.vmap(red, in_dims=(0, None))(xs, y)
    assert torch.equal(idxs[1], red(-x, y)[1])
    close(vals[0], val)


def lazy_kernel(x, y, b):
    K = (-((LazyTensor(x[..., :, None, :]) - LazyTensor(y[..., None, :, :])) ** 2).sum(-1)).exp()
    return (K * LazyTensor(b[..., None, :, :])).sum(-2)


def dense_kernel(x, y, b):
    return (-sqdist(x, y)).exp() @ b


def test_lazytensor_transforms():
    x, y, b, _ = inputs(batch=(2,))
    close(lazy_kernel(x, y, b), dense_kernel(x, y, b))
    s, sd = scalar(lazy_kernel), scalar(dense_kernel)
    for k in range(3):
        close(func.grad(s, argnums=k)(x, y, b), func.grad(sd, argnums=k)(x, y, b))
    close(func.jacfwd(lazy_kernel)(x, y, b), func.jacfwd(dense_kernel)(x, y, b))
    close(func.hessian(s)(x, y, b), func.hessian(sd)(x, y, b))
    close(torch.vmap(lazy_kernel, in_dims=(1, None, 0))(x.transpose(0, 1), y[0], b),
          torch.vmap(dense_kernel, in_dims=(1, None, 0))(x.transpose(0, 1), y[0], b))


def test_unread_argument_gets_zero_grad_under_func():
    red = Genred("X * 0 + Y", ["X = Vi(1)", "Y = Vj(1)"], "Sum", axis=1)
    x, y = torch.randn(N, 1, dtype=F64), torch.randn(M, 1, dtype=F64)
    gx, gy = func.grad(lambda x, y: red(x, y).sum(), argnums=(0, 1))(x, y)
    close(gx, torch.zeros_like(x))
    close(gy, torch.full_like(y, float(N)))


def test_torch_compile_traces_the_operator():
    """Under torch.compile the reduction is the operator tessel::genred (fake shapes, registered
    backward): one graph, no break, even with fullgraph=True; values and gradients as eager."""
    red, dense, e = CASES["LogSumExp"]

    def loss(x, y, b, g):
        return (red(x * 2, y, b, g).sin() ** 2).sum()

    explained = torch._dynamo.explain(loss)(*inputs(e))
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    for n in (N, N + 3):  # a second size: recompiled (or dynamic), never a stale shape
        x, y, b, g = inputs(e)
        x = torch.cat([x, x[: n - N] + 1]).requires_grad_()
        out, ref = compiled(x, y, b, g), loss(x, y, b, g)
        close(out, ref)
        close(torch.autograd.grad(out, x)[0], torch.autograd.grad(ref, x)[0])


def test_torch_compile_graph_break_with_ranges():
    """Block-sparse ranges do not go through the operator: the graph breaks around the call,
    which runs eagerly; the value and the gradient are those of the eager call."""
    red, dense, e = CASES["Sum"]
    x, y, b, g = inputs(e)
    half = M // 2
    ranges = (torch.tensor([[0, N]]), torch.tensor([1]), torch.tensor([[0, half]]),
              torch.tensor([[0, M]]), torch.tensor([1]), torch.tensor([[0, N]]))

    def loss(x):
        return (red(x * 2, y, b, g, ranges=ranges).sin() ** 2).sum()

    assert torch._dynamo.explain(loss)(x).graph_break_count >= 1
    compiled = torch.compile(loss, fullgraph=False, backend="aot_eager")
    xr = x.clone().requires_grad_()
    out = compiled(xr)
    ref_fn = lambda x: (dense(x * 2, y[:half], b[:half], g).sin() ** 2).sum()  # noqa: E731
    close(out, ref_fn(x))
    close(torch.autograd.grad(out, xr)[0], func.grad(ref_fn)(x))


def test_torch_compile_lazytensor():
    """LazyTensor builds its formula in the core (graph breaks there); the reduction runs as the
    operator in the graph after them."""
    x, y, b, _ = inputs(batch=(2,))

    def loss(x):
        return (lazy_kernel(x, y, b) ** 2).sum()

    compiled = torch.compile(loss, backend="aot_eager")
    xr = x.clone().requires_grad_()
    out = compiled(xr)
    close(out, (dense_kernel(x, y, b) ** 2).sum())
    close(torch.autograd.grad(out, xr)[0],
          func.grad(lambda x: (dense_kernel(x, y, b) ** 2).sum())(x))


def test_kernel_solve_refuses_transforms_clearly():
    from tessel.torch import KernelSolve
    ks = KernelSolve("Exp(-SqDist(X, Y)) * B", ["X = Vi(3)", "Y = Vj(3)", "B = Vj(1)"], "B",
                     axis=1)
    x = torch.randn(N, 3, dtype=F64)
    b = torch.randn(N, 1, dtype=F64)
    with pytest.raises(NotImplementedError, match="KernelSolve: torch.func transforms"):
        func.grad(lambda b: ks(x, x, b, alpha=1.0).sum())(b)
