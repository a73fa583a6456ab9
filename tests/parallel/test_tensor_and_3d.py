"""Tensor parallelism, sharding over DP with TP/PP, per-stage memory and degree-1 no-ops, on real
scenarios; numbers by hand from formulas.md §6 and §2 (Korthikanti et al. 2022)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simulator.api import simulate
from simulator.config.loader import load_scenario
from simulator.config.scenario import ParallelConfig
from simulator.engine.costing import Costing
from simulator.engine.executor import simulate as run_graph
from simulator.parallel import ddp
from simulator.parallel.build import build_step_graph, context_for
from simulator.parallel.context import BuildContext
from simulator.parallel.mesh import RankMesh
from simulator.parallel.volume import bytes_per_rank, per_rank_factor
from simulator.workload.memory import stage_activations
from tests.parallel.fakes import AlphaBeta, SumCompute, work

FIXTURE = Path(__file__).resolve().parent / "ddp-olmo-8xh100.yaml"


def _scenario(*sets: str):
    return load_scenario(FIXTURE, list(sets))


def _spans(report):
    return [(s.name, s.stream, s.device, s.start_s, s.end_s) for s in report.trace]


def test_tp_pp_one_is_exactly_data_parallel():
    base = _scenario("training.global_batch_size=64", "training.seq_len=1024")
    # Degree-1 keys are no-ops: same spans as the plain scenario.
    same = _scenario("training.global_batch_size=64", "training.seq_len=1024", "parallel.sequence_parallel=true",
                     "parallel.tp_comm_overlap=true", "parallel.pipeline_schedule=gpipe")
    assert _spans(simulate(base, exact=True)) == _spans(simulate(same, exact=True))
    # And the composition root's graph equals the framework builder's own (no pipeline wrapper).
    ctx = context_for(base)
    assert build_step_graph(ctx).tasks == ddp.build(ctx).tasks


def test_tp_all_reduce_bytes_per_layer_by_hand():
    # t = 4, b = 1, s = 1024, h = hidden, bf16: each of the 4 all-reduces of a block (2 forward,
    # 2 backward) moves 2·(t−1)/t·b·s·h·2 B per rank (formulas.md §6), and so do the embedding's forward
    # all-reduce and the output layer's backward one, once per micro-batch (tp_plain.EDGE_TP).
    sc = _scenario("training.global_batch_size=16", "training.seq_len=1024", "training.micro_batch_size=1",
                   "parallel.tp=4", "training.activation_checkpointing=none")
    ctx = context_for(sc)
    graph = build_step_graph(ctx)
    h = sc.model.hidden_size
    per_allreduce = 2 * 3 / 4 * 1 * 1024 * h * 2
    tp = [t for t in graph.collectives() if t.kind == "tp"]
    assert {t.op for t in tp} == {"all_reduce"}
    n_allreduce = sum(t.count for t in tp)
    assert n_allreduce == (4 * sc.model.n_layers + 2) * sc.grad_accum_steps
    assert bytes_per_rank(graph, ctx.mesh)["tp"] / n_allreduce == pytest.approx(per_allreduce)
    assert tp[0].nbytes * per_rank_factor("all_reduce", 4) == pytest.approx(per_allreduce)


def test_full_recompute_repeats_forward_tp_and_sp_splits_each():
    sc = _scenario("training.global_batch_size=16", "training.seq_len=1024", "parallel.tp=2",
                   "training.activation_checkpointing=full")
    g = build_step_graph(context_for(sc))
    calls = sum(t.count for t in g.collectives() if t.kind == "tp")
    # blocks recompute their forward, the embedding and output layer do not: + 2 per micro-batch
    assert calls == (6 * sc.model.n_layers + 2) * sc.grad_accum_steps
    sp = dataclasses.replace(context_for(sc), work=dataclasses.replace(context_for(sc).work, sequence_parallel=True))
    calls = {"reduce_scatter": 0, "all_gather": 0}
    for t in build_step_graph(sp).collectives():
        if t.kind == "tp":
            calls[t.op] += t.count
    n = sc.model.n_layers * sc.grad_accum_steps
    # forward and recompute: a reduce-scatter + all-gather per all-reduce (2 each); backward as
    # Megatron runs it (LinearWithGradAccumulationAndAsyncCommunication): the row-parallel layers'
    # output-gradient all-gathers (2), the column-parallel layers' input re-gathers for their weight
    # gradients (2) and data-gradient reduce-scatters (2). Per micro-batch the embedding's reduce-scatter
    # (backward: all-gather) and the output layer's all-gather (backward: reduce-scatter).
    g = sc.grad_accum_steps
    assert calls == {"reduce_scatter": 6 * n + 2 * g, "all_gather": 8 * n + 2 * g}


def test_tp_comm_overlap_hides_tp_time_not_bytes():
    w = dataclasses.replace(work(n_layers=4), tp_allreduce_bytes=5e6)
    mesh = RankMesh(tp=4, dp=1, pp=1, gpus_per_node=8)

    def run(overlap: bool):
        c = BuildContext(dataclasses.replace(w, tp_comm_overlap=overlap), mesh, ParallelConfig(framework="ddp"), 2,
                         "bf16")
        graph = build_step_graph(c)
        costs = Costing(SumCompute(), AlphaBeta(10e-6, 100e9), mesh, 1e10, 1e9).costs(graph)
        return graph, run_graph(graph, costs)

    g0, t0 = run(False)
    g1, t1 = run(True)
    assert bytes_per_rank(g0, mesh) == bytes_per_rank(g1, mesh)
    assert t1.end_s < t0.end_s
    assert {s.stream for s in t1.spans if s.kind == "tp"} == {"comm_tp"}


def test_dp_gradients_on_psi_over_tp_pp_and_distributed_optimizer():
    # Per rank the DP reduction carries only the local stage's 1/tp shard: Ψ_local = Ψ/(t·p) (blocks).
    w = work(n_layers=4, layer_params=1e6)
    n = 4
    phi = (n - 1) / n
    c = BuildContext(w, RankMesh(tp=2, dp=n, pp=2, gpus_per_node=8), ParallelConfig(framework="ddp", pp=2), 4, "bf16")
    v = bytes_per_rank(build_step_graph(c), c.mesh, device=0)
    assert v["grad_reduce"] == pytest.approx(2 * phi * 2e6 * 4)  # 2 blocks on stage 0, fp32 grads
    c = dataclasses.replace(c, parallel=ParallelConfig(framework="ddp", pp=2, distributed_optimizer=True))
    graph = build_step_graph(c)
    v = bytes_per_rank(graph, c.mesh, device=0)
    # Megatron distributed optimizer: reduce-scatter φ·Ψ·4 B, all-gather φ·Ψ·2 B (ZeRO-1 row).
    assert v["grad_reduce"] == pytest.approx(phi * 2e6 * 4)
    assert v["post_step_gather"] == pytest.approx(phi * 2e6 * 2)


def test_fsdp_with_pipeline_gathers_once_and_reduces_once():
    # torchtitan 3D: parameters kept unsharded across micro-batches, gradients synced in the last backward.
    w = work(n_layers=4, layer_params=1e6)
    c = BuildContext(w, RankMesh(tp=1, dp=4, pp=2, gpus_per_node=8), ParallelConfig(framework="fsdp", pp=2), 8,
                     "bf16")
    graph = build_step_graph(c)
    gathers = [t for t in graph.collectives() if t.kind == "param_allgather" and t.device == 0]
    reduces = [t for t in graph.collectives() if t.kind == "grad_reduce" and t.device == 0]
    assert len(gathers) == 2 and len(reduces) == 2  # the 2 blocks of stage 0, once each
    costs = Costing(SumCompute(), AlphaBeta(), c.mesh, 1e10, 1e9).costs(graph)
    assert run_graph(graph, costs).end_s > 0


def test_per_stage_memory_follows_in_flight_micro_batches():
    sets = ["training.global_batch_size=64", "training.seq_len=1024", "training.micro_batch_size=1",
            "parallel.pp=4", "training.activation_checkpointing=selective"]
    sc = _scenario(*sets)
    layers = sc.model.n_layers // 4
    m = sc.grad_accum_steps
    rows = {sched: stage_activations(_scenario(*sets, f"parallel.pipeline_schedule={sched}"))
            for sched in ("1f1b", "gpipe")}
    # Stages 1 and 2 hold neither embedding nor logits: activations = per_layer · layers · in-flight.
    per_layer = rows["1f1b"][1].total_bytes / (layers * 3)
    assert rows["1f1b"][2].total_bytes == pytest.approx(per_layer * layers * 2)
    assert rows["gpipe"][1].total_bytes == pytest.approx(per_layer * layers * m)
    inter = stage_activations(_scenario(*sets, "parallel.virtual_stages=2"))
    # Interleaved stage 1: 2(p−s−1) + (v−1)p + 1 = 9 chunks of layers/2 blocks.
    assert inter[1].total_bytes == pytest.approx(per_layer * layers / 2 * 9)


def test_simulate_reports_bubble_dimensions_and_stage_memory():
    sc = _scenario("training.global_batch_size=64", "training.seq_len=1024", "parallel.pp=2", "parallel.tp=2")
    r = simulate(sc, exact=True)
    bd = r.breakdown
    assert bd["bubble_s"] > 0
    assert set(bd["by_dimension"]) == {"tp", "cp", "pp", "dp"}
    assert bd["by_dimension"]["tp"]["on_link_s"] == pytest.approx(bd["communication"]["tp"]["on_link_s"])
    assert len(r.memory["stages"]) == 2
    assert r.layout["schedule"] == "1f1b" and r.layout["dp"] == 2
    assert {s.device for s in r.trace} == {0, 1}


def test_sequence_parallel_divides_norm_and_dropout_activations_by_tp():
    # Korthikanti et al. 2022 Table 2: the norm/dropout region, 4p·sbh per block (no dropout here, so no
    # masks), is split over t with SP: the saving per block is 4·2·s·b·h·(1 − 1/t), here t = 4; the final
    # norm's input and output (2·2·sbh, the one stage's output layer) run on s/t tokens too
    # (Megatron theoretical_memory_usage.py divides the output layer's 4·sbh by t as well).
    sets = ["training.seq_len=1024", "training.micro_batch_size=1", "parallel.tp=4"]
    plain = stage_activations(_scenario(*sets))[0].total_bytes
    sp = stage_activations(_scenario(*sets, "parallel.sequence_parallel=true"))[0].total_bytes
    sc = _scenario(*sets)
    assert sc.model.dropout == 0
    sbh = 1024 * 1 * sc.model.hidden_size
    assert plain - sp == pytest.approx(sc.model.n_layers * 8 * sbh * 3 / 4 + 4 * sbh * 3 / 4)
    report = simulate(_scenario(*sets, "parallel.sequence_parallel=true"))
    assert report.memory["activations_bytes"] == pytest.approx(sp)


def test_dtensor_sequence_parallel_keeps_the_gathered_linear_inputs():
    # torchtitan's TP plan all-gathers the norm outputs (PrepareModuleInput Shard(1) -> Replicate()) before
    # the attention, the feed-forward and the output layer, whose column-parallel linears save that
    # gathered input: per block the attention and MLP inputs, 2·2·sbh, stay whole where Megatron keeps
    # its sequence shard (2·2·sbh/t); the output layer's input 2·sbh too. t = 4, one stage, no recompute.
    sets = ["training.seq_len=1024", "training.micro_batch_size=1", "parallel.tp=4", "parallel.sequence_parallel=true",
            "training.activation_checkpointing=none"]
    megatron = stage_activations(_scenario(*sets))[0]
    dtensor = stage_activations(_scenario(*sets, "parallel.framework=fsdp"))[0]
    sc = _scenario(*sets)
    sbh = 1024 * 1 * sc.model.hidden_size
    assert dtensor.per_layer - megatron.per_layer == pytest.approx(2 * 2 * sbh * 3 / 4)
    from simulator.workload.activations import logits_activation_bytes

    shard, whole = (logits_activation_bytes(sc.model, 1, 1024, 4, 2, "fused", sequence_parallel=True,
                                            gathered_inputs=g) for g in (False, True))
    assert whole - shard == pytest.approx(2 * sbh * 3 / 4)
    assert dtensor.logits == pytest.approx(logits_activation_bytes(sc.model, 1, 1024, 4, 2, "eager",
                                                                   sequence_parallel=True, gathered_inputs=True))


def test_overlapped_tp_chunks_by_hand():
    # One block's forward: qkv 1 ms, out_proj 1 ms, mlp_down 2 ms; each all-reduce takes c = 0.8 ms
    # (t = 4 ring: 2·(3/4)·S/B). Chunk-pipelined with k = t = 4 chunks, each producer GEMM g exposes
    # only c/k = 0.2 ms (c ≤ g): 4 + 2·0.2 = 4.4 ms, against 4 + 2·0.8 = 5.6 ms on the critical path.
    from simulator.parallel import tp_overlap
    from simulator.parallel.ir import GraphBuilder
    from tests.parallel.fakes import TimedOp

    ops = (TimedOp("qkv", 1e-3), TimedOp("out_proj", 1e-3), TimedOp("mlp_down", 2e-3))
    nbytes = 0.8e-3 * 100e9 / 1.5
    w = dataclasses.replace(work(n_layers=1), layer_fwd=ops, tp_allreduce_bytes=nbytes, tp_comm_overlap=True,
                            tp_degree=4)
    mesh = RankMesh(tp=4, dp=1, pp=1, gpus_per_node=8)
    b = GraphBuilder()
    _, pending = tp_overlap.forward_block(b, w, ops, "forward", "fwd 0", [], 0, 0)
    b.compute("next", "forward", (), deps=pending)
    graph = b.build()
    trace = run_graph(graph, Costing(SumCompute(), AlphaBeta(0.0, 100e9), mesh, 1e10, 1e9).costs(graph))
    assert trace.end_s == pytest.approx(4.4e-3)
    assert sum(s.duration_s for s in trace.spans if s.kind == "tp") == pytest.approx(1.6e-3)


def test_p2p_crosses_the_real_links_of_each_boundary():
    # pp = 2 inside one DGX H100 (stages on GPUs 0-3 and 4-7: NVLink) vs across two nodes (dp = 2,
    # stage 1 on node 1: the boundary crosses InfiniBand): the same activation send is slower.
    sets = ["training.global_batch_size=16", "training.seq_len=1024", "parallel.pp=2"]
    inside = simulate(_scenario(*sets, "parallel.tp=4"), exact=True)
    across = simulate(_scenario(*sets, "parallel.tp=4", "cluster.nodes=2", "training.global_batch_size=32"), exact=True)

    def send_s(r):
        return max(s.duration_s for s in r.trace if s.kind == "pp")

    assert send_s(across) > 2 * send_s(inside)


def test_embedding_and_output_layer_tp_collectives_on_their_stages():
    """Megatron's vocab-parallel embedding all-reduces its partial lookups in the forward and the output
    layer all-reduces its input gradient in the backward (tp_plain.EDGE_TP): with pp = 2 the first stage
    adds one all-reduce per micro-batch to its blocks' 4 per block, the last stage one too, and a middle
    stage (pp = 4) none."""
    def calls(pp: int) -> tuple:
        sc = _scenario("training.global_batch_size=16", "training.seq_len=1024", "parallel.tp=2",
                       f"parallel.pp={pp}", "training.activation_checkpointing=none")
        ctx = context_for(sc)
        out: dict[int, int] = {}
        for t in build_step_graph(ctx).collectives():
            if t.kind == "tp":
                out[t.device] = out.get(t.device, 0) + t.count
        return out, sc.model.n_layers // pp, ctx.n_micro

    two, per_stage, g = calls(2)
    assert two == {0: (4 * per_stage + 1) * g, 1: (4 * per_stage + 1) * g}
    four, per_stage, g = calls(4)
    assert four == {0: (4 * per_stage + 1) * g, 1: 4 * per_stage * g, 2: 4 * per_stage * g, 3: (4 * per_stage + 1) * g}
