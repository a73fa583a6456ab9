"""Vectorised hop loads (``network.loads``) and compact routes equal the per-route computation."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.network import Transfer, analytical_time, build_cluster, flow_time, link_loads
from simulator.network.loads import HopLoads, bottleneck_time, compact_transfers

NODES = 6


@pytest.fixture(scope="module")
def clusters(topo):
    base = topo("dgx-h100")
    multi = base.model_copy(update={"fabric": base.fabric.model_copy(update={"switch_radix": 4, "oversubscription": 2.0})})
    return {
        "dgx-h100": build_cluster(base, NODES),
        "multi-block": build_cluster(multi, NODES),  # two nodes per leaf block: most cross-node hops climb
        "pcie": build_cluster(topo("pcie-rtx4090x8"), NODES),
        "mi300x": build_cluster(topo("mi300x-8"), NODES),
    }


hops = st.lists(st.tuples(st.integers(0, 8 * NODES - 1), st.integers(0, 8 * NODES - 1),
                          st.sampled_from([0.0, 1.0, 3.5, 1e6]), st.integers(-1, 7)), min_size=1, max_size=25)


def _arrays(hs, c):
    src = np.array([h[0] for h in hs], dtype=np.int64)
    dst = np.array([h[1] for h in hs], dtype=np.int64)
    b = np.array([h[2] for h in hs])
    rail = np.array([h[3] if h[3] < c.edges.nics else -1 for h in hs], dtype=np.int64)
    return src, dst, b, rail


def _exact(c, src, dst, b, rail):
    return [Transfer(c.route(s, d, None if r < 0 else r), x)
            for s, d, x, r in zip(src.tolist(), dst.tolist(), b.tolist(), rail.tolist(), strict=True) if x > 0 and s != d]


@settings(max_examples=40, deadline=None)
@given(hs=hops, name=st.sampled_from(["dgx-h100", "multi-block", "pcie", "mi300x"]))
def test_vectorised_loads_equal_route_loads(clusters, hs, name):
    c = clusters[name]
    src, dst, b, rail = _arrays(hs, c)
    fast = HopLoads(c).loads(src, dst, b, rail)
    exact = link_loads(_exact(c, src, dst, b, rail), len(c.edge_bandwidth_Bps))
    t = c.edges
    real = np.arange(t.first_spine)
    np.testing.assert_allclose(fast[real], exact[real], rtol=1e-12, atol=1e-9)
    assert not fast[t.first_spine:t.n_edges].any()  # the compact form never loads a real spine edge
    for leaf in range(t.leaves if t.spines else 0):
        up = sum(exact[t.spine_up(leaf, s)] for s in range(t.spines))
        down = sum(exact[t.spine_down(leaf, s)] for s in range(t.spines))
        assert fast[t.first_aggregate + 2 * leaf] == pytest.approx(up, rel=1e-12, abs=1e-9)
        assert fast[t.first_aggregate + 2 * leaf + 1] == pytest.approx(down, rel=1e-12, abs=1e-9)


@settings(max_examples=40, deadline=None)
@given(hs=hops, name=st.sampled_from(["dgx-h100", "multi-block", "pcie"]))
def test_compact_bottleneck_and_flow_equal_the_exact_ones(clusters, hs, name):
    c = clusters[name]
    src, dst, b, rail = _arrays(hs, c)
    real_cap = c.edge_bandwidth_Bps
    compact_cap = c.edges.compact_bandwidth_Bps()
    exact = _exact(c, src, dst, b, rail)
    want = analytical_time(exact, real_cap)
    h = HopLoads(c)
    assert h.bottleneck(src, dst, b, rail, None, compact_cap) == pytest.approx(want, rel=1e-12)
    assert bottleneck_time(h.loads(src, dst, b, rail), compact_cap) == pytest.approx(want, rel=1e-12)
    assert flow_time(compact_transfers(c, src, dst, b, rail), compact_cap) == pytest.approx(
        flow_time(exact, real_cap), rel=1e-9)


def test_switch_traffic_loads_the_nvswitch_plane(clusters):
    c = clusters["dgx-h100"]
    gpu = np.array([3, 11])
    up, down = np.array([8.0, 8.0]), np.array([4.0, 4.0])
    fast = HopLoads(c).loads(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64),
                             (gpu, up, down))
    exact = link_loads([Transfer(c.switch_route(int(k), True), u) for k, u in zip(gpu, up, strict=True)]
                       + [Transfer(c.switch_route(int(k), False), d) for k, d in zip(gpu, down, strict=True)],
                       len(c.edge_bandwidth_Bps))
    np.testing.assert_allclose(fast[: len(exact)], exact, rtol=1e-12)


def test_compact_route_has_two_core_entries(clusters):
    c = clusters["multi-block"]
    real, compact = c.route(0, 8 * 5 + 2), c.route(0, 8 * 5 + 2, compact=True)
    assert len(real.edges) - len(compact.edges) == 2 * c.edges.spines - 2
    assert compact.latency_s == real.latency_s
