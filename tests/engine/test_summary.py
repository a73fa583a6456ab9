"""Breakdown from spans: busy time per compute kind, on-link vs exposed per communication kind."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from simulator.catalog import get_gpu
from simulator.engine.executor import TaskCost, simulate
from simulator.engine.summary import summarize
from simulator.hardware.compute import RooflineComputeModel
from simulator.hardware.efficiency import for_gpu
from simulator.parallel.ir import GraphBuilder
from simulator.report.chrome_trace import trace_events
from simulator.workload.op import Op


def _trace():
    b = GraphBuilder()
    f = b.compute("fwd", "forward", ())
    ag = b.collective("ag", "param_allgather", "all_gather", "dp", 1.0)  # 0..3, under fwd 0..4
    bw = b.compute("bwd", "backward", (), deps=(f, ag))  # 4..10
    rs = b.collective("rs", "grad_reduce", "reduce_scatter", "dp", 1.0, deps=(bw,))  # 10..12, exposed
    b.copy("d2h", "d2h", 10.0, deps=(rs,))  # 12..13
    b.host("adam", 1.0, deps=(rs,))  # 12..15
    graph = b.build()
    costs = [TaskCost(4.0), TaskCost(3.0), TaskCost(6.0), TaskCost(2.0), TaskCost(1.0), TaskCost(3.0)]
    return graph, simulate(graph, costs)


def test_summary_by_hand():
    _, trace = _trace()
    s = summarize(trace)
    assert s["step_time_s"] == 15.0
    assert (s["forward_s"], s["backward_s"], s["optimizer_s"]) == (4.0, 6.0, 3.0)
    assert s["communication"]["param_allgather"] == {"on_link_s": 3.0, "exposed_s": 0.0}
    assert s["communication"]["grad_reduce"] == {"on_link_s": 2.0, "exposed_s": 2.0}
    assert s["offload"]["on_link_s"] == 1.0 and s["offload"]["exposed_s"] == 3.0
    assert s["idle_s"] == pytest.approx(5.0)


def test_chrome_trace_tracks_and_graph_json():
    graph, trace = _trace()
    events = trace_events(trace.spans)["traceEvents"]
    names = {e["args"]["name"] for e in events if e["name"] == "thread_name"}
    assert names == {"compute", "comm", "pcie_d2h", "cpu"}
    assert all(e["dur"] >= 0 for e in events if e["ph"] == "X")
    assert len(json.loads(graph.to_json())["tasks"]) == 6


def test_recompute_inside_a_backward_span_counts_as_recompute():
    """An MoE block's op-level recomputes run inside its backward task (``recompute_share`` of the task's
    GPU work). Forward 0..4, recompute task 4..6, backward 6..14 with a quarter of it re-running forward
    ops: forward 4, backward 8 x 3/4 = 6, recompute 2 + 8 / 4 = 4; the busy total (14) is unchanged."""
    b = GraphBuilder()
    f = b.compute("fwd", "forward", ())
    r = b.compute("recompute", "recompute", (), deps=(f,))
    b.compute("bwd", "backward", (), deps=(r,))
    graph = b.build()
    s = summarize(simulate(graph, [TaskCost(4.0), TaskCost(2.0, {"recompute_share": 1.0}),
                                   TaskCost(8.0, {"recompute_share": 0.25})]))
    assert (s["forward_s"], s["backward_s"], s["recompute_s"]) == (4.0, 6.0, 4.0)
    assert s["compute_busy_s"] == 14.0


def test_recompute_share_of_an_ops_tuple():
    """The share of the GPU time in ``recompute.*`` ops: an op and its recompute copy cost the same, so
    (a, recompute.a) gives 1/2 and (a, a, recompute.a) 1/3; no recompute op gives 0."""
    h100 = get_gpu("h100-sxm")
    model = RooflineComputeModel(h100, "bf16", for_gpu(h100))
    a = Op("norm", "memory", flops=1e6, bytes=1e8)
    again = replace(a, name="recompute.norm")
    assert model.recompute_share((a, again)) == pytest.approx(1 / 2)
    assert model.recompute_share((a, replace(a, name="norm2"), again)) == pytest.approx(1 / 3)
    assert model.recompute_share((a,)) == 0.0
