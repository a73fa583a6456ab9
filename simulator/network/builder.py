"""Topology → ``networkx.DiGraph``: one node template instantiated ``nodes`` times plus the fabric.

Graph nodes carry ``type`` (one of ``NODE_TYPES``), ``node`` (machine index, ``None`` for fabric
switches) and ``index``. Directed edges carry ``bandwidth_Bps`` (line rate, per direction),
``latency_s``, ``link`` (one of ``LINK_CLASSES``; the collective model applies a per-class
efficiency) and ``id`` (a dense integer used by the fabric solvers). Node ``k``'s internal edges have
ids ``k * E + j`` for the template's edge ``j``, so routes computed once on the template are shifted
to any machine by an offset.

Fat tree sizing (DGX SuperPOD style, hardware.md §3c [S48]): with radix ``R`` and oversubscription
``o`` a leaf has ``d = floor(R·o/(1+o))`` down ports. Rail-optimised with ``rails`` rails (default:
one per NIC): leaf ``(r, b)`` takes the NICs ``≡ r (mod rails)`` of the ``d // (nics/rails)`` nodes of
block ``b``; otherwise a leaf takes all NICs of ``d // nics`` nodes. Spines:
``S = ceil(leaves·(R − d)/R)``. Each leaf's uplink capacity is its attached NIC capacity / ``o``,
split evenly over the ``S`` spines (one logical edge per leaf-spine pair).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from simulator.config.topology import (
    FatTreeFabric,
    FullMeshFabric,
    NVSwitchFabric,
    PCIeFabric,
    TopologyConfig,
)
from simulator.errors import InputError
from simulator.units import GB, US

NODE_TYPES = ("gpu", "nvswitch", "pcie_switch", "cpu", "nic", "leaf", "spine")
LINK_CLASSES = ("nvlink", "xgmi", "pcie", "upi", "net")


@dataclass(frozen=True)
class NodeTemplate:
    """One machine's internal graph in local names (``gpu3``, ``nvsw0``, ``pcie1``, ``cpu0``, ``nic2``)."""

    nodes: tuple[tuple[str, str, int], ...]  # (local name, type, index)
    edges: tuple[tuple[str, str, float, float, str], ...]  # (u, v, bandwidth_Bps, latency_s, link)

    def graph(self) -> nx.DiGraph:
        g = nx.DiGraph()
        for name, kind, idx in self.nodes:
            g.add_node(name, type=kind, index=idx)
        for j, (u, v, bw, lat, link) in enumerate(self.edges):
            g.add_edge(u, v, bandwidth_Bps=bw, latency_s=lat, link=link, id=j)
        return g


def gpu_switch(topo: TopologyConfig, i: int) -> int:
    """PCIe switch of local GPU ``i`` (GPUs spread in blocks over the switches)."""
    return i * topo.host.pcie_switches // topo.gpus_per_node


def nic_rail_of_gpu(topo: TopologyConfig, i: int) -> int:
    """The NIC (rail) nearest local GPU ``i``; ``-1`` when the node has no NIC."""
    n = topo.nics.per_node
    return i * n // topo.gpus_per_node if n else -1


def nic_gpu(topo: TopologyConfig, r: int) -> int:
    """The first local GPU whose nearest NIC is ``r`` (the PXN proxy for rail ``r``)."""
    return math.ceil(r * topo.gpus_per_node / topo.nics.per_node)


def socket_of_switch(topo: TopologyConfig, s: int) -> int:
    return s * topo.host.sockets // topo.host.pcie_switches


def gpus_per_socket(topo: TopologyConfig) -> list[int]:
    """How many of the node's GPUs hang off each CPU socket (through their PCIe switch)."""
    counts = [0] * topo.host.sockets
    for i in range(topo.gpus_per_node):
        counts[socket_of_switch(topo, gpu_switch(topo, i))] += 1
    return counts


