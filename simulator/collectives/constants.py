"""Calibration constants of the collective model, each with its source.

The model keeps NCCL's tuning structure (formulas.md §3.5, ``src/graph/tuning.cc`` 2.30.7): a
collective's time for protocol ``p`` is ``base_p + Σ steps·step_latency_p[link] + β-time / fraction_p``
and the fastest protocol wins. β-time comes from the graph with each link's line rate scaled by a
per-link-class efficiency. Five numbers are fitted to measurements (marked *fit*); the rest are
NCCL's own constants.

Link efficiencies (effective / line rate, per direction):

* NVLink: NCCL's per-link model bandwidth over the line rate per link (topo.h, formulas.md §3.5):
  SM80 20/25 = 0.80, SM90 20.6/25 = 0.824, SM100 40.1/50 = 0.802. Gives 240 GB/s on A100 (measured
  all-reduce plateau 230-232, collectives.yaml) and 370.8 GB/s on H100 (maintainer: "effective NVLink
  bandwidth of 370GB/s", nccl-tests #212).
* PCIe: NCCL models x16 as ``lanes·speed/80`` = 12/24/48 GB/s for Gen3/4/5 against 15.75/31.5/63 line
  (topo.cc, hardware.md §0): 0.762.
* Network: *fit*, 0.95 — maintainers see 24 GB/s per HDR 200 Gb/s NIC (25 line, 0.96) and 46-48 GB/s
  per NDR 400 Gb/s NIC (50 line, 0.92-0.96) (collectives.yaml nccl-maintainer-*-per-nic).
* Infinity Fabric (xGMI): *fit*, 0.70 — MI300X 8-GPU all-reduce busbw 312.9 GB/s over 448 GB/s
  aggregate (hardware.md §4 [S2]); the 2-GPU figure (47.7 GB/s over one 64 GB/s link) checks it.
* UPI / socket links: 1.0 (the YAML values are already NCCL's effective model values).

Protocols (latencies in µs; NCCL values unless marked):

* LL128: base 14.0, per step NVLink 1.9 / PCI 2.5 / NET 4.0 (tuning.cc Ring LL128); enabled only
  over NVLink-class intra-node paths (NCCL enables LL128 only when the path is ≤ NVB). Bandwidth
  fraction *fit* 0.46: the 1-8 MiB slope of the measured 8×A100 all-reduce (≈110 GB/s busbw) over
  the 240 GB/s Simple plateau (collectives.yaml azure-nda100v4-allreduce-8gpu).
* Simple: base 8.4; per step NET 19.6 = 14.0 × 1.4 (Ring/Simple NET and NCCL's multi-node
  "plateau" factor). Per NVLink/PCI step *fit* 13.7 µs (NCCL's 3.4 µs is its launch-floor model; the
  measured A100 curve reaches half its plateau only at ≈16 MiB, which needs ≈200 µs per 14-step
  all-reduce — the Simple pipeline fill of 512 KiB chunk slots).
* NVLS: base 0, NVLink step 25, NET 18 (tuning.cc); NVLS bandwidth efficiency Hopper 0.85,
  Blackwell 0.74 (tuning.cc ``nvlsEfficiency``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

US = 1e-6


#: Pipeline-fill constants (*fit* to whole nccl-tests curves, docs/network.md "Calibration").
RING_FILL_S, RING_FILL_BYTES = 220e-6, 24 * 2**20
#: Ring/tree steps of the curves ``RING_FILL_S`` was fitted on: an all-reduce of 8 GPUs, 2·(8 − 1).
RING_FILL_STEPS = 14
#: Per-step fill of a single ring pass (all-gather, reduce-scatter) as a fraction of the all-reduce's
#: (*fit*, 0.05 grid, interior; ``python benchmarks/nccl_curves.py --pass-fill-grid`` prints the grid):
#: the 8 × H100 all_gather_perf and reduce_scatter_perf curves (nccl_tests_curves.yaml ``h100-8gpu-allgather`` / ``-reducescatter``,
#: 8 MiB-1 GiB) run at NCCL's ring latency plus their β-time with almost no fill (8 MiB in 49 µs).
PASS_FILL_FRACTION = 0.15
NVLS_FILL_S, NVLS_FILL_BYTES = 60e-6, 12 * 2**20


#: The ring/tree pipeline fill every NCCL protocol shares (``Protocol.fill``; the constants above).
_RING_FILL = dict(fill_s=RING_FILL_S, fill_bytes=RING_FILL_BYTES, fill_steps=RING_FILL_STEPS,
                  pass_fill_fraction=PASS_FILL_FRACTION)
#: Collectives that move each chunk through one ring pass (``Protocol.fill``).
SINGLE_PASS = ("all_gather", "reduce_scatter")
#: Collectives NCCL runs as grouped send/recv, not as a ring or tree of steps.
DIRECT = ("all_to_all", "send_recv")


@dataclass(frozen=True)
class Protocol:
    """One NCCL protocol: latency terms (s) and the fraction of link bandwidth it reaches."""

    name: str
    base_latency_s: float
    step_latency_s: dict[str, float]  # keys: nvlink, pci, net
    bandwidth_fraction: float
    needs_nvlink: bool = False
    #: Pipeline fill (*fit*): ``fill_s · (1 − exp(−S / fill_bytes))`` per phase.
    fill_s: float = 0.0
    fill_bytes: float = 1.0
    #: When > 0, ``fill_s`` and ``fill_bytes`` hold for a group of ``fill_ranks`` ranks and scale
    #: with the group size (NVLS: the switch reduces one contribution per rank for every chunk).
    fill_ranks: int = 0
    #: When > 0, ``fill_s`` holds for a pipeline of ``fill_steps`` ring/tree steps and scales with the
    #: phase's steps (below).
    fill_steps: int = 0
    #: Fill per step of a single ring pass (all-gather, reduce-scatter) relative to an all-reduce's.
    pass_fill_fraction: float = 1.0

    def fill(self, nbytes: float, ranks: int = 0, steps: int = 0, single_pass: bool = False) -> float:
        """Seconds a call of ``nbytes`` spends filling the protocol's chunk pipeline: a message gives
        each channel only ``S / (channels · ranks)`` bytes, so small messages run few, small chunks
        and never reach the steady-state rate; the cost saturates at ``fill_s`` once every channel's
        pipeline is full (``fill_bytes`` is the e-folding message size).

        A ring or tree moves each chunk through its steps one after the other, so the pipeline takes
        ``steps`` chunk times to fill and drain before the steady rate holds: the fill is
        ``fill_s · steps / fill_steps``, the same proportionality NCCL's own latency model gives its
        per-step hardware latency (``latency = base + nsteps · hwLat``, ``src/graph/tuning.cc``; ring
        all-reduce ``2(n − 1)`` steps, all-gather and reduce-scatter ``n − 1``). So an all-gather
        of 8 GPUs fills in half the time of the all-reduce the constant was fitted on, a 4-GPU
        tensor-parallel all-reduce in 6/14 of it. ``steps`` counts the steps inside one node; a
        phase with steps across nodes passes 0 and keeps the fitted ``fill_s``: the measured
        2 × DGX A100 all-reduce (≈ 190 GB/s busbw at 1 GiB, NIC-bound; tests/collectives) leaves no
        room for a deeper fill there, and no multi-node curve is bundled to fit one.

        ``single_pass``: an all-gather or reduce-scatter moves each chunk through one pass of the
        ring, not the all-reduce's reduce-then-broadcast pass pair; measured on 8 × H100 its steps
        fill at ``pass_fill_fraction`` of the all-reduce's (the curves in ``PASS_FILL_FRACTION``)."""
        if not self.fill_s:
            return 0.0
        k = ranks / self.fill_ranks if self.fill_ranks and ranks else 1.0
        depth = steps / self.fill_steps if self.fill_steps and steps else 1.0
        if single_pass:
            depth *= self.pass_fill_fraction
        return depth * k * self.fill_s * -math.expm1(-nbytes / (k * self.fill_bytes))

    def phase_fill(self, op: str, nbytes: float, ranks: int, steps_intra: int, steps_inter: int) -> float:
        """``fill`` of one phase of ``op``: a single-node ring/tree phase's fill scales with its steps;
        the grouped send/recv of all-to-all and p2p, and phases across nodes, keep the fitted one."""
        steps = 0 if steps_inter or op in DIRECT else steps_intra
        return self.fill(nbytes, ranks, steps, op in SINGLE_PASS)


