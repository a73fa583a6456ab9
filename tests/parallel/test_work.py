"""StepWork from a real scenario: parameter counts and op lists agree with the workload layer."""

from __future__ import annotations

import pytest

from simulator.config.loader import scenario_from_dict
from simulator.parallel.build import context_for
from simulator.parallel.work import from_scenario
from simulator.workload import params


def _scenario(framework="fsdp", **training):
    return scenario_from_dict({
        "model": "llama-3-8b",
        "cluster": {"topology": "dgx-h100", "nodes": 1},
        "training": {"seq_len": 2048, "micro_batch_size": 1, "global_batch_size": 16, **training},
        "parallel": {"framework": framework},
    })


def test_total_params_match_the_workload_count():
    s = _scenario()
    work = from_scenario(s)
    assert work.total_params == pytest.approx(params.count(s.model).total)
    assert work.layer_persistent == 2 * 4096  # two RMSNorm weights per block stay replicated


@pytest.mark.parametrize(("mode", "recompute_len"), [("none", 0), ("selective", 0), ("full", None)])
def test_recompute_ops(mode, recompute_len):
    # full: every forward op again (early stop off; with it see tests/workload/test_recompute_layers.py);
    # selective under FSDP with FlashAttention: nothing (no framework but Megatron-Core checkpoints a
    # fused core; recompute.attention_mode); under Megatron (ddp) the one FlashAttention kernel re-runs
    work = from_scenario(_scenario(activation_checkpointing=mode, kernels={"checkpoint_early_stop": False}))
    # FSDP's unit hooks (the block's first forward op) run once: recomputation happens inside the unit
    expected = len(work.layer_fwd) - 1 if recompute_len is None else recompute_len
    assert work.layer_fwd[0].name == "fsdp_unit"
    assert len(work.layer_recompute) == expected
    if mode == "selective":
        megatron = from_scenario(_scenario(activation_checkpointing=mode, kernels={"checkpoint_early_stop": False},
                                           framework="ddp"))
        assert [op.name for op in megatron.layer_recompute] == ["recompute.attention"]
    assert not any(op.name.startswith("recompute.") for op in work.layer_bwd)


def test_context_layout():
    ctx = context_for(_scenario())
    assert (ctx.mesh.dp, ctx.mesh.tp, ctx.n_micro) == (8, 1, 2)


def test_block_backward_is_split_where_gradients_become_ready():
    work = from_scenario(_scenario())
    (mlp_name, mlp_ops, mlp_params), (attn_name, attn_ops, attn_params) = work.layer_bwd_pieces
    assert (mlp_name, attn_name) == ("mlp", "attn")
    assert mlp_ops + attn_ops == work.layer_bwd
    assert mlp_ops[0].name.startswith("mlp_down") and attn_ops[0].name.startswith("post_attn")
    assert mlp_params + attn_params == pytest.approx(work.layer_params)
    assert mlp_params == pytest.approx(3 * 4096 * 14336)  # SwiGLU gate, up, down
