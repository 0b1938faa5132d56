"""tessel.shapes: register curves and surfaces on tessel's reductions (memory O(N)).

- shapes: `PointCloud`, `Curve`, `Mesh` (tensors on any device, checked once, with
  differentiable centers, normals and lengths/areas);
- deformation kernels: `GaussianKernel`, `CauchyKernel`, `SumOfGaussians`,
  `AnisotropicGaussian` (widths may be learned tensors);
- `LDDMM`: geodesic shooting (Euler, Ralston, RK4, reversible Heun; `snapshots=`), and
  `NormalizedLDDMM`: the normalized Hamiltonian (kernel scaled by symmetric Sinkhorn against mu);
- data attachments: `KernelNorm` (MMD), `Currents`, `Varifold` (constant, linear, oriented,
  unoriented, Binet orientation kernels), `SinkhornLoss` (tessel.ot, measures as weights);
- `register(source, target, ...)`: the momenta that bring source onto target, and the history;
- `atlas(shapes, ...)`: a template and its deformations onto each shape, fitted together;
- `GaussianMixture`: EM fit of a weighted point cloud (memory O(N + K D^2)).
"""
from ._shape import Curve, Mesh, PointCloud
from .atlas import Atlas, atlas
from .attachments import Currents, KernelNorm, SinkhornLoss, Varifold
from .kernels import AnisotropicGaussian, CauchyKernel, GaussianKernel, Kernel, SumOfGaussians
from .lddmm import LDDMM, NormalizedLDDMM
from .mixture import GaussianMixture
from .registration import Registration, register

__all__ = ["PointCloud", "Curve", "Mesh", "Kernel", "GaussianKernel", "CauchyKernel",
           "SumOfGaussians", "AnisotropicGaussian", "LDDMM", "NormalizedLDDMM", "GaussianMixture",
           "register", "Registration", "atlas", "Atlas", "KernelNorm", "Currents", "Varifold",
           "SinkhornLoss"]
