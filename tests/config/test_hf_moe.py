"""Hugging Face config.json import of the MoE families: the imported model counts exactly as the
catalog entry written from the same config (whose counts tests/workload/test_moe_params.py derives
by hand)."""

from __future__ import annotations

import json

import pytest

from simulator import catalog
from simulator.catalog.hf import model_dict_from_hf
from simulator.config.model import ModelConfig
from simulator.errors import InputError
from simulator.workload import params

# The architecture keys of each model's published config.json (values as published).
CONFIGS = {
    "mixtral-8x7b": {"model_type": "mixtral", "hidden_act": "silu", "hidden_size": 4096,
                     "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
                     "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
                     "vocab_size": 32000, "tie_word_embeddings": False, "max_position_embeddings": 32768},
    "qwen3-30b-a3b": {"model_type": "qwen3_moe", "hidden_act": "silu", "hidden_size": 2048,
                      "intermediate_size": 6144, "moe_intermediate_size": 768, "num_attention_heads": 32,
                      "num_hidden_layers": 48, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
                      "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
                      "vocab_size": 151936, "tie_word_embeddings": False, "max_position_embeddings": 40960},
    "deepseek-v3": {"model_type": "deepseek_v3", "hidden_act": "silu", "hidden_size": 7168,
                    "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_attention_heads": 128,
                    "num_hidden_layers": 61, "num_key_value_heads": 128, "n_routed_experts": 256,
                    "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
                    "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
                    "tie_word_embeddings": False, "max_position_embeddings": 163840, "num_nextn_predict_layers": 1},
    "deepseek-v2": {"model_type": "deepseek_v2", "hidden_act": "silu", "hidden_size": 5120,
                    "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_attention_heads": 128,
                    "num_hidden_layers": 60, "num_key_value_heads": 128, "n_routed_experts": 160,
                    "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
                    "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400,
                    "tie_word_embeddings": False, "max_position_embeddings": 163840},
    "gpt-oss-120b": {"model_type": "gpt_oss", "hidden_act": "silu", "hidden_size": 2880, "intermediate_size": 2880,
                     "num_attention_heads": 64, "num_hidden_layers": 36, "num_key_value_heads": 8, "head_dim": 64,
                     "num_local_experts": 128, "experts_per_token": 4, "attention_bias": True,
                     "vocab_size": 201088, "tie_word_embeddings": False, "max_position_embeddings": 131072,
                     "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 18,
                     "swiglu_limit": 7.0, "rope_scaling": {"rope_type": "yarn", "factor": 32.0}},
    "olmoe-1b-7b": {"model_type": "olmoe", "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 1024,
                    "num_attention_heads": 16, "num_hidden_layers": 16, "num_key_value_heads": 16,
                    "num_experts": 64, "num_experts_per_tok": 8, "vocab_size": 50304,
                    "tie_word_embeddings": False, "max_position_embeddings": 4096},
}


