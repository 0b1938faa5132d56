"""Tensors a user function reads without their being passed in (closures, nn.Module parameters,
weights computed before the call) get the gradients of unrolled autograd, in every tool."""
import pytest
import torch

from tessel.torch import (Genred, KernelSolve, ReversibleCoupling, cg_solve, checkpoint_loop,
                          checkpoint_while, fixed_point, odeint_reversible)

F64 = torch.float64
TOL = 1e-10


def close(got, ref, tol=TOL):
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g is not None, "a tensor the function reads got no gradient"
        torch.testing.assert_close(g, r, rtol=tol, atol=tol)


def grads(loss, tensors, **kw):
    return torch.autograd.grad(loss, tensors, retain_graph=True, **kw)


class World:
    """What the functions below read: a leaf P, a non-leaf W computed from it before the call, a
    stack of per-step weights indexed by the step, a bias read at a few steps only, and a module
    with a buffer."""

    def __init__(self, d=3, n=9):
        g = torch.Generator().manual_seed(7)
        self.P = (0.4 * torch.randn(d, d, dtype=F64, generator=g)).requires_grad_()
        self.W = self.P * 0.5 + 0.1  # non-leaf: its gradient must flow on to P
        self.stack = (0.2 * torch.randn(n, d, dtype=F64, generator=g)).requires_grad_()
        self.rows = self.stack * 1.5  # non-leaf, read by indexing only (which 1.13 hides)
        self.rare = torch.randn(d, dtype=F64, generator=g).requires_grad_()
        self.net = torch.nn.Sequential(torch.nn.Linear(d, 8), torch.nn.Tanh(),
                                       torch.nn.Linear(8, d)).double()
        self.net.register_buffer("scale", torch.tensor(0.3, dtype=F64))
        self.x0 = torch.randn(2, d, dtype=F64, generator=g).requires_grad_()

    def leaves(self):
        return [self.x0, self.P, self.stack, self.rare, *self.net.parameters()]

    def step(self, x, k):
        # P is read directly and through W: its gradient must count each path once.
        y = torch.tanh(x @ self.W) + 0.1 * x @ self.P + self.rows[k % self.stack.shape[0]]
        y = y + self.net.scale * self.net(x)
        if k % 4 == 2:  # read at a few steps only
            y = y + self.rare * x
        return 0.5 * (x + y)


def unrolled(step, x, n):
    for k in range(n):
        x = step(x, k)
    return x


# ---- checkpoint_loop ----------------------------------------------------------------------------
@pytest.mark.parametrize("snapshots", [1, 3, 20])
def test_checkpoint_closure_nonleaf_module_buffer_and_rare_parameters(snapshots):
    w, n = World(), 13
    ts = w.leaves() + [w.W]
    ref = grads(unrolled(w.step, w.x0, n).square().sum(), ts)
    out = checkpoint_loop(w.step, w.x0, n, snapshots)
    close(grads(out.square().sum(), ts), ref)


def test_checkpoint_backward_accumulates_into_every_parameter():
    w, n = World(), 10
    ref = grads(unrolled(w.step, w.x0, n).sum(), w.leaves())
    checkpoint_loop(w.step, w.x0, n, 3).sum().backward()
    close([t.grad for t in w.leaves()], ref)
    assert w.net.scale.grad is None and not w.net.scale.requires_grad


class _ModuleStep(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3).double()
        self.register_buffer("shift", torch.full((3,), 0.05, dtype=F64))

    def forward(self, x, k):
        return torch.sin(self.lin(x)) + self.shift * k


def test_checkpoint_module_step_and_explicit_params_union():
    step, n = _ModuleStep(), 11
    x0 = torch.randn(4, 3, dtype=F64, requires_grad=True)
    extra = torch.randn(3, dtype=F64, requires_grad=True)  # listed, unused: a zero gradient
    ts = [x0, *step.parameters()]
    ref = grads(unrolled(step, x0, n).square().sum(), ts)
    out = checkpoint_loop(step, x0, n, 2, params=[step.lin.weight, extra])
    got = grads(out.square().sum(), ts + [extra], allow_unused=True)
    close(got[:-1], ref)
    assert got[-1] is None or not got[-1].any()


