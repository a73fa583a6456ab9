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


def test_a_split_call_reports_the_whole_calls_wire_bytes_and_bus_bandwidth():
    """A ZeRO-3 layer's all-gather issued as several calls (one per parameter group) labels the whole call:
    a ring all-gather over 8 ranks puts 7/8 of all its bytes on each rank's wire, and its bus bandwidth
    is the parts' bus bytes over their time (a review found the last part's figures on the whole call)."""
    from simulator.api import simulate as simulate_scenario
    from simulator.config.loader import load_scenario

    report = simulate_scenario(load_scenario("scenarios/olmo-2-7b-dgx-h100-zero3.yaml",
                                             ["training.global_batch_size=16", "training.total_tokens=null"]))
    split = next(s for s in report.trace if "parts" in (getattr(s, "args", None) or {}))
    args, rows = split.args, split.args["parts"]
    assert len(rows) > 1 and args["group_size"] == 8
    assert args["bytes_on_wire_per_rank"] == pytest.approx(7 / 8 * args["bytes"], rel=1e-12)
    host = args.get("host_s", 0.0)
    on_link = sum(r["time_s"] - host for r in rows)
    assert args["busbw_GBps"] == pytest.approx(7 / 8 * args["bytes"] / on_link / 1e9, rel=1e-9)
