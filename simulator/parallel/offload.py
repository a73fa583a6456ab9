"""ZeRO-Offload / FSDP CPUOffload steps on the task graph (formulas.md §5).

Gradients go down to host memory as they are reduced (each rank copies its own partition), the
optimizer runs on the host CPU at a catalogued CPU-Adam rate, and the updated 16-bit parameters go
back up (ZeRO-Offload: ``4Ψ/N_d`` bytes of host traffic per step per GPU with 16-bit values).
The copies run at the cluster's host bandwidth per GPU (``Cluster.host_bandwidth_Bps_per_gpu``): the
PCIe tree, or NVLink-C2C to the Grace CPU's memory on Grace-Blackwell racks (``host.c2c_GBps`` of the
topology, GB200: 900 GB/s bidirectional per Grace and its 2 GPUs, hardware.md §1b [S26]).
With parameter offload (ZeRO-Infinity ``offload_param``) the parameters live on the host: each
all-gather is preceded by an upload of the rank's shard and nothing is uploaded after the step.
"""

from __future__ import annotations

from simulator.parallel.ir import GraphBuilder


def grads_down(b: GraphBuilder, name: str, nbytes: float, dep: int | None, g: int) -> int | None:
    """Copy this rank's reduced gradient partition to host memory after reduction ``dep``."""
    return b.copy(f"grad d2h {name}", "d2h", nbytes, deps=(dep,), micro_batch=g)


#: Optimizer state streamed per parameter per step when it lives on NVMe: fp32 master weights,
#: momentum and variance (12 B) read and written back (ZeRO-Infinity, formulas.md §5).
NVME_BYTES_PER_PARAM = 24.0


def cpu_step(b: GraphBuilder, n_local_params: float, param_bytes: float, deps: list[int | None],
             params_on_host: bool, nvme: bool = False) -> int | None:
    """CPU Adam over this rank's ``n_local_params``, then the upload of the updated working params."""
    nvme_bytes = NVME_BYTES_PER_PARAM * n_local_params if nvme else 0.0
    host = b.host("cpu adam", n_local_params, nvme_bytes=nvme_bytes, deps=deps)
    if params_on_host:
        return host
    return b.copy("params h2d", "h2d", n_local_params * param_bytes, deps=(host,))
