"""The cluster helpers that are the same for NumPy arrays and PyTorch tensors (duck-typed)."""

__all__ = ["sort_clusters", "swap_axes"]


def sort_clusters(x, lab):
    """Sorts points (an array, or a tuple / list of arrays) by label so that clusters are
    contiguous; returns (sorted points, sorted labels)."""
    lab = lab.reshape(-1)
    perm = lab.argsort()
    lab = lab[perm]
    if isinstance(x, tuple):
        return tuple(a[perm] for a in x), lab
    if isinstance(x, list):
        return [a[perm] for a in x], lab
    return x[perm], lab


def swap_axes(ranges):
    """The ranges of the transposed reduction (None stays None)."""
    return None if ranges is None else (*ranges[3:6], *ranges[0:3])
