"""Checkpoint size and the time training stalls to take one (formulas.md §7)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.config.scenario import Scenario
from simulator.units import GB
from simulator.workload import params


def checkpoint_bytes_per_param(scenario: Scenario) -> int:
    """What a checkpoint holds per parameter: Adam's momentum and variance (8 B) and the fp32 weights
    (4 B), plus a separate 16-bit copy of the weights when the framework keeps one.

    DeepSpeed under fp16/bf16 keeps 16-bit weights beside the fp32 master copy: 2 + 12 = 14 B
    (formulas.md §7, the ZeRO paper's K = 12 plus 2Ψ); so does Megatron's distributed optimizer (16-bit
    model weights in the model checkpoint, the fp32 master and Adam states in the optimizer's: the
    ``2 + 12/d`` of its memory model, ``workload.memory.model_states``). DDP and FSDP under autocast keep
    fp32 parameters only (the 16-bit copies are transient): 4 + 8 = 12 B; so does any fp32/tf32 run.
    """
    par = scenario.parallel
    mixed = scenario.training.precision in ("fp16", "bf16", "fp8")
    sixteen_bit_weights = par.framework == "deepspeed" or (par.framework == "ddp" and par.distributed_optimizer)
    return 14 if mixed and sixteen_bit_weights else 12


@dataclass(frozen=True)
class CheckpointCost:
    """``size_bytes`` of one checkpoint; ``write_s`` to persist it; ``stall_s`` that training waits."""

    size_bytes: float
    writer_nodes: int
    write_s: float
    stall_s: float


def checkpoint_cost(scenario: Scenario) -> CheckpointCost:
    """Size = bytes per parameter (``checkpoint_bytes_per_param``) · Ψ · size_factor. Who writes: with any ZeRO/FSDP sharding every data-parallel rank
    saves its own shard (DeepSpeed per-rank optimizer files, FSDP sharded state dicts), so all nodes
    write at once; without sharding (DDP, ZeRO-0) one data-parallel replica (its tp·pp ranks) writes.

    ``write_s = size / min(storage aggregate, writer nodes × per-node bandwidth)``. Synchronous
    checkpoints stall for the write; asynchronous ones only for the snapshot of each GPU's share to
    host memory over PCIe.
    """
    ck = scenario.reliability.checkpoint
    size = checkpoint_bytes_per_param(scenario) * params.count(scenario.model).total * ck.size_factor
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