def node_template(topo: TopologyConfig) -> NodeTemplate:
    """The node's internal graph: scale-up fabric, PCIe tree, CPUs and NICs (both directions)."""
    g, host = topo.gpus_per_node, topo.host
    nodes: list[tuple[str, str, int]] = [(f"gpu{i}", "gpu", i) for i in range(g)]
    edges: list[tuple[str, str, float, float, str]] = []

    def both(u: str, v: str, bw: float, lat: float, link: str) -> None:
        edges.append((u, v, bw, lat, link))
        edges.append((v, u, bw, lat, link))

    fabric = topo.intra_node
    if isinstance(fabric, NVSwitchFabric):
        nodes += [(f"nvsw{s}", "nvswitch", s) for s in range(fabric.switches)]
        per_switch = fabric.bandwidth_GBps_per_gpu * GB / fabric.switches
        for i in range(g):
            for s in range(fabric.switches):
                both(f"gpu{i}", f"nvsw{s}", per_switch, fabric.latency_us * US / 2, "nvlink")
    elif isinstance(fabric, FullMeshFabric):
        for i in range(g):
            for j in range(g):
                if i != j:
                    edges.append((f"gpu{i}", f"gpu{j}", fabric.link_GBps * GB, fabric.latency_us * US, fabric.link))
    else:
        assert isinstance(fabric, PCIeFabric)
    nodes += [(f"pcie{s}", "pcie_switch", s) for s in range(host.pcie_switches)]
    nodes += [(f"cpu{c}", "cpu", c) for c in range(host.sockets)]
    lat = host.latency_us * US / 2
    for i in range(g):
        both(f"gpu{i}", f"pcie{gpu_switch(topo, i)}", host.gpu_link_GBps * GB, lat, "pcie")
    for s in range(host.pcie_switches):
        both(f"pcie{s}", f"cpu{socket_of_switch(topo, s)}", host.uplink_GBps * GB, lat, "pcie")
    if host.socket_link_GBps is not None:
        for a in range(host.sockets):
            for b in range(a + 1, host.sockets):
                both(f"cpu{a}", f"cpu{b}", host.socket_link_GBps * GB, lat, "upi")
    if host.c2c_GBps is not None:
        # NVLink-C2C (Grace superchips): each CPU's link is shared evenly by the GPUs of its socket.
        # Class "nvlink" (C2C is an NVLink-family link); no GPU-GPU or GPU-NIC route uses it.
        share = gpus_per_socket(topo)
        for i in range(g):
            c = socket_of_switch(topo, gpu_switch(topo, i))
            both(f"gpu{i}", f"cpu{c}", host.c2c_GBps * GB / share[c], lat, "nvlink")
    nic_bw = topo.nics.bandwidth_Gbps * 1e9 / 8
    for r in range(topo.nics.per_node):
        nodes.append((f"nic{r}", "nic", r))
        both(f"nic{r}", f"pcie{gpu_switch(topo, nic_gpu(topo, r))}", nic_bw, topo.nics.latency_us * US / 2, "net")
    return NodeTemplate(tuple(nodes), tuple(edges))


@dataclass(frozen=True)
class FabricLayout:
    """Where each node's NICs attach: ``leaf_of(node, rail)`` → leaf name; spines and their uplinks."""

    nodes_per_block: int
    blocks: int
    rails: int  # leaves per block
    spines: int

    def block_of(self, node: int) -> int:
        return node // self.nodes_per_block

    def leaf_name(self, node: int, rail: int) -> str:
        return f"leaf{rail % self.rails}.{self.block_of(node)}"