def test_checkpoint_create_graph_and_a_state_the_step_also_captures():
    w, n = World(), 7

    def step(x, k):  # reads the initial state through the closure too
        return w.step(x, k) + 0.1 * w.x0

    def hvp(run):
        gx, gp = torch.autograd.grad(run(w.x0).square().sum(), [w.x0, w.P], create_graph=True)
        return grads(gx.square().sum() + gp.sum(), w.leaves())

    ref = hvp(lambda x: unrolled(step, x, n))
    close(hvp(lambda x: checkpoint_loop(step, x, n, 3)), ref)


def test_checkpoint_genred_inside_the_step_without_params():
    gauss = Genred("Exp(-SqDist(X,Y))*B", ["X = Vi(2)", "Y = Vj(2)", "B = Vj(2)"], "Sum", axis=1)
    y = torch.randn(9, 2, dtype=F64, requires_grad=True)
    b = (0.3 * torch.randn(9, 2, dtype=F64)).requires_grad_()
    bw = b * 2.0  # non-leaf, read only through the custom autograd Function

    def step(x, k):
        return x + 0.1 * gauss(x, y, bw)

    x0 = torch.randn(6, 2, dtype=F64, requires_grad=True)
    ts = [x0, y, b]
    ref = grads(unrolled(step, x0, 8).sum(), ts)
    close(grads(checkpoint_loop(step, x0, 8, 2).sum(), ts), ref)


def test_checkpoint_tensor_appearing_only_in_backward_raises():
    holder = [torch.randn(3, dtype=F64, requires_grad=True)]
    x0 = torch.randn(3, dtype=F64, requires_grad=True)
    out = checkpoint_loop(lambda x, k: x * holder[0], x0, 6, 2)
    holder[0] = torch.randn(3, dtype=F64, requires_grad=True)  # not what the forward read
    with pytest.raises(RuntimeError, match="checkpoint_loop: .*never reached"):
        out.sum().backward()


# ---- odeint_reversible --------------------------------------------------------------------------
def heun_unrolled(f, y0, t, m):
    """Reversible Heun with autograd through every step (the reference)."""
    rows, y = [y0], y0
    for k in range(len(t) - 1):
        h = (t[k + 1] - t[k]) / m
        grid = [t[k] + j * h for j in range(m + 1)]
        if k == 0:
            z, F = y0, f(grid[0], y0)
        for j in range(m):
            z1 = 2 * y - z + F * h
            F1 = f(grid[j + 1], z1)
            y = y + (F + F1) * (h / 2)
            z, F = z1, F1
        rows.append(y)
    return torch.stack(rows)


def test_odeint_closure_nonleaf_module_buffer_and_rare_parameters():
    w = World()

    def f(t, y):
        k = int(float(t) * 8)  # the stack row and the rare bias depend on the time
        return w.step(y, k) - y

    t = torch.linspace(0, 1, 3, dtype=F64)
    ts = w.leaves() + [w.W]
    ref = grads(heun_unrolled(f, w.x0, t, 4).square().sum(), ts)
    stats = {}
    out = odeint_reversible(f, w.x0, t, steps_per_interval=4, stats=stats)
    close(grads(out.square().sum(), ts), ref, tol=1e-9)
    assert stats["reconstruction_error"] < 1e-12
    out = odeint_reversible(f, w.x0, t, steps_per_interval=4)
    out.square().sum().backward()
    close([p.grad for p in w.leaves()], ref[:len(w.leaves())], tol=1e-9)


class _Field(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3).double()
        self.register_buffer("damp", torch.tensor(0.2, dtype=F64))

    def forward(self, t, y):
        return torch.tanh(self.lin(y)) - self.damp * y


