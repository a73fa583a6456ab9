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
from functools import cached_property

import numpy as np

from simulator.config.topology import FatTreeFabric, TopologyConfig
from simulator.network.builder import LINK_CLASSES, FabricLayout, NodeTemplate
from simulator.units import US

NET = LINK_CLASSES.index("net")


@dataclass(frozen=True)
class EdgeTable:
    """Edges described by the node template and the fabric sizes; per-edge arrays in id order
    (line rate B/s, latency s, link-class code) are built on first use."""

    nodes: int
    nics: int
    leaves: int
    spines: int
    rails: int
    nodes_per_block: int
    has_fabric: bool
    template_bandwidth_Bps: np.ndarray
    template_latency_s: np.ndarray
    template_link_code: np.ndarray  # int8 index into LINK_CLASSES
    nic_Bps: float
    switch_latency_s: float
    leaf_uplink_Bps: np.ndarray  # per leaf: attached NIC capacity / oversubscription (all spines together)

    # --- id arithmetic ------------------------------------------------------------------------
    @property
    def per_node(self) -> int:
        """``E``, template edges per node."""
        return len(self.template_bandwidth_Bps)

    @property
    def first_nic(self) -> int:
        return self.nodes * self.per_node

    @property
    def first_spine(self) -> int:
        return self.first_nic + (2 * self.nodes * self.nics if self.has_fabric else 0)

    @property
    def n_edges(self) -> int:
        return self.first_spine + 2 * self.leaves * self.spines

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

    # --- arrays -------------------------------------------------------------------------------
    def _fill(self, out: np.ndarray, per_node: np.ndarray, nic: float, spine: np.ndarray | float | None) -> np.ndarray:
        """Write the node block (template tiled), the NIC block and, unless ``None``, the spine block."""
        out[: self.first_nic].reshape(self.nodes, self.per_node)[:] = per_node
        out[self.first_nic:self.first_spine] = nic
        if spine is not None and self.spines:
            out[self.first_spine:self.n_edges].reshape(self.spines, 2 * self.leaves)[:] = spine
        return out

    def _spine_Bps(self) -> np.ndarray:
        """Line rate of one leaf↔spine edge, per spine in id order: ``(up, down)`` for every leaf."""
        return np.repeat(self.leaf_uplink_Bps / self.spines, 2)

    @cached_property
    def bandwidth_Bps(self) -> np.ndarray:
        return self._fill(np.empty(self.n_edges), self.template_bandwidth_Bps, self.nic_Bps,
                          self._spine_Bps() if self.spines else None)

    @cached_property
    def latency_s(self) -> np.ndarray:
        return self._fill(np.empty(self.n_edges), self.template_latency_s, self.switch_latency_s / 2,
                          self.switch_latency_s / 2)

    @cached_property
    def link_code(self) -> np.ndarray:
        return self._fill(np.empty(self.n_edges, dtype=np.int8), self.template_link_code, NET, NET)

    def compact_bandwidth_Bps(self) -> np.ndarray:
        """Line rates per compact id (``compact_capacity_Bps`` at efficiency 1)."""
        return self.compact_capacity_Bps(np.ones(len(LINK_CLASSES)))

    def compact_capacity_Bps(self, efficiency_by_class: np.ndarray) -> np.ndarray:
        """Effective capacity (line rate × efficiency of its link class) per compact id: real edges,
        then ``up(l)``, ``down(l)`` per leaf. The real leaf↔spine edges, which compact routes never
        use, are left at 0 (untouched zero pages: building this costs no pass over them)."""
        out = np.zeros(self.n_compact)
        net = efficiency_by_class[NET]
        self._fill(out, self.template_bandwidth_Bps * efficiency_by_class[self.template_link_code],
                   self.nic_Bps * net, None)
        if self.spines:
            out[self.first_aggregate:] = np.repeat(self.leaf_uplink_Bps, 2) * net
        return out


def edge_table(topo: TopologyConfig, nodes: int, template: NodeTemplate, layout: FabricLayout) -> EdgeTable:
    """The edges of ``nodes`` machines of ``topo`` in ``build_graph``'s id order (see module doc)."""
    nics = topo.nics.per_node
    has_fabric = nodes > 1 or nics > 0
    rails = layout.rails
    leaves = layout.blocks * rails if has_fabric else 0
    nic_bw = topo.nics.bandwidth_Gbps * 1e9 / 8
    # NICs attached to each leaf: rail-optimised leaves take one NIC per node of their block,
    # otherwise a leaf takes every NIC of its nodes; the last block may be partial.
    in_block = np.minimum(layout.nodes_per_block, nodes - np.arange(layout.blocks) * layout.nodes_per_block)
    attached = np.repeat(in_block * (nics // rails), rails) * nic_bw if has_fabric else np.zeros(0)
    o = topo.fabric.oversubscription if isinstance(topo.fabric, FatTreeFabric) else 1.0
    return EdgeTable(
        nodes=nodes, nics=nics, leaves=leaves, spines=layout.spines if has_fabric else 0, rails=rails,
        nodes_per_block=layout.nodes_per_block, has_fabric=has_fabric,
        template_bandwidth_Bps=np.array([e[2] for e in template.edges], dtype=np.float64),
        template_latency_s=np.array([e[3] for e in template.edges], dtype=np.float64),
        template_link_code=np.array([LINK_CLASSES.index(e[4]) for e in template.edges], dtype=np.int8),
        nic_Bps=nic_bw, switch_latency_s=topo.fabric.switch_latency_us * US,
        leaf_uplink_Bps=attached / o,
    )
