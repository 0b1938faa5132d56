"""tessel.shapes: register curves and surfaces on tessel's reductions (memory O(N)).

Shapes (`PointCloud`, `Curve`, `Mesh`) hold tensors on any device; deformation kernels, LDDMM
shooting, data attachments (kernel norms, currents, varifolds, Sinkhorn) and `register` build on
them.
"""
from ._shape import Curve, Mesh, PointCloud

__all__ = ["PointCloud", "Curve", "Mesh"]