@pytest.mark.parametrize("inside_closure", [False, True])
def test_odeint_module_field(inside_closure):
    field = _Field()
    f = (lambda t, y: 2.0 * field(t, y)) if inside_closure else field
    y0 = torch.randn(5, 3, dtype=F64, requires_grad=True)
    t = torch.tensor([0.0, 0.3, 0.7], dtype=F64)
    ts = [y0, *field.parameters()]
    ref = grads(heun_unrolled(f, y0, t, 3).sum(), ts)
    close(grads(odeint_reversible(f, y0, t, steps_per_interval=3).sum(), ts), ref, tol=1e-9)


def test_odeint_create_graph_and_a_state_the_field_also_captures():
    w = World()
    y0 = w.x0

    def f(t, y):
        return torch.tanh(y @ w.W) - 0.3 * y0

    t = torch.tensor([0.0, 0.5], dtype=F64)

    def second(run):
        gy, gp = torch.autograd.grad(run().sin().sum(), [y0, w.P], create_graph=True)
        return grads(gy.square().sum() + gp.square().sum(), [y0, w.P])

    ref = second(lambda: heun_unrolled(f, y0, t, 5))
    close(second(lambda: odeint_reversible(f, y0, t, steps_per_interval=5)), ref, tol=1e-9)


# ---- fixed_point and cg_solve (they differentiate through a graph of the function) ---------------
def test_fixed_point_closure_nonleaf_and_module():
    w = World()
    lin = torch.nn.Linear(3, 3).double()
    with torch.no_grad():
        lin.weight.mul_(0.2)

    def f(x):  # a contraction: |df/dx| < 1
        return 0.3 * torch.tanh(x @ w.W) + 0.2 * lin(x) + 0.1 * w.rare

    x0 = torch.zeros(2, 3, dtype=F64)
    ts = [w.P, w.rare, *lin.parameters(), w.W]
    x = x0
    for _ in range(200):
        x = f(x)
    ref = grads(x.square().sum(), ts)
    got = fixed_point(f, x0, tol=1e-14, backward_tol=1e-14)
    close(grads(got.square().sum(), ts), ref, tol=1e-9)
    with pytest.raises(RuntimeError, match="fixed_point: double backward"):
        torch.autograd.grad(torch.autograd.grad(fixed_point(f, x0).sum(), w.P,
                                                create_graph=True)[0].sum(), w.P)


def test_cg_solve_closure_nonleaf_and_module_to_second_order():
    g = torch.Generator().manual_seed(3)
    n = 6
    L = (0.3 * torch.randn(n, n, dtype=F64, generator=g)).requires_grad_()
    M = L @ L.T + torch.eye(n, dtype=F64)  # non-leaf, made before the solve
    lin = torch.nn.Linear(n, n, bias=False).double()
    b = torch.randn(n, dtype=F64, requires_grad=True)

    def matvec(v):
        return M @ v + 0.1 * lin.weight.T @ (lin.weight @ v)

    A = M + 0.1 * lin.weight.T @ lin.weight

    def second(solve):
        x = solve()
        gl, gw = torch.autograd.grad(x.square().sum(), [L, lin.weight], create_graph=True)
        return [x.detach()] + list(grads(gl.square().sum() + gw.sum(), [L, lin.weight, b]))

    ref = second(lambda: torch.linalg.solve(A, b))
    close(second(lambda: cg_solve(matvec, b, tol=1e-13)), ref, tol=1e-8)


# ---- ReversibleCoupling -------------------------------------------------------------------------
class _Branch(torch.nn.Module):
    """A branch that reads, besides its parameters, a captured leaf and a non-leaf weight."""

    def __init__(self, extra, weight):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2).double()
        self.register_buffer("gain", torch.tensor(0.5, dtype=F64))
        self._extra, self._weight = [extra], [weight]  # not registered: plain attributes

    def forward(self, h):
        return self.gain * torch.tanh(self.lin(h) @ self._weight[0]) + self._extra[0]


