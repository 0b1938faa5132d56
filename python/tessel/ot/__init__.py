"""tessel.ot: optimal transport between point clouds on tessel's core (memory O(N + M)).

SamplesLoss takes GeomLoss's signature and defaults, so code switches by changing the import.
"""
from .samples_loss import SamplesLoss

__all__ = ["SamplesLoss"]
