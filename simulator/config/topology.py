"""Cluster topology files (``topologies/*.yaml``): one node type and how nodes attach to the fabric.

This module holds the schema and the file lookup; ``simulator.network`` turns a validated
``TopologyConfig`` into a networkx graph. Bandwidths are per direction in decimal GB/s (NVLink,
PCIe, Infinity Fabric) or Gb/s (NICs, as vendors label ports); latencies in microseconds. Pluggable
parts (the intra-node fabric, the scale-out fabric) are discriminated unions on ``kind``.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)

from simulator.bundled import bundled_dir
from simulator.config.base import Frozen
from simulator.config.yamlio import read_yaml
from simulator.errors import InputError

#: The bundled topology folder: ``topologies/`` beside the package, or its installed copy
#: (``simulator.bundled``).
BUNDLED_TOPOLOGY_DIR = bundled_dir("topologies")


class NVSwitchFabric(Frozen):
    """GPUs joined by NVSwitch chips; every GPU has ``bandwidth_GBps_per_gpu`` per direction, spread
    evenly over ``switches`` chips (DGX A100: 12 NVLink3 links, 2 to each of 6 switches)."""

    kind: Literal["nvswitch"] = "nvswitch"
    bandwidth_GBps_per_gpu: PositiveFloat
    switches: PositiveInt = 1
    latency_us: NonNegativeFloat = 0.7
    #: NVLink SHARP (in-switch reduction, NVLink4+ switches): enables the ``nvls`` algorithm.
    nvls: bool = False


class FullMeshFabric(Frozen):
    """Every GPU pair joined by a dedicated link of ``link_GBps`` per direction (AMD MI300X UBB)."""

    kind: Literal["full_mesh"] = "full_mesh"
    link_GBps: PositiveFloat
    link: Literal["xgmi", "nvlink"] = "xgmi"
    latency_us: NonNegativeFloat = 1.0


class PCIeFabric(Frozen):
    """No scale-up links: GPUs talk over the host PCIe tree (``host``). Without ``p2p`` (GeForce cards
    with the stock driver, hardware.md §2 [S31]) every GPU-GPU and GPU-NIC transfer is staged through
    host memory (it crosses the CPU)."""

    kind: Literal["pcie"] = "pcie"
    p2p: bool = True


IntraNodeFabric = Annotated[NVSwitchFabric | FullMeshFabric | PCIeFabric, Field(discriminator="kind")]


class HostConfig(Frozen):
    """The PCIe tree of one node: GPUs and NICs hang off ``pcie_switches`` switches, which hang off
    ``sockets`` CPU root complexes joined by a socket link (UPI / xGMI)."""

    sockets: PositiveInt = 2
    pcie_switches: PositiveInt = 4
    gpu_link_GBps: PositiveFloat = Field(description="GPU <-> PCIe switch, per direction")
    uplink_GBps: PositiveFloat = Field(description="PCIe switch <-> CPU root port, per direction")
    socket_link_GBps: PositiveFloat | None = Field(
        40.0, description="CPU socket <-> socket, per direction; null = the CPUs are separate hosts (no link)")
    #: CPU vendor: NCCL's tuner uses it for the multi-node LL cap and the network post overhead
    #: (tuning.cc: 1 µs Intel/other, 2 µs AMD per step), and applies its tree correction to NVLSTree
    #: all-reduces on Blackwell only with x86 hosts (intel, amd; not arm: Grace).
    cpu_vendor: Literal["intel", "amd", "arm", "other"] = "intel"
    latency_us: NonNegativeFloat = 1.0
    #: NVLink-C2C from each CPU to the GPUs of its socket, per direction, shared by them (Grace
    #: superchips: GB200 900 GB/s bidirectional per Grace + 2 GPUs, hardware.md §1b). When set, host
    #: copies (optimizer offload) use it instead of the PCIe tree; NICs stay on PCIe.
    c2c_GBps: PositiveFloat | None = None
    #: The host CPU's time per PyTorch call (Python, dispatcher, kernel launch) over an x86 DGX host's
    #: (Intel Xeon / AMD EPYC), which the host layer's measured block times stand for
    #: (``simulator.workload.host``). Grace (Arm Neoverse V2) runs PyTorch's host code about 2.75x
    #: slower: NVIDIA TransformerEngine issue #2053 times ``torch.nn.Linear``'s forward on the CPU at
    #: 37.08 µs on GB200 and 33.17 µs on GH200 against 13.48 µs on a DGX H100 (Xeon Platinum 8480C).
    dispatch_scale: PositiveFloat = 1.0
    #: The same for Transformer Engine's share of a Megatron-Core block's host time (what its modules add
    #: over Megatron-Core's local ones, ``simulator.workload.host.te_share``), where it differs; None:
    #: ``dispatch_scale``. Grace 1.88: TE issue #2053 times a ``te.Linear`` forward at 99.66 µs on GB200
    #: against 37.08 for ``torch.nn.Linear``, where ``benchmarks/host_dispatch_te.py`` prices a te.Linear's
    #: excess over torch.nn.Linear at 30-40 µs on dtsim's x86 host (TE 2.12; (99.66 - 37.08) / that excess:
    #: 1.58-2.12 over six runs, median 1.88), not the 2.75 x (82-110 µs) that ``dispatch_scale`` would give. An
    #: upper bound: #2053's TE (August 2025) predates the releases that cut TE's CPU work (TE 2.12's te.Linear
    #: costs 0.6 of TE 2.9's on the same stand-in).
    te_dispatch_scale: PositiveFloat | None = None


class NICConfig(Frozen):
    """Compute NICs of one node; NIC ``r`` sits on the PCIe switch of GPU ``r * gpus / per_node``
    and is rail ``r`` of a rail-optimised fabric."""

    per_node: NonNegativeInt = 0
    bandwidth_Gbps: PositiveFloat = 200.0
    latency_us: NonNegativeFloat = 1.0


class FatTreeFabric(Frozen):
    """Two-level fat tree. Rail-optimised: NIC ``r`` of every node attaches to the leaf of rail
    ``r mod rails`` (DGX SuperPOD; ``rails`` defaults to the NICs per node, NVL72 racks use one rail
    per GPU position of a compute tray). Each leaf has ``switch_radix`` ports; its uplink capacity to
    the spines is its attached downlink capacity divided by ``oversubscription`` (1 = non-blocking).

    ``planes`` > 1: multi-plane fabric, each NIC port on its own independent fat tree carrying
    ``1/planes`` of the NIC's bandwidth (ConnectX-8 / Spectrum-X multi-plane). ``dual_tor``: every
    NIC has two ports on two leaves of the same fabric (dual-homed ToR pair). Both spread every
    transfer evenly over identical parallel paths, so in the bandwidth model they equal one plane of
    the full NIC bandwidth; they change the switch and cable counts (``Cluster.stats``) and what one
    switch failure removes (docs/network.md, "Rack-scale NVLink and new clusters")."""

    kind: Literal["fat_tree"] = "fat_tree"
    rail_optimized: bool = True
    rails: PositiveInt | None = None
    oversubscription: float = Field(1.0, ge=1.0)
    switch_radix: int = Field(64, ge=2)
    switch_latency_us: NonNegativeFloat = 0.6
    planes: PositiveInt = 1
    dual_tor: bool = False
    #: SHARP in-network reduction on the switches (InfiniBand Quantum with the NCCL SHARP plugin,
    #: ``NCCL_COLLNET_ENABLE=1``): enables NCCL's CollNet all-reduce across nodes. Off by default,
    #: as in NCCL. SHARP runs one aggregation flow per HCA rail, so it needs a rail-optimised fabric
    #: (NVIDIA HPC-X NCCL-RDMA-SHARP plugin docs: "leaf level switches are connected to the same HCA
    #: rail from each server").
    sharp: bool = False


class SingleSwitchFabric(Frozen):
    """All NICs on one switch (small clusters)."""

    kind: Literal["single_switch"] = "single_switch"
    switch_latency_us: NonNegativeFloat = 0.6


ScaleOutFabric = Annotated[FatTreeFabric | SingleSwitchFabric, Field(discriminator="kind")]


class TopologyConfig(Frozen):
    """One node type (GPU model, GPUs per node, intra-node fabric, host, NICs) and its fabric."""

    name: str
    description: str = ""
    #: What one ``node`` (``cluster.nodes``) is: a server, or a rack whose GPUs share one NVLink
    #: domain (NVL72: 18 compute trays of 4 GPUs, every GPU on the rack's NVLink switches).
    node_unit: Literal["server", "rack"] = "server"
    gpu: str
    gpus_per_node: PositiveInt
    #: GPUs per host OS instance (compute tray) when a node spans several hosts (NVL72: 4); a
    #: partial node (``cluster.gpus`` ending mid-rack) must hold whole hosts. ``None``: one host.
    gpus_per_host: PositiveInt | None = None
    intra_node: IntraNodeFabric = PCIeFabric()
    #: Power of a node besides its GPUs (CPUs, switches, NICs, fans), W, at the rated maximum: the
    #: datasheet's node (or rack) maximum minus its GPUs' TDP. ``None``: the DGX H100 ratio, 0.82 W per
    #: W of GPU TDP (``runcost.plan``), which overstates racks whose switch trays and CPUs are shared.
    node_overhead_W: NonNegativeFloat | None = None
    host: HostConfig = HostConfig(gpu_link_GBps=31.5, uplink_GBps=31.5)
    nics: NICConfig = NICConfig()
    fabric: ScaleOutFabric = SingleSwitchFabric()

    @property
    def nvls(self) -> bool:
        return isinstance(self.intra_node, NVSwitchFabric) and self.intra_node.nvls

    @property
    def sharp(self) -> bool:
        """SHARP in-network reduction on the scale-out fabric (enables NCCL CollNet)."""
        return isinstance(self.fabric, FatTreeFabric) and self.fabric.sharp

    @property
    def nvlink_domain_gpus(self) -> int:
        """GPUs that reach each other over the scale-up fabric (NVLink / xGMI): the node's GPUs, or 1
        when GPUs share only PCIe. Collectives and layouts read this (TP/EP up to it stay on NVLink)."""
        return 1 if isinstance(self.intra_node, PCIeFabric) else self.gpus_per_node

    @model_validator(mode="after")
    def _check_rails(self) -> TopologyConfig:
        fab = self.fabric
        if isinstance(fab, FatTreeFabric) and fab.rails is not None and self.nics.per_node % fab.rails:
            raise ValueError(f"fabric.rails ({fab.rails}) must divide nics.per_node ({self.nics.per_node})")
        if isinstance(fab, FatTreeFabric) and fab.sharp and not fab.rail_optimized:
            raise ValueError("fabric.sharp needs fabric.rail_optimized: true (SHARP aggregates one flow per HCA "
                             "rail; leaf switches must hold the same rail of every node)")
        if isinstance(fab, FatTreeFabric) and fab.sharp and self.nics.per_node == 0:
            raise ValueError("fabric.sharp needs NICs (nics.per_node >= 1): SHARP reduces in the network switches")
        if self.gpus_per_host is not None and self.gpus_per_node % self.gpus_per_host:
            raise ValueError(f"gpus_per_host ({self.gpus_per_host}) must divide gpus_per_node ({self.gpus_per_node})")
        if self.nics.per_node > self.gpus_per_node:
            # each NIC hangs off one GPU's PCIe switch (network.builder.nic_gpu): more NICs than GPUs
            # (two ports per GPU) is not modelled; give the ports' total rate on one NIC per GPU
            raise ValueError(f"nics.per_node ({self.nics.per_node}) must be at most gpus_per_node "
                             f"({self.gpus_per_node}): dtsim attaches each NIC to one GPU; for two ports per GPU "
                             "give one NIC per GPU with their combined nics.bandwidth_Gbps")
        return self


def bundled_topology_names() -> list[str]:
    """Names of the topology files shipped in ``topologies/`` (without ``.yaml``)."""
    if not BUNDLED_TOPOLOGY_DIR.is_dir():
        return []
    return sorted(p.stem for p in BUNDLED_TOPOLOGY_DIR.glob("*.yaml"))


def resolve_topology_path(ref: str, base_dir: Path | None = None) -> Path:
    """Find a topology by bundled name (``dgx-h100``) or by path (absolute, or relative to
    ``base_dir`` — the scenario's folder — or to the working directory).

    Raises ``FileNotFoundError`` whose message lists the bundled names.
    """
    candidates = []
    as_path = Path(ref)
    if as_path.suffix in (".yaml", ".yml") or "/" in ref:
        if base_dir is not None and not as_path.is_absolute():
            candidates.append(base_dir / as_path)
        candidates.append(as_path)
    else:
        candidates.append(BUNDLED_TOPOLOGY_DIR / f"{ref}.yaml")
    for path in candidates:
        if path.is_file():
            return path
    if as_path.suffix in (".yaml", ".yml") or "/" in ref:  # a path was given: say that it is missing
        where = " or ".join(str(c) for c in candidates) if len(candidates) > 1 else str(candidates[0])
        raise FileNotFoundError(f"topology file {ref} does not exist (looked for {where}); check the path, or give "
                                "a bundled topology name")
    names = bundled_topology_names()
    close = difflib.get_close_matches(ref, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise FileNotFoundError(f"unknown topology {ref!r}{hint}; bundled topologies: {', '.join(names) or '(none)'}; "
                            "or give a path to a .yaml file")


def _field_of(error: dict) -> str | None:
    # Drop the discriminator tags pydantic inserts into the location (intra_node.nvswitch.x -> intra_node.x).
    tags = {"nvswitch", "full_mesh", "pcie", "fat_tree", "single_switch"}
    loc = [str(p) for i, p in enumerate(error["loc"]) if not (i > 0 and p in tags)]
    if error["type"] == "union_tag_invalid":
        loc.append("kind")
    return ".".join(loc) or None  # None: a whole-topology check names its fields in its message


def parse_topology(data: dict, source: str = "topology") -> TopologyConfig:
    """Validate a topology mapping; a schema error becomes ``InputError`` naming the first bad field."""
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return TopologyConfig.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        msg = first["msg"].removeprefix("Value error, ")
        raise InputError(f"{msg} (in {source})", field=_field_of(first)) from None


def load_topology(ref: str, base_dir: Path | None = None) -> TopologyConfig:
    """Read and validate a topology by bundled name or path; every failure is an ``InputError``."""
    try:
        path = resolve_topology_path(ref, base_dir)
    except FileNotFoundError as exc:
        raise InputError(str(exc), field="topology") from None
    return parse_topology(read_yaml(path, field="topology"), str(path))
