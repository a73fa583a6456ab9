"""Routes as weighted edge sets, with ECMP.

A ``Route`` says which fraction of a transfer's bytes crosses each directed edge: traffic is split
evenly over equal-cost paths (ECMP over NVSwitch chips and over fat-tree spines), so a route over
``S`` spines puts weight ``1/S`` on each leaf→spine edge. Fabric solvers only need these weights.

Intra-node routes are computed once per topology on the node template (networkx shortest paths on
the relevant sub-fabric) and shifted by the node's edge-id offset:

* GPU→GPU over the scale-up fabric (NVSwitch, full mesh); over PCIe when there is none. Without
  GPU peer-to-peer (GeForce, hardware.md §2 [S31]) the transfer is staged through host memory, so
  the route is forced through the source GPU's CPU socket.
* GPU→NIC ``r``: when GPU and NIC are not on the same rail and a peer-to-peer scale-up fabric
  exists, data first moves to the rail's GPU (NCCL PXN, formulas.md §3.6) then over PCIe.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from simulator.config.topology import PCIeFabric, TopologyConfig
from simulator.network.builder import NodeTemplate, gpu_switch, nic_gpu, nic_rail_of_gpu, socket_of_switch


@dataclass(frozen=True)
class Route:
    """Edge ids, the fraction of bytes on each, and the latency of the longest path (s)."""

    edges: np.ndarray  # int64
    weights: np.ndarray  # float64, each in (0, 1]
    latency_s: float

    def shifted(self, offset: int) -> Route:
        return Route(self.edges + offset, self.weights, self.latency_s)


def _combine(parts: list[dict[int, float]]) -> dict[int, float]:
    out: dict[int, float] = {}
    for part in parts:
        for e, w in part.items():
            out[e] = out.get(e, 0.0) + w
    return out


def make_route(weights: dict[int, float], latency_s: float) -> Route:
    ids = np.fromiter(weights.keys(), dtype=np.int64, count=len(weights))
    ws = np.fromiter(weights.values(), dtype=np.float64, count=len(weights))
    return Route(ids, ws, latency_s)


def concat(a: Route, b: Route) -> Route:
    """Route ``a`` then route ``b`` (bytes cross both; weights add where they share an edge)."""
    parts = [dict(zip(a.edges.tolist(), a.weights.tolist(), strict=True)),
             dict(zip(b.edges.tolist(), b.weights.tolist(), strict=True))]
    return make_route(_combine(parts), a.latency_s + b.latency_s)


class TemplateRoutes:
    """All intra-node routes of one node type, in template edge ids (memoised)."""

    def __init__(self, topo: TopologyConfig, template: NodeTemplate):
        self.topo = topo
        self.graph = template.graph()
        kinds = nx.get_node_attributes(self.graph, "type")
        self._pcie = self.graph.subgraph([n for n, k in kinds.items() if k in ("gpu", "pcie_switch", "cpu", "nic")])
        self._scale_up = self.graph.subgraph([n for n, k in kinds.items() if k in ("gpu", "nvswitch")])
        self.p2p = not (isinstance(topo.intra_node, PCIeFabric) and not topo.intra_node.p2p)
        self.has_scale_up = not isinstance(topo.intra_node, PCIeFabric)
        self._memo: dict[tuple, Route] = {}

    def _ecmp(self, g: nx.DiGraph, src: str, dst: str) -> tuple[dict[int, float], float]:
        """Even split over all hop-count shortest paths; latency of the slowest one."""
        paths = list(nx.all_shortest_paths(g, src, dst))
        w = 1.0 / len(paths)
        out: dict[int, float] = {}
        lat = 0.0
        for path in paths:
            plat = 0.0
            for u, v in zip(path[:-1], path[1:], strict=True):
                data = g.edges[u, v]
                out[data["id"]] = out.get(data["id"], 0.0) + w
                plat += data["latency_s"]
            lat = max(lat, plat)
        return out, lat

    def _pcie_route(self, src: str, dst: str, via_cpu: str | None) -> tuple[dict[int, float], float]:
        if via_cpu is None:
            return self._ecmp(self._pcie, src, dst)
        a, la = self._ecmp(self._pcie, src, via_cpu)
        b, lb = self._ecmp(self._pcie, via_cpu, dst)
        return _combine([a, b]), la + lb

    def _cpu_of_gpu(self, i: int) -> str:
        return f"cpu{socket_of_switch(self.topo, gpu_switch(self.topo, i))}"

    def gpu_gpu(self, i: int, j: int) -> Route:
        key = ("gg", i, j)
        if key not in self._memo:
            if self.has_scale_up:
                w, lat = self._ecmp(self._scale_up, f"gpu{i}", f"gpu{j}")
            else:
                w, lat = self._pcie_route(f"gpu{i}", f"gpu{j}", None if self.p2p else self._cpu_of_gpu(i))
            self._memo[key] = make_route(w, lat)
        return self._memo[key]

    def gpu_nic(self, i: int, r: int) -> Route:
        key = ("gn", i, r)
        if key not in self._memo:
            if self.has_scale_up and nic_rail_of_gpu(self.topo, i) != r:
                proxy = nic_gpu(self.topo, r)
                a = self.gpu_gpu(i, proxy)
                w, lat = self._pcie_route(f"gpu{proxy}", f"nic{r}", None)
                self._memo[key] = concat(a, make_route(w, lat))
            else:
                w, lat = self._pcie_route(f"gpu{i}", f"nic{r}", None if self.p2p else self._cpu_of_gpu(i))
                self._memo[key] = make_route(w, lat)
        return self._memo[key]

    def nic_gpu(self, r: int, j: int) -> Route:
        key = ("ng", r, j)
        if key not in self._memo:
            w, lat = self._pcie_route(f"nic{r}", f"gpu{j}", None if self.p2p else self._cpu_of_gpu(j))
            self._memo[key] = make_route(w, lat)
        return self._memo[key]

    def gpu_switch_plane(self, i: int, up: bool) -> Route:
        """GPU ``i`` to (``up``) or from all NVSwitch chips, evenly (NVLS traffic)."""
        key = ("sw", i, up)
        if key not in self._memo:
            edges = self.graph.out_edges(f"gpu{i}", data=True) if up else self.graph.in_edges(f"gpu{i}", data=True)
            ids = [d["id"] for u, v, d in edges if self.graph.nodes[v if up else u]["type"] == "nvswitch"]
            lat = max((d["latency_s"] for u, v, d in edges), default=0.0)
            self._memo[key] = make_route({e: 1.0 / len(ids) for e in ids}, lat)
        return self._memo[key]