@dataclass(frozen=True)
class Calibration:
    """All constants of the collective model (see module docstring for sources)."""

    nvlink_efficiency_by_sm: dict[int, float] = field(default_factory=lambda: {70: 0.80, 80: 0.80, 90: 0.824, 100: 0.802})
    nvlink_efficiency_default: float = 0.80
    pcie_efficiency: float = 0.762
    net_efficiency: float = 0.95
    xgmi_efficiency: float = 0.70
    upi_efficiency: float = 1.0
    nvls_efficiency_by_arch: dict[str, float] = field(default_factory=lambda: {"hopper": 0.85, "blackwell": 0.74})
    protocols: tuple[Protocol, ...] = (
        # LL: NCCL's values (base 6.6, per step NVLink 0.6 / PCI 1.0 / NET 2.7 µs); 8-byte stores of
        # 4 data + 4 flag bytes, so half the link bandwidth (NCCL: ``busBw · 0.5``).
        Protocol("LL", 6.6 * US, {"nvlink": 0.6 * US, "pci": 1.0 * US, "net": 2.7 * US}, 0.5,
                 **_RING_FILL),
        Protocol("LL128", 14.0 * US, {"nvlink": 1.9 * US, "pci": 2.5 * US, "net": 4.0 * US}, 0.92, needs_nvlink=True,
                 **_RING_FILL),
        Protocol("Simple", 8.4 * US, {"nvlink": 3.4 * US, "pci": 5.7 * US, "net": 14.0 * US}, 1.0,
                 **_RING_FILL),
    )
    nvls_protocol: Protocol = Protocol("Simple", 0.0, {"nvlink": 25.0 * US, "pci": 25.0 * US, "net": 18.0 * US}, 1.0,
                                       fill_s=NVLS_FILL_S, fill_bytes=NVLS_FILL_BYTES, fill_ranks=8)
    #: NVLS channels (NCCL_NVLS_NCHANNELS default 16 on sm90, init.cc).
    nvls_channels: int = 16
    #: PAT all-gather / reduce-scatter with one GPU per node (NCCL >= 2.23, NCCL_PAT_ENABLE default).
    nccl_pat: bool = True

    def link_efficiency(self, link: str, sm: int | None) -> float:
        if link == "nvlink":
            return self.nvlink_efficiency_by_sm.get(sm or 0, self.nvlink_efficiency_default)
        return {"pcie": self.pcie_efficiency, "net": self.net_efficiency, "xgmi": self.xgmi_efficiency,
                "upi": self.upi_efficiency}[link]


#: The default calibration (NCCL 2.30.7 structure, fitted where stated).
DEFAULT_CALIBRATION = Calibration()
