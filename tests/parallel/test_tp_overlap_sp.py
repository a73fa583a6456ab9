"""Sequence-parallel TP communication overlap (Transformer Engine userbuffers): hand arithmetic for one
block's forward and one backward piece, the SM share of the comm kernels, FP8 all-gather bytes."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.engine.costing import Costing
from simulator.engine.executor import simulate as run_graph
from simulator.parallel import tp_overlap
from simulator.parallel.ir import GraphBuilder
from simulator.parallel.mesh import RankMesh
from tests.parallel.fakes import AlphaBeta, SumCompute, TimedOp, work

MESH = RankMesh(tp=4, dp=1, pp=1, gpus_per_node=8)
BW = 100e9
# t = 4 ring: a reduce-scatter of S bytes takes (3/4)·S/B. S = 0.8 ms · B / 0.75 → RS 0.8 ms; the FP8
# all-gather carries half the bytes → 0.4 ms.
S = 0.8e-3 * BW / 0.75


FWD = (TimedOp("input_norm", 0.2e-3), TimedOp("qkv", 1e-3), TimedOp("out_proj", 1e-3), TimedOp("mlp_up", 2e-3),
       TimedOp("mlp_down", 2e-3))


def _work(**kw):
    base = dict(layer_fwd=FWD, tp_allreduce_bytes=S, tp_allgather_bytes=S / 2, tp_comm_overlap=True,
                sequence_parallel=True, tp_degree=4)
    base.update(kw)
    return dataclasses.replace(work(n_layers=1), **base)


def _play(b: GraphBuilder, slowdown: float = 0.0):
    graph = b.build()
    costs = Costing(SumCompute(), AlphaBeta(0.0, BW), MESH, 1e10, 1e9).costs(graph)
    return run_graph(graph, costs, slowdown)



def test_forward_block_hides_all_but_the_reduce_scatter_tails():
    # By hand (ms): norm 0–0.2. qkv (g = 1, k = 4 chunks): AG 0.2–0.6 beside 3 chunks 0.2–0.95, last
    # chunk 0.95–1.2. out_proj (g = 1, 4 splits): head 1.2–1.45; RS body (3/4 · 0.8 = 0.6) 1.45–2.05
    # beside the tail 1.45–2.2; RS last (0.2) 2.2–2.4. mlp_up (g = 2): AG 2.4–2.8 beside 3 chunks
    # 2.4–3.9, last chunk 3.9–4.4. mlp_down (g = 2): head 4.4–4.9; RS body 4.9–5.5 beside the tail
    # 4.9–6.4; RS last 6.4–6.6; the next block starts at 6.6 ms.
    # Exposed: the two RS tails, 0.4 ms of the 2.4 ms on the link (2 × (0.4 + 0.8)).
    w = _work()
    b = GraphBuilder()
    _, pending = tp_overlap.forward_block(b, w, FWD, "forward", "fwd 0", [], 0, 0)
    b.compute("next", "forward", (), deps=pending)
    trace = _play(b)
    assert trace.end_s == pytest.approx(6.6e-3)
    assert sum(s.duration_s for s in trace.spans if s.kind == "tp") == pytest.approx(2.4e-3)
    assert {s.stream for s in trace.spans if s.kind == "tp"} == {"comm_tp"}


@pytest.mark.parametrize("overlap, expected_ms", [(True, 6.6), (False, 8.6)])
def test_one_layer_forward_with_and_without_overlap(overlap, expected_ms):
    # Through the schedule (embedding, 1 block, head; empty embedding and head): with overlap as
    # above, 6.6 ms; without (Megatron SP, collectives on the compute stream after the block): 6.2 ms
    # of compute + 2 reduce-scatters (0.8 ms) + 2 FP8 all-gathers (0.4 ms) = 8.6 ms.
    from simulator.parallel import schedule

    w = dataclasses.replace(_work(tp_comm_overlap=overlap), layer_fwd=FWD)
    b = GraphBuilder()
    schedule.forward_pass(b, w, 0, schedule.Hooks())
    assert _play(b).end_s == pytest.approx(expected_ms * 1e-3)


BWD = (TimedOp("mlp_down.dgrad", 2e-3), TimedOp("mlp_down.wgrad", 2e-3), TimedOp("act.bwd", 0.2e-3),
       TimedOp("mlp_up.dgrad", 2e-3), TimedOp("mlp_up.wgrad", 2e-3), TimedOp("norm.bwd", 0.2e-3))


def test_backward_piece_hides_gathers_and_scatter_behind_dgrad_and_wgrad():
    # By hand (ms): mlp_down.dgrad beside the output-gradient AG (0.4): 3 chunks 0–1.5 (AG 0–0.4), last
    # chunk + wgrad + act.bwd 1.5–4.2. mlp_up: input AG (0.4) 4.2–4.6 beside its dgrad 4.2–6.2; RS of
    # the data gradient (0.8) 6.2–7.0 beside the wgrad 6.2–8.2; norm.bwd waits for the RS: 8.2–8.4.
    # All 1.6 ms of TP traffic hidden: the piece takes its 8.4 ms of compute.
    w = _work()
    b = GraphBuilder()
    tid, pending = tp_overlap.backward_piece(b, w, BWD, "bwd 0", [], 0, 0, 1)
    assert pending == []
    trace = _play(b)
    assert trace.end_s == pytest.approx(8.4e-3)
    tp = [s for s in trace.spans if s.kind == "tp"]
    assert [s.name.split()[1] for s in tp] == ["all_gather", "all_gather", "reduce_scatter"]
    assert sum(s.duration_s for s in tp) == pytest.approx(1.6e-3)


def test_comm_kernels_hold_their_sm_share():
    # TE's pipelined reduce-scatter holds 16 of 132 H100 SMs: the GEMM beside it runs on 116/132.
    # An empty qkv exposes its all-gather (0–0.4 ms, ring exchange beside nothing). mlp_down (g = 4 ms,
    # 4 splits of 1 ms): head 0.4–1.4; RS body (0.6 ms) beside the tail, whose 3 ms of work run 0.6 ms
    # at 116/132 (0.5273 ms done), then at full rate; RS last 0.2 ms:
    # 0.4 + 1 + 0.6 + (3 − 0.5273) + 0.2 = 4.6727 ms (4.6 ms if the GEMM kept all its SMs).
    w = _work(gpu_sms=132)
    b = GraphBuilder()
    _, pending = tp_overlap.forward_block(b, w, (TimedOp("qkv", 0.0), TimedOp("mlp_down", 4e-3)), "forward",
                                          "fwd 0", [], 0, 0)
    b.compute("next", "forward", (), deps=pending)
    trace = _play(b)
    work_in_body = 0.6e-3 * 116 / 132
    assert trace.end_s == pytest.approx(0.4e-3 + 1e-3 + 0.6e-3 + (3e-3 - work_in_body) + 0.2e-3)
    rs = [t for t in b.build().collectives() if t.op == "reduce_scatter"]
    assert [t.sm_share for t in rs] == [pytest.approx(16 / 132)] * 2


def test_fp8_all_gather_is_half_the_bf16_one():
    from simulator.config.loader import scenario_from_dict
    from simulator.parallel.work import from_scenario

    def sc(precision):
        return scenario_from_dict({"name": "t", "model": "llama-2-7b", "cluster": {"topology": "dgx-h100"},
                                   "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 8,
                                                "precision": precision},
                                   "parallel": {"tp": 4, "sequence_parallel": True, "tp_comm_overlap": True}})

    bf16, fp8 = from_scenario(sc("bf16")), from_scenario(sc("fp8"))
    # b·s·h = 1 · 4096 · 4096 elements: 2 B each in BF16, the FP8-cast input 1 B each.
    assert bf16.tp_allreduce_bytes == bf16.tp_allgather_bytes == 4096 * 4096 * 2
    assert fp8.tp_allreduce_bytes == 4096 * 4096 * 2
    assert fp8.tp_allgather_bytes == 4096 * 4096 * 1
    assert fp8.gpu_sms == 132


@pytest.mark.parametrize("sp, expected_ms", [(True, 8.8), (False, 8.4)])
def test_megatron_async_backward_without_tp_comm_overlap(sp, expected_ms):
    # Megatron-LM without --tp-comm-overlap (LinearWithGradAccumulationAndAsyncCommunication), the
    # backward piece above. With SP (ms): mlp_down's output-gradient all-gather on the compute stream,
    # exposed, 0–0.4; its dgrad + wgrad + act.bwd 0.4–4.6; mlp_up's input all-gather (0.4) beside its
    # dgrad 4.6–6.6; the data-gradient reduce-scatter (0.8) 6.6–7.4 beside the wgrad 6.6–8.6; norm.bwd
    # 8.6–8.8. Without SP no gather; the data-gradient all-reduce (2·(3/4)·S/B = 1.6 ms) runs 6.2–7.8
    # beside the wgrad 6.2–8.2; norm.bwd 8.2–8.4: hidden.
    w = _work(tp_comm_overlap=False, sequence_parallel=sp)
    b = GraphBuilder()
    tp_overlap.async_backward_piece(b, w, BWD, "bwd 0", [], 0, 0)
    trace = _play(b)
    assert trace.end_s == pytest.approx(expected_ms * 1e-3)
    ops = [s.name.split()[1] for s in trace.spans if s.kind == "tp"]
    assert ops == (["all_gather", "all_gather", "reduce_scatter"] if sp else ["all_reduce"])


def test_a_chunked_gemm_keeps_its_module_host_time_once_plus_a_launch_per_chunk():
    """Transformer Engine's userbuffers overlap issues a GEMM's chunks from its C++ loop: the module's
    Python (the op's measured host time, 100 µs here) runs once and each of the 4 chunks adds one launch
    at the eager launch model's 10 µs (simulator.hardware.kernels EAGER). On the compute model (host
    dispatch scale 1 on H100): 4 x 25 µs + 4 x 10 µs = 140 µs, against 100 µs unchunked."""
    from simulator.catalog import get_gpu
    from simulator.hardware.compute import RooflineComputeModel
    from simulator.hardware.efficiency import for_gpu
    from simulator.workload.ops import gemm

    h100 = get_gpu("h100-sxm")
    model = RooflineComputeModel(h100, "bf16", for_gpu(h100))
    assert model.eff.host_dispatch_scale == 1.0
    op = dataclasses.replace(gemm("qkv", 4096, 1024, 1024, 2), host_s=100e-6)
    chunk = tp_overlap.fraction(op, 1 / 4)
    assert (chunk.host_s, chunk.cpp_launches, chunk.m) == (pytest.approx(25e-6), 1, 1024)
    assert model.host_time((op,)) == pytest.approx(100e-6)
    assert model.host_time((chunk,) * 4) == pytest.approx(4 * 25e-6 + 4 * 10e-6)
