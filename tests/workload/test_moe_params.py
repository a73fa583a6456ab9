"""MoE and MLA parameter counts derived by hand from each model's config.json shapes.

Every expected number below is written out from the module structure (router, experts, shared
experts, attention, norms, embeddings) with the config values, and compared with the model card's
published total and active counts to the precision the card gives them.
"""

from __future__ import annotations

import pytest

from simulator import catalog
from simulator.config.model import ModelConfig
from simulator.workload import flops, params


def _count(name: str):
    return params.count(catalog.get_model(name))


def _mla(h: int, a: int) -> int:
    """One MLA block's attention parameters at DeepSeek's ranks (q 1,536, kv 512; head dims 128 + 64 rope,
    value 128): q down and up (with the q norm), kv down (with the rope key) and up (with the kv norm), output."""
    qr, kvr, dn, dr, dv = 1536, 512, 128, 64, 128
    return h * qr + qr + qr * a * (dn + dr) + h * (kvr + dr) + kvr + kvr * a * (dn + dv) + a * dv * h


def test_mixtral_8x7b_by_hand():
    h, f, L, V, E, k = 4096, 14336, 32, 32000, 8, 2
    attn = h * 4096 + 2 * h * 1024 + 4096 * h  # q, k, v (8 KV heads of 128), o
    expert = 3 * h * f
    block_other = attn + E * h + 2 * h  # + router + 2 RMSNorms
    total = 2 * V * h + h + L * (block_other + E * expert)
    active = 2 * V * h + h + L * (block_other + k * expert)
    c = _count("mixtral-8x7b")
    assert c.total == total == 46_702_792_704  # the published safetensors total
    assert c.active == active
    assert round(c.active / 1e9, 1) == 12.9  # Jiang et al. 2024: 12.9B active
    assert round(c.total / 1e9, 1) == 46.7


def test_mixtral_8x22b_by_hand():
    h, f, L, V, E, k = 6144, 16384, 56, 32768, 8, 2
    attn = 2 * h * 6144 + 2 * h * 1024
    per_other = attn + E * h + 2 * h
    c = _count("mixtral-8x22b")
    assert c.total == 2 * V * h + h + L * (per_other + E * 3 * h * f)
    assert c.active == 2 * V * h + h + L * (per_other + k * 3 * h * f)
    assert round(c.total / 1e9) == 141 and round(c.active / 1e9) == 39  # Mistral: 141B / 39B


def test_grok1_by_hand():
    """xai-org/grok-1 run.py: 64 layers, emb 6144, 48 query and 8 KV heads of 128, 8 experts of ffn_size
    int(8 x 6144) x 2 // 3 = 32768 (three matrices each, gated), top-2, vocabulary 128 x 1024, tied."""
    h, f, L, V, E, k = 6144, 32768, 64, 131072, 8, 2
    attn = h * 6144 + 2 * h * 1024 + 6144 * h
    per_other = attn + E * h + 2 * h  # + router + 2 RMSNorms
    c = _count("grok-1")  # one embedding: the output layer decodes with it (model.py InOutEmbed)
    assert c.total == V * h + h + L * (per_other + E * 3 * h * f) == 315_684_034_560
    assert c.active == V * h + h + L * (per_other + k * 3 * h * f)
    assert round((c.total - V * h) / 1e9) == 315  # xAI's "314B": 314.88e9 without the embedding


