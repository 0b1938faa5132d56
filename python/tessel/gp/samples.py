"""Posterior samples of a GP in O(n) memory by the pathwise (Matheron) update: a prior function
drawn with random Fourier features, moved to the posterior by one batched solve.

f_post(x) = f(x) + K(x, X) (K + D)^-1 (y - mean - f(X) - e), with f a prior draw and e ~ N(0, D)
(Wilson et al. 2020, "Efficiently sampling functions from Gaussian process posteriors"). The
prior draw is exact for the linear kernel and approximate, by L random Fourier features, for the
stationary ones: its covariance is the kernel's to a relative error of about sqrt(2 / L) per
entry (standard deviation), so L = 4096 gives about 2 %. The update is exact (to CG's tol).
"""
import math

import numpy as np
import torch

from .. import _core
from ._problem import _numpy64, _Problem
from .kernels import RBF, Matern, RationalQuadratic, Scale, _Product, _Sum
from .kernels_extra import Linear

__all__ = ["PriorSampler"]

_CHUNK = 4096  # rows of features evaluated at once: memory chunk x features
_COLUMNS = 16  # sample paths per batched solve


class PriorSampler:
    """A draw of `samples` prior functions of `kernel` on R^d, evaluable at any points."""

    def __init__(self, kernel, d, samples, features, generator, who):
        self.parts = []  # (kind, data): each part adds its functions
        self._add(kernel, 1.0, d, samples, features, generator, who)

    def _add(self, k, scale, d, s, features, g, who):
        if isinstance(k, Scale):
            return self._add(k.base, scale * float(k.outputscale), d, s, features, g, who)
        if isinstance(k, _Sum):
            self._add(k.a, scale, d, s, features, g, who)
            return self._add(k.b, scale, d, s, features, g, who)
        if isinstance(k, Linear):
            w = torch.randn(d, s, generator=g, dtype=torch.float64)
            self.parts.append(("linear", math.sqrt(scale * float(k.variance)) * w))
            return None
        if isinstance(k, (RBF, Matern, RationalQuadratic)):
            ell = k.lengthscale.detach().to(torch.float64).reshape(-1)
            if ell.numel() not in (1, d):
                raise ValueError(f"{who}: {ell.numel()} lengthscales for points of dimension {d}")
            z = torch.randn(features, d, generator=g, dtype=torch.float64)
            # Heavier-tailed frequencies as scale mixtures of the Gaussian's (numpy draws them
            # from a seed of g: torch 1.13's samplers take no generator).
            rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,), generator=g)))
            if isinstance(k, Matern):  # a Student t with 2 nu degrees of freedom
                u = torch.as_tensor(rng.chisquare(2.0 * k.nu, features))
                z = z * torch.sqrt(2.0 * k.nu / u)[:, None]
            elif isinstance(k, RationalQuadratic):  # tau ~ Gamma(alpha, rate alpha)
                a = float(k.alpha)
                z = z * torch.sqrt(torch.as_tensor(rng.gamma(a, 1.0 / a, features)))[:, None]
            omega = z / ell
            phase = 2 * math.pi * torch.rand(features, generator=g, dtype=torch.float64)
            w = torch.randn(features, s, generator=g, dtype=torch.float64)
            self.parts.append(("fourier", (omega, phase, math.sqrt(2 * scale / features) * w)))
            return None
        kinds = "RBF, Matern, RationalQuadratic, Linear, Scale and sums of them"
        if isinstance(k, _Product):
            raise NotImplementedError(f"{who}: prior draws of a product of kernels are not "
                                      f"offered (random features cover {kinds}); use "
                                      "predict_covariance for joint samples at a few points")
        raise NotImplementedError(f"{who}: prior draws of a {type(k).__name__} kernel are not "
                                  f"offered (random features cover {kinds}); use "
                                  "predict_covariance for joint samples at a few points")

    def __call__(self, x):
        """The functions at x (m, d): (m, samples) float64, chunked over the rows."""
        x = x.to(torch.float64)
        out = []
        for start in range(0, x.shape[0], _CHUNK):
            xc = x[start:start + _CHUNK]
            acc = 0
            for kind, data in self.parts:
                if kind == "linear":
                    acc = acc + xc @ data
                else:
                    omega, phase, w = data
                    acc = acc + torch.cos(xc @ omega.T + phase) @ w
            out.append(acc)
        return torch.cat(out) if out else torch.zeros(0, 0, dtype=torch.float64)


def posterior_samples(gp, x_test, samples, features, seed, mode, rank, tol):
    """See ExactGP.sample."""
    who = "ExactGP.sample"
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise ValueError(f"{who}: samples must be an integer >= 1, got {samples!r}")
    if isinstance(features, bool) or not isinstance(features, int) or features < 1:
        raise ValueError(f"{who}: features must be an integer >= 1, got {features!r}")
    xt = gp._test_points(x_test, who)
    mode = gp._mode(mode, who)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        x = gp.x
        n = x.shape[0]
        prior = PriorSampler(gp.kernel, x.shape[1], samples, features, g, who)
        noise = gp.noise.detach().to(torch.float64).expand(n)
        eps = torch.randn(n, samples, generator=g, dtype=torch.float64) * noise.sqrt()[:, None]
        mean = gp._mean().detach()
        resid = (gp.y - mean)[:, None] - prior(x) - eps  # (n, samples)
        if mode == "exact":
            chol = gp._exact_cholesky(who)
            v = torch.cholesky_solve(resid, chol)
            update = gp.kernel.dense(xt.to(torch.float64), x.to(torch.float64)).detach() @ v
        else:
            prob = _Problem(gp.kernel, x)
            pt = np.ascontiguousarray(xt.to(x.dtype).cpu().numpy())
            parts = []
            # Columns in blocks: a product's kernel is compiled for its width, and thousands of
            # columns would make one too large to compile (and a new one per sample count).
            for start in range(0, samples, _COLUMNS):
                r = _numpy64(resid[:, start:start + _COLUMNS])
                v, _ = _core.gp_solve(prob.formula, prob.params, prob.x, _numpy64(noise),
                                      r.reshape(-1), r.shape[1], rank, tol)
                parts.append(torch.as_tensor(_core.gp_kernel_product(
                    prob.formula, prob.params, pt, prob.x, np.ascontiguousarray(v), r.shape[1])))
            update = torch.cat(parts, 1)
        return mean + prior(xt) + update
