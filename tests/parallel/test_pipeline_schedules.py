"""Pipeline schedules: bubble from the simulation against (p−1)/m by hand, interleaving ÷ v, every
stage boundary on its own links, in-flight micro-batches per schedule."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.config.scenario import ParallelConfig
from simulator.engine.costing import Costing
from simulator.engine.executor import simulate
from simulator.engine.summary import bubble, pass_window
from simulator.parallel import pipeline_order
from simulator.parallel.build import build_step_graph
from simulator.parallel.context import BuildContext
from simulator.parallel.mesh import RankMesh
from tests.parallel.fakes import AlphaBeta, SumCompute, work

TF, TB = 1e-3, 2e-3  # one block's forward and backward, s


def _run(pp: int, m: int, n_layers: int, dp: int = 1, act: float = 1.0, net=None, **par):
    w = dataclasses.replace(work(n_layers=n_layers, fwd_s=TF, bwd_s=TB), p2p_bytes=act)
    ctx = BuildContext(w, RankMesh(tp=1, dp=dp, pp=pp, gpus_per_node=8), ParallelConfig(pp=pp, **par), m, "bf16")
    graph = build_step_graph(ctx)
    costing = Costing(SumCompute(), net or AlphaBeta(0.0, 1e30), ctx.mesh, pcie_Bps=1e10, cpu_adam_params_per_s=1e9)
    return graph, simulate(graph, costing.costs(graph))


def _bubbles(trace):
    window = pass_window(trace)
    return [bubble(trace, d, window) for d in trace.devices]


@pytest.mark.parametrize(("p", "m"), [(2, 4), (4, 8), (4, 16), (8, 32)])
@pytest.mark.parametrize("schedule", ["1f1b", "gpipe"])
def test_bubble_is_p_minus_1_over_m_of_ideal(p, m, schedule):
    # Uniform stages (one block each, free p2p): ideal per stage = m·(tf + tb); the bubble of every
    # stage is (p−1)·(tf + tb) = (p−1)/m of it (Narayanan et al. SC'21 §2.2).
    _, trace = _run(p, m, n_layers=p, framework="ddp", pipeline_schedule=schedule)
    ideal = m * (TF + TB)
    for b in _bubbles(trace):
        assert b / ideal == pytest.approx((p - 1) / m, rel=0.01)


@pytest.mark.parametrize(("p", "m", "v"), [(2, 4, 2), (4, 8, 2), (4, 8, 4), (4, 16, 2)])
def test_interleaving_divides_the_bubble_by_v(p, m, v):
    # p·v chunks of one block each: per stage ideal m·v·(tf + tb); bubble (p−1)/(m·v) of it.
    _, plain = _run(p, m, n_layers=p * v, framework="ddp")
    _, inter = _run(p, m, n_layers=p * v, framework="ddp", virtual_stages=v)
    ideal = m * v * (TF + TB)
    for b in _bubbles(inter):
        assert b / ideal == pytest.approx((p - 1) / (m * v), rel=0.01)
    assert max(_bubbles(plain)) / max(_bubbles(inter)) == pytest.approx(v, rel=0.01)


def test_every_stage_boundary_uses_its_own_links():
    graph, _ = _run(4, 4, n_layers=4, dp=2, framework="ddp")
    groups = {t.group for t in graph.collectives() if t.kind == "pp"}
    assert groups == {"pp_next:0", "pp_next:1", "pp_next:2"}
    graph, _ = _run(4, 4, n_layers=8, framework="ddp", virtual_stages=2)
    groups = {t.group for t in graph.collectives() if t.kind == "pp"}
    assert groups == {"pp_next:0", "pp_next:1", "pp_next:2", "pp_next:3"}  # 3 → 0 wraps to chunk 1
    mesh = RankMesh(tp=2, dp=2, pp=4, gpus_per_node=8)
    # rank = t + 2·(d + 2·p): boundary 1 pairs stage 1 (ranks 4-7) with stage 2 (8-11).
    assert mesh.groups("pp_next:1") == [[4, 8], [5, 9], [6, 10], [7, 11]]
    assert mesh.groups("pp_next:3") == [[12, 0], [13, 1], [14, 2], [15, 3]]


def test_p2p_volume_per_boundary_and_direction():
    # Every inner stage sends m activations forward and m gradients backward; the ends one way.
    graph, _ = _run(4, 8, n_layers=4, act=1e6, framework="ddp")
    sends = {}
    for t in graph.collectives():
        if t.kind == "pp":
            sends[t.device] = sends.get(t.device, 0) + t.nbytes
    assert sends == {0: 8e6, 1: 16e6, 2: 16e6, 3: 8e6}


def test_slow_links_lengthen_the_pipeline_not_the_compute():
    _, fast = _run(4, 8, n_layers=4, act=1e6, framework="ddp")
    _, slow = _run(4, 8, n_layers=4, act=1e6, framework="ddp", net=AlphaBeta(1e-4, 1e9))
    assert slow.end_s > fast.end_s


def test_in_flight_micro_batches_per_schedule():
    p, m = 4, 8
    assert [pipeline_order.in_flight("1f1b", s, p, m) for s in range(p)] == [4, 3, 2, 1]
    assert [pipeline_order.in_flight("gpipe", s, p, m) for s in range(p)] == [8, 8, 8, 8]
    assert pipeline_order.in_flight("1f1b", 0, p, 2) == 2  # fewer micro-batches than stages
    # Interleaved, stage 0: 2(p−1) + (v−1)p + 1 chunks of L/(pv) layers = L·(1 + (p−1)/(pv)) layers
    # (Korthikanti et al. 2022 §4.2.3), i.e. p + (p−1)/v stage-equivalents.
    for v in (2, 4):
        assert pipeline_order.in_flight("interleaved", 0, p, m, v) == pytest.approx(p + (p - 1) / v)


def test_schedule_orders_cover_every_item_once():
    for sched, v in (("1f1b", 1), ("gpipe", 1), ("interleaved", 2), ("interleaved", 3)):
        for s in range(4):
            items = pipeline_order.order(sched, s, 4, 8, v)
            assert sorted(items) == sorted((ph, g, c) for ph in "FB" for g in range(8) for c in range(v))
    # Megatron interleaved, stage 0 of 2, 2 chunks, 4 micro-batches: warm-up (2−1)·2 + (2−1)·2 = 4.
    assert pipeline_order.interleaved(0, 2, 4, 2)[:6] == [
        ("F", 0, 0), ("F", 1, 0), ("F", 0, 1), ("F", 1, 1), ("F", 2, 0), ("B", 0, 1)]


def test_pipeline_with_data_parallel_reduces_each_stage():
    graph, trace = _run(2, 4, n_layers=4, dp=2, framework="ddp")
    reduces = [t for t in graph.collectives() if t.kind == "grad_reduce"]
    assert {t.device for t in reduces} == {0, 1}
    assert trace.end_s > 0


def test_deepspeed_pipeline_reduces_after_the_last_send():
    # DeepSpeed's pipeline engine runs ReduceGrads after the schedule: a ZeRO-1 reduction issued on
    # the compute stream (overlap_comm False) must not delay the gradient stage 0 waits for.
    slow_dp = AlphaBeta(0.0, 1e7)  # 1e6-element buckets take ~0.2 s: far longer than the passes
    _, trace = _run(2, 4, n_layers=2, dp=2, act=1.0, net=slow_dp, framework="deepspeed", zero_stage=1)
    spans = {(s.device, s.name): s for s in trace.spans}
    send = spans[(1, "send gradients v1->v0 mb3")]
    assert send.start_s == pytest.approx(spans[(1, "bwd E mb3")].end_s)
    assert spans[(0, "bwd H mb3")].start_s == pytest.approx(send.end_s)
    # Both stages' reductions still happen, after their last backward.
    reduce1 = [s for s in trace.spans if s.device == 1 and s.kind == "grad_reduce"]
    assert reduce1 and min(s.start_s for s in reduce1) >= spans[(1, "bwd E mb3")].end_s - 1e-12


def test_fsdp_interleaved_allows_uneven_chunks():
    # torchtitan splits 6 layers over 2 stages x 2 chunks unevenly (2, 2, 1, 1).
    graph, trace = _run(2, 4, n_layers=6, framework="fsdp", virtual_stages=2)
    assert graph.meta["stage_layers"] == [3, 3]
    assert trace.end_s > 0


def test_unequal_chunks_hold_their_own_blocks_in_flight():
    """Interleaved, p = 2, v = 2, m = 4, last stage with chunks of 4 and 1 blocks (an MTP-like split).
    Its order: F0c0 F1c0 F0c1 B0c1 F1c1 B1c1 F2c0 B0c0 ... (Megatron's interleaving, warm-up
    (2-1-1)·2 + (2-1)·2 = 2): after F2c0, three chunk-0 forwards of 4 blocks are live, 12 of the
    stage's 5 blocks, 2.4 micro-batches' worth; counting chunks alike gives 3 chunks / 2 = 1.5."""
    assert pipeline_order.in_flight("interleaved", 1, 2, 4, 2, [4, 1]) == pytest.approx(12 / 5)
    assert pipeline_order.in_flight("interleaved", 1, 2, 4, 2) == pytest.approx(3 / 2)
    # chunk 1 the large one: peak after F0c1 / F1c1, c0 + c1 live: 1 + 1 + 4 = 6 of 5 blocks
    assert pipeline_order.in_flight("interleaved", 1, 2, 4, 2, [1, 4]) == pytest.approx(6 / 5)