@pytest.mark.parametrize(
    ("name", "h", "L", "heads", "kv", "fe", "card_total", "card_active"),
    [("qwen3-30b-a3b", 2048, 48, 32, 4, 768, 30.5, 3.3), ("qwen3-235b-a22b", 4096, 94, 64, 4, 1536, 235, 22)],
)
def test_qwen3_moe_by_hand(name, h, L, heads, kv, fe, card_total, card_active):
    V, E, k, d = 151936, 128, 8, 128
    attn = h * heads * d + 2 * h * kv * d + heads * d * h
    norms = 2 * h + 2 * d  # input/post-attention RMSNorm + per-head q_norm, k_norm
    other = attn + norms + E * h
    c = _count(name)
    assert c.total == 2 * V * h + h + L * (other + E * 3 * h * fe)
    assert c.active == 2 * V * h + h + L * (other + k * 3 * h * fe)
    # Qwen's model cards truncate: 30.5B / 3.3B and 235B / 22B are the leading digits.
    assert card_total <= c.total / 1e9 < card_total + (0.1 if card_total < 100 else 1)
    assert card_active <= c.active / 1e9 < card_active + (0.1 if card_active < 10 else 1)


def test_deepseek_v3_by_hand():
    h, L, V, a = 7168, 61, 129280, 128
    mla = _mla(h, a)
    norms = 2 * h
    dense_mlp = 3 * h * 18432
    expert = 3 * h * 2048
    moe_other = 256 * h + expert  # router + 1 shared expert
    outside = 2 * V * h + h
    assert L == 3 + 58  # first_k_dense_replace 3, then MoE blocks
    total = outside + 3 * (mla + norms + dense_mlp) + 58 * (mla + norms + moe_other + 256 * expert)
    active = outside + 3 * (mla + norms + dense_mlp) + 58 * (mla + norms + moe_other + 8 * expert)
    c = _count("deepseek-v3")
    assert c.total == total
    assert c.active == active
    assert round(c.total / 1e9) == 671  # DeepSeek-V3 report: 671B total
    # DeepSeek's README_WEIGHTS.md: 36.6B activated including the 0.9B output head (no input embedding)
    assert round((c.active - c.embedding) / 1e9, 1) == 36.6


def test_kimi_k2_by_hand():
    """DeepSeek-V3's block with 64 heads, 384 experts and one dense block (Kimi-K2-Instruct config.json)."""
    h, V, a = 7168, 163840, 64
    mla = _mla(h, a)
    expert = 3 * h * 2048
    dense_block = mla + 2 * h + 3 * h * 18432
    moe_other = mla + 2 * h + 384 * h + expert  # router + 1 shared expert
    outside = 2 * V * h + h  # untied embedding and output layer, final norm
    c = _count("kimi-k2")
    assert c.total == outside + dense_block + 60 * (moe_other + 384 * expert)
    assert c.active == outside + dense_block + 60 * (moe_other + 8 * expert)
    # Hugging Face's safetensors count of the block-FP8 checkpoint, 1,026.5B, includes its scale tensors
    # (one per 128 x 128 weight block, about 0.06B): 1,026.4B of weights
    assert round(c.total / 1e9, 1) == 1026.4
    assert round((c.active - c.embedding) / 1e9) == 32  # model card: 32B activated


def test_deepseek_v2_by_hand():
    h, V, a = 5120, 102400, 128
    mla = _mla(h, a)
    expert = 3 * h * 1536
    dense_block = mla + 2 * h + 3 * h * 12288
    moe_other = mla + 2 * h + 160 * h + 2 * expert  # router + 2 shared experts
    outside = 2 * V * h + h
    c = _count("deepseek-v2")
    assert c.total == outside + dense_block + 59 * (moe_other + 160 * expert)
    assert c.active == outside + dense_block + 59 * (moe_other + 6 * expert)
    assert round(c.total / 1e9) == 236 and round(c.active / 1e9) == 21  # DeepSeek-V2: 236B / 21B


def _gpt_oss(name: str, L: int, E: int):
    """GPT-OSS's block by hand (openai/gpt-oss-* config.json): biases on q, k, v, o and on both expert
    projections, two norms, a router with a bias; the two models differ in depth and expert count."""
    h, V, k, f, heads, kv, d = 2880, 201088, 4, 2880, 64, 8, 64
    attn = h * heads * d + heads * d + 2 * (h * kv * d + kv * d) + heads * d * h + h
    expert = h * 2 * f + 2 * f + f * h + h  # gate_up_proj (+bias), down_proj (+bias)
    other = attn + 2 * h + E * h + E
    c = _count(name)
    assert c.total == 2 * V * h + h + L * (other + E * expert)
    assert c.active == 2 * V * h + h + L * (other + k * expert)
    return c


