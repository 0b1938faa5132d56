"""tessel.gp: Gaussian processes on tessel's kernel reductions, in O(n) memory.

What is here: kernels as formulas with their hyperparameters as PyTorch parameters (RBF, Matérn
1/2, 3/2, 5/2, rational quadratic, periodic, linear, polynomial, spectral mixture; ARD
lengthscales; sums, products, Scale), positive ones through softplus; `ExactGP`, exact GP
regression with Gaussian noise (fixed or learned, or known per-point variances) and a zero or
constant mean, whose log marginal likelihood and gradient come either from a dense float64 Cholesky
(mode="exact", small n and tests) or from the core's BBMM (mode="bbmm": pivoted-Cholesky
preconditioner, batched preconditioned CG on y and probe vectors, stochastic Lanczos quadrature,
GPyTorch's variance-reduced gradient, one gradient reduction per call and no derivative matrix);
`predict` gives the posterior mean and exact per-point variances (batched solves chunked over the
test points); `ExactGP.fit`, L-BFGS or Adam with a history, progress lines and clear failures.

`SparseGP`: sparse GP regression on M learned inducing points (Titsias's bound, GPflow's SGPR),
O(n M^2) time and O(M^2) memory per step: the model for a million points.

`NystromRidge`: Nyström kernel ridge regression, Falkon-preconditioned CG in the core.
`NystromRidge.tune` learns its hyperparameters by descending the exact GCV score.
`GaussianProcessRegressor` and `NystromKernelRidge`: scikit-learn's estimator API (they import
scikit-learn). GPyTorch's
KeOps kernels (gpytorch.kernels.keops) run on tessel after tessel.compat.install().

`ExactGP.sample`: posterior samples in O(n) memory by the pathwise update of a random-feature prior
draw.

`GPyTorchKernel`: a tessel.gp kernel as a GPyTorch kernel (it imports GPyTorch).
"""
from .kernels import Kernel, Matern, RationalQuadratic, RBF, Scale
from .kernels_extra import Linear, Periodic, Polynomial, SpectralMixture
from .model import ExactGP
from .ridge import NystromRidge
from .sparse import SparseGP

__all__ = ["Kernel", "RBF", "Matern", "RationalQuadratic", "Periodic", "Linear", "Polynomial",
           "SpectralMixture", "Scale", "ExactGP", "SparseGP", "GaussianProcessRegressor",
           "NystromRidge", "NystromKernelRidge", "GPyTorchKernel"]


def __getattr__(name):
    # scikit-learn and GPyTorch are imported only by who asks for their APIs.
    if name in ("GaussianProcessRegressor", "NystromKernelRidge"):
        try:
            from . import estimators
        except ImportError as e:
            raise ImportError(f"tessel.gp.{name} needs scikit-learn (pip install scikit-learn): "
                              f"{e}") from e
        return getattr(estimators, name)
    if name == "GPyTorchKernel":
        try:
            from .gpytorch_kernel import GPyTorchKernel
        except ImportError as e:
            raise ImportError(f"tessel.gp.GPyTorchKernel needs GPyTorch (pip install gpytorch): "
                              f"{e}") from e
        return GPyTorchKernel
    raise AttributeError(f"module 'tessel.gp' has no attribute {name!r}")