def _load(tmp_path, cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return ModelConfig.model_validate(model_dict_from_hf(path))


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_import_matches_catalog(tmp_path, name):
    got = params.count(_load(tmp_path, CONFIGS[name]))
    want = params.count(catalog.get_model(name))
    assert (got.total, got.active) == (want.total, want.active)


def test_deepseek_import_reads_mla(tmp_path):
    m = _load(tmp_path, CONFIGS["deepseek-v3"])
    assert m.attention == "mla" and (m.q_lora_rank, m.kv_lora_rank) == (1536, 512)
    assert m.moe.first_dense_layers == 3 and m.moe.n_shared_experts == 1


# GLM-4.5-Air's architecture keys (zai-org/GLM-4.5-Air config.json as loaded in ms-swift's conversion log;
# GLM-4.5's differ in size: 92 layers, hidden 5,120, experts 160 of 1,536, 3 dense layers, use_qk_norm true).
GLM45_AIR = {"model_type": "glm4_moe", "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 10944,
             "moe_intermediate_size": 1408, "num_attention_heads": 96, "num_key_value_heads": 8, "head_dim": 128,
             "num_hidden_layers": 46, "n_routed_experts": 128, "n_shared_experts": 1, "num_experts_per_tok": 8,
             "first_k_dense_replace": 1, "attention_bias": True, "use_qk_norm": False, "partial_rotary_factor": 0.5,
             "vocab_size": 151552, "tie_word_embeddings": False, "max_position_embeddings": 131072,
             "num_nextn_predict_layers": 1, "n_group": 1, "topk_group": 1, "norm_topk_prob": True}


def test_glm45_import_by_hand(tmp_path):
    # Glm4MoeAttention: q 4,096 x (96 x 128), o back, k and v 4,096 x (8 x 128), biases on q, k and v only;
    # the first block dense (SwiGLU 10,944), the other 45 a router (128 x 4,096), 128 routed experts and one
    # shared expert of SwiGLU 1,408; two RMSNorms a block; untied 151,552-token vocabulary; no MTP layer.
    h, q, kv = 4096, 96 * 128, 8 * 128
    attn = 2 * h * q + 2 * h * kv + (q + 2 * kv) + 2 * h
    expert = 3 * h * 1408
    dense, moe = attn + 3 * h * 10944, attn + 128 * h + 129 * expert
    m = _load(tmp_path, GLM45_AIR)
    assert m.qkv_bias and not m.linear_bias and not m.qk_norm and m.attention != "mla"
    c = params.count(m)
    assert c.total == dense + 45 * moe + 2 * 151552 * h + h
    assert c.active == dense + 45 * (moe - 120 * expert) + 2 * 151552 * h + h
    # the model card's "106B total, 12B active" (the active count without the embedding and output layer)
    assert c.total // 10**9 == 106 and round((c.active - 2 * 151552 * h) / 1e9) == 12
    big = _load(tmp_path, {**GLM45_AIR, "num_hidden_layers": 92, "hidden_size": 5120, "intermediate_size": 12288,
                           "moe_intermediate_size": 1536, "n_routed_experts": 160, "first_k_dense_replace": 3,
                           "use_qk_norm": True})
    assert big.qk_norm and big.qk_norm_per_head
    assert round((params.count(big).active - 2 * 151552 * 5120) / 1e9) == 32  # GLM-4.5's card: "32B active"
    assert params.count(big).per_layer - params.count(big.model_copy(update={"qk_norm": False,
                                                                              "qk_norm_per_head": False})).per_layer == 2 * 128


def test_irregular_dense_layers_refused(tmp_path):
    cfg = {**CONFIGS["qwen3-30b-a3b"], "mlp_only_layers": [0, 5]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="mlp_only_layers"):
        model_dict_from_hf(path)


def test_gpt_oss_import_reads_the_sliding_window(tmp_path):
    # config.json: sliding_window 128, layer_types alternating from a sliding block: every 2nd block full
    m = _load(tmp_path, CONFIGS["gpt-oss-120b"])
    want = catalog.get_model("gpt-oss-120b")
    assert (m.sliding_window, m.full_attention_interval, m.windowed_layers) == (128, 2, 18)
    assert (want.sliding_window, want.full_attention_interval) == (128, 2)
    assert m.swiglu_limit == want.swiglu_limit == 7.0  # config.json swiglu_limit
    assert m.rope_scaling == want.rope_scaling == "yarn"  # config.json rope_scaling.rope_type
    # the older key (DeepSeek-V3, Qwen2.5 long-context configs): rope_scaling.type
    old_key = _load(tmp_path, {**CONFIGS["gpt-oss-120b"], "rope_scaling": {"type": "yarn", "factor": 4.0}})
    assert old_key.rope_scaling == "yarn"
    assert _load(tmp_path, {**CONFIGS["gpt-oss-120b"], "rope_scaling": None}).rope_scaling is None


@pytest.mark.parametrize(("extra", "window", "interval"), [
    ({"sliding_window": 4096}, 4096, None),  # Mistral 7B v0.1: every block windowed, no layer_types
    ({"sliding_window": None}, None, None),  # Mistral 7B v0.3
    ({"sliding_window": 32768, "use_sliding_window": False}, None, None),  # Qwen2: window switched off
    ({"sliding_window": 512, "layer_types": ["sliding_attention"] * 5 + ["full_attention"]}, 512, 6),  # Gemma 3
    ({"sliding_window": 512, "layer_types": ["full_attention"] * 6}, None, None),
])
def test_llama_like_sliding_window_keys(tmp_path, extra, window, interval):
    base = {"model_type": "mistral", "hidden_act": "silu", "hidden_size": 64, "intermediate_size": 128,
            "num_attention_heads": 4, "num_hidden_layers": 6, "num_key_value_heads": 2, "vocab_size": 100}
    m = _load(tmp_path, {**base, **extra})
    assert (m.sliding_window, m.full_attention_interval) == (window, interval)


def test_irregular_layer_types_refused(tmp_path):
    cfg = {**CONFIGS["gpt-oss-120b"], "layer_types": ["sliding_attention"] * 35 + ["full_attention"] * 1}
    cfg["layer_types"][3] = "full_attention"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(InputError, match="layer_types"):
        model_dict_from_hf(path)