@pytest.mark.parametrize("name, L, E, total_b, active_b", [("gpt-oss-120b", 36, 128, 116.83, 5.13),
                                                          ("gpt-oss-20b", 24, 32, 20.91, 3.61)])
def test_gpt_oss_by_hand(name, L, E, total_b, active_b):
    # OpenAI model card Table 1: total; active counting the unembedding, not the embedding.
    c = _gpt_oss(name, L, E)
    assert round(c.total / 1e9, 2) == total_b
    assert round((c.active - c.embedding) / 1e9, 2) == active_b


def test_olmoe_by_hand():
    h, L, V, E, k, f = 2048, 16, 50304, 64, 8, 1024
    other = 4 * h * h + 2 * h + 2 * h + E * h  # MHA, 2 norms, full-width q_norm and k_norm, router
    c = _count("olmoe-1b-7b")
    assert c.total == 2 * V * h + h + L * (other + E * 3 * h * f)
    assert c.active == 2 * V * h + h + L * (other + k * 3 * h * f)
    assert round(c.total / 1e9, 1) == 6.9 and round(c.active / 1e9, 1) == 1.3  # Muennighoff et al. 2024


def test_moe_flops_use_active_experts():
    """Forward FLOPs per token without attention = 2 x (active params − embedding) for Mixtral
    (every active matrix is used once per token; the embedding is a lookup)."""
    m = catalog.get_model("mixtral-8x7b")
    s = 1
    fw = flops.step(m, 1, s).forward_flops
    c = params.count(m)
    norms = 2 * 4096 * 32 + 4096
    # at s = 1 the attention core is 2·2·1·q_dim per layer = 4·4096 per layer
    assert fw == pytest.approx(2 * (c.active - c.embedding - norms) + 32 * 4 * 4096, rel=1e-12)


def test_mla_flops_by_hand():
    m = catalog.get_model("deepseek-v3")
    b, s = 1, 4096
    lay = flops.layer_forward(m, b, s, causal=True)
    groups = {n: lf for n, lf in __import__("simulator.workload.moe", fromlist=["x"]).layer_groups(m, b, s, True)}
    moe_layer = groups[58]
    T = b * s
    assert moe_layer.scores == 2 * b * s * s * 128 * 192 / 2
    assert moe_layer.attn_v == 2 * b * s * s * 128 * 128 / 2
    assert moe_layer.mlp == 2 * T * 7168 * 256 + 2 * 3 * T * 7168 * (8 * 2048 + 2048)
    assert lay.mlp == pytest.approx((3 * 2 * 3 * T * 7168 * 18432 + 58 * moe_layer.mlp) / 61)


def test_schema_is_strict():
    base = dict(n_layers=2, hidden_size=64, n_heads=4, ffn_hidden_size=128, vocab_size=100)
    with pytest.raises(ValueError, match="top_k"):
        ModelConfig.model_validate({**base, "moe": {"n_experts": 2, "top_k": 3, "expert_ffn_hidden_size": 8}})
    with pytest.raises(ValueError, match="kv_lora_rank"):
        ModelConfig.model_validate({**base, "attention": "mla"})
    with pytest.raises(ValueError, match="MLA key"):
        ModelConfig.model_validate({**base, "kv_lora_rank": 16})
    with pytest.raises(ValueError, match="mha"):
        ModelConfig.model_validate({**base, "n_kv_heads": 2, "attention": "mha"})
    with pytest.raises(ValueError, match="extra"):
        ModelConfig.model_validate({**base, "moe": {"n_experts": 2, "top_k": 1, "expert_ffn_hidden_size": 8, "k": 1}})


def test_dense_models_unchanged():
    c = _count("llama-3-8b")
    assert c.total == c.active == 8_030_261_248
