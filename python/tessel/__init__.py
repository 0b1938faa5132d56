"""tessel: compiled, differentiable kernel reductions that never store the N x M matrix.

`tessel.numpy` and `tessel.torch` hold the array-library front ends; the core lives in the
C++ extension `tessel._core`.
"""
from ._core import (Formula, Reduction, parse, simd_level, num_threads, cache_dir,  # noqa: F401
                    cuda_available, cuda_status, InternalError)

__version__ = "0.1.0"
__all__ = ["Formula", "Reduction", "parse", "simd_level", "num_threads", "cache_dir",
           "cuda_available", "cuda_status", "InternalError"]
