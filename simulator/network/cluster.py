"""``Cluster``: the built graph plus GPU indexing, routing and summary figures.

GPU ``k·g + i`` (global rank order, node-major) is local GPU ``i`` of machine ``k``; its graph node
is ``n{k}/gpu{i}``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from simulator.catalog import get_gpu
from simulator.config.hardware import GPUSpec
from simulator.config.topology import PCIeFabric, TopologyConfig
from simulator.errors import InputError
from simulator.network.builder import (
    FabricLayout,
    NodeTemplate,
    build_graph,
    gpu_switch,
    nic_rail_of_gpu,
    validate_graph,
)
from simulator.network.routing import Route, TemplateRoutes, make_route


@dataclass(frozen=True, eq=False)
class Cluster:
    """A built cluster. Treat as immutable; the route memo is an internal cache."""

    topology: TopologyConfig
    gpu: GPUSpec
    nodes: int
    graph: nx.DiGraph
    template: NodeTemplate
    layout: FabricLayout
    gpu_ids: tuple[str, ...]
    edge_bandwidth_Bps: np.ndarray
    edge_latency_s: np.ndarray
    edge_link: np.ndarray  # link class name per edge id (object array)
    _routes: TemplateRoutes = field(repr=False)
    _fabric_ids: dict[tuple[str, str], int] = field(repr=False)
    _memo: dict = field(default_factory=dict, repr=False)

    # --- indexing -----------------------------------------------------------------------------
    @property
    def gpus_per_node(self) -> int:
        return self.topology.gpus_per_node

    @property
    def n_gpus(self) -> int:
        return len(self.gpu_ids)

    @property
    def edges_per_node(self) -> int:
        return len(self.template.edges)

    def check_gpu(self, gpu: int) -> int:
        if not isinstance(gpu, int | np.integer) or not 0 <= gpu < self.n_gpus:
            raise InputError(f"GPU index {gpu!r} outside 0..{self.n_gpus - 1}", field="groups")
        return int(gpu)

    def node_of(self, gpu: int) -> int:
        return self.check_gpu(gpu) // self.gpus_per_node

    def local_index(self, gpu: int) -> int:
        return self.check_gpu(gpu) % self.gpus_per_node

    def rail_of(self, gpu: int) -> int:
        """The NIC rail nearest this GPU (``-1`` without NICs)."""
        return nic_rail_of_gpu(self.topology, self.local_index(gpu))

    @property
    def has_p2p_scale_up(self) -> bool:
        return self._routes.has_scale_up and self._routes.p2p

    @property
    def intra_link_class(self) -> str:
        """``nvlink`` (NVLink / xGMI scale-up) or ``pci`` for NCCL's per-step latency tables."""
        return "pci" if isinstance(self.topology.intra_node, PCIeFabric) else "nvlink"

    # --- routing ------------------------------------------------------------------------------
    def route(self, src: int, dst: int, rail: int | None = None) -> Route:
        """Route of a GPU→GPU transfer. Cross-node transfers leave through NIC ``rail`` (default:
        the destination GPU's rail when PXN is possible, else the source's) and arrive on the same
        rail (rail-optimised fabrics never mix rails, formulas.md §3.6)."""
        key = (src, dst, rail)
        hit = self._memo.get(key)
        if hit is not None:
            return hit
        ka, i = divmod(self.check_gpu(src), self.gpus_per_node)
        kb, j = divmod(self.check_gpu(dst), self.gpus_per_node)
        e = self.edges_per_node
        if ka == kb:
            out = self._routes.gpu_gpu(i, j).shifted(ka * e) if i != j else make_route({}, 0.0)
        else:
            if rail is None:
                rail = nic_rail_of_gpu(self.topology, j if self.has_p2p_scale_up else i)
            a = self._routes.gpu_nic(i, rail).shifted(ka * e)
            b = self._routes.nic_gpu(rail, j).shifted(kb * e)
            net = self._net_route(ka, kb, rail)
            # the three parts use disjoint edges (node ka, fabric, node kb): plain concatenation
            out = Route(np.concatenate((a.edges, net.edges, b.edges)), np.concatenate((a.weights, net.weights, b.weights)),
                        a.latency_s + net.latency_s + b.latency_s)
        self._memo[key] = out
        return out

    def _net_route(self, ka: int, kb: int, rail: int) -> Route:
        nic_a, nic_b = f"n{ka}/nic{rail}", f"n{kb}/nic{rail}"
        leaf_a, leaf_b = self.layout.leaf_name(ka, rail), self.layout.leaf_name(kb, rail)
        ids = self._fabric_ids
        w = {ids[nic_a, leaf_a]: 1.0, ids[leaf_b, nic_b]: 1.0}
        hops = 1
        if leaf_a != leaf_b:
            s = self.layout.spines
            for k in range(s):
                w[ids[leaf_a, f"spine{k}"]] = 1.0 / s
                w[ids[f"spine{k}", leaf_b]] = 1.0 / s
            hops = 3
        return make_route(w, hops * self.topology.fabric.switch_latency_us * 1e-6)

    def switch_route(self, gpu: int, up: bool) -> Route:
        """GPU → its node's NVSwitch chips (``up``) or back, for NVLS in-switch reduction."""
        k, i = divmod(self.check_gpu(gpu), self.gpus_per_node)
        return self._routes.gpu_switch_plane(i, up).shifted(k * self.edges_per_node)

    def path_bandwidth_Bps(self, src: int, dst: int) -> float:
        """Line-rate bottleneck of one transfer alone: ``min_e bandwidth_e / weight_e``."""
        r = self.route(src, dst)
        return float(np.min(self.edge_bandwidth_Bps[r.edges] / r.weights)) if len(r.edges) else math.inf

    # --- summaries ----------------------------------------------------------------------------
    @property
    def host_bandwidth_Bps_per_gpu(self) -> float:
        """PCIe bandwidth per GPU to host memory when every GPU offloads at once (line rate, per
        direction): ``min(gpu_link, uplink / GPUs per PCIe switch)``."""
        host = self.topology.host
        sharing = Counter(gpu_switch(self.topology, i) for i in range(self.gpus_per_node))
        return min(host.gpu_link_GBps, host.uplink_GBps / max(sharing.values())) * 1e9

    def stats(self) -> dict:
        """GPU count, node and link counts by type, per-GPU and bisection bandwidth (GB/s, per direction)."""
        node_types = Counter(d["type"] for _, d in self.graph.nodes(data=True))
        links = Counter(d["link"] for _, _, d in self.graph.edges(data=True))
        g0 = self.gpu_ids[0]
        scale_up = sum(d["bandwidth_Bps"] for _, v, d in self.graph.out_edges(g0, data=True) if d["link"] != "pcie")
        topo = self.topology
        return {
            "topology": topo.name,
            "nodes": self.nodes,
            "gpus": self.n_gpus,
            "gpu": self.gpu.name,
            "node_counts": dict(node_types),
            "link_counts": {k: v // 2 for k, v in links.items()},
            "directed_edges": self.graph.number_of_edges(),
            "scale_up_GBps_per_gpu": scale_up / 1e9,
            "nic_GBps_per_gpu": topo.nics.per_node * topo.nics.bandwidth_Gbps / 8 / topo.gpus_per_node,
            "host_GBps_per_gpu": self.host_bandwidth_Bps_per_gpu / 1e9,
            "leaves": node_types.get("leaf", 0),
            "spines": node_types.get("spine", 0),
            "bisection_GBps": self.bisection_Bps() / 1e9,
        }

    def bisection_Bps(self) -> float:
        """Bandwidth (per direction) from the first half of the GPUs to the second half.

        One node: max flow on the graph. Several nodes: half the nodes' NIC capacity, divided by
        the oversubscription when the halves sit under different leaves.
        """
        if self.n_gpus < 2:
            return 0.0
        if self.nodes == 1:
            g = nx.DiGraph()
            g.add_edges_from((u, v, {"capacity": d["bandwidth_Bps"]}) for u, v, d in self.graph.edges(data=True))
            half = self.n_gpus // 2
            for name in self.gpu_ids[:half]:
                g.add_edge("_src", name, capacity=math.inf)
            for name in self.gpu_ids[half:]:
                g.add_edge(name, "_dst", capacity=math.inf)
            return float(nx.maximum_flow_value(g, "_src", "_dst"))
        topo = self.topology
        nic = topo.nics.per_node * topo.nics.bandwidth_Gbps * 1e9 / 8
        o = getattr(topo.fabric, "oversubscription", 1.0) if self.layout.blocks > 1 else 1.0
        return (self.nodes // 2) * nic / o


def build_cluster(topology: TopologyConfig, nodes: int, gpu: GPUSpec | None = None) -> Cluster:
    """Build ``nodes`` machines of ``topology`` and their fabric (pure; no I/O).

    ``gpu`` overrides the topology's GPU (else it is looked up in the catalog). Raises ``InputError``
    for impossible layouts (several nodes without NICs, an unknown GPU, bad graph elements).
    """
    if gpu is None:
        try:
            gpu = get_gpu(topology.gpu)
        except KeyError as exc:
            raise InputError(str(exc.args[0]), field="gpu") from None
    graph, template, layout = build_graph(topology, nodes)
    validate_graph(graph)
    n_e = graph.number_of_edges()
    bw = np.empty(n_e)
    lat = np.empty(n_e)
    link = np.empty(n_e, dtype=object)
    fabric_ids: dict[tuple[str, str], int] = {}
    first_fabric = nodes * len(template.edges)
    for u, v, d in graph.edges(data=True):
        j = d["id"]
        bw[j], lat[j], link[j] = d["bandwidth_Bps"], d["latency_s"], d["link"]
        if j >= first_fabric:
            fabric_ids[u, v] = j
    gpu_ids = tuple(f"n{k}/gpu{i}" for k in range(nodes) for i in range(topology.gpus_per_node))
    return Cluster(
        topology=topology,
        gpu=gpu,
        nodes=nodes,
        graph=graph,
        template=template,
        layout=layout,
        gpu_ids=gpu_ids,
        edge_bandwidth_Bps=bw,
        edge_latency_s=lat,
        edge_link=link,
        _routes=TemplateRoutes(topology, template),
        _fabric_ids=fabric_ids,
    )
