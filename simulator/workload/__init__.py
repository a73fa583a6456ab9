"""Workload model: what one training step asks of a GPU, as pure functions of the configuration.

* :mod:`~simulator.workload.params` — exact parameter counts (total, embedding, per block, per GPU);
* :mod:`~simulator.workload.flops` — matrix FLOPs per block and per step, model (MFU) vs hardware (HFU);
* :mod:`~simulator.workload.ops` — per-kernel FLOPs, bytes and GEMM shapes on one GPU;
* :mod:`~simulator.workload.memory` — per-GPU bytes: model states, activations, buffers, verdict.

No I/O and no simpy here; formulas and their sources are in each function's docstring
(``shared/reference/formulas.md`` §1, §2, §4).
"""

from simulator.workload import flops, memory, ops, params

__all__ = ["flops", "memory", "ops", "params"]
