"""Collective communication costs: the alpha-beta model with ring algorithms.

A message of n bytes over one hop costs alpha + n/B (Hockney's model). Ring
algorithms over p ranks (Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan
2009) cost

* all-reduce:                 2(p-1)·alpha + 2(p-1)/p · n/B
* reduce-scatter, all-gather:  (p-1)·alpha +  (p-1)/p · n/B   (n = the full, unsharded size)
* all-to-all (pairwise):       (p-1)·alpha +  (p-1)/p · n/B

B is the bus bandwidth a rank reaches: the link bandwidth per direction times
the cluster's ``coll_eff``. A group that spans nodes with g members on each node
runs g rings in parallel, one per NIC (NCCL's one-channel-per-NIC layout), so
its inter-node bottleneck is g × the per-GPU NIC bandwidth, capped by NVLink.
Rank layout follows Megatron-LM (tp fastest, then ep, then dp, then pp): a
group of ``size`` ranks ``stride`` apart spans nodes iff stride·size > GPUs per node.
"""

from __future__ import annotations

import numpy as np

from simlab.cluster.hardware import Cluster


def group_link(c: Cluster, size: np.ndarray | int, stride: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """(bus bandwidth bytes/s, per-step latency s) of a group of ``size`` ranks ``stride`` apart."""
    size = np.asarray(size, dtype=float)
    stride = np.asarray(stride, dtype=float)
    spans = stride * size > c.gpus_per_node
    per_node = np.clip(np.floor(c.gpus_per_node / stride), 1.0, size)
    bw = np.where(spans, np.minimum(c.intra_bw, per_node * c.inter_bw), c.intra_bw) * c.coll_eff
    alpha = np.where(spans, c.inter_latency_s, c.intra_latency_s)
    return bw, alpha


def all_reduce(n: np.ndarray, p: np.ndarray, bw: np.ndarray, alpha: np.ndarray,
               calls: np.ndarray | float = 1.0) -> np.ndarray:
    """Ring all-reduce of ``n`` bytes split over ``calls`` collectives (buckets)."""
    p = np.asarray(p, dtype=float)
    return np.where(p > 1, 2 * (p - 1) / p * n / bw + 2 * (p - 1) * alpha * calls, 0.0)


def gather_or_scatter(n: np.ndarray, p: np.ndarray, bw: np.ndarray, alpha: np.ndarray,
                      calls: np.ndarray | float = 1.0) -> np.ndarray:
    """Ring reduce-scatter or all-gather of ``n`` (unsharded) bytes over ``calls`` collectives."""
    p = np.asarray(p, dtype=float)
    return np.where(p > 1, (p - 1) / p * n / bw + (p - 1) * alpha * calls, 0.0)


def all_to_all(c: Cluster, n: np.ndarray, p: np.ndarray, stride: np.ndarray) -> np.ndarray:
    """Pairwise all-to-all where each rank sends ``n`` bytes in total (1/p to each peer).

    Intra- and inter-node shares travel concurrently (NVLink and NIC); the
    slower one sets the time. Off-node share = (p - g)/(p - 1) of the peers.
    """
    p = np.asarray(p, dtype=float)
    stride = np.asarray(stride, dtype=float)
    per_node = np.clip(np.floor(c.gpus_per_node / stride), 1.0, p)
    peers = np.maximum(p - 1, 1.0)
    off_node = np.where(stride * p > c.gpus_per_node, (p - per_node) / peers, 0.0)
    sent = (p - 1) / p * n
    t_intra = sent * (1 - off_node) / (c.intra_bw * c.coll_eff)
    t_inter = sent * off_node / (c.inter_bw * c.coll_eff)
    alpha = np.where(off_node > 0, c.inter_latency_s, c.intra_latency_s)
    return np.where(p > 1, np.maximum(t_intra, t_inter) + (p - 1) * alpha, 0.0)


def point_to_point(c: Cluster, n: np.ndarray, inter_node: np.ndarray | bool) -> np.ndarray:
    """One send of ``n`` bytes between neighbouring pipeline stages."""
    bw = np.where(inter_node, c.inter_bw, c.intra_bw) * c.coll_eff
    alpha = np.where(inter_node, c.inter_latency_s, c.intra_latency_s)
    return alpha + n / bw
