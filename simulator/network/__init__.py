"""Network layer: topology YAML → cluster (``build_cluster``: per-edge arrays, networkx graph on
demand), routing with ECMP, vectorised link loads, and the fabric solvers (analytical bottleneck and
max–min fair flow) that turn transfers into seconds."""

from simulator.network.builder import LINK_CLASSES, NODE_TYPES, build_graph, validate_graph
from simulator.network.cluster import Cluster, build_cluster
from simulator.network.edges import EdgeTable, edge_table
from simulator.network.fabric import Transfer, analytical_time, flow_time, link_loads
from simulator.network.loads import HopLoads
from simulator.network.routing import Route

__all__ = [
    "LINK_CLASSES",
    "NODE_TYPES",
    "Cluster",
    "EdgeTable",
    "HopLoads",
    "Route",
    "Transfer",
    "analytical_time",
    "build_cluster",
    "build_graph",
    "edge_table",
    "flow_time",
    "link_loads",
    "validate_graph",
]
