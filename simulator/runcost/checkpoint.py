"""Checkpoint size and the time training stalls to take one (formulas.md §7)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.config.scenario import Scenario
from simulator.units import GB
from simulator.workload import params

#: Mixed-precision Adam checkpoint: fp32 master weights, momentum and variance (12 B/param) plus the
#: 16-bit weights (2 B/param) — formulas.md §7 (D), the ZeRO paper's K = 12 plus 2Ψ.
CHECKPOINT_BYTES_PER_PARAM = 14


@dataclass(frozen=True)
class CheckpointCost:
    """``size_bytes`` of one checkpoint; ``write_s`` to persist it; ``stall_s`` that training waits."""

    size_bytes: float
    writer_nodes: int
    write_s: float
    stall_s: float


def checkpoint_cost(scenario: Scenario) -> CheckpointCost:
    """Size = 14·Ψ·size_factor. Who writes: with any ZeRO/FSDP sharding every data-parallel rank
    saves its own shard (DeepSpeed per-rank optimizer files, FSDP sharded state dicts), so all nodes
    write at once; without sharding (DDP, ZeRO-0) one data-parallel replica (its tp·pp ranks) writes.

    ``write_s = size / min(storage aggregate, writer nodes × per-node bandwidth)``. Synchronous
    checkpoints stall for the write; asynchronous ones only for the snapshot of each GPU's share to
    host memory over PCIe.
    """
    ck = scenario.reliability.checkpoint
    size = CHECKPOINT_BYTES_PER_PARAM * params.count(scenario.model).total * ck.size_factor
    per_node = scenario.cluster.topology.gpus_per_node
    n_nodes = math.ceil(scenario.n_gpus / per_node)
    model_parallel = scenario.parallel.tp * scenario.parallel.pp
    sharded = scenario.parallel.effective_zero_stage > 0
    writer_gpus = scenario.n_gpus if sharded else model_parallel
    writer_nodes = n_nodes if sharded else min(n_nodes, math.ceil(model_parallel / per_node))
    bandwidth = min(ck.storage_GBps, writer_nodes * ck.per_node_write_GBps) * GB
    write_s = size / bandwidth
    if ck.asynchronous:
        stall_s = (size / writer_gpus) / scenario.cluster.gpu_spec.pcie_Bps
    else:
        stall_s = write_s
    return CheckpointCost(size_bytes=size, writer_nodes=writer_nodes, write_s=write_s, stall_s=stall_s)
