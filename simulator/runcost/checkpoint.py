"""Checkpoint size and the time training stalls to take one (formulas.md §7)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.config.scenario import Scenario
from simulator.units import GB
from simulator.workload import lora as wlora
from simulator.workload import model_states, params


def checkpoint_bytes(scenario: Scenario) -> float:
    """What one checkpoint holds: each trained parameter's persistent weight and optimizer states, at the bytes
    the memory model gives them (``workload.model_states.state_sizes``; gradients are not saved), over the whole
    model.

    * DeepSpeed and Megatron in 16-bit training save the 16-bit weights beside the fp32 master and Adam's states,
      2 + 12 = 14 B (formulas.md §7, the ZeRO paper's K = 12 plus 2Ψ; Megatron's model checkpoint holds the
      16-bit weights, its optimizer's the master and moments, with or without the distributed optimizer).
      PyTorch DDP and FSDP under autocast keep fp32 parameters only (the 16-bit copies are transient): 4 + 8 =
      12 B; so does any fp32/tf32 run.
    * Megatron-Core's precision-aware optimizer writes the BF16 weights' 16-bit master remainders and fp32
      moments, 2 + 2 + 8 = 12 B (``optimizer_state_bytes(saved=True)``).
    * Muon: the fp32 master and one momentum for the blocks' matrices, Adam's states for the embedding and
      output layer (``workload.muon``).
    * LoRA (``training.lora``): the adapters only, their weights and optimizer states; the frozen base weights
      are not saved (Megatron-Bridge's ``PEFT.params_to_save``: "Checkpoints store adapter weights only",
      NVIDIA's Megatron-Bridge LoRA guide).

    Kept at 2 B (U): a weight stored in FP8 (``parallel.fp8_param_gather``); how Megatron-Core saves FP8
    parameters is not read."""
    model, lora = scenario.model, scenario.training.lora
    if lora is not None:
        trained = model.n_layers * wlora.block_params(model, lora, 1)
        (weight, _, optimizer), _ = model_states.state_sizes(scenario, trained, 0.0, saved=True)
        return (weight + optimizer) * trained
    counts = params.count(model)
    (weight, _, optimizer), _ = model_states.state_sizes(scenario, counts.total, counts.embedding + counts.lm_head,
                                                         saved=True)
    return (weight + optimizer) * counts.total


@dataclass(frozen=True)
class CheckpointCost:
    """``size_bytes`` of one checkpoint; ``write_s`` to persist it; ``stall_s`` that training waits."""

    size_bytes: float
    writer_nodes: int
    write_s: float
    stall_s: float


def checkpoint_cost(scenario: Scenario) -> CheckpointCost:
    """Size = ``checkpoint_bytes`` · size_factor. Who writes: with any ZeRO/FSDP sharding every data-parallel rank
    saves its own shard (DeepSpeed per-rank optimizer files, FSDP sharded state dicts), so all nodes
    write at once; without sharding (DDP, ZeRO-0) one data-parallel replica (its tp·pp ranks) writes.

    ``write_s = size / min(storage aggregate, writer nodes × per-node bandwidth)``. Synchronous
    checkpoints stall for the write; asynchronous ones only for the snapshot of each GPU's share to
    host memory over PCIe.
    """
    ck = scenario.reliability.checkpoint
    size = checkpoint_bytes(scenario) * ck.size_factor
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
