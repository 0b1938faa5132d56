"""Float32's range in tessel.ot: exact power-of-two rescaling, float64 where none fits, masses.

Float32 holds 2^-126 to 2^128. The built-in costs and kernels are homogeneous in the lengths:
dividing the points, blur, reach and diameter by a power of two s is exact and multiplies the
value, the potentials and the gradients by powers of two (s^p for Sinkhorn, s for the energy
kernel, 1 for the Gaussian and Laplacian ones), so a problem far from unit size is solved at
unit size and scaled back without a rounding. One ratio no rescaling changes: Sinkhorn's
C / eps, up to (diameter / blur)^p. Past 2^100 the loop's log-weights g / eps and C / eps leave
float32 (NaN before); such clouds are solved on their float64 copies (exact) and the result is
rounded to float32 once, or refused where that rounding overflows.
"""
import math

import torch

_UNIT = 2.0 ** 16  # lengths within [1/_UNIT, _UNIT] are left as given (results as before)
_EPS_LOG2 = 100  # eps = blur^p within 2^+-100 at unit scale leaves 1/eps and C/eps in range
_RATIO_LOG2 = 100  # (diameter / blur)^p above this: C / eps does not fit float32 (see above)
_EXTENT_LOG2 = 100  # coordinates / s above this would overflow once squared and summed
_SOFT_LOG2 = 60  # eps / rho (or eps, dense) above this: float64 (eps_past_float32)


def _pow2(v):
    return 2.0 ** round(math.log2(v))


def float32_scale(loss, p, blur, diameter, extent):
    """The power of two s by which float32 points and lengths are divided (1: left as they are),
    or None where no s keeps the solver in float32's range (then it runs in float64).

    loss: "sinkhorn" or a kernel name; diameter: the schedule's start (Sinkhorn) or the clouds'
    bounding box (None if the points coincide); extent: the largest |coordinate|."""
    if loss == "sinkhorn":
        if diameter is None:
            return 1
        if p * math.log2(diameter / blur) > _RATIO_LOG2:
            return None
        unit = 1 / _UNIT <= diameter <= _UNIT
        if unit and abs(p * math.log2(blur)) <= _EPS_LOG2:
            return 1
        return _pow2(diameter)
    if loss == "energy":  # -|x - y|: only distances matter, their squares must be normal
        return 1 if diameter is None or 1 / _UNIT <= diameter <= _UNIT else _pow2(diameter)
    # Gaussian and Laplacian kernels depend on |x - y| / blur alone: blur itself goes to ~1.
    s = 1 if 1 / _UNIT <= blur <= _UNIT else _pow2(blur)
    return None if extent > s * 2.0 ** _EXTENT_LOG2 else s


def eps_past_float32(p, blur, dense, *reaches):
    """Whether a float32 Sinkhorn problem must run in float64 (then rounded once) for its eps:
    soft-marginal potentials ~ rho C / eps underflow float32 past eps / rho = 2^_SOFT_LOG2, and
    a loop on dense float32 cost matrices meets eps itself (inf past 2^128)."""
    rho = [r for r in reaches if r is not None]
    return bool((rho and p * math.log2(blur / min(rho)) > _SOFT_LOG2)
                or (dense and p * math.log2(blur) > _SOFT_LOG2))


def degree(loss, p):
    """The power of s by which the loss scales when every length is multiplied by s."""
    return p if loss == "sinkhorn" else 1 if loss == "energy" else 0


def to_float32(t, who):
    """A float64 result of float32 inputs, rounded to float32; a ValueError where it overflows."""
    out = t.float()
    if not bool(torch.isfinite(out.detach()).all()) and bool(torch.isfinite(t.detach()).all()):
        raise ValueError(f"{who}: the result for these float32 points is about "
                         f"{float(t.detach().abs().max()):.3g}, past float32's range; pass "
                         "float64 points")
    return out


def distinct_digits(u, v):
    """u and v with the fewest significant digits (at least 6) whose difference, as printed, is
    u - v to 10 %: 1 + 1e-6 and 1 - 1e-6 print as 1.000001 and 0.999999, not 1 and 0.999999."""
    for k in range(6, 18):
        su, sv = f"{u:.{k}g}", f"{v:.{k}g}"
        if abs(float(su) - float(sv) - (u - v)) <= 0.1 * abs(u - v):
            break
    return su, sv


def check_masses(who, a, b):
    """Balanced OT has no solution between different total masses (the potentials would drift):
    a ValueError naming both sums, to as many digits as tell them apart (the core's message read
    "a sums to 1 and b to 1" for 1 + 1e-6 and 1 - 1e-6). a (B, N), b (B, M); the core's
    tolerance (a relative 1e-4 in float32, 1e-8 in float64)."""
    tol = 1e-4 if a.dtype == torch.float32 else 1e-8
    if not all(bool(((w >= 0) & torch.isfinite(w)).all()) for w in (a.detach(), b.detach())):
        return  # the core names the weight that is negative or not finite
    for k, (ma, mb) in enumerate(zip(a.detach().double().sum(-1).tolist(),
                                     b.detach().double().sum(-1).tolist())):
        if abs(ma - mb) > tol * max(ma, mb):
            sa, sb = distinct_digits(ma, mb)
            rel, most = distinct_digits(abs(ma - mb) / max(ma, mb), tol)
            where = f" (problem {k} of the batch)" if a.shape[0] > 1 else ""
            raise ValueError(f"{who}: balanced OT (reach None) needs equal total masses; the "
                             f"weights a sum to {sa} and b to {sb}{where}, a relative "
                             f"difference of {rel} > {most}: normalise a and b, or give a reach")


class Scaled(torch.autograd.Function):
    """t * forward_factor, whose backward multiplies by backward_factor: the power-of-two
    factors of a rescaled loss, moved to where the cotangents cannot underflow."""

    @staticmethod
    def forward(ctx, t, forward_factor, backward_factor):
        ctx.backward_factor = backward_factor
        return t * forward_factor

    @staticmethod
    def backward(ctx, g):
        return g * ctx.backward_factor, None, None
