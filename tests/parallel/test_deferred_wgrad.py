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
    assert _trace(defer_embedding_wgrad_compute=True, wgrad_deferral_limit=1).end_s == pytest.approx(12e-3 + 3 * T)


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
