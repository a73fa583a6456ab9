"""Properties of the fabric solvers on random transfer sets (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.network import Transfer, analytical_time, flow_time
from simulator.network.routing import Route

N_EDGES = 6


@st.composite
def scenarios(draw):
    cap = np.array(draw(st.lists(st.floats(0.5, 10.0), min_size=N_EDGES, max_size=N_EDGES)))
    transfers = []
    for _ in range(draw(st.integers(1, 6))):
        edges = sorted(draw(st.sets(st.integers(0, N_EDGES - 1), min_size=1, max_size=4)))
        weights = [draw(st.sampled_from([0.25, 0.5, 1.0])) for _ in edges]
        nbytes = draw(st.floats(0.1, 100.0))
        transfers.append(Transfer(Route(np.array(edges, np.int64), np.array(weights), 0.0), nbytes))
    return transfers, cap


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_flow_never_beats_the_congestion_bound(case):
    # every link must carry its load, so no schedule finishes before max_e load_e / cap_e
    transfers, cap = case
    assert flow_time(transfers, cap) >= analytical_time(transfers, cap) * (1 - 1e-9)


@settings(max_examples=60, deadline=None)
@given(scenarios(), st.floats(0.01, 1000.0))
def test_both_fidelities_scale_linearly_with_bytes(case, k):
    # the collective model evaluates one reference size per group shape and rescales (model._profiles)
    transfers, cap = case
    scaled = [Transfer(t.route, t.nbytes * k) for t in transfers]
    assert analytical_time(scaled, cap) == pytest.approx(k * analytical_time(transfers, cap), rel=1e-9)
    assert flow_time(scaled, cap) == pytest.approx(k * flow_time(transfers, cap), rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_flow_makespan_is_bounded_by_running_transfers_one_after_another(case):
    transfers, cap = case
    serial = sum(analytical_time([t], cap) for t in transfers)
    assert flow_time(transfers, cap) <= serial * (1 + 1e-9)
