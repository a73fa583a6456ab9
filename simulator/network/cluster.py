"""``Cluster``: a built cluster — GPU indexing, routing, per-edge arrays and summary figures.

GPU ``k·g + i`` (global rank order, node-major) is local GPU ``i`` of machine ``k``; its graph node
is ``n{k}/gpu{i}``. Edges are described by ``edges.edge_table`` (template + fabric sizes, ids by
arithmetic); the per-edge arrays and the networkx graph (``Cluster.graph``: drawing, GraphML
export, max-flow on one node) are built only when asked for, so 16,384 GPUs build in milliseconds.
"""

from __future__ import annotations

import math
from collections import Counter
from functools import cached_property

import networkx as nx
import numpy as np

from simulator.catalog import get_gpu
from simulator.config.hardware import GPUSpec
from simulator.config.topology import PCIeFabric, TopologyConfig
from simulator.errors import InputError
from simulator.network.builder import (
    LINK_CLASSES,
    FabricLayout,
    NodeTemplate,
    build_graph,
    check_nodes,
    fabric_layout,
    gpu_switch,
    gpus_per_socket,
    nic_rail_of_gpu,
    node_template,
    validate_graph,
)
from simulator.network.edges import EdgeTable, edge_table
from simulator.network.routing import Route, TemplateRoutes, make_route


