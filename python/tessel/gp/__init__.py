"""tessel.gp: Gaussian processes on tessel's kernel reductions, in O(n) memory.

What is here: kernels as formulas with their hyperparameters as PyTorch parameters (RBF, Matérn 1/2,
3/2, 5/2, rational quadratic, periodic, linear, polynomial; ARD lengthscales; sums, products,
Scale), positive ones through softplus; `ExactGP`, exact GP regression with Gaussian noise (fixed or
learned, or known per-point variances) and a zero or constant mean, whose log marginal likelihood
and gradient come either from a dense float64 Cholesky (mode="exact", small n and tests) or from the
core's BBMM (mode="bbmm": pivoted-Cholesky preconditioner, batched preconditioned CG on y and probe
vectors, stochastic Lanczos quadrature, GPyTorch's variance-reduced gradient, one gradient reduction
per call and no derivative matrix); `predict` gives the posterior mean and exact per-point variances
(batched solves chunked over the test points); `ExactGP.fit`, L-BFGS or Adam with a history,
progress lines and clear failures.

Not here yet: posterior samples and LOVE variances, the spectral mixture kernel, Nyström kernel
ridge, scikit-learn estimators, the GPyTorch bridge, distributed and R front ends.
"""
from .kernels import Kernel, Matern, RationalQuadratic, RBF, Scale
from .kernels_extra import Linear, Periodic, Polynomial
from .model import ExactGP

__all__ = ["Kernel", "RBF", "Matern", "RationalQuadratic", "Periodic", "Linear", "Polynomial",
           "Scale", "ExactGP"]
