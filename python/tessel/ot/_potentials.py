"""The Sinkhorn potentials of one problem as a torch.autograd.Function (envelope gradients)."""
import torch

from .. import _core


def _numpy_to(t, like):
    return torch.from_numpy(t).to(dtype=like.dtype, device=like.device)


def _on_gpu(x, y):
    return x.device.type == "cuda" or y.device.type == "cuda"


def core_sinkhorn(a, x, b, y, solve):
    """The core's loop on detached inputs. CUDA points stay on their GPU, where every reduction
    of the loop runs; the weights go to the host (the loop reads them there) and the diameter,
    which the core would measure on host points, is measured here on the device."""
    a, x, b, y = a.detach(), x.detach(), b.detach(), y.detach()
    if _on_gpu(x, y):
        if x.device != y.device:
            raise ValueError(f"tessel.ot: x is on {x.device} but y on {y.device}; expected one "
                             "device")
        for name, t in (("x", x), ("y", y)):
            if not bool(torch.isfinite(t).all()):
                raise ValueError(f"tessel.ot: {name} has a non-finite coordinate; points must be "
                                 "finite")
        if solve.get("diameter") is None:
            pts = torch.cat((x, y))
            d = float((pts.max(0)[0] - pts.min(0)[0]).norm())
            solve = dict(solve, diameter=d if d > 0 else solve.get("blur", 0.05))
        a, b = a.cpu(), b.cpu()
    return _core.sinkhorn(a, x, b, y, **solve)


def core_vjp(a, x, b, y, parts, cots, solve):
    """The envelope gradients (grad_x, grad_y) from the core, on the points' device: the core
    reads the potentials, weights and cotangents on the host and writes host gradients."""
    host = [None if t is None else t.detach().cpu() for t in parts]
    cf, cg, cp, cq = (None if c is None else c.detach().cpu().contiguous() for c in cots)
    gx = torch.empty(x.shape, dtype=x.dtype)
    gy = torch.empty(y.shape, dtype=y.dtype)
    _core.sinkhorn_potentials_vjp(a.detach().cpu(), x.detach(), b.detach().cpu(), y.detach(),
                                  host, cf, cg, cp, cq, gx, gy, **solve)
    return gx.to(x.device), gy.to(y.device)


def bounding_diameter(*clouds):
    """GeomLoss's diameter estimate: the diagonal of the bounding box of every point of `clouds`
    ((..., D) tensors); None when all the points coincide."""
    dim = clouds[0].shape[-1]
    pts = torch.cat([c.detach().reshape(-1, dim).to(clouds[0].dtype) for c in clouds])
    # The norm in float64: the box's sides of float32 points at 1e20 fit, their squares do not.
    d = float((pts.max(0)[0] - pts.min(0)[0]).double().norm())
    return d if d > 0 else None


def refuse_create_graph(hint="pass gradient='implicit' (exact) or 'unrolled'"):
    """Raises when a backward builds a graph (create_graph=True, or torch.autograd.functional's
    double-backward trick): an envelope gradient holds the potentials' own dependence constant,
    so differentiating it again would be silently wrong, not merely inexact."""
    if torch.is_grad_enabled():
        raise RuntimeError(
            "tessel.ot: gradient='envelope' (the default) gives first derivatives only; for a "
            "gradient that is differentiated again (create_graph=True: Hessian-vector products, "
            f"gradient penalties) {hint}")


class _FirstOrderOnly(torch.autograd.Function):
    """The identity on tensors whose backward refuses to build a graph (refuse_create_graph)."""

    @staticmethod
    def forward(ctx, hint, *ts):
        ctx.hint = hint
        return tuple(t.view_as(t) for t in ts)

    @staticmethod
    def backward(ctx, *grads):
        refuse_create_graph(ctx.hint)
        return (None,) + grads


def first_order_only(*ts, hint="pass gradient='implicit' (exact) or 'unrolled'"):
    """ts, unchanged, such that a gradient reaching them cannot be differentiated again: the
    inputs of every computation whose gradients are envelope ones."""
    return _FirstOrderOnly.apply(hint, *ts)


class SinkhornPotentials(torch.autograd.Function):
    """(f, g, p, q) = the potentials after the last extrapolation of the core's Sinkhorn loop.

    Forward: the core's loop (core_sinkhorn) on detached inputs. Backward: the envelope theorem,
    as GeomLoss differentiates its last extrapolation: each potential is one softmin of x (or y)
    against the other cloud, the potentials it started from and the weights held constant; the
    gradients in x and y come from one Sum reduction per potential (core_vjp). The weights a, b
    get no gradient here: the loss uses them outside this function.
    """

    @staticmethod
    def forward(ctx, x, y, a, b, solve, vjp, report=None):
        xd, yd, ad, bd = x.detach(), y.detach(), a.detach(), b.detach()
        res = core_sinkhorn(ad, xd, bd, yd, solve)
        if report is not None:  # what solve_sample returns besides the potentials
            report.update(history=res.history, converged=res.converged, eps=res.eps,
                          diameter=res.diameter)
        ctx.vjp = vjp
        f, g = _numpy_to(res.f, x), _numpy_to(res.g, x)
        ins = [torch.from_numpy(res.f_in), torch.from_numpy(res.g_in)]
        if solve["debias"]:
            p, q = _numpy_to(res.p, x), _numpy_to(res.q, x)
            ins += [torch.from_numpy(res.p_in), torch.from_numpy(res.q_in)]
        else:
            p, q = x.new_zeros(0), x.new_zeros(0)
        # Tensors only: a core object held by the graph would outlive the interpreter.
        ctx.save_for_backward(xd, yd, ad, bd, f, g, p, q, *ins)
        ctx.mark_non_differentiable(*(() if solve["debias"] else (p, q)))
        return f, g, p, q

    @staticmethod
    def backward(ctx, cf, cg, cp, cq):
        refuse_create_graph()  # before anything: a weight's gradient alone is first order too
        if not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
            return None, None, None, None, None, None, None
        x, y, a, b, *pots = ctx.saved_tensors
        debias = ctx.vjp["debias"]
        f, g, p, q, *ins = pots
        parts = [f, g, p, q] + ins if debias else [f, g, None, None, ins[0], ins[1], None, None]

        def cot(c, n):
            return None if c is None or not debias and n == 0 else c

        gx, gy = core_vjp(a, x, b, y, parts, (cot(cf, 1), cot(cg, 1), cot(cp, 0), cot(cq, 0)),
                          ctx.vjp)
        return (gx if ctx.needs_input_grad[0] else None,
                gy if ctx.needs_input_grad[1] else None, None, None, None, None, None)
