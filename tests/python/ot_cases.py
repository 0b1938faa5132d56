"""Shared data of the tessel.ot tests: weighted float64 point clouds with positive weights."""
import torch


def weighted_clouds(n, m, d=2, seed=0, shift=0.25, floor=0.2, batch=None):
    """a (n), x (n, d), b (m), y (m, d), with a leading batch axis when `batch` is given: uniform
    points, y shifted by `shift`, weights in [floor, floor + 1) normalised to mass 1."""
    g = torch.Generator().manual_seed(seed)
    lead = () if batch is None else (batch,)
    x = torch.rand(lead + (n, d), generator=g, dtype=torch.float64)
    y = torch.rand(lead + (m, d), generator=g, dtype=torch.float64) + shift
    a = torch.rand(lead + (n,), generator=g, dtype=torch.float64) + floor
    b = torch.rand(lead + (m,), generator=g, dtype=torch.float64) + floor
    return a / a.sum(-1, keepdim=True), x, b / b.sum(-1, keepdim=True), y
