"""tessel.ot: optimal transport between point clouds on tessel's core (memory O(N + M)).

SamplesLoss takes GeomLoss's signature and defaults, so code switches by changing the import;
solve_sample returns the value, the potentials and the transport plan as a LazyTensor.
"""
from .samples_loss import SamplesLoss
from .solve import OTResult, solve_sample

__all__ = ["SamplesLoss", "solve_sample", "OTResult"]
