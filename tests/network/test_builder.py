"""Builder invariants: counts by hand, reachability, route conservation, bottlenecks, speed."""

from __future__ import annotations

import itertools
import time

import networkx as nx
import numpy as np
import pytest

from simulator.errors import InputError
from simulator.network import LINK_CLASSES, NODE_TYPES, build_cluster, validate_graph


def test_dgx_a100_two_nodes_counts(topo):
    c = build_cluster(topo("dgx-a100"), 2)
    s = c.stats()
    assert s["gpus"] == 16
    # per node: 6 NVSwitch, 4 PCIe switches, 2 CPUs, 8 NICs; rail-optimised: one leaf per rail.
    # radix 40, oversubscription 1 -> 20 down ports, so both nodes share each rail's leaf;
    # spines = 8 leaves * 20 up ports / 40 = 4.
    assert s["node_counts"] == {"gpu": 16, "nvswitch": 12, "pcie_switch": 8, "cpu": 4, "nic": 16, "leaf": 8, "spine": 4}
    # directed edges per node: NVLink 8*6*2 + GPU-PCIe 8*2 + PCIe-CPU 4*2 + CPU-CPU 2 + NIC-PCIe 8*2 = 138;
    # fabric: NIC-leaf 16*2 + leaf-spine 8*4*2 = 96.
    assert s["directed_edges"] == 2 * 138 + 96
    assert s["link_counts"]["nvlink"] == 96
    assert set(nx.get_node_attributes(c.graph, "type").values()) <= set(NODE_TYPES)
    assert set(nx.get_edge_attributes(c.graph, "link").values()) <= set(LINK_CLASSES)


def test_edge_ids_are_dense_and_attributes_positive(topo):
    c = build_cluster(topo("dgx-h100"), 3)
    ids = sorted(d["id"] for _, _, d in c.graph.edges(data=True))
    assert ids == list(range(c.graph.number_of_edges()))
    assert np.all(c.edge_bandwidth_Bps > 0) and np.all(c.edge_latency_s >= 0)


@pytest.mark.parametrize("name", ["dgx-a100", "dgx-h100", "pcie-rtx4090x8", "mi300x-8", "dgx-b200", "hgx-b300", "mi355x-8"])
def test_every_gpu_pair_is_reachable_and_routes_conserve_flow(topo, name):
    c = build_cluster(topo(name), 2)
    ends = {d["id"]: (u, v) for u, v, d in c.graph.edges(data=True)}
    for a, b in itertools.permutations(range(c.n_gpus), 2):
        assert nx.has_path(c.graph, c.gpu_ids[a], c.gpu_ids[b])
        r = c.route(a, b)
        net = {}
        for e, w in zip(r.edges.tolist(), r.weights.tolist(), strict=True):
            u, v = ends[e]
            net[u] = net.get(u, 0.0) - w
            net[v] = net.get(v, 0.0) + w
        assert net.pop(c.gpu_ids[a]) == pytest.approx(-1.0)
        assert net.pop(c.gpu_ids[b]) == pytest.approx(1.0)
        assert all(abs(x) < 1e-9 for x in net.values())


def test_cross_node_bottleneck_is_the_nic(topo):
    # DGX A100: NVLink 300 GB/s, PCIe Gen4 31.5 GB/s, HDR NIC 200 Gb/s = 25 GB/s -> NIC limits.
    c = build_cluster(topo("dgx-a100"), 2)
    assert c.path_bandwidth_Bps(0, 8) == pytest.approx(25e9)
    assert c.path_bandwidth_Bps(0, 1) == pytest.approx(300e9)


def test_oversubscribed_uplink_is_the_cross_block_bottleneck(topo):
    # radix 4, oversubscription 4 -> 3 down ports per leaf, 3 nodes per block; 6 nodes = 2 blocks.
    base = topo("dgx-a100")
    fabric = base.fabric.model_copy(update={"switch_radix": 4, "oversubscription": 4.0})
    c = build_cluster(base.model_copy(update={"fabric": fabric}), 6)
    assert c.layout.blocks == 2
    # leaf uplink = 3 NICs * 25 GB/s / 4 = 18.75 GB/s (spread over the spines by ECMP)
    assert c.path_bandwidth_Bps(0, 3 * 8) == pytest.approx(18.75e9)
    # same block: no spine on the path, the NIC limits
    assert c.path_bandwidth_Bps(0, 8) == pytest.approx(25e9)


def test_no_p2p_gpus_stage_through_host_memory(topo):
    c = build_cluster(topo("pcie-rtx4090x8"), 1)
    names = {d["id"]: v for _, v, d in c.graph.edges(data=True)}
    visited = {names[e] for e in c.route(0, 1).edges.tolist()}
    assert any(n.endswith("cpu0") for n in visited)


def test_pxn_uses_the_destination_rail(topo):
    c = build_cluster(topo("dgx-h100"), 2)
    names = {d["id"]: (u, v) for u, v, d in c.graph.edges(data=True)}
    hops = {names[e] for e in c.route(0, 8 + 5).edges.tolist()}
    assert ("n0/nic5", "leaf5.0") in hops


