"""Run-level settings of a scenario: price and power (``cost``), failures and checkpoints
(``reliability``). ``simulator.runcost`` turns them, with a simulated step, into the whole run."""

from __future__ import annotations

from pydantic import Field, NonNegativeFloat, PositiveFloat

from simulator.config.base import Frozen


class SpotConfig(Frozen):
    """Preemptible capacity: cheaper, but each preemption costs a restart and lost work."""

    #: Preemptions per node-hour (each one interrupts the whole job, like a failure).
    preemptions_per_node_hour: NonNegativeFloat = 0.0
    #: Fraction off the on-demand price (0.6 = pay 40%).
    discount: float = Field(0.0, ge=0, lt=1)


class CostConfig(Frozen):
    """Price and power of the capacity."""

    #: None = the GPU catalog's dated on-demand snapshot (``dtsim catalog gpus --json``).
    usd_per_gpu_hour: NonNegativeFloat | None = None
    #: Power of everything in a node but the GPUs (CPUs, NICs, fans, PSU loss). None = 0.82 × the
    #: node's GPU TDP, the DGX H100 ratio: (10.2 kW maximum system power − 8 × 700 W) / 5.6 kW
    #: (hardware.md §2, [S38], S). A maximum-power ratio, so an upper estimate; set it for your nodes.
    node_overhead_W: NonNegativeFloat | None = None
    #: GPU power when idle (waiting for communication) as a fraction of TDP (U: typical nvidia-smi
    #: readings of idle-but-allocated datacenter GPUs are 20–30% of TDP).
    gpu_idle_power_fraction: float = Field(0.3, ge=0, le=1)
    spot: SpotConfig = SpotConfig()


class CheckpointConfig(Frozen):
    """How checkpoints are written (formulas.md §7)."""

    enabled: bool = True
    #: None = optimal (Daly 2006); otherwise a fixed interval between checkpoints, in seconds.
    interval_s: PositiveFloat | None = None
    #: Multiplies the full checkpoint size (incremental or compressed checkpoints < 1).
    size_factor: float = Field(1.0, gt=0, le=1)
    #: Aggregate storage write bandwidth. Default: Llama 3's Tectonic store sustains 2 TB/s
    #: (hardware.md §6a, [S50], V).
    storage_GBps: PositiveFloat = 2000.0
    #: Write bandwidth one node achieves to storage (U): a DGX's storage NIC is one dual-port 200 Gb/s
    #: ConnectX-6 (hardware.md §2, [S35]: 50 GB/s line rate); parallel file-system clients sustain a
    #: fraction of it. Set it from your storage's measured per-client rate.
    per_node_write_GBps: PositiveFloat = 5.0
    #: Asynchronous checkpointing: training stalls only for the snapshot to host memory (over PCIe);
    #: the write to storage proceeds in the background.
    asynchronous: bool = False


class ReliabilityConfig(Frozen):
    """Failures and restarts. Default rate: Llama 3 405B's 419 unexpected interruptions in 54 days on
    16,384 H100s ⇒ per-GPU MTBF ≈ 50,700 h (hardware.md §6a, D from [S50])."""

    enabled: bool = True
    gpu_mtbf_hours: PositiveFloat = 50700.0
    #: Node-level failures (host, NIC, switch) in addition to the per-GPU rate; None = none extra.
    node_mtbf_hours: PositiveFloat | None = None
    #: Time to detect, restart and reload after an interruption (Daly's examples use 10 min; Meta
    #: reports ~10 min at ~100K GPUs, hardware.md §6c, S/U).
    restart_s: NonNegativeFloat = 600.0
    checkpoint: CheckpointConfig = CheckpointConfig()