class Cluster:
    """A built cluster. Treat as immutable; route memos are internal caches.

    Attributes: ``topology``, ``gpu``, ``nodes``, ``template`` (one node's graph in local names),
    ``layout`` (fat-tree sizing), ``edges`` (``EdgeTable``); built on first use: ``graph``,
    ``gpu_ids``, ``edge_bandwidth_Bps``, ``edge_latency_s``, ``edge_link``.
    """

    def __init__(self, topology: TopologyConfig, gpu: GPUSpec, nodes: int, template: NodeTemplate,
                 layout: FabricLayout, edges: EdgeTable):
        self.topology = topology
        self.gpu = gpu
        self.nodes = nodes
        self.template = template
        self.layout = layout
        self.edges = edges
        self._routes = TemplateRoutes(topology, template)
        self._memo: dict[tuple, Route] = {}

    # --- lazily built views ---------------------------------------------------------------------
    @cached_property
    def graph(self) -> nx.DiGraph:
        """The full networkx graph (built on first use; its edge ``id`` equals the array index)."""
        return build_graph(self.topology, self.nodes)[0]

    @cached_property
    def gpu_ids(self) -> tuple[str, ...]:
        return tuple(f"n{k}/gpu{i}" for k in range(self.nodes) for i in range(self.gpus_per_node))

    @property
    def edge_bandwidth_Bps(self) -> np.ndarray:
        """Line rate per edge id (B/s, per direction)."""
        return self.edges.bandwidth_Bps

    @property
    def edge_latency_s(self) -> np.ndarray:
        return self.edges.latency_s

    @cached_property
    def edge_link(self) -> np.ndarray:
        """Link class name per edge id (object array)."""
        return np.array(LINK_CLASSES, dtype=object)[self.edges.link_code]

    # --- indexing -----------------------------------------------------------------------------
    @property
    def gpus_per_node(self) -> int:
        return self.topology.gpus_per_node

    @property
    def n_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

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

    @property
    def template_routes(self) -> TemplateRoutes:
        return self._routes

    # --- routing ------------------------------------------------------------------------------
    def default_rail(self, src_local: int, dst_local: int) -> int:
        """Rail of a cross-node transfer: the destination GPU's with PXN, else the source's."""
        return nic_rail_of_gpu(self.topology, dst_local if self.has_p2p_scale_up else src_local)

    def route(self, src: int, dst: int, rail: int | None = None, compact: bool = False) -> Route:
        """Route of a GPU→GPU transfer. Cross-node transfers leave through NIC ``rail`` (default:
        the destination GPU's rail when PXN is possible, else the source's) and arrive on the same
        rail (rail-optimised fabrics never mix rails, formulas.md §3.6). ``compact`` replaces the
        ``2S`` leaf↔spine edges by the leaves' two pseudo-edges (``edges`` module; compact ids)."""
        key = (src, dst, rail, compact)
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
                rail = self.default_rail(i, j)
            a = self._routes.gpu_nic(i, rail).shifted(ka * e)
            b = self._routes.nic_gpu(rail, j).shifted(kb * e)
            net = self._net_route(ka, kb, rail, compact)
            # the three parts use disjoint edges (node ka, fabric, node kb): plain concatenation
            out = Route(np.concatenate((a.edges, net.edges, b.edges)), np.concatenate((a.weights, net.weights, b.weights)),
                        a.latency_s + net.latency_s + b.latency_s)
        self._memo[key] = out
        return out

    def _net_route(self, ka: int, kb: int, rail: int, compact: bool) -> Route:
        t = self.edges
        la, lb = t.leaf(ka, rail), t.leaf(kb, rail)
        w = {t.nic_up(ka, rail): 1.0, t.nic_down(kb, rail): 1.0}
        hops = 1
        if la != lb:
            s = t.spines
            if compact:
                w[t.first_aggregate + 2 * la] = 1.0
                w[t.first_aggregate + 2 * lb + 1] = 1.0
            else:
                for k in range(s):
                    w[t.spine_up(la, k)] = 1.0 / s
                    w[t.spine_down(lb, k)] = 1.0 / s
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
        """Bandwidth per GPU to host memory when every GPU offloads at once (line rate, per
        direction). PCIe: ``min(gpu_link, uplink / GPUs per PCIe switch)``. NVLink-C2C (Grace
        superchips, ``host.c2c_GBps``): the CPU's C2C bandwidth / the GPUs on that CPU."""
        host = self.topology.host
        if host.c2c_GBps is not None:
            return host.c2c_GBps / max(gpus_per_socket(self.topology)) * 1e9
        sharing = Counter(gpu_switch(self.topology, i) for i in range(self.gpus_per_node))
        return min(host.gpu_link_GBps, host.uplink_GBps / max(sharing.values())) * 1e9

    @property
    def host_link(self) -> str:
        """``c2c`` when host memory is reached over NVLink-C2C, else ``pcie``."""
        return "pcie" if self.topology.host.c2c_GBps is None else "c2c"

    @property
    def nvlink_domain_gpus(self) -> int:
        """GPUs joined by the scale-up fabric (NVLink/xGMI): a DGX node's 8, an NVL72 rack's 72."""
        return self.topology.nvlink_domain_gpus

    def nvlink_bisection_Bps(self) -> float:
        """Scale-up bisection of one NVLink domain (per direction): max flow from the first half of a
        node's GPUs to the second half over GPU and NVSwitch links only (0 without scale-up).
        A non-blocking NVSwitch domain of ``g`` GPUs at ``b`` each gives ``(g/2)·b``."""
        g = self.gpus_per_node
        if self.nvlink_domain_gpus < 2:
            return 0.0
        kinds = {name: kind for name, kind, _ in self.template.nodes}
        flow = nx.DiGraph()
        for u, v, bw, _, _ in self.template.edges:
            if kinds[u] in ("gpu", "nvswitch") and kinds[v] in ("gpu", "nvswitch"):
                flow.add_edge(u, v, capacity=bw)
        for i in range(g):
            if i < g // 2:
                flow.add_edge("_src", f"gpu{i}", capacity=math.inf)
            else:
                flow.add_edge(f"gpu{i}", "_dst", capacity=math.inf)
        return float(nx.maximum_flow_value(flow, "_src", "_dst"))

    def stats(self) -> dict:
        """GPU count, node and link counts by type, per-GPU and bisection bandwidth (GB/s, per direction).

        Counted from the template and the fabric sizes (no graph needed)."""
        t = self.edges
        kinds = {name: kind for name, kind, _ in self.template.nodes}
        node_types: Counter = Counter()
        for _, kind, _ in self.template.nodes:
            node_types[kind] += self.nodes
        if t.has_fabric:
            node_types["leaf"] += t.leaves
            if t.spines:
                node_types["spine"] += t.spines
        links: Counter = Counter()
        for u, v, _, _, link in self.template.edges:
            # NVLink-C2C (GPU <-> Grace) is reported on its own, though it is an NVLink-class edge.
            c2c = {kinds[u], kinds[v]} == {"gpu", "cpu"}
            links["c2c" if c2c else link] += self.nodes
        if t.n_edges > t.first_nic:
            links["net"] += t.n_edges - t.first_nic
        scale_up = sum(bw for u, v, bw, _, _ in self.template.edges if u == "gpu0" and kinds[v] in ("gpu", "nvswitch"))
        topo = self.topology
        fab = topo.fabric
        # Multi-plane / dual-ToR: every NIC port is a separate cable to a separate leaf; the switch
        # count of each tier scales with the ports per NIC (FatTreeFabric docstring).
        ports = getattr(fab, "planes", 1) * (2 if getattr(fab, "dual_tor", False) else 1)
        for tier in ("leaf", "spine"):
            if tier in node_types:
                node_types[tier] *= ports
        if ports > 1 and "net" in links:
            fabric_links = t.n_edges - t.first_nic
            links["net"] += fabric_links * (ports - 1)
        return {
            "topology": topo.name,
            "node_unit": topo.node_unit,
            "nodes": self.nodes,
            "gpus": self.n_gpus,
            "gpu": self.gpu.name,
            "node_counts": dict(node_types),
            "link_counts": {k: v // 2 for k, v in links.items()},
            "directed_edges": t.n_edges,
            "nvlink_domain_gpus": self.nvlink_domain_gpus,
            "nvlink_domains": self.nodes if self.nvlink_domain_gpus > 1 else 0,
            "scale_up_GBps_per_gpu": scale_up / 1e9,
            "nvlink_bisection_GBps": self.nvlink_bisection_Bps() / 1e9,
            "nic_GBps_per_gpu": topo.nics.per_node * topo.nics.bandwidth_Gbps / 8 / topo.gpus_per_node,
            "host_link": self.host_link,
            "host_GBps_per_gpu": self.host_bandwidth_Bps_per_gpu / 1e9,
            "fabric_planes": ports,
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


def _validate(topo: TopologyConfig, nodes: int, template: NodeTemplate, table: EdgeTable) -> None:
    """``validate_graph`` on one node's template (every node is a copy), then the fabric: positive
    line rates and, with several nodes, a NIC that GPU 0 reaches and is reached from."""
    tg = template.graph()
    validate_graph(tg)
    if table.has_fabric and not (table.nic_Bps > 0 and np.all(table.leaf_uplink_Bps > 0)):
        raise InputError("NIC and leaf uplink bandwidths must be > 0", field="bandwidth_Bps")
    if nodes > 1:
        reach = nx.descendants(tg, "gpu0") & nx.ancestors(tg, "gpu0")
        if not any(f"nic{r}" in reach for r in range(topo.nics.per_node)):
            raise InputError("GPU 0 reaches no NIC: GPUs on different nodes are unreachable", field="nics")


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
    check_nodes(topology, nodes)
    template = node_template(topology)
    layout = fabric_layout(topology, nodes)
    table = edge_table(topology, nodes, template, layout)
    _validate(topology, nodes, template, table)
    return Cluster(topology, gpu, nodes, template, layout, table)
