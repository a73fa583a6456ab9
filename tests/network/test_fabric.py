"""Fabric solvers on hand-made routes: fair sharing, max–min by hand, ECMP, agreement."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.network import Transfer, analytical_time, flow_time, link_loads
from simulator.network.fabric import maxmin_rates
from simulator.network.routing import Route


def route(edges, weights=None):
    edges = np.array(edges, dtype=np.int64)
    return Route(edges, np.ones(len(edges)) if weights is None else np.array(weights, float), 0.0)


def test_two_flows_over_one_link_each_get_half():
    cap = np.array([10.0])
    flows = [Transfer(route([0]), 10.0), Transfer(route([0]), 10.0)]
    rates = maxmin_rates(np.array([0, 1]), np.array([0, 0]), np.ones(2), np.array([True, True]), cap)
    assert rates.tolist() == [5.0, 5.0]
    assert flow_time(flows, cap) == pytest.approx(2.0)
    assert analytical_time(flows, cap) == pytest.approx(2.0)


def test_maxmin_classic_example():
    # link 0 (cap 10): flows 0 and 1; link 1 (cap 4): flows 1 and 2.
    # Link 1 saturates first at 2 per flow; flow 0 then takes the remaining 8 of link 0.
    flow = np.array([0, 1, 1, 2])
    edge = np.array([0, 0, 1, 1])
    rates = maxmin_rates(flow, edge, np.ones(4), np.ones(3, bool), np.array([10.0, 4.0]))
    assert rates.tolist() == pytest.approx([8.0, 2.0, 2.0])


def test_flow_frees_bandwidth_when_a_transfer_finishes():
    # flows A (link 0 only, 8 B) and B (links 0 and 1, 8 B); link 0 cap 4, link 1 cap 1.
    # max-min: B limited to 1 by link 1, A gets 3 -> A done at 8/3 s; B needs 8 s in total.
    # analytical bound: link 0 carries 16 B / 4 = 4 s, link 1 carries 8 B / 1 = 8 s -> 8 s.
    cap = np.array([4.0, 1.0])
    flows = [Transfer(route([0]), 8.0), Transfer(route([0, 1]), 8.0)]
    assert flow_time(flows, cap) == pytest.approx(8.0)
    assert analytical_time(flows, cap) == pytest.approx(8.0)


def test_flow_is_faster_than_the_congestion_bound_only_when_it_may_be():
    # two transfers share link 0 (cap 2); the first also crosses a slow link 1 (cap 1).
    # analytical: max(12/2, 4/1) = 6 s. flow: rates 1 and 1 until t=4 (first done), second has 4 B left at 2 B/s -> 6 s.
    cap = np.array([2.0, 1.0])
    flows = [Transfer(route([0, 1]), 4.0), Transfer(route([0]), 8.0)]
    assert flow_time(flows, cap) == pytest.approx(6.0)
    assert analytical_time(flows, cap) == pytest.approx(6.0)


def test_ecmp_split_uses_both_paths():
    # one transfer split evenly over two parallel links of 5 B/s -> 10 B/s in total.
    cap = np.array([5.0, 5.0])
    flows = [Transfer(route([0, 1], [0.5, 0.5]), 20.0)]
    assert flow_time(flows, cap) == pytest.approx(2.0)
    assert analytical_time(flows, cap) == pytest.approx(2.0)
    assert link_loads(flows, 2).tolist() == [10.0, 10.0]


def test_disjoint_transfers_agree_exactly():
    cap = np.array([1.0, 2.0, 3.0])
    flows = [Transfer(route([0]), 3.0), Transfer(route([1]), 3.0), Transfer(route([2]), 3.0)]
    assert flow_time(flows, cap) == pytest.approx(analytical_time(flows, cap)) == pytest.approx(3.0)


def test_empty_and_zero_byte_transfers_take_no_time():
    cap = np.array([1.0])
    assert flow_time([], cap) == 0.0
    assert analytical_time([Transfer(route([0]), 0.0)], cap) == 0.0
