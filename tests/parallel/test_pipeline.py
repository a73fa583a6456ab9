"""1F1B pipeline: schedule order, a 2-stage step by hand, p2p volume, refusal with ZeRO-2/3 and FSDP."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.config.scenario import ParallelConfig
from simulator.engine.costing import Costing
from simulator.engine.executor import simulate
from simulator.errors import InputError
from simulator.parallel.build import build_step_graph
from simulator.parallel.context import BuildContext
from simulator.parallel.mesh import RankMesh
from simulator.parallel.pipeline import blocking_sends, one_f_one_b
from simulator.parallel.pipeline_split import virtual_stage_layers as stage_layers
from simulator.parallel.volume import bytes_per_rank
from tests.parallel.fakes import AlphaBeta, SumCompute, work

ALPHA, BW = 10e-6, 100e9


def _ctx(pp: int, n_micro: int, dp: int = 1, n_layers: int = 2, act: float = 1e6, **par) -> BuildContext:
    w = dataclasses.replace(work(n_layers=n_layers), p2p_bytes=act)
    return BuildContext(w, RankMesh(tp=1, dp=dp, pp=pp, gpus_per_node=8), ParallelConfig(pp=pp, **par),
                        n_micro, "bf16")


def test_one_f_one_b_orders():
    assert one_f_one_b(0, 2, 2) == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]
    assert one_f_one_b(1, 2, 2) == [("F", 0), ("B", 0), ("F", 1), ("B", 1)]
    assert one_f_one_b(0, 4, 2) == [("F", 0), ("F", 1), ("B", 0), ("B", 1)]
    assert stage_layers(10, 4) == [3, 3, 2, 2]


@pytest.mark.parametrize("framework", ["ddp", "deepspeed"])
def test_two_stage_step_by_hand(framework):
    # One block per stage; forward 1 ms, backward 2 ms, Adam 0.5 ms; p2p t = α + S/B (send_recv).
    # 1F1B waits for its own send before computing on (blocking_sends).
    tp2p = ALPHA + 1e6 / BW
    # Stage 0: F0 [0,1] → sent [1, 1+t]; F1 [1+t, 2+t] → sent [2+t, 2+2t].
    # Stage 1: F0 [1+t, 2+t], B0 [2+t, 4+t] → grad sent [4+t, 4+2t]; F1 waits for that send:
    # [4+2t, 5+2t], B1 [5+2t, 7+2t] → grad sent [7+2t, 7+3t].
    # Stage 0: B0 [4+2t, 6+2t], B1 [7+3t, 9+3t], Adam → 9.5 + 3t (9.5 + 2t if sends did not block).
    ctx = _ctx(pp=2, n_micro=2, framework=framework, **({"zero_stage": 1} if framework == "deepspeed" else {}))
    graph = build_step_graph(ctx)
    costing = Costing(SumCompute(), AlphaBeta(ALPHA, BW), ctx.mesh, pcie_Bps=1e10, cpu_adam_params_per_s=1e9)
    trace = simulate(graph, costing.costs(graph))
    assert trace.end_s == pytest.approx(9.5e-3 + 3 * tp2p)
    stage1 = {s.name: s for s in trace.spans if s.device == 1}
    assert stage1["fwd 0 mb1"].start_s == pytest.approx(4e-3 + 2 * tp2p)
    assert stage1["bwd 0 mb1"].end_s == pytest.approx(7e-3 + 2 * tp2p)


@pytest.mark.parametrize(("par", "blocks"), [
    ({"framework": "ddp"}, True),  # Megatron forces overlap_p2p_comm off without interleaving
    ({"framework": "deepspeed", "zero_stage": 1}, True),  # PipelineEngine's synchronous p2p.send
    ({"framework": "ddp", "pipeline_schedule": "interleaved", "virtual_stages": 2}, False),  # overlap_p2p_comm
    ({"framework": "fsdp"}, True),  # torch.distributed.pipelining Schedule1F1B: fwd_send_bwd_recv waited
    ({"framework": "ddp", "pipeline_schedule": "gpipe"}, False),  # ScheduleGPipe waits after the forwards
])
def test_which_schedules_block_on_their_sends(par, blocks):
    assert blocking_sends(_ctx(pp=2, n_micro=4, n_layers=4, **par)) is blocks


def test_p2p_volume_per_stage_and_dp_per_stage():
    ctx = _ctx(pp=2, n_micro=4, dp=2, framework="ddp")
    graph = build_step_graph(ctx)
    # Each stage sends 4 micro-batches one way; DP all-reduces its own stage's block: 2·(1/2)·1e6·4 B.
    for device in (0, 1):
        v = bytes_per_rank(graph, ctx.mesh, device)
        assert v["pp"] == pytest.approx(4 * 1e6)
        assert v["grad_reduce"] == pytest.approx(1e6 * 4)


def test_bubble_shrinks_with_more_micro_batches():
    def bubble(m):
        ctx = _ctx(pp=4, n_micro=m, n_layers=4, act=1.0, framework="deepspeed", zero_stage=1)
        graph = build_step_graph(ctx)
        costing = Costing(SumCompute(), AlphaBeta(0.0, 1e18), ctx.mesh, pcie_Bps=1e10, cpu_adam_params_per_s=1e9)
        trace = simulate(graph, costing.costs(graph))
        ideal = m * 3e-3 + 0.5e-3  # per stage: m × (fwd + bwd) + optimizer
        return trace.end_s / ideal - 1

    # (p−1)/m of the ideal time, up to the optimizer tail.
    assert bubble(4) == pytest.approx(3 * 3e-3 / (4 * 3e-3 + 0.5e-3), rel=1e-6)
    assert bubble(16) < bubble(4)


@pytest.mark.parametrize("par", [{"framework": "deepspeed", "zero_stage": 2}, {"framework": "deepspeed", "zero_stage": 3}])
def test_pipeline_refuses_deepspeed_zero_2_3(par):
    with pytest.raises(InputError, match="parallel.pp"):
        build_step_graph(_ctx(pp=2, n_micro=2, **par))
