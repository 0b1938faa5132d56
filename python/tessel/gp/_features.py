"""The pieces of tessel.gp's prior draws: a kernel as a sum of products of factors, a stationary
factor's spectral measure drawn as frequencies, a Linear or Polynomial factor's exact features.

A stationary factor k(x, y) = variance * E cos(omega . (x - y)) is drawn as `variance` and L
frequencies omega; every measure here is symmetric (omega and -omega equally likely), so the
product of two is drawn by summing one frequency of each: E cos(a . t) E cos(b . t) =
E cos((a + b) . t) when E sin(a . t) = 0.
"""
import itertools
import math

import numpy as np
import torch

from .kernels import RBF, Matern, RationalQuadratic, Scale, _Product, _Sum
from .kernels_extra import Linear, Periodic, Polynomial, SpectralMixture

STATIONARY = (RBF, Matern, RationalQuadratic, Periodic, SpectralMixture)
EXACT = (Linear, Polynomial)
COVERED = ("random features for RBF, Matern, RationalQuadratic, Periodic and SpectralMixture, "
           "exact ones for Linear and Polynomial; Scale, sums and products of them")


def terms(k, who):
    """The kernel as [(coefficient, [factors])], a sum of products (products of sums expanded).

    Expanding keeps every factor's own draw: a sum inside a product has no spectral measure of
    one kind, while each of its products does.
    """
    if isinstance(k, Scale):
        c = float(k.outputscale)
        return [(c * a, f) for a, f in terms(k.base, who)]
    if isinstance(k, _Sum):
        return terms(k.a, who) + terms(k.b, who)
    if isinstance(k, _Product):
        return [(a * b, fa + fb) for a, fa in terms(k.a, who) for b, fb in terms(k.b, who)]
    if isinstance(k, STATIONARY + EXACT):
        return [(1.0, [k])]
    raise NotImplementedError(f"{who}: prior draws of a {type(k).__name__} kernel are not "
                              f"offered ({COVERED}); use predict_covariance for joint samples at "
                              "a few points")


def _numpy_rng(g):
    # numpy draws what torch 1.13's samplers cannot take a generator for, from a seed of g.
    return np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=g)))


def frequencies(k, d, count, g, who):
    """(variance, omega): k(x, y) = variance * E cos(omega . (x - y)), omega (count, d) drawn."""
    f64 = torch.float64
    if isinstance(k, (RBF, Matern, RationalQuadratic)):
        ell = k.lengthscale.detach().to(f64).reshape(-1).cpu()  # drawn on the host, as g is
        if ell.numel() not in (1, d):
            raise ValueError(f"{who}: {ell.numel()} lengthscales for points of dimension {d}")
        z = torch.randn(count, d, generator=g, dtype=f64)
        # Heavier tails than the Gaussian's as its scale mixtures.
        rng = _numpy_rng(g)
        if isinstance(k, Matern):  # a Student t with 2 nu degrees of freedom
            u = torch.as_tensor(rng.chisquare(2.0 * k.nu, count))
            z = z * torch.sqrt(2.0 * k.nu / u)[:, None]
        elif isinstance(k, RationalQuadratic):  # tau ~ Gamma(alpha, rate alpha)
            a = float(k.alpha)
            z = z * torch.sqrt(torch.as_tensor(rng.gamma(a, 1.0 / a, count)))[:, None]
        return 1.0, z / ell
    if isinstance(k, Periodic):
        if k.distance == "euclidean" and d > 1:
            raise NotImplementedError(
                f"{who}: Periodic(distance='euclidean') has no prior draw for points of "
                f"dimension {d} > 1: sin^2(pi |x - y| / period) is not positive definite there, "
                "so it has no spectral measure; distance='per_dimension' has one")
        # Per dimension, exp(-2 sin^2(pi t / p) / l^2) = sum_j exp(-z) I_|j|(z) cos(2 pi j t / p)
        # with z = 1 / l^2, and exp(-z) I_|j|(z) is the Skellam law of N1 - N2 with N1, N2 ~
        # Poisson(z / 2): the series' weights drawn exactly, with no truncation.
        lam = 0.5 / float(k.lengthscale) ** 2
        rng = _numpy_rng(g)
        j = rng.poisson(lam, (count, d)) - rng.poisson(lam, (count, d))
        return 1.0, torch.as_tensor(j, dtype=f64) * (2 * math.pi / float(k.period))
    if isinstance(k, SpectralMixture):
        k._check_d(d)
        w, mu, s = (t.detach().to(f64).cpu() for t in (k.weights, k.means, k.scales))
        # Component q by weight; its density is a Gaussian of sd 2 pi s_q around 2 pi mu_q, each
        # coordinate's sign at random (prod_d cos(a_d) is the mean of cos(sum_d +-a_d)).
        q = torch.multinomial(w / w.sum(), count, replacement=True, generator=g)
        sign = 2.0 * torch.randint(0, 2, (count, d), generator=g, dtype=f64) - 1
        z = torch.randn(count, d, generator=g, dtype=f64)
        return float(w.sum()), 2 * math.pi * (sign * mu[q] + s[q] * z)
    raise TypeError(f"{who}: {type(k).__name__} is not stationary")  # terms() sorted them


class ExactFeatures:
    """phi(x) with k(x, y) = phi(x) . phi(y) exactly, for a product of Linear and Polynomial
    factors (the row-wise Kronecker product of theirs)."""

    def __init__(self, factors, d):
        self.maps = [math.sqrt(float(k.variance)) if isinstance(k, Linear) else
                     _monomials(k.power, float(k.offset), d) for k in factors]
        self.count = math.prod(monomial_count(k, d) for k in factors)

    def __call__(self, x):
        out = None
        for m in self.maps:
            phi = m * x if isinstance(m, float) else torch.cat(
                [_monomial_values(x, idx) * coef.to(x.device) for idx, coef in m], 1)
            out = phi if out is None else (out[:, :, None] * phi[:, None, :]).reshape(
                x.shape[0], -1)
        return out


def _monomial_values(x, idx):
    if idx.shape[1] == 0:  # degree 0: the constant 1 (made, not the product of nothing)
        return x.new_ones(x.shape[0], idx.shape[0])
    return x[:, idx].prod(-1)


def _monomials(power, offset, d):
    """(x . y + c)^p = sum over |a| <= p of p! / ((p - |a|)! a!) c^(p - |a|) x^a y^a: per degree
    r, the (count, r) indices of each monomial x^a and sqrt of its coefficient."""
    out = []
    for r in range(power + 1):
        idx = list(itertools.combinations_with_replacement(range(d), r))
        coef = [math.factorial(power) / math.factorial(power - r) * offset ** (power - r) /
                math.prod(math.factorial(i.count(v)) for v in set(i)) for i in idx]
        out.append((torch.tensor(idx, dtype=torch.long).reshape(len(idx), r),
                    torch.tensor(coef, dtype=torch.float64).sqrt()))
    return out


def monomial_count(k, d):
    """How many exact features a Linear or Polynomial factor has in dimension d."""
    return d if isinstance(k, Linear) else math.comb(d + k.power, k.power)


def describe(k):
    return "Linear" if isinstance(k, Linear) else f"Polynomial(power={k.power})"
