"""ZeRO-3 ``stage3_max_reuse_distance``: what full recomputation fetches a second time (DeepSpeed
``PartitionedParameterCoordinator.__params_to_release``: walking the trace from the next module, a
parameter met before ``max_reuse_distance`` parameters have been traversed is kept)."""

from __future__ import annotations

import pytest

from simulator.config.loader import scenario_from_dict
from simulator.parallel.build import build_step_graph, context_for
from simulator.parallel.ir import CollectiveTask


def _sc(model, *sets):
    raw = {"name": "t", "model": model, "cluster": {"topology": "dgx-a100", "nodes": 2},
           "training": {"seq_len": 2048, "micro_batch_size": 1, "global_batch_size": 16, "precision": "fp16",
                        "activation_checkpointing": "full"},
           "parallel": {"framework": "deepspeed", "zero_stage": 3}}
    return scenario_from_dict(raw, overrides=["model.n_layers=2", *sets])


def _refetches(sc):
    ctx = context_for(sc)
    g = build_step_graph(ctx)
    return ctx, [t for t in g.tasks if isinstance(t, CollectiveTask) and t.name.startswith("allgather refetch")]


def test_gpt3_175b_block_refetches_qkv_proj_fc1_at_the_default_distance():
    # Block of h = 12288: qkv 3h^2, proj h^2, fc1 4h^2, fc2 4h^2 (1.81e9 with biases). After module k's
    # recompute the trace runs modules k+1.. (recompute) then ..k+1 (backward) before k's backward:
    # 2 * sum(later) = 2*9h^2 = 2.7e9, 2*8h^2 = 2.4e9, 2*4h^2 = 1.2e9 (all >= 1e9: released), fc2 0 (kept).
    ctx, tasks = _refetches(_sc("megatron-gpt-175b"))
    assert len(tasks) == 2 * ctx.n_micro  # one per block per micro-batch
    t = tasks[0]
    assert [label.split(".")[1].split()[0] for label, _ in t.parts] == ["fc1", "o", "qkv"]  # backward order (proj is "o")
    share = ctx.work.layer_module_params
    assert t.nbytes == pytest.approx((share[0] + share[1] + share[2]) * 2)  # fp16
    assert share[2] / sum(share) == pytest.approx(4 / 12, rel=1e-3)


def test_a_long_reuse_distance_keeps_every_module():
    _, tasks = _refetches(_sc("megatron-gpt-175b", "parallel.stage3_max_reuse_distance=1e10"))
    assert tasks == []


def test_llama2_7b_block_keeps_everything():
    # 2 * (sum of a 202M-parameter block minus q) = 3.7e8 < 1e9: the recompute's gather serves the backward.
    _, tasks = _refetches(_sc("llama-2-7b"))
    assert tasks == []


def test_no_refetch_without_full_recomputation():
    _, tasks = _refetches(_sc("megatron-gpt-175b", "training.activation_checkpointing=selective"))
    assert tasks == []
