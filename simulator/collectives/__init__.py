"""Collectives over the cluster graph: ring, double binary tree, hierarchical and NVLS algorithms as
phases of transfers; analytical and flow fidelities; NCCL-style algorithm and protocol selection."""

from simulator.collectives.constants import DEFAULT_CALIBRATION, Calibration, Protocol
from simulator.collectives.model import (
    ALGORITHMS,
    FIDELITIES,
    OPS,
    CollectiveModel,
    CollectiveResult,
    bus_factor,
)

__all__ = [
    "ALGORITHMS",
    "DEFAULT_CALIBRATION",
    "FIDELITIES",
    "OPS",
    "Calibration",
    "CollectiveModel",
    "CollectiveResult",
    "Protocol",
    "bus_factor",
]
