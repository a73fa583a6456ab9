"""The arithmetic edge table equals the networkx graph, edge by edge, on small clusters."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from simulator.network import build_cluster
from simulator.network.builder import LINK_CLASSES


def _variants(topo):
    base = topo("dgx-h100")
    small = base.fabric.model_copy(update={"switch_radix": 4, "oversubscription": 3.0})
    flat = base.fabric.model_copy(update={"rail_optimized": False, "switch_radix": 32})
    return {
        "dgx-h100": base,
        "dgx-a100": topo("dgx-a100"),
        "mi300x-8": topo("mi300x-8"),
        "pcie-rtx4090x8": topo("pcie-rtx4090x8"),
        "h100-radix4-o3": base.model_copy(update={"fabric": small}),
        "h100-not-rail": base.model_copy(update={"fabric": flat}),
    }


@pytest.mark.parametrize("name", ["dgx-h100", "dgx-a100", "mi300x-8", "pcie-rtx4090x8", "h100-radix4-o3", "h100-not-rail"])
@pytest.mark.parametrize("nodes", [1, 2, 3, 5, 7])
def test_edge_arrays_match_the_graph(topo, name, nodes):
    c = build_cluster(_variants(topo)[name], nodes)
    g = c.graph
    assert g.number_of_edges() == len(c.edge_bandwidth_Bps)
    bw = np.empty(len(c.edge_bandwidth_Bps))
    lat = np.empty_like(bw)
    link = np.empty(len(bw), dtype=object)
    for _, _, d in g.edges(data=True):
        bw[d["id"]], lat[d["id"]], link[d["id"]] = d["bandwidth_Bps"], d["latency_s"], d["link"]
    np.testing.assert_allclose(c.edge_bandwidth_Bps, bw, rtol=1e-12)
    np.testing.assert_allclose(c.edge_latency_s, lat, rtol=1e-12)
    assert list(c.edge_link) == list(link)
    # fabric id arithmetic names the right edges
    t = c.edges
    ids = {(u, v): d["id"] for u, v, d in g.edges(data=True)}
    for k in range(nodes):
        for r in range(t.nics):
            leaf = c.layout.leaf_name(k, r)
            assert ids[f"n{k}/nic{r}", leaf] == t.nic_up(k, r)
            assert ids[leaf, f"n{k}/nic{r}"] == t.nic_down(k, r)
            for s in range(t.spines):
                assert ids[leaf, f"spine{s}"] == t.spine_up(t.leaf(k, r), s)
                assert ids[f"spine{s}", leaf] == t.spine_down(t.leaf(k, r), s)


@pytest.mark.parametrize("name", ["dgx-h100", "pcie-rtx4090x8", "h100-radix4-o3", "h100-not-rail"])
@pytest.mark.parametrize("nodes", [1, 4, 7])
def test_stats_count_what_the_graph_holds(topo, name, nodes):
    c = build_cluster(_variants(topo)[name], nodes)
    s = c.stats()
    g = c.graph
    assert s["node_counts"] == dict(Counter(d["type"] for _, d in g.nodes(data=True)))
    links = Counter(d["link"] for _, _, d in g.edges(data=True))
    assert s["link_counts"] == {k: v // 2 for k, v in links.items()}
    assert s["directed_edges"] == g.number_of_edges()
    g0 = c.gpu_ids[0]
    assert s["scale_up_GBps_per_gpu"] == pytest.approx(
        sum(d["bandwidth_Bps"] for _, _, d in g.out_edges(g0, data=True) if d["link"] != "pcie") / 1e9)
    assert set(c.edge_link) <= set(LINK_CLASSES)


def test_16384_gpus_build_without_a_graph(topo):
    c = build_cluster(topo("dgx-h100"), 2048)
    assert c.n_gpus == 16384 and "graph" not in c.__dict__
    assert c.stats()["leaves"] == 512 and c.stats()["spines"] == 256
    assert c.path_bandwidth_Bps(0, 16383) == pytest.approx(50e9)
