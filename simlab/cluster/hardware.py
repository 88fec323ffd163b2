"""Simulated clusters: one table of hardware facts, one row per cluster.

Every row carries its ``source``. Datasheet figures (peak FLOP/s, HBM, NVLink,
InfiniBand) are quoted from the vendor; the efficiency fields are modelling
assumptions and are marked as such in the row's source and in
``docs/simulator.md``.

Units: FLOP/s, bytes, bytes/s (per GPU, per direction), seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

GiB: float = float(1 << 30)

_H100_SRC = (
    "NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16 dense 989.4 TFLOP/s (1979 with sparsity), "
    "80 GB HBM3 at 3.35 TB/s, NVLink 4 900 GB/s bidirectional (450 GB/s per direction); "
    "NVLink 4 = 18 links x 50 GB/s. ")
_A100_SRC = (
    "NVIDIA A100 Tensor Core GPU datasheet (SXM4 40GB): BF16 dense 312 TFLOP/s (624 with sparsity), "
    "40 GB HBM2 at 1555 GB/s, NVLink 3 600 GB/s bidirectional (300 GB/s per direction); "
    "NVLink 3 = 12 links x 50 GB/s. ")
_NDR_SRC = "InfiniBand NDR 400 Gb/s per GPU (ConnectX-7, one NIC per GPU as in DGX H100) = 50 GB/s per direction. "
_HDR_SRC = "InfiniBand HDR 200 Gb/s per GPU (ConnectX-6, one NIC per GPU as in DGX A100) = 25 GB/s per direction. "
_ASSUME = (
    "Assumed (not datasheet): GEMM efficiency ceiling, FlashAttention efficiency (FA2 ~320 TFLOP/s fwd on H100 "
    "at 4k, FA3 paper Fig.; FA2 50-73% of A100 peak, FA2 paper), collective efficiency, HBM efficiency, "
    "per-kernel overhead, latencies (alpha of the alpha-beta model: ~µs NVLink, several µs IB), noise CV.")


@dataclass(frozen=True, kw_only=True, slots=True)
class Cluster:
    """One simulated cluster: homogeneous nodes of identical GPUs.

    ``intra_bw``/``inter_bw`` are link bandwidths per GPU and per direction
    (the ``B`` of the alpha-beta model); ``coll_eff`` is the share of it
    that NCCL collectives reach (bus bandwidth / link bandwidth).
    ``noise_cv`` is the run-to-run coefficient of variation of the step time.
    """

    name: str
    gpu: str
    nodes: int
    gpus_per_node: int
    peak_flops: float        # dense BF16 tensor-core FLOP/s per GPU
    hbm_bytes: float         # HBM capacity per GPU
    hbm_bw: float            # HBM bandwidth, bytes/s
    intra_bw: float          # NVLink per GPU per direction, bytes/s
    intra_latency_s: float   # alpha for an intra-node hop
    inter_bw: float          # InfiniBand per GPU per direction, bytes/s
    inter_latency_s: float   # alpha for an inter-node hop
    gemm_eff: float          # ceiling of achieved/peak for large BF16 GEMMs (assumed)
    gemm_half_flops: float   # GEMM size (FLOPs) that reaches half the ceiling (assumed)
    flash_eff: float         # achieved/peak of fused attention fwd+bwd (assumed)
    hbm_eff: float           # achieved/peak HBM bandwidth of memory-bound kernels (assumed)
    coll_eff: float          # achieved bus bandwidth / link bandwidth for NCCL (assumed)
    kernel_overhead_s: float  # fixed time per kernel: launch + tail (assumed)
    reserve_bytes: float     # CUDA context, NCCL and cuBLAS workspaces (assumed)
    frag_fraction: float     # allocator fragmentation: share of HBM that is unusable (assumed)
    noise_cv: float          # run-to-run coefficient of variation of the step time (assumed)
    source: str

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def usable_hbm_bytes(self) -> float:
        """HBM a training job can fill before the allocator reports OOM."""
        return self.hbm_bytes * (1.0 - self.frag_fraction) - self.reserve_bytes


def _h100(name: str, nodes: int, cv: float) -> Cluster:
    return Cluster(
        name=name, gpu="H100-SXM5-80GB", nodes=nodes, gpus_per_node=8,
        peak_flops=989.4e12, hbm_bytes=80 * GiB, hbm_bw=3.35e12,
        intra_bw=450e9, intra_latency_s=3e-6, inter_bw=50e9, inter_latency_s=6e-6,
        gemm_eff=0.65, gemm_half_flops=1e10, flash_eff=0.33, hbm_eff=0.80, coll_eff=0.80, kernel_overhead_s=5e-6,
        reserve_bytes=2.5 * GiB, frag_fraction=0.05, noise_cv=cv,
        source=_H100_SRC + (_NDR_SRC if nodes > 1 else "Single node: NVLink/NVSwitch only. ") + _ASSUME)


#: The hardware table: one row per cluster, each with its source.
CLUSTERS: tuple[Cluster, ...] = (
    _h100("h100-1x8", 1, 0.015),
    _h100("h100-2x8", 2, 0.025),
    _h100("h100-4x8", 4, 0.030),
    Cluster(
        name="a100-2x8", gpu="A100-SXM4-40GB", nodes=2, gpus_per_node=8,
        peak_flops=312e12, hbm_bytes=40 * GiB, hbm_bw=1.555e12,
        intra_bw=300e9, intra_latency_s=3e-6, inter_bw=25e9, inter_latency_s=6e-6,
        gemm_eff=0.75, gemm_half_flops=4e9, flash_eff=0.45, hbm_eff=0.80, coll_eff=0.80, kernel_overhead_s=5e-6,
        reserve_bytes=2.0 * GiB, frag_fraction=0.05, noise_cv=0.025,
        source=_A100_SRC + _HDR_SRC + _ASSUME),
)


def cluster(name: str) -> Cluster:
    """The cluster of that name; ValueError names the known ones."""
    for row in CLUSTERS:
        if row.name == name:
            return row
    raise ValueError(f"unknown cluster {name!r}; known: {', '.join(c.name for c in CLUSTERS)}")
