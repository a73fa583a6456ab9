"""The output layer's weight gradients deferred to the pipeline flush (``parallel.defer_embedding_wgrad_compute``):
a two-stage 1F1B step by hand, the limit's semantics, and the refusals."""

from __future__ import annotations

import dataclasses

import pytest
from pydantic import ValidationError

from simulator.config.scenario import ParallelConfig
from simulator.engine.costing import Costing
from simulator.engine.executor import simulate
from simulator.parallel.build import build_step_graph
from simulator.parallel.context import BuildContext
from simulator.parallel.deferred_wgrad import deferred_count
from simulator.parallel.mesh import RankMesh
from tests.parallel.fakes import AlphaBeta, SumCompute, TimedOp, work

ALPHA, BW = 10e-6, 100e9
T = ALPHA + 1e6 / BW  # one activation / gradient send_recv


def _trace(**par):
    # One block per stage (forward 1 ms, backward 2 ms); the last stage also holds the head: forward 0.5 ms,
    # backward a 0.5 ms data gradient then a 0.5 ms weight gradient; Adam 0.5 ms.
    w = dataclasses.replace(work(n_layers=2), p2p_bytes=1e6, head_fwd=(TimedOp("logits", 0.5e-3),),
                            head_bwd=(TimedOp("logits.dgrad", 0.5e-3), TimedOp("logits.wgrad", 0.5e-3)))
    ctx = BuildContext(w, RankMesh(tp=1, dp=1, pp=2, gpus_per_node=8), ParallelConfig(pp=2, framework="ddp", **par), 2, "bf16")
    graph = build_step_graph(ctx)
    costing = Costing(SumCompute(), AlphaBeta(ALPHA, BW), ctx.mesh, pcie_Bps=1e10, cpu_adam_params_per_s=1e9)
    return simulate(graph, costing.costs(graph))


def test_two_stage_step_by_hand():
    """1F1B, 2 micro-batches, sends blocking (times in ms, t = one send):
    stage 1 runs F0 [1+t, 2.5+t], B0 [2.5+t, 5.5+t] (head 1 + block 2), F1 after its own send [5.5+2t, 7+2t],
    B1 [7+2t, 10+2t]; stage 0's B1 waits for that gradient, [10+3t, 12+3t], then Adam: 12.5 + 3t.
    Deferring both weight gradients: B0 [2.5+t, 5+t], F1 [5+2t, 6.5+2t], B1 [6.5+2t, 9+2t], then the drain
    (1 ms) and stage 1's Adam; stage 0's B1 [9+3t, 11+3t], Adam: 11.5 + 3t. With the limit 1 only B0 is lean:
    B1 [6.5+2t, 9.5+2t], stage 0 ends at 12 + 3t."""
    assert _trace().end_s == pytest.approx(12.5e-3 + 3 * T)
    deferred = _trace(defer_embedding_wgrad_compute=True)
    assert deferred.end_s == pytest.approx(11.5e-3 + 3 * T)
    stage1 = {s.name: s for s in deferred.spans if s.device == 1}
    drain = stage1["drain output-layer wgrads"]
    assert (drain.start_s, drain.end_s) == (pytest.approx(9e-3 + 2 * T), pytest.approx(10e-3 + 2 * T))
    assert stage1["optimizer"].start_s == pytest.approx(drain.end_s)  # the step follows the drain
    limited = _trace(defer_embedding_wgrad_compute=True, wgrad_deferral_limit=1)
    assert limited.end_s == pytest.approx(12e-3 + 3 * T)
    spans = {s.name: s for s in limited.spans if s.device == 1}
    # the first micro-batch's head backward is the lean one (0.5 ms), the second keeps its weight gradient (1 ms)
    assert [spans[n].end_s - spans[n].start_s for n in ("bwd H mb0", "bwd H mb1", "drain output-layer wgrads")] == [
        pytest.approx(0.5e-3), pytest.approx(1e-3), pytest.approx(0.5e-3)]


