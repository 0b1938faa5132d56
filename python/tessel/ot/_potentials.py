"""The Sinkhorn potentials of one problem as a torch.autograd.Function (envelope gradients)."""
import torch

from .. import _core


def _numpy_to(t, like):
    return torch.from_numpy(t).to(like.dtype)


class SinkhornPotentials(torch.autograd.Function):
    """(f, g, p, q) = the potentials after the last extrapolation of the core's Sinkhorn loop.

    Forward: _core.sinkhorn on detached inputs. Backward: the envelope theorem, as GeomLoss
    differentiates its last extrapolation: each potential is one softmin of x (or y) against the
    other cloud, the potentials it started from and the weights held constant; the gradients in
    x and y come from one Sum reduction per potential (_core.sinkhorn_potentials_vjp). The
    weights a, b get no gradient here: the loss uses them outside this function.
    """

    @staticmethod
    def forward(ctx, x, y, a, b, solve, vjp, report=None):
        xd, yd, ad, bd = x.detach(), y.detach(), a.detach(), b.detach()
        res = _core.sinkhorn(ad, xd, bd, yd, **solve)
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
        if not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
            return None, None, None, None, None, None, None
        x, y, a, b, *pots = ctx.saved_tensors
        debias = ctx.vjp["debias"]
        f, g, p, q, *ins = pots
        parts = [f, g, p, q] + ins if debias else [f, g, None, None, ins[0], ins[1], None, None]

        def cot(c, n):
            return None if c is None or not debias and n == 0 else c.detach().contiguous()

        gx, gy = torch.empty_like(x), torch.empty_like(y)
        _core.sinkhorn_potentials_vjp(a, x, b, y, parts, cot(cf, 1), cot(cg, 1),
                                      cot(cp, 0), cot(cq, 0), gx, gy, **ctx.vjp)
        return (gx if ctx.needs_input_grad[0] else None,
                gy if ctx.needs_input_grad[1] else None, None, None, None, None, None)
