"""Network layer: topology YAML → networkx graph (``build_cluster``), routing with ECMP, and the
fabric solvers (analytical bottleneck and max–min fair flow) that turn transfers into seconds."""

from simulator.network.builder import LINK_CLASSES, NODE_TYPES, build_graph, validate_graph
from simulator.network.cluster import Cluster, build_cluster
from simulator.network.fabric import Transfer, analytical_time, flow_time, link_loads
from simulator.network.routing import Route

__all__ = [
    "LINK_CLASSES",
    "NODE_TYPES",
    "Cluster",
    "Route",
    "Transfer",
    "analytical_time",
    "build_cluster",
    "build_graph",
    "flow_time",
    "link_loads",
    "validate_graph",
]
