"""Multi-token prediction modules (``model.mtp_layers``): placement and work, checked by hand."""

from __future__ import annotations

import pytest

from simulator.api import simulate
from simulator.config.loader import scenario_from_dict
from simulator.errors import InputError
from simulator.parallel import pipeline_split
from simulator.parallel.work import from_scenario

# Megatron-Bridge's DeepSeek-V3 layout for pp 16 (recipes/deepseek/deepseek_v3.py, layout_map[(16, 1)])
LAYOUT = "Etttt|(tttt|)*14tmL"


class _Par:
    pipeline_layout = None


def test_mtp_blocks_go_to_the_last_stage_or_where_the_layout_puts_them():
    # 61 blocks over 16 stages: 13 stages of 4 and 3 of 3; the MTP block joins the last
    assert pipeline_split.virtual_stage_layers(61, 16, 1, _Par(), mtp=1) == [4] * 13 + [3, 3, 4]
    par = _Par()
    par.pipeline_layout = LAYOUT
    # the layout: 4 blocks on the first 15 stages, then t + m on the last
    assert pipeline_split.virtual_stage_layers(61, 16, 1, par, mtp=1) == [4] * 15 + [2]
    assert pipeline_split.virtual_stage_layers(61, 16, 1, par, mtp=0) == [4] * 15 + [1]  # m holds nothing
    assert pipeline_split.split_error(61, 16, 1, par, mtp=2) == (
        "pipeline_layout places 1 MTP blocks (m), model.mtp_layers is 2")


def _tiny(mtp: int, pp: int = 1, layout: str | None = None) -> object:
    par = {"framework": "ddp", "pp": pp}
    if layout:
        par["pipeline_layout"] = layout
    return scenario_from_dict({
        "name": "t",
        "model": {"name": "tiny", "n_layers": 4, "hidden_size": 1024, "n_heads": 8, "ffn_hidden_size": 4096,
                  "vocab_size": 32000, "mtp_layers": mtp},
        "cluster": {"topology": "dgx-h100", "nodes": 1},
        "training": {"seq_len": 2048, "micro_batch_size": 2, "global_batch_size": 16 * pp},
        "parallel": par,
    })


def test_an_mtp_module_adds_a_block_its_projection_and_a_second_head():
    base, one = from_scenario(_tiny(0)), from_scenario(_tiny(1))
    assert (base.n_layers, one.n_layers, one.mtp_layers) == (4, 5, 1)
    # eh_proj: the b·s = 4,096 tokens' concatenated norms (2h = 2,048) projected to h = 1,024
    (proj,) = [op for op in one.head_fwd if op.name == "mtp_eh_proj"]
    assert proj.flops == 2 * 4096 * 1024 * 2048
    # the shared head (final norm, logits, cross-entropy) runs once more
    assert [op.name for op in one.head_fwd].count("logits") == 2
    # its own parameters: eh_proj 2h·h and the two norms 2h
    assert one.head_params - base.head_params == 2 * 1024 * 1024 + 2 * 1024
    assert simulate(_tiny(1)).step_time_s > simulate(_tiny(0)).step_time_s


def test_a_layout_must_place_every_mtp_block():
    with pytest.raises(InputError, match="places 0 MTP blocks"):
        simulate(_tiny(1, pp=2, layout="Ett|ttL"))
    assert simulate(_tiny(1, pp=2, layout="Ett|ttmL")).step_time_s > 0


def test_the_memory_model_holds_the_mtp_module_on_the_last_stage():
    from simulator.workload import params

    one, base = _tiny(1).model, _tiny(0).model
    block = params.layer_local(base, 1)
    # one GPU: one more block plus eh_proj (2h·h) and the two norms (2h)
    assert params.local(one) - params.local(base) == block + 2 * 1024 * 1024 + 2 * 1024
    # 4 blocks over 4 stages: the last stage holds its block, the MTP block and eh_proj, the most loaded
    assert params.local(one, pp=4) - params.local(base, pp=4) == block + 2 * 1024 * 1024 + 2 * 1024


def test_mtp_flops_count_in_hfu_not_mfu():
    from simulator.workload import flops

    base, one = flops.for_scenario(_tiny(0)), flops.for_scenario(_tiny(1))
    assert one.model_flops == base.model_flops
    # per micro-batch (b·s = 4,096 tokens, h = 1,024): one block, eh_proj 2·4,096·2,048·1,024 and the logits
    # 2·4,096·1,024·32,000, three times (forward and backward); 8 micro-batches (16 sequences / 2)
    block = (base.forward_flops / 8 - 2 * 4096 * 1024 * 32000) / 4
    mtp = block + 2 * 4096 * 2048 * 1024 + 2 * 4096 * 1024 * 32000
    assert one.hardware_flops - base.hardware_flops == pytest.approx(8 * 3 * mtp, rel=1e-12)


def test_an_mtp_block_is_of_the_last_blocks_kind_in_the_flop_count():
    """An MTP module's block is of the main model's last block's kind. 4 blocks, MoE every second from block 0
    (blocks 0 and 2 MoE, block 3 dense): the module's block is dense, so its hardware FLOPs are 3 x (a dense
    block's forward + the logits + eh_proj's 2·b·s·2h·h), the dense block by hand (h 1,024, MHA, GELU-4h
    MLP, causal core, b·s = 4,096): 24·T·h² + 2·b·s²·h."""
    from simulator.workload import flops

    def sc(mtp):
        return scenario_from_dict({
            "name": "t",
            "model": {"name": "tiny", "n_layers": 4, "hidden_size": 1024, "n_heads": 8, "ffn_hidden_size": 4096,
                      "vocab_size": 32000, "mlp": "gelu", "mtp_layers": mtp,
                      "moe": {"n_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 8192, "layer_interval": 2}},
            "cluster": {"topology": "dgx-h100", "nodes": 1},
            "training": {"seq_len": 2048, "micro_batch_size": 2, "global_batch_size": 16},
            "parallel": {"framework": "ddp"}})

    b, s, h, t = 2, 2048, 1024, 4096
    dense_block = 24 * t * h * h + 2 * b * s * s * h
    logits = 2 * t * h * 32000
    eh_proj = 2 * t * 2 * h * h
    got = flops.for_scenario(sc(1), executed=True).hardware_flops - flops.for_scenario(sc(0), executed=True).hardware_flops
    assert got == pytest.approx(8 * 3 * (dense_block + logits + eh_proj))  # 8 micro-batches of 2 sequences