@pytest.mark.parametrize("depth", [1, 3])
def test_reversible_coupling_reads_unregistered_tensors(depth):
    g = torch.Generator().manual_seed(5)
    extra = torch.randn(2, dtype=F64, generator=g).requires_grad_()
    P = torch.randn(2, 2, dtype=F64, generator=g).requires_grad_()
    W = P.T * 0.7  # non-leaf (a view-free product of a view)
    blocks = [ReversibleCoupling(_Branch(extra, W), _Branch(extra * 2, P)) for _ in range(depth)]
    x = torch.randn(5, 4, dtype=F64, generator=g).requires_grad_()
    ts = [x, extra, P] + [p for blk in blocks for p in blk.parameters()]

    def plain(x):
        for blk in blocks:
            x1, x2 = x.chunk(2, dim=1)
            y1 = x1 + blk.F(x2)
            x = torch.cat([y1, x2 + blk.G(y1)], dim=1)
        return x

    def run(x):
        for blk in blocks:
            x = blk(x)
        return x

    ref = grads(plain(x).square().sum(), ts)
    close(grads(run(x).square().sum(), ts), ref)
    ref2 = grads(torch.autograd.grad(plain(x).square().sum(), P, create_graph=True)[0].sum(), ts)
    got2 = grads(torch.autograd.grad(run(x).square().sum(), P, create_graph=True)[0].sum(), ts)
    close(got2, ref2)


