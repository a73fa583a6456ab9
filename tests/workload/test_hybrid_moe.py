"""Mamba hybrids with MoE layers (Nemotron 3 Nano, ``E`` in ``model.hybrid_pattern``): which blocks are MoE
blocks, their parameters, FLOPs, kernels and host time, each checked against the pattern counted by hand, the
model card and Megatron-Core's module shapes."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from simulator import catalog
from simulator.catalog.hf import model_dict_from_hf
from simulator.config.kernels import KernelConfig
from simulator.config.model import ModelConfig
from simulator.errors import InputError
from simulator.python_api import simulate
from simulator.workload import host, moe, moe_ops, params

NANO = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
# Keys as in nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16/config.json
NANO_HF = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h", "attention_bias": False, "chunk_size": 128,
    "conv_kernel": 4, "head_dim": 128, "hidden_size": 2688, "hybrid_override_pattern": NANO,
    "intermediate_size": 1856, "mamba_head_dim": 64, "mamba_num_heads": 64, "mamba_proj_bias": False,
    "max_position_embeddings": 262144, "mlp_bias": False, "mlp_hidden_act": "relu2",
    "moe_intermediate_size": 1856, "moe_shared_expert_intermediate_size": 3712, "n_groups": 8,
    "n_routed_experts": 128, "n_shared_experts": 1, "num_attention_heads": 32, "num_experts_per_tok": 6,
    "num_hidden_layers": 52, "num_key_value_heads": 2, "ssm_state_size": 128, "tie_word_embeddings": False,
    "use_bias": False, "use_conv_bias": True, "vocab_size": 131072,
}


def _kernels() -> KernelConfig:
    return KernelConfig()


@pytest.fixture(scope="module")
def nano() -> ModelConfig:
    return catalog.get_model("nemotron-3-nano-30b-a3b")


def test_moe_blocks_are_the_pairs_holding_an_e(nano):
    # the pattern in pairs: ME ME M* EM EM EM *E ME ME M* EM EM EM *E ME ME M* EM EM EM *E ME ME M* EM *E ... by hand
    pairs = [NANO[i:i + 2] for i in range(0, 52, 2)]
    assert [nano.is_moe_block(i) for i in range(26)] == ["E" in p for p in pairs]
    assert nano.n_moe_blocks == 23  # 23 E layers, one per pair
    assert nano.hybrid_class_counts(True) == (23, {"M": 20, "*": 3, "-": 0, "E": 23})
    assert nano.hybrid_class_counts(False) == (3, {"M": 3, "*": 3, "-": 0, "E": 0})


def test_parameters_match_the_model_card(nano):
    counts = params.count(nano)
    # model card: 31.6B total, 3.2B active without the embeddings (3.6B with them)
    assert counts.total == pytest.approx(31.6e9, rel=2e-3)
    assert counts.active - counts.embedding == pytest.approx(3.2e9, rel=1e-2)
    # one MoE layer by hand: router 128·2688, 128 experts of 2 matrices 2688 x 1856, one shared of width 3712,
    # its pre-norm 2688 (RMSNorm weight)
    h = 2688
    e_layer = 128 * h + 128 * 2 * h * 1856 + 2 * h * 3712 + h
    moe_blk, dense_blk = moe.block(nano, True), moe.block(nano, False)
    mamba_layer = (h * (2 * 4096 + 2 * 8 * 128 + 64) + (4096 + 2 * 8 * 128) * 5 + 3 * 64 + 4096 + 4096 * h + h)
    attn_layer = h * (4096 + 2 * 256) + 4096 * h + h
    assert moe_blk.total == pytest.approx(e_layer + (20 * mamba_layer + 3 * attn_layer) / 23)
    assert dense_blk.total == pytest.approx(mamba_layer + attn_layer)  # the three *M blocks
    assert moe_blk.experts == 128 * 2 * h * 1856


def test_moe_block_flops_by_hand(nano):
    b, s, h = 1, 8192, 2688
    t = b * s
    moe_fwd = moe.layer_forward(nano, b, s, True, True)
    # router 2·T·h·E, routed 2·2·T·h·f·k, shared 2·2·T·h·f_s
    assert moe_fwd.mlp == pytest.approx(2 * t * h * 128 + 4 * t * h * 1856 * 6 + 4 * t * h * 3712)
    # the mixer: 20/23 Mamba layers' projections 2·T·h·(2d + 2GN + H) + 2·T·d·h, d = 4096
    ssm = 2 * t * h * (2 * 4096 + 2 * 8 * 128 + 64) + 2 * t * 4096 * h
    assert moe_fwd.ssm == pytest.approx(ssm * 20 / 23)
    assert moe_fwd.q == pytest.approx(2 * t * h * 4096 * 3 / 23)  # 3/23 attention layers' Q projection


def test_moe_block_kernels_are_its_mixer_and_the_moe_layer(nano):
    ops = moe_ops.moe_block_ops(nano, 2, 8192, 1, 2, _kernels(), "none", ep=8)
    pre = {op.name: op.weight for op in ops.pre}
    assert pre["mamba_ssd"] == pytest.approx(20 / 23) and pre["attention"] == pytest.approx(3 / 23)
    assert pre["input_add_norm"] == 1.0 and pre["post_attn_add_norm"] == 1.0  # each layer's add + norm once
    assert "mlp_up" not in pre and pre["router"] == 1.0
    assert ops.routed_tokens == 2 * 8192 * 6 and ops.local_experts == 16


def test_mixer_host_share_follows_the_graphed_layers(nano):
    half = host.ATTENTION_HALF[0]
    assert host.mixer_share(nano, frozenset(), 0) == pytest.approx(half)
    # the mamba scope captures 20 of the MoE blocks' 23 mixers, attn the other 3
    assert host.mixer_share(nano, frozenset({"mamba"}), 0) == pytest.approx(half * 3 / 23)
    assert host.mixer_share(nano, frozenset({"attn", "mamba"}), 0) == 0.0
    # the three dense blocks hold one Mamba and one attention layer each
    assert host.eager_share(_kernels(), 0, nano) == pytest.approx(2 * half)


def test_hf_import_equals_catalog(tmp_path, nano):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(NANO_HF))
    model = ModelConfig.model_validate(model_dict_from_hf(path))
    assert params.count(model).total == params.count(nano).total
    path.write_text(json.dumps({**NANO_HF, "moe_latent_size": 1024}))
    assert ModelConfig.model_validate(model_dict_from_hf(path)).moe.latent_size == 1024


BASE = dict(name="x", hidden_size=64, n_heads=4, ffn_hidden_size=128, vocab_size=100,
            mamba={"n_heads": 8, "n_groups": 2}, moe={"n_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 32})


@pytest.mark.parametrize(("update", "text"), [
    ({"hybrid_pattern": "EEM*"}, "pairs such as EE"),
    ({"hybrid_pattern": "E-M*"}, "pairs such as EE"),
    ({"hybrid_pattern": "M*M*"}, "set both or neither"),
    ({"hybrid_pattern": "MEM*", "moe": {"n_experts": 8, "top_k": 2, "expert_ffn_hidden_size": 32,
                                        "first_dense_layers": 1}}, "first_dense_layers"),
    ({"hybrid_pattern": "MEM*"}, None),
])
def test_config_checks(update, text):
    data = {**BASE, **update}
    if text is None:
        assert ModelConfig(**data).n_moe_blocks == 1
        return
    with pytest.raises(ValidationError, match=text):
        ModelConfig(**data)


def test_a_nano_step_runs_end_to_end():
    result = simulate({
        "model": "nemotron-3-nano-30b-a3b", "cluster": {"topology": "dgx-h100", "nodes": 1},
        "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 16, "precision": "bf16"},
        "parallel": {"framework": "ddp", "ep": 8, "distributed_optimizer": True}})
    # the 23 MoE blocks' expert all-to-alls are on the link
    assert result.step.breakdown["by_dimension"]["ep"]["on_link_s"] > 0


def test_muon_on_a_hybrid_is_refused_naming_the_key():
    with pytest.raises(InputError, match="training.optimizer"):
        simulate({"model": "nemotron-3-nano-30b-a3b", "cluster": {"topology": "dgx-h100", "nodes": 1},
                  "training": {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 16, "precision": "bf16",
                               "optimizer": "muon"},
                  "parallel": {"framework": "ddp", "ep": 8, "distributed_optimizer": True}})
