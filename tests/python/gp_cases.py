"""What the tessel.gp tests share: central finite differences of the exact log likelihood."""
import numpy as np
import torch


def exact_finite_differences(gp, h=1e-6):
    """d log p(y) / d raw parameter, every entry of gp.parameters() in order, by central
    differences of the exact mode (float64)."""
    fd = []
    with torch.no_grad():
        for p in gp.parameters():
            for k in range(p.numel()):
                p.view(-1)[k] += h
                up = float(gp.log_marginal_likelihood(mode="exact"))
                p.view(-1)[k] -= 2 * h
                down = float(gp.log_marginal_likelihood(mode="exact"))
                p.view(-1)[k] += h
                fd.append((up - down) / (2 * h))
    return np.array(fd)
