"""The cluster's directed edges as numpy arrays, with edge ids computed by arithmetic.

``build_graph`` numbers edges in a fixed order; this module reproduces that numbering without
building the graph, so a 16,384-GPU cluster costs a few array operations instead of half a
million networkx edges (ARCHITECTURE.md §1.4). With ``E`` template edges per node, ``N`` nodes,
``n`` NICs per node, ``L`` leaves and ``S`` spines:

* node ``k``'s template edge ``j``: id ``k·E + j``;
* NIC ``r`` of node ``k`` → its leaf: ``N·E + 2(k·n + r)``; the reverse direction ``+1``;
* leaf ``l`` → spine ``s``: ``N·E + 2·N·n + 2(s·L + l)``; the reverse direction ``+1``.

Leaves are numbered ``l = block·rails + rail`` (the order in which ``build_graph`` first meets them).

*Compact ids* append two pseudo-edges per leaf after the real ones: ``up(l)`` stands for all ``S``
leaf→spine edges of leaf ``l`` and ``down(l)`` for all spine→leaf edges. ECMP puts weight ``1/S``
on each of those ``S`` edges for every cross-leaf transfer, so the ``S`` capacity constraints of a
leaf are the same inequality ``Σ_t rate_t ≤ S·c``; one pseudo-edge with capacity ``S·c`` and weight 1
therefore gives the same bottleneck load ratio and the same max–min fair rates, while a route
carries 2 fabric-core entries instead of ``2S``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.config.topology import FatTreeFabric, TopologyConfig
from simulator.network.builder import LINK_CLASSES, FabricLayout, NodeTemplate
from simulator.units import US

NET = LINK_CLASSES.index("net")


@dataclass(frozen=True)
class EdgeTable:
    """Per-edge line rate (B/s), latency (s) and link-class code, in id order; fabric id arithmetic."""

    nodes: int
    per_node: int  # E, template edges per node
    nics: int
    leaves: int
    spines: int
    rails: int
    nodes_per_block: int
    has_fabric: bool
    bandwidth_Bps: np.ndarray
    latency_s: np.ndarray
    link_code: np.ndarray  # int8 index into LINK_CLASSES
    leaf_uplink_Bps: np.ndarray  # per leaf: attached NIC capacity / oversubscription (all spines together)

    # --- id arithmetic ------------------------------------------------------------------------
    @property
    def first_nic(self) -> int:
        return self.nodes * self.per_node

    @property
    def first_spine(self) -> int:
        return self.first_nic + 2 * self.nodes * self.nics

    @property
    def n_edges(self) -> int:
        return len(self.bandwidth_Bps)

    @property
    def first_aggregate(self) -> int:
        """First compact pseudo-edge id (``up(l) = first_aggregate + 2l``, ``down(l)`` = ``+1``)."""
        return self.n_edges

    @property
    def n_compact(self) -> int:
        return self.n_edges + (2 * self.leaves if self.spines else 0)

    def leaf(self, node, rail):
        """Leaf index of NIC ``rail`` of ``node`` (works on ints and integer arrays)."""
        return (node // self.nodes_per_block) * self.rails + rail % self.rails

    def nic_up(self, node, rail):
        return self.first_nic + 2 * (node * self.nics + rail)

    def nic_down(self, node, rail):
        return self.first_nic + 2 * (node * self.nics + rail) + 1

    def spine_up(self, leaf: int, spine: int) -> int:
        return self.first_spine + 2 * (spine * self.leaves + leaf)

    def spine_down(self, leaf: int, spine: int) -> int:
        return self.first_spine + 2 * (spine * self.leaves + leaf) + 1

    def compact_bandwidth_Bps(self) -> np.ndarray:
        """Line rates over compact ids: the real edges, then ``up(l)``, ``down(l)`` per leaf."""
        if not self.spines:
            return self.bandwidth_Bps
        agg = np.repeat(self.leaf_uplink_Bps, 2)
        return np.concatenate((self.bandwidth_Bps, agg))

    def compact_link_code(self) -> np.ndarray:
        extra = np.full(self.n_compact - self.n_edges, NET, dtype=np.int8)
        return np.concatenate((self.link_code, extra))


def edge_table(topo: TopologyConfig, nodes: int, template: NodeTemplate, layout: FabricLayout) -> EdgeTable:
    """All edges of ``nodes`` machines of ``topo`` in ``build_graph``'s id order (see module doc)."""
    t_bw = np.array([e[2] for e in template.edges], dtype=np.float64)
    t_lat = np.array([e[3] for e in template.edges], dtype=np.float64)
    t_link = np.array([LINK_CLASSES.index(e[4]) for e in template.edges], dtype=np.int8)
    nics = topo.nics.per_node
    has_fabric = nodes > 1 or nics > 0
    parts_bw, parts_lat, parts_link = [np.tile(t_bw, nodes)], [np.tile(t_lat, nodes)], [np.tile(t_link, nodes)]
    rails = layout.rails
    leaves = layout.blocks * rails if has_fabric else 0
    spines = layout.spines if has_fabric else 0
    uplink = np.zeros(leaves)
    if has_fabric:
        nic_bw = topo.nics.bandwidth_Gbps * 1e9 / 8
        sw_lat = topo.fabric.switch_latency_us * US
        n_nic = 2 * nodes * nics
        parts_bw.append(np.full(n_nic, nic_bw))
        parts_lat.append(np.full(n_nic, sw_lat / 2))
        parts_link.append(np.full(n_nic, NET, dtype=np.int8))
        # NICs attached to each leaf: rail-optimised leaves take one NIC per node of their block,
        # otherwise a leaf takes every NIC of its nodes; the last block may be partial.
        in_block = np.minimum(layout.nodes_per_block, nodes - np.arange(layout.blocks) * layout.nodes_per_block)
        per_node_on_leaf = nics // rails
        attached = np.repeat(in_block * per_node_on_leaf, rails) * nic_bw
        o = topo.fabric.oversubscription if isinstance(topo.fabric, FatTreeFabric) else 1.0
        uplink = attached / o
        if spines:
            per_edge = np.repeat(uplink / spines, 2)  # (leaf→spine, spine→leaf) per leaf
            n_sp = 2 * leaves * spines
            parts_bw.append(np.tile(per_edge, spines))
            parts_lat.append(np.full(n_sp, sw_lat / 2))
            parts_link.append(np.full(n_sp, NET, dtype=np.int8))
    return EdgeTable(
        nodes=nodes, per_node=len(template.edges), nics=nics, leaves=leaves, spines=spines, rails=rails,
        nodes_per_block=layout.nodes_per_block, has_fabric=has_fabric,
        bandwidth_Bps=np.concatenate(parts_bw), latency_s=np.concatenate(parts_lat),
        link_code=np.concatenate(parts_link), leaf_uplink_Bps=uplink,
    )