def test_host_and_bisection_bandwidth(topo):
    a100 = build_cluster(topo("dgx-a100"), 1)
    assert a100.host_bandwidth_Bps_per_gpu == pytest.approx(31.5e9 / 2)  # 2 GPUs per Gen4 x16 uplink
    h100 = build_cluster(topo("dgx-h100"), 1)
    # max flow GPUs 0-3 -> 4-7: NVLink 4 x 450 GB/s (3.6 TB/s bidirectional, hardware.md §2), plus the detours
    # 4 NICs x 50 GB/s through the rail leaves and spines, plus the 22 GB/s socket link between PCIe halves.
    assert h100.bisection_Bps() == pytest.approx(4 * 450e9 + 4 * 50e9 + 22e9)


def test_node_of_and_indexing(topo):
    c = build_cluster(topo("dgx-h100"), 4)
    assert c.n_gpus == 32 and c.node_of(17) == 2 and c.local_index(17) == 1
    assert c.gpu_ids[17] == "n2/gpu1"
    with pytest.raises(InputError):
        c.node_of(32)


def test_2048_gpu_cluster_builds_fast(topo):
    t0 = time.perf_counter()
    c = build_cluster(topo("dgx-h100"), 256)
    assert time.perf_counter() - t0 < 1.0
    # radix 64, non-blocking: 32 down ports -> 8 blocks x 8 rails = 64 leaves; spines = 64 * 32 / 64 = 32.
    # DGX SuperPOD B200 RA for 2,048 GPUs: 64 leaf and 32 spine switches (hardware.md §3c [S48]).
    assert c.n_gpus == 2048 and c.stats()["leaves"] == 64 and c.stats()["spines"] == 32


def test_multi_node_without_nics_is_unreachable(topo):
    base = topo("dgx-a100")
    no_nics = base.model_copy(update={"nics": base.nics.model_copy(update={"per_node": 0})})
    build_cluster(no_nics, 1)
    with pytest.raises(InputError) as info:
        build_cluster(no_nics, 2)
    assert info.value.field == "nics.per_node"


def test_validate_graph_rejects_bad_elements(topo):
    c = build_cluster(topo("dgx-a100"), 1)
    g = c.graph.copy()
    g.nodes["n0/gpu0"]["type"] = "quantum_router"
    with pytest.raises(InputError, match="node type"):
        validate_graph(g)
    g = c.graph.copy()
    g.edges["n0/gpu0", "n0/nvsw0"]["bandwidth_Bps"] = 0.0
    with pytest.raises(InputError, match="bandwidth"):
        validate_graph(g)
    g = c.graph.copy()
    g.remove_edges_from([(u, v) for u, v in g.in_edges("n0/gpu5")])
    with pytest.raises(InputError, match="n0/gpu5"):
        validate_graph(g)
    g = c.graph.copy()
    g.edges["n0/gpu0", "n0/nvsw0"]["link"] = "smoke_signals"
    with pytest.raises(InputError, match="link type"):
        validate_graph(g)


def test_zero_nodes_is_an_input_error(topo):
    with pytest.raises(InputError):
        build_cluster(topo("dgx-a100"), 0)


def test_full_mesh_has_a_direct_link_per_pair(topo):
    c = build_cluster(topo("mi300x-8"), 1)
    assert c.stats()["link_counts"]["xgmi"] == 8 * 7 // 2
    r = c.route(0, 5)
    assert len(r.edges) == 1 and c.path_bandwidth_Bps(0, 5) == pytest.approx(64e9)


def test_non_rail_optimised_tree_puts_a_node_under_one_leaf(topo):
    base = topo("dgx-h100")
    fabric = base.fabric.model_copy(update={"rail_optimized": False, "switch_radix": 32})
    c = build_cluster(base.model_copy(update={"fabric": fabric}), 4)
    # 16 down ports per leaf hold 2 nodes of 8 NICs: 2 leaves; spines = 2 * 16 / 32 = 1
    assert c.layout.nodes_per_block == 2 and c.stats()["leaves"] == 2 and c.stats()["spines"] == 1
    fabric = base.fabric.model_copy(update={"rail_optimized": False, "switch_radix": 8})
    with pytest.raises(InputError) as info:
        build_cluster(base.model_copy(update={"fabric": fabric}), 2)
    assert info.value.field == "fabric.switch_radix"


def test_single_switch_joins_all_nics(topo):
    c = build_cluster(topo("pcie-rtx4090x8"), 3)
    assert c.stats()["leaves"] == 1 and c.stats()["spines"] == 0
    # GPU 0 -> GPU 16: staged via host (Gen4 x16 31.5 GB/s) then the 200 Gb/s NIC (25 GB/s) limits
    assert c.path_bandwidth_Bps(0, 16) == pytest.approx(25e9)


def test_network_layer_does_not_import_simpy():
    import subprocess
    import sys

    code = "import sys, simulator.network, simulator.collectives, simulator.cli_network; print('simpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_pcie_p2p_stays_under_the_switch(topo):
    base = topo("pcie-rtx4090x8")
    c = build_cluster(base.model_copy(update={"intra_node": base.intra_node.model_copy(update={"p2p": True})}), 1)
    names = {d["id"]: v for _, v, d in c.graph.edges(data=True)}
    visited = {names[e] for e in c.route(0, 1).edges.tolist()}  # GPUs 0 and 1 share PCIe switch 0
    assert visited == {"n0/pcie0", "n0/gpu1"}
