"""Cluster helpers on NumPy arrays (pykeops.numpy.cluster's API): voxel clusters, cluster
ranges and centroids, sparsity masks."""
import numpy as np

from . import check_cluster_ranges, sort_clusters, swap_axes  # noqa: F401

__all__ = sorted(["grid_cluster", "from_matrix", "sort_clusters", "cluster_ranges",
                  "cluster_centroids", "cluster_ranges_centroids", "swap_axes"])


def grid_cluster(x, size):
    """(M,) int labels of the cubic cells of side `size` holding the points x (M, D), the cells
    being floor(x / size) (from the origin, as pykeops.numpy does). Labels are 0..C-1 in the
    lexicographic order of the cells (the first coordinate most significant)."""
    x = np.asarray(x)
    if x.ndim != 2:
        raise ValueError(f"grid_cluster: expected an (M, D) array, got shape {x.shape}")
    cells = np.floor(x / size).astype(np.int64)
    _, labels = np.unique(cells, axis=0, return_inverse=True)
    return labels.reshape(-1).astype(int)


def cluster_ranges(lab, Nlab=None):
    """(C, 2) int [start, end) of each cluster in a point cloud sorted by label."""
    counts = np.bincount(lab) if Nlab is None else np.rint(np.asarray(Nlab)).astype(np.int64)
    ends = np.cumsum(counts)
    return np.stack((ends - counts, ends), axis=1).astype(int)


def cluster_centroids(x, lab, Nlab=None, weights=None, weights_c=None):
    """(C, D) centroids sum_{i in k} w_i x_i / sum_{i in k} w_i (weights 1 by default), in
    x's dtype."""
    lab = np.asarray(lab).ravel()
    if Nlab is None:
        Nlab = np.bincount(lab).astype(float)
    C, D = len(Nlab), x.shape[1]
    w = None if weights is None else np.asarray(weights).ravel()
    wx = x if w is None else x * w[:, None]
    num = np.stack([np.bincount(lab, weights=wx[:, d], minlength=C) for d in range(D)], axis=1)
    if w is None:
        den = np.asarray(Nlab, dtype=float)
    elif weights_c is None:
        den = np.bincount(lab, weights=w, minlength=C)
    else:
        den = np.asarray(weights_c).ravel()
    return (num / den[:, None]).astype(x.dtype)


def cluster_ranges_centroids(x, lab, weights=None):
    """(ranges (C, 2) int, centroids (C, D), total weight per cluster (C,) float64); without
    weights the third output is the number of points per cluster (float64), as in pykeops."""
    Nlab = np.bincount(lab).astype(float)
    if weights is None:
        return cluster_ranges(lab, Nlab), cluster_centroids(x, lab, Nlab), Nlab
    w_c = np.bincount(lab, weights=np.asarray(weights).ravel(), minlength=len(Nlab))
    return (cluster_ranges(lab, Nlab),
            cluster_centroids(x, lab, Nlab, weights=weights, weights_c=w_c), w_c)


def from_matrix(ranges_i, ranges_j, keep):
    """The 6-tuple `ranges` of a block-sparse reduction from cluster ranges and an (Mc, Nc)
    boolean mask (all int64): (ranges_i, slices_i, redranges_j, ranges_j, slices_j, redranges_i)."""
    check_cluster_ranges(ranges_i, ranges_j)
    ranges_i, ranges_j = np.asarray(ranges_i), np.asarray(ranges_j)
    keep = np.asarray(keep).astype(bool)
    k, l = np.nonzero(keep)          # row-major: grouped by i-cluster
    lt, kt = np.nonzero(keep.T)      # grouped by j-cluster
    as64 = lambda a: np.asarray(a).astype(np.int64)  # noqa: E731
    return (as64(ranges_i), as64(np.cumsum(keep.sum(1))), as64(ranges_j[l]), as64(ranges_j),
            as64(np.cumsum(keep.sum(0))), as64(ranges_i[kt]))
