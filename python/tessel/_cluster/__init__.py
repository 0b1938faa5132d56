"""Block-sparse cluster helpers: clusters, their ranges and centroids, sparsity masks as `ranges`.

Their home below both users: tessel.ot's multiscale solver and pykeops's `cluster` modules in
tessel.compat (which re-export them). This module holds what is the same for NumPy arrays and
PyTorch tensors (duck-typed); `numpy` and `torch` hold the rest, one per array library, so that
the NumPy side never imports PyTorch.
"""

from .._genred import int_array_shape

__all__ = ["sort_clusters", "swap_axes", "check_cluster_ranges"]


def check_cluster_ranges(ranges_i, ranges_j):
    """from_matrix's cluster ranges: (n, 2) integer arrays (a float would become an index by
    truncation, dropping the last point of a cluster)."""
    for name, r in (("ranges_i", ranges_i), ("ranges_j", ranges_j)):
        shape = int_array_shape(r, name, "from_matrix")
        if len(shape) != 2 or shape[1] != 2:
            raise ValueError(f"from_matrix: {name} must have shape (n, 2) ([start, end) pairs), "
                             f"got shape {shape}")


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
