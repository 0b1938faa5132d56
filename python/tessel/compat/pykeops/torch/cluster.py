"""pykeops.torch.cluster on tessel: the cluster helpers of tessel._cluster.torch, re-exported."""
from ...._cluster.torch import (__all__, check_cluster_ranges, cluster_centroids,  # noqa: F401
                                cluster_ranges, cluster_ranges_centroids, from_matrix,
                                grid_cluster, sort_clusters, swap_axes)