def test_interleaved_drain_on_the_last_gpu_stage():
    """pp 2 x 2 virtual stages: the head is virtual stage 3, on GPU stage 1; its drain follows every backward there
    and precedes both chunks' optimizer steps, and the stage's compute is the same total, moved."""
    w = dataclasses.replace(work(n_layers=4), p2p_bytes=1e6, head_fwd=(TimedOp("logits", 0.5e-3),),
                            head_bwd=(TimedOp("logits.dgrad", 0.5e-3), TimedOp("logits.wgrad", 0.5e-3)))

    def trace(**par):
        ctx = BuildContext(w, RankMesh(tp=1, dp=1, pp=2, gpus_per_node=8),
                           ParallelConfig(pp=2, framework="ddp", virtual_stages=2, **par), 2, "bf16")
        graph = build_step_graph(ctx)
        costing = Costing(SumCompute(), AlphaBeta(ALPHA, BW), ctx.mesh, pcie_Bps=1e10, cpu_adam_params_per_s=1e9)
        return simulate(graph, costing.costs(graph))

    plain, deferred = trace(), trace(defer_embedding_wgrad_compute=True)
    stage1 = [s for s in deferred.spans if s.device == 1]
    drain = next(s for s in stage1 if s.name == "drain output-layer wgrads")
    assert drain.end_s - drain.start_s == pytest.approx(1e-3)  # both micro-batches' 0.5 ms weight gradients
    assert all(s.end_s <= drain.start_s + 1e-12 for s in stage1 if s.name.startswith("bwd"))
    assert all(s.start_s >= drain.end_s - 1e-12 for s in stage1 if s.name == "optimizer")
    assert not any(s.name == "drain output-layer wgrads" for s in deferred.spans if s.device == 0)

    def busy(tr):
        return sum(s.end_s - s.start_s for s in tr.spans if s.device == 1 and s.stream == "compute")
    assert busy(deferred) == pytest.approx(busy(plain))
    assert deferred.end_s <= plain.end_s


def test_the_last_stage_holds_the_deferred_buffers():
    """Until the flush, each deferred micro-batch keeps the output layer's output gradient (s·b·V/t) and its input
    (s·b·h/t under sequence parallelism), 2 bytes each: Nemotron-4 340B at TP 8, 4,096 tokens, 22 deferred
    micro-batches: 22 x 2 x 4,096 x (256,000 / 8 + 18,432 / 8) = 6.18 GB more on the last stage only."""
    from simulator.config.loader import scenario_from_dict
    from simulator.workload.activations import stage_activations

    def stages(**extra):
        return stage_activations(scenario_from_dict({
            "name": "x", "model": "nemotron-4-340b", "cluster": {"topology": "dgx-h100", "nodes": 16},
            "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 64, "precision": "bf16"},
            "parallel": {"framework": "ddp", "distributed_optimizer": True, "tp": 8, "sequence_parallel": True, "pp": 8,
                         "virtual_stages": 12, **extra}}))

    plain, deferred = stages(), stages(defer_embedding_wgrad_compute=True, wgrad_deferral_limit=22)
    assert deferred[-1].total_bytes - plain[-1].total_bytes == pytest.approx(22 * 2 * 4096 * (256000 / 8 + 18432 / 8))
    assert [a.total_bytes for a in deferred[:-1]] == [a.total_bytes for a in plain[:-1]]


def test_refused_with_multi_token_prediction():
    """Megatron-Core's limit counts the output layer's calls, one per MTP depth as well: not simulated."""
    from simulator.config.loader import scenario_from_dict
    from simulator.errors import InputError
    from simulator.parallel.checks import check_supported

    scenario = scenario_from_dict({
        "name": "x", "model": "deepseek-v3", "cluster": {"topology": "dgx-h100", "nodes": 32},
        "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 512},
        "parallel": {"framework": "ddp", "distributed_optimizer": True, "pp": 8, "ep": 32,
                     "defer_embedding_wgrad_compute": True}})
    scenario = scenario.model_copy(update={"model": scenario.model.model_copy(update={"mtp_layers": 1})})
    with pytest.raises(InputError, match="mtp_layers"):
        check_supported(scenario)


@pytest.mark.parametrize(("limit", "n_micro", "expected"), [(0, 36, 36), (22, 36, 22), (22, 16, 16), (50, 64, 50)])
def test_the_first_limit_micro_batches_are_deferred(limit, n_micro, expected):
    """Megatron-Core buffers the first ``wgrad_deferral_limit`` backward calls' inputs; 0 means all."""
    par = ParallelConfig(pp=2, framework="ddp", defer_embedding_wgrad_compute=True, wgrad_deferral_limit=limit)
    assert deferred_count(par, n_micro) == expected
    assert deferred_count(ParallelConfig(pp=2, framework="ddp"), n_micro) == 0


@pytest.mark.parametrize(("par", "field"), [
    ({"pp": 1, "framework": "ddp", "defer_embedding_wgrad_compute": True}, "parallel.defer_embedding_wgrad_compute"),
    ({"pp": 2, "framework": "ddp", "wgrad_deferral_limit": 22}, "parallel.wgrad_deferral_limit"),
    ({"pp": 2, "framework": "ddp", "defer_embedding_wgrad_compute": True, "wgrad_deferral_limit": -1},
     "wgrad_deferral_limit"),
    ({"pp": 2, "framework": "fsdp", "defer_embedding_wgrad_compute": True}, "parallel.defer_embedding_wgrad_compute"),
])
def test_refused_where_megatron_refuses_it(par, field):
    with pytest.raises(ValidationError, match=field):
        ParallelConfig(**par)
