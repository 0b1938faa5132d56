"""Posterior samples of a GP in O(n) memory by the pathwise (Matheron) update: a prior function
drawn from random or exact features, moved to the posterior by one batched solve.

f_post(x) = f(x) + K(x, X) (K + D)^-1 (y - mean - f(X) - e), with f a prior draw and e ~ N(0, D)
(Wilson et al. 2020, "Efficiently sampling functions from Gaussian process posteriors"). The
kernel is expanded into a sum of products (Scale's constants carried); each product is drawn by
L random Fourier features of its stationary factors' spectral measure (RBF's Gaussian, Matérn's
Student t, the rational quadratic's Gaussian scale mixture, the periodic kernel's Bessel-weighted
harmonics, the spectral mixture's Gaussians; a product's frequency is the sum of one drawn from
each factor), times the exact features of its Linear and Polynomial factors (x, and the
monomials of degree <= power). The draw's covariance is the kernel's to a relative error of
about sqrt(2 / L) per entry (standard deviation, relative to the prior's standard deviations at
the two points), so L = 4096 gives about 2 %; products of Linear and Polynomial factors alone
are exact. The update is exact (to CG's tol).

Memory stays O((n + m) samples + chunk (features + F) + features samples), with F the exact
features of a product: at most max(features, d + 1) of them alone, and 64 (_TENSOR) beside random
features, whose F x features weights are drawn again for each chunk rather than stored (time F
times a stationary kernel's).
"""
import math

import numpy as np
import torch

from .. import _core
from . import _features, _torch_bbmm
from ._problem import _numpy64, _Problem

__all__ = ["PriorSampler"]

_CHUNK = 4096  # rows of features evaluated at once: memory chunk x features
_COLUMNS = 16  # sample paths per batched solve
_TENSOR = 64  # exact features beside random ones: F x features columns, F-fold time


class PriorSampler:
    """A draw of `samples` prior functions of `kernel` on R^d, evaluable at any points."""

    def __init__(self, kernel, d, samples, features, generator, who):
        self.parts = []
        for coef, factors in _features.terms(kernel, who):
            self.parts.append(_Part(coef, factors, d, samples, features, generator, who))

    def __call__(self, x):
        """The functions at x (m, d): (m, samples) float64, chunked over the rows."""
        return self._chunked(x, lambda xc: sum(part(xc) for part in self.parts))

    def covariance(self, x1, x2):
        """The drawn functions' covariance between x1 (m1, d) and x2 (m2, d), given the features:
        the random-feature estimate of the kernel, (m1, m2)."""
        x2 = x2.to(torch.float64)
        return self._chunked(x1, lambda xc: sum(part.covariance(xc, x2) for part in self.parts))

    @staticmethod
    def _chunked(x, fn):
        x = x.to(torch.float64)
        out = [fn(x[start:start + _CHUNK]) for start in range(0, x.shape[0], _CHUNK)]
        return torch.cat(out) if out else torch.zeros(0, 0, dtype=torch.float64)


class _Part:
    """One product of the kernel: coef * (product of its random Fourier features' kernel) *
    (product of its exact features' kernel), with `samples` functions drawn from it."""

    def __init__(self, coef, factors, d, s, features, g, who):
        stationary = [k for k in factors if isinstance(k, _features.STATIONARY)]
        exact = [k for k in factors if isinstance(k, _features.EXACT)]
        count = math.prod(_features.monomial_count(k, d) for k in exact)
        cap = _TENSOR if stationary else max(features, d + 1)
        if count > cap:
            names = " * ".join(_features.describe(k) for k in exact)
            beside = " beside random features" if stationary else f" (features={features})"
            raise NotImplementedError(
                f"{who}: {names} has {count} exact features for points of dimension {d}, more "
                f"than the {cap} a prior draw takes{beside}; use predict_covariance for joint "
                "samples at a few points")
        self.exact = _features.ExactFeatures(exact, d) if exact else None
        self.omega = None
        for k in stationary:
            variance, omega = _features.frequencies(k, d, features, g, who)
            coef *= variance
            self.omega = omega if self.omega is None else self.omega + omega
        self.root = math.sqrt(coef)
        if self.omega is not None:
            self.phase = 2 * math.pi * torch.rand(features, generator=g, dtype=torch.float64)
        if self.omega is not None and self.exact is not None:
            # One weight matrix per exact feature, drawn again from its seed at each use.
            self.seed, self.samples = int(torch.randint(0, 2**62, (1,), generator=g)), s
        else:
            rows = features if self.omega is not None else count
            self.w = torch.randn(rows, s, generator=g, dtype=torch.float64)

    def _at(self, name, device):
        # Moved once to the device of the first chunk, not copied again for every chunk.
        t = getattr(self, name)
        if t.device != device:
            t = t.to(device)
            setattr(self, name, t)
        return t

    def _features(self, x):
        # Drawn on the host (one generator whatever the device), used where x is.
        psi = None if self.omega is None else math.sqrt(2 / self.omega.shape[0]) * torch.cos(
            x @ self._at("omega", x.device).T + self._at("phase", x.device))
        return psi, None if self.exact is None else self.exact(x)

    def __call__(self, x):
        psi, phi = self._features(x)
        if phi is None or psi is None:
            return self.root * ((psi if phi is None else phi) @ self._at("w", x.device))
        out = 0
        for i in range(phi.shape[1]):
            g = torch.Generator().manual_seed(self.seed + i)
            w = torch.randn(psi.shape[1], self.samples, generator=g, dtype=torch.float64).to(
                x.device)
            out = out + phi[:, i:i + 1] * (psi @ w)
        return self.root * out

    def covariance(self, x1, x2):
        (psi1, phi1), (psi2, phi2) = self._features(x1), self._features(x2)
        out = self.root ** 2
        if psi1 is not None:
            out = out * (psi1 @ psi2.T)
        if phi1 is not None:
            out = out * (phi1 @ phi2.T)
        return out


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
        eps = torch.randn(n, samples, generator=g, dtype=torch.float64).to(x.device) * \
            noise.sqrt()[:, None]
        mean = gp._mean().detach()
        resid = (gp.y - mean)[:, None] - prior(x) - eps  # (n, samples)
        if mode == "exact":
            chol = gp._exact_cholesky(who)
            v = torch.cholesky_solve(resid, chol)
            update = gp.kernel.dense(xt.to(torch.float64), x.to(torch.float64)).detach() @ v
        elif x.device.type != "cpu":  # BBMM in PyTorch on the device, as ExactGP.predict
            rows = _torch_bbmm.Rows(gp)
            parts = []
            for start in range(0, samples, _COLUMNS):
                v, _ = _torch_bbmm.solve(gp, rows, resid[:, start:start + _COLUMNS], rank, tol)
                parts.append(rows.product(v, points=xt.to(x.dtype)))
            update = torch.cat(parts, 1)
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
