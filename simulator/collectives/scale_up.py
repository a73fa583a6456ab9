"""Per-GPU scale-up bandwidth as NCCL's topology search models it (the input of its tuner)."""

from __future__ import annotations

from simulator.collectives.constants import Calibration
from simulator.config.topology import FullMeshFabric, NVSwitchFabric
from simulator.network.cluster import Cluster


def scale_up_GBps(cluster: Cluster, cal: Calibration) -> float:
    """Per-GPU scale-up bandwidth as NCCL models it (GB/s, per direction): NVLink/xGMI line rate ×
    the per-class efficiency; PCIe GPU link × the PCIe efficiency when there is no scale-up fabric."""
    intra = cluster.topology.intra_node
    host = cluster.topology.host
    if isinstance(intra, NVSwitchFabric):
        return intra.bandwidth_GBps_per_gpu * cal.link_efficiency("nvlink", cluster.gpu.sm)
    if isinstance(intra, FullMeshFabric):
        links = cluster.gpus_per_node - 1
        return links * intra.link_GBps * cal.link_efficiency(intra.link, cluster.gpu.sm)
    return host.gpu_link_GBps * cal.pcie_efficiency
