"""Cluster helpers on PyTorch tensors (pykeops.torch.cluster's API): voxel clusters, cluster
ranges and centroids, sparsity masks."""
import torch

from . import check_cluster_ranges, sort_clusters, swap_axes  # noqa: F401

__all__ = sorted(["grid_cluster", "from_matrix", "sort_clusters", "cluster_ranges",
                  "cluster_centroids", "cluster_ranges_centroids", "swap_axes"])


def grid_cluster(x, size):
    """(M,) int32 labels of the cubic cells of side `size` (a number or a (D,) tensor) that hold
    the points x (M, D), cells counted from the lower corner of the cloud. Labels are 0..C-1 in
    the lexicographic order of the cells (the first coordinate most significant), as pykeops."""
    if x.dim() != 2:
        raise ValueError(f"grid_cluster: expected an (M, D) tensor, got shape {tuple(x.shape)}")
    with torch.no_grad():
        cells = torch.floor((x - x.min(dim=0, keepdim=True).values) / size).to(torch.int64)
        _, labels = torch.unique(cells, sorted=True, return_inverse=True, dim=0)
    return labels.reshape(-1).to(torch.int32)


def cluster_ranges(lab, Nlab=None):
    """(C, 2) int64 [start, end) of each cluster in a point cloud sorted by label; `Nlab`: the
    number of points per cluster if already known."""
    counts = torch.bincount(lab) if Nlab is None else Nlab
    if counts.is_floating_point():
        counts = counts.round()
    counts = counts.to(torch.int64)
    ends = torch.cumsum(counts, 0)
    return torch.stack((ends - counts, ends), dim=1)


def cluster_centroids(x, lab, Nlab=None, weights=None, weights_c=None):
    """(C, D) centroids sum_{i in k} w_i x_i / sum_{i in k} w_i (weights 1 by default)."""
    index = lab.reshape(-1).to(torch.int64)
    if Nlab is None:
        Nlab = torch.bincount(index).float()
    C = len(Nlab)
    if weights is None:
        num = torch.zeros((C, x.shape[1]), dtype=x.dtype, device=x.device).index_add_(0, index, x)
        den = Nlab.to(x.dtype)
    else:
        w = weights.reshape(-1)
        num = torch.zeros((C, x.shape[1]), dtype=torch.promote_types(x.dtype, w.dtype),
                          device=x.device).index_add_(0, index, x * w[:, None])
        den = weights_c if weights_c is not None else torch.zeros(
            C, dtype=w.dtype, device=w.device).index_add_(0, index, w)
        den = den.reshape(-1)
    return (num / den[:, None]).to(x.dtype)


def cluster_ranges_centroids(x, lab, weights=None, min_weight=1e-9):
    """(ranges (C, 2) int64, centroids (C, D), weights per cluster (C,)) of a labelled cloud.

    Weights are clamped below at `min_weight`; without weights the third output is the float32
    number of points per cluster, as in pykeops."""
    index = lab.reshape(-1).to(torch.int64)
    Nlab = torch.bincount(index).float()
    if weights is None:
        return cluster_ranges(lab, Nlab), cluster_centroids(x, lab, Nlab), Nlab
    w = torch.where(weights <= min_weight, torch.full_like(weights, min_weight), weights)
    w_c = torch.zeros(len(Nlab), dtype=w.dtype, device=w.device).index_add_(0, index,
                                                                              w.reshape(-1))
    return (cluster_ranges(lab, Nlab),
            cluster_centroids(x, lab, Nlab, weights=w, weights_c=w_c), w_c)


def from_matrix(ranges_i, ranges_j, keep):
    """The 6-tuple `ranges` of a block-sparse reduction from cluster ranges and an (Mc, Nc)
    boolean mask: (ranges_i, slices_i, redranges_j, ranges_j, slices_j, redranges_i)."""
    check_cluster_ranges(ranges_i, ranges_j)
    keep = keep.to(torch.bool)
    pairs = torch.nonzero(keep)        # (k, l) in row-major order: grouped by i-cluster
    pairs_t = torch.nonzero(keep.t())  # (l, k): grouped by j-cluster
    redranges_j = ranges_j[pairs[:, 1]]
    redranges_i = ranges_i[pairs_t[:, 1]]
    slices_i = torch.cumsum(keep.sum(1), 0).to(torch.int64)
    slices_j = torch.cumsum(keep.sum(0), 0).to(torch.int64)
    return (ranges_i, slices_i, redranges_j, ranges_j, slices_j, redranges_i)
