"""A split collective's trace rows (``costing.PartRows``): made on demand, equal to the plain rows,
written into the Chrome trace as plain JSON."""

from __future__ import annotations

import json

import pytest

from simulator.engine.costing import Costing, PartRows
from simulator.engine.executor import simulate
from simulator.parallel.ir import GraphBuilder
from simulator.parallel.mesh import RankMesh
from simulator.report.chrome_trace import trace_events
from tests.parallel.fakes import AlphaBeta, SumCompute


def _graph():
    b = GraphBuilder()
    b.collective("allgather fwd 0 mb0", "param_allgather", "all_gather", "dp", 4e6, host_s=1e-5,
                 parts=(("allgather fwd 0.q mb0", 1e6), ("allgather fwd 0.up mb0", 3e6)))
    return b.build()


def test_rows_are_priced_per_call():
    # 8 ranks, alpha 10 us, 100 GB/s: all_gather of S takes 10 us + (7/8) S / 1e11; each call adds host 10 us
    mesh = RankMesh(tp=1, dp=8, pp=1, gpus_per_node=8)
    cost = Costing(SumCompute(), AlphaBeta(10e-6, 100e9), mesh, 1e10, 1e9).costs(_graph())[0]
    q = 10e-6 + 7 / 8 * 1e6 / 100e9 + 1e-5
    up = 10e-6 + 7 / 8 * 3e6 / 100e9 + 1e-5
    rows = cost.args["parts"]
    assert isinstance(rows, PartRows) and len(rows) == 2
    assert rows[0]["name"] == "allgather fwd 0.q mb0" and rows[1]["bytes"] == 3e6
    assert rows[0]["time_s"] == pytest.approx(q, rel=1e-12) and rows[1]["time_s"] == pytest.approx(up, rel=1e-12)
    assert cost.duration_s == pytest.approx(q + up, rel=1e-12)
    assert rows == [rows[0], rows[1]] and rows[:1] == [rows[0]]


def test_chrome_trace_writes_plain_rows_and_sub_spans():
    mesh = RankMesh(tp=1, dp=8, pp=1, gpus_per_node=8)
    graph = _graph()
    costs = Costing(SumCompute(), AlphaBeta(10e-6, 100e9), mesh, 1e10, 1e9).costs(graph)
    events = trace_events(simulate(graph, costs).spans)["traceEvents"]
    text = json.loads(json.dumps(events))  # plain JSON values only
    task = next(e for e in text if e["ph"] == "X" and e["name"] == "allgather fwd 0 mb0")
    assert [r["name"] for r in task["args"]["parts"]] == ["allgather fwd 0.q mb0", "allgather fwd 0.up mb0"]
    subs = [e["name"] for e in text if e["ph"] == "X" and e["name"] != "allgather fwd 0 mb0"]
    assert subs == ["allgather fwd 0.q mb0", "allgather fwd 0.up mb0"]
