"""Shared data of the tessel.ot tests: weighted float64 point clouds with positive weights."""
import torch


def weighted_clouds(n, m, d=2, seed=0, shift=0.25):
    """a (n), x (n, d), b (m), y (m, d): uniform points, y shifted by `shift`, weights in
    [0.2, 1.2) normalised to mass 1."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, d, generator=g, dtype=torch.float64)
    y = torch.rand(m, d, generator=g, dtype=torch.float64) + shift
    a = torch.rand(n, generator=g, dtype=torch.float64) + 0.2
    b = torch.rand(m, generator=g, dtype=torch.float64) + 0.2
    return a / a.sum(), x, b / b.sum(), y