def fabric_layout(topo: TopologyConfig, nodes: int) -> FabricLayout:
    """Leaf/spine counts for ``nodes`` machines (see module docstring)."""
    nics = topo.nics.per_node
    fab = topo.fabric
    if not isinstance(fab, FatTreeFabric):
        return FabricLayout(nodes_per_block=max(nodes, 1), blocks=1, rails=1, spines=0)
    down = int(fab.switch_radix * fab.oversubscription / (1 + fab.oversubscription))
    down = max(1, min(down, fab.switch_radix - 1))
    if fab.rail_optimized:
        rails = fab.rails or nics
        per_leaf = max(1, nics // max(rails, 1))  # NICs one node puts on each leaf of its block
        if down < per_leaf:
            raise InputError(
                f"a leaf with {down} down ports cannot hold the {per_leaf} NICs of one node on its rail",
                field="fabric.switch_radix")
        per_block = down // per_leaf
    else:
        if down < nics:
            raise InputError(
                f"a leaf with {down} down ports cannot hold the {nics} NICs of one node", field="fabric.switch_radix"
            )
        per_block, rails = down // nics, 1
    blocks = math.ceil(nodes / per_block)
    leaves = blocks * rails
    spines = 0 if leaves == 1 else max(1, math.ceil(leaves * (fab.switch_radix - down) / fab.switch_radix))
    return FabricLayout(per_block, blocks, rails, spines)


def check_nodes(topo: TopologyConfig, nodes: int) -> None:
    """At least one node, and NICs whenever there is more than one (else nodes cannot talk)."""
    if nodes < 1:
        raise InputError(f"need at least one node, got {nodes}", field="nodes")
    if nodes > 1 and topo.nics.per_node == 0:
        raise InputError(
            f"{nodes} nodes but no NICs: GPUs on different nodes are unreachable", field="nics.per_node"
        )


def build_graph(topo: TopologyConfig, nodes: int) -> tuple[nx.DiGraph, NodeTemplate, FabricLayout]:
    """The cluster graph (see module docstring), its node template and its fabric layout."""
    check_nodes(topo, nodes)
    template = node_template(topo)
    layout = fabric_layout(topo, nodes)
    g = nx.DiGraph()
    n_edges = len(template.edges)
    node_rows, edge_rows = [], []
    for k in range(nodes):
        p = f"n{k}/"
        node_rows += [(p + name, {"type": kind, "node": k, "index": idx}) for name, kind, idx in template.nodes]
        base = k * n_edges
        edge_rows += [
            (p + u, p + v, {"bandwidth_Bps": bw, "latency_s": lat, "link": link, "id": base + j})
            for j, (u, v, bw, lat, link) in enumerate(template.edges)
        ]
    next_id = nodes * n_edges
    if nodes > 1 or topo.nics.per_node:
        nic_bw = topo.nics.bandwidth_Gbps * 1e9 / 8
        sw_lat = topo.fabric.switch_latency_us * US
        attached: dict[str, float] = {}
        for k in range(nodes):
            for r in range(topo.nics.per_node):
                leaf = layout.leaf_name(k, r)
                attached[leaf] = attached.get(leaf, 0.0) + nic_bw
                for u, v in ((f"n{k}/nic{r}", leaf), (leaf, f"n{k}/nic{r}")):
                    edge_rows.append((u, v, {"bandwidth_Bps": nic_bw, "latency_s": sw_lat / 2, "link": "net", "id": next_id}))
                    next_id += 1
        for leaf in attached:
            rail, block = (int(x) for x in leaf[4:].split("."))
            node_rows.append((leaf, {"type": "leaf", "node": None, "index": rail, "block": block}))
        o = getattr(topo.fabric, "oversubscription", 1.0)
        for s in range(layout.spines):
            node_rows.append((f"spine{s}", {"type": "spine", "node": None, "index": s}))
            for leaf, cap in attached.items():
                bw = cap / o / layout.spines
                for u, v in ((leaf, f"spine{s}"), (f"spine{s}", leaf)):
                    edge_rows.append((u, v, {"bandwidth_Bps": bw, "latency_s": sw_lat / 2, "link": "net", "id": next_id}))
                    next_id += 1
    g.add_nodes_from(node_rows)
    g.add_edges_from(edge_rows)
    g.graph.update(name=topo.name, nodes=nodes, gpus_per_node=topo.gpus_per_node)
    return g, template, layout


def validate_graph(g: nx.DiGraph) -> None:
    """Check node types, link classes, bandwidths and that every GPU reaches every other one (both
    ways, via GPU 0); ``InputError`` naming the bad element."""
    for name, data in g.nodes(data=True):
        if data.get("type") not in NODE_TYPES:
            raise InputError(f"unknown node type {data.get('type')!r} at {name}; valid: {', '.join(NODE_TYPES)}", field="type")
    for u, v, data in g.edges(data=True):
        if data.get("link") not in LINK_CLASSES:
            raise InputError(f"unknown link type {data.get('link')!r} on {u}->{v}; valid: {', '.join(LINK_CLASSES)}", field="link")
        bw = data.get("bandwidth_Bps")
        if bw is None or not bw > 0:
            raise InputError(f"bandwidth must be > 0 on {u}->{v}, got {bw}", field="bandwidth_Bps")
        if data.get("latency_s", 0) < 0:
            raise InputError(f"latency must be >= 0 on {u}->{v}", field="latency_s")
    gpus = [n for n, d in g.nodes(data=True) if d["type"] == "gpu"]
    if gpus:
        reach = nx.descendants(g, gpus[0]) & nx.ancestors(g, gpus[0])
        lost = [n for n in gpus[1:] if n not in reach]
        if lost:
            raise InputError(f"GPU {lost[0]} cannot reach (or be reached from) {gpus[0]}", field="gpu")
