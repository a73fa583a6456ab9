"""Context parallelism: ring K/V volume by hand, the batch split, work and memory per rank."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.api import simulate
from simulator.config.loader import load_scenario
from simulator.parallel.build import build_step_graph, context_for
from simulator.parallel.volume import bytes_per_rank
from simulator.workload.memory import stage_activations

FIXTURE = Path(__file__).resolve().parent / "ddp-olmo-8xh100.yaml"
BASE = ["training.seq_len=4096", "training.global_batch_size=16", "training.micro_batch_size=1"]


def _sc(*sets: str):
    return load_scenario(FIXTURE, [*BASE, *sets])


def _flops(graph, kind: str) -> float:
    return sum(op.flops for t in graph.tasks if getattr(t, "kind", "") == kind for op in getattr(t, "ops", ()))


def test_cp_ring_volume_by_hand():
    # cp = 2 on 8 GPUs: dp = 4, G = 16 / (1·4) = 4 micro-batches per rank. Per block and micro-batch the
    # K and V of the whole sequence on one TP rank, S = 2·b·s·kv_dim·2 B, go round the ring once
    # forward (all-gather) and twice backward (K,V and dK,dV): 3·(cp−1)/cp·S per rank.
    sc = _sc("parallel.cp=2")
    ctx = context_for(sc)
    assert ctx.mesh.dp == 4 and ctx.n_micro == 4 and ctx.mesh.size("dp") == 8
    S = 2 * 1 * 4096 * sc.model.kv_dim * 2
    assert ctx.work.cp_kv_bytes == pytest.approx(S)
    v = bytes_per_rank(build_step_graph(ctx), ctx.mesh)
    assert v["cp"] == pytest.approx(4 * sc.model.n_layers * 3 * 0.5 * S)


def test_cp_keeps_per_rank_work_and_gradient_volume_of_pure_dp():
    # Same GPUs, same global batch: cp = 2 halves every micro-batch's tokens (and its causal attention
    # work) and doubles the micro-batches, so the FLOPs per rank are those of dp = 8; gradients still
    # reduce over all 8 ranks.
    plain, cp = context_for(_sc()), context_for(_sc("parallel.cp=2"))
    g_plain, g_cp = build_step_graph(plain), build_step_graph(cp)
    assert _flops(g_cp, "forward") == pytest.approx(_flops(g_plain, "forward"), rel=1e-6)
    assert bytes_per_rank(g_cp, cp.mesh)["grad_reduce"] == pytest.approx(bytes_per_rank(g_plain, plain.mesh)["grad_reduce"])


def test_cp_halves_activations_per_micro_batch():
    a1 = stage_activations(_sc())[0].total_bytes
    a2 = stage_activations(_sc("parallel.cp=2"))[0].total_bytes
    assert a2 == pytest.approx(a1 / 2, rel=1e-9)


def test_cp_simulates_and_reports_the_cp_dimension():
    r = simulate(_sc("parallel.cp=2", "parallel.tp=2"), exact=True)
    cp = r.breakdown["by_dimension"]["cp"]
    assert cp["on_link_s"] > 0 and 0 <= cp["exposed_s"] <= cp["on_link_s"]
    assert r.layout["cp"] == 2 and r.layout["dp"] == 2 and r.layout["grad_accum_steps"] == 8
    assert {s.stream for s in r.trace if s.kind == "cp"} == {"comm_cp"}