# ---- KernelSolve (no user function: every tensor it reads is an argument) ------------------------
def test_kernel_solve_arguments_made_by_a_module():
    g = torch.Generator().manual_seed(2)
    lin = torch.nn.Linear(2, 2).double()
    z = torch.randn(12, 2, dtype=F64, generator=g).requires_grad_()
    b = torch.randn(12, 1, dtype=F64, generator=g).requires_grad_()
    solve = KernelSolve("Exp(-SqDist(X,Y))*B", ["X = Vi(2)", "Y = Vj(2)", "B = Vj(1)"], "B")
    x = lin(z)  # non-leaf arguments: gradients go on to z and the module
    ts = [z, b, *lin.parameters()]
    K = torch.exp(-((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))
    ref = grads(torch.linalg.solve(K + 0.5 * torch.eye(12, dtype=F64), b).square().sum(), ts)
    got = solve(x, x, b, alpha=0.5, tol=1e-13)
    close(grads(got.square().sum(), ts), ref, tol=1e-7)


# ---- hooks, retain_grad and autograd.grad at the tensors a function reads ----------------------
# PyTorch 2.x runs a tensor's hooks on what autograd.grad captures for it, and names the tensors
# made before a call by autograd's sequence numbers (1.13 has none); both paths run only there.
HAS_SEQUENCE_NRS = hasattr(torch.zeros((), requires_grad=True).view(()).grad_fn, "_sequence_nr")


def _made(P, kind):
    """A non-leaf tensor made from P before the call, of P's shape."""
    return {"product": lambda: P * 0.5 + 0.1, "view": lambda: P.t(),
            "index": lambda: P[[1, 0]]}[kind]()


def _run_tool(tool, reads, x0):
    """(unrolled reference, tool) pair of results of a function of x0 that calls reads(x)."""
    if tool == "checkpoint_loop":
        def step(x, k):
            return 0.5 * x + 0.1 * reads(x)
        return lambda: unrolled(step, x0, 5), lambda: checkpoint_loop(step, x0, 5, 2)
    if tool == "odeint_reversible":
        t = torch.tensor([0.0, 0.4, 0.9], dtype=F64)

        def field(t, y):
            return reads(y) - 0.2 * y
        return (lambda: heun_unrolled(field, x0, t, 3),
                lambda: odeint_reversible(field, x0, t, steps_per_interval=3))

    class Branch(torch.nn.Module):
        def forward(self, h):
            return reads(h)
    blocks = [ReversibleCoupling(Branch(), Branch()) for _ in range(2)]

    def plain():
        x = x0
        for blk in blocks:
            x1, x2 = x.chunk(2, dim=1)
            y1 = x1 + blk.F(x2)
            x = torch.cat([y1, x2 + blk.G(y1)], dim=1)
        return x

    def rev():
        x = x0
        for blk in blocks:
            x = blk(x)
        return x
    return plain, rev


TOOLS = ["checkpoint_loop", "odeint_reversible", "ReversibleCoupling"]


@pytest.mark.parametrize("kind", ["product", "view", "index"])
@pytest.mark.parametrize("tool", TOOLS)
def test_hooks_and_retain_grad_on_read_tensors_run_once_on_the_whole_gradient(tool, kind):
    """A hook that changes the gradient (here doubles it: clipping, scaling) sees what unrolled
    autograd gives it, and changes it once, on the leaf P and on W made from it before the call."""
    seen = {}
    for how in ("unrolled", "tool"):
        g = torch.Generator().manual_seed(4)
        P = (0.5 * torch.randn(2, 2, dtype=F64, generator=g)).requires_grad_()
        W = _made(P, kind)
        W.retain_grad()
        calls = {"P": [], "W": []}
        for name, t in (("P", P), ("W", W)):
            t.register_hook(lambda gr, c=calls[name]: (c.append(gr.detach().clone()), 2 * gr)[1])
        x0 = torch.randn(3, 4 if tool == "ReversibleCoupling" else 2, dtype=F64, generator=g)
        x0.requires_grad_()

        def reads(x):
            return torch.tanh(x @ W) + 0.3 * x @ P
        ref, run = _run_tool(tool, reads, x0)
        (ref if how == "unrolled" else run)().square().sum().backward()
        seen[how] = calls, P.grad, W.grad, x0.grad
    (ref_calls, *ref), (got_calls, *got) = seen["unrolled"], seen["tool"]
    close(got, ref, tol=1e-9)
    for name in ("P", "W"):
        close([sum(got_calls[name])], [sum(ref_calls[name])], tol=1e-9)
    assert len(got_calls["P"]) == len(ref_calls["P"]) == 1
    if HAS_SEQUENCE_NRS or kind == "product":
        # Otherwise W is walked through to P (see tessel.loops._captured): its hook sees each
        # recomputation's share apart, whose sum is checked above.
        assert len(got_calls["W"]) == len(ref_calls["W"]) == 1


@pytest.mark.skipif(not HAS_SEQUENCE_NRS, reason="PyTorch 1.13 has no autograd sequence numbers: "
                    "a captured view, indexing result or custom Function output is walked through "
                    "to its leaves, which get their gradients, but not itself (tessel.loops._captured)")
@pytest.mark.parametrize("tool", TOOLS)
def test_autograd_grad_at_read_views_indexing_and_genred_outputs(tool):
    g = torch.Generator().manual_seed(6)
    P = (0.5 * torch.randn(2, 2, dtype=F64, generator=g)).requires_grad_()
    gauss = Genred("Exp(-SqDist(X,Y))*B", ["X = Vi(2)", "Y = Vj(2)", "B = Vj(2)"], "Sum", axis=1)
    V, R, Gz = P.t(), P[1], gauss(P, P, P)  # made before the call; the function reads them
    x0 = torch.randn(3, 4 if tool == "ReversibleCoupling" else 2, dtype=F64, generator=g)
    x0.requires_grad_()

    def reads(x):
        return torch.tanh(x @ V) + 0.2 * R + 0.1 * x @ Gz

    ref, run = _run_tool(tool, reads, x0)
    ts = [x0, P, V, R, Gz]
    close(grads(run().square().sum(), ts, allow_unused=True), grads(ref().square().sum(), ts),
          tol=1e-9)


@pytest.mark.parametrize("passthrough", ["to", "contiguous", "type_as"])
def test_a_call_handing_back_its_argument_keeps_the_gradient(passthrough):
    # x.to(x.dtype), x.contiguous() and x.type_as(x) return x itself: the leaf read through them
    # is still an outside tensor, and must get the gradient of unrolled autograd in every tool.
    s = torch.tensor(0.7, dtype=F64, requires_grad=True)
    x0 = torch.linspace(-1, 1, 6, dtype=F64).reshape(3, 2).requires_grad_()

    def read_s():
        return {"to": lambda: s.to(dtype=F64, device=s.device), "contiguous": s.contiguous,
                "type_as": lambda: s.type_as(s)}[passthrough]()

    def step(x, k):
        return x + 0.1 * torch.sin(read_s() * x)

    ref = grads(unrolled(step, x0, 5).square().sum(), [x0, s])
    close(grads(checkpoint_loop(step, x0, 5, 2).square().sum(), [x0, s]), ref)
    t = torch.linspace(0, 1, 2, dtype=F64)
    out = odeint_reversible(lambda _t, y: torch.sin(read_s() * y), x0, t, steps_per_interval=4)
    ref_ode = grads(heun_unrolled(lambda _t, y: torch.sin(read_s() * y), x0, t, 4)[-1]
                    .square().sum(), [x0, s])
    close(grads(out[-1].square().sum(), [x0, s]), ref_ode, tol=1e-9)


# ---- a non-leaf tensor read through a view ------------------------------------------------------
def _read_through_view(tool, reads, x0):
    """The result of `tool` on a function of x0 that calls reads(x), for the tools _run_tool does
    not build (dopri5 has no unrolled reference: its test checks the chain rule instead)."""
    if tool == "checkpoint_while":
        return checkpoint_while(lambda x, k: k < 5, lambda x, k: 0.5 * x + 0.1 * reads(x), x0, 2)
    t = torch.tensor([0.0, 0.4, 0.9], dtype=F64)
    return odeint_reversible(lambda _t, y: reads(y) - 0.2 * y, x0, t, method="dopri5",
                             rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("where", ["before the call", "by the function"])
@pytest.mark.parametrize("tool", TOOLS + ["checkpoint_while", "dopri5"])
def test_a_non_leaf_read_through_a_view_gets_its_share(tool, where):
    """X, made from the leaf P before the call (points moved to the GPU, a network's output), is
    read through the view X[None][0] (how tessel.ot reads the batch's k-th cloud), made before the
    call or by the function with an indexing PyTorch 1.13's modes do not see. The walk went
    through the view to P: P got the whole gradient, X missed the function's share."""
    g = torch.Generator().manual_seed(3)
    P = (0.5 * torch.randn(2, 2, dtype=F64, generator=g)).requires_grad_()
    X = P * 0.5 + 0.1
    V = X[None][0]
    x0 = torch.randn(3, 4 if tool == "ReversibleCoupling" else 2, dtype=F64, generator=g)
    x0.requires_grad_()

    def reads(x):
        return torch.tanh(x @ (V if where == "before the call" else X[None][0]))

    ts = [x0, P, X]
    if tool in TOOLS:
        ref, run = _run_tool(tool, reads, x0)
        got = grads(run().square().sum(), ts, allow_unused=True)
        close(got, grads(ref().square().sum(), ts))
    else:
        got = grads(_read_through_view(tool, reads, x0).square().sum(), ts, allow_unused=True)
        if tool == "checkpoint_while":
            close(got, grads(unrolled(lambda x, k: 0.5 * x + 0.1 * reads(x), x0, 5)
                             .square().sum(), ts))
    # P reaches the function through X = P / 2 + 0.1 only: dL/dP = dL/dX / 2, to rounding.
    assert got[2] is not None, "X, read through a view, got no gradient"
    close([got[1]], [0.5 * got[2]], tol=1e-14)
