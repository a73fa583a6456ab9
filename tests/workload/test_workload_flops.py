"""Training FLOPs against Megatron-LM's closed forms, Kaplan's and PaLM's per-token counts."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.workload import flops, params

B, S = 1536, 2048  # GPT-3's batch (sequences) and context
L, H, V = 96, 12288, 51200


def test_gpt3_megatron_eq3_no_recompute(gpt3_175b):
    # Narayanan et al. SC'21 Sec. 5.1 Eq. 3: F = 72·B·s·l·h²·(1 + s/6h + V/12lh), non-causal counting.
    expected = 72 * B * S * L * H**2 * (1 + S / (6 * H) + V / (12 * L * H))
    got = flops.step(gpt3_175b, b=8, s=S, n_micro=B // 8, causal=False)
    assert got.model_flops == pytest.approx(expected, rel=1e-12)
    assert got.hardware_flops == got.model_flops


def test_gpt3_megatron_full_recompute_is_hardware_flops(gpt3_175b):
    # Same paper, with full activation recomputation: 96·B·s·l·h²·(1 + s/6h + V/16lh).
    expected = 96 * B * S * L * H**2 * (1 + S / (6 * H) + V / (16 * L * H))
    got = flops.step(gpt3_175b, b=B, s=S, causal=False, recompute="full")
    assert got.hardware_flops == pytest.approx(expected, rel=1e-12)
    assert got.model_flops == pytest.approx(
        72 * B * S * L * H**2 * (1 + S / (6 * H) + V / (12 * L * H)), rel=1e-12
    )


def test_gpt3_selective_recompute(gpt3_175b):
    # formulas.md §1.2 [D]: 3·(24bsh² + 4bs²h) + 4bs²h per layer ⇒ 72·B·s·l·h²·(1 + 2s/9h + V/12lh).
    expected = 72 * B * S * L * H**2 * (1 + 2 * S / (9 * H) + V / (12 * L * H))
    got = flops.step(gpt3_175b, b=B, s=S, causal=False, recompute="selective")
    assert got.hardware_flops == pytest.approx(expected, rel=1e-12)


def test_layer_terms_by_hand(gpt3_175b):
    b, s, h = 2, 2048, H
    lay = flops.layer_forward(gpt3_175b, b, s, causal=False)
    # Megatron code comment: qkv 6Bsh², attention 2Bs²h, attention over value 2Bs²h, out-proj 2Bsh².
    assert lay.q + lay.kv == 6 * b * s * h**2
    assert lay.scores == lay.attn_v == 2 * b * s**2 * h
    assert lay.out_proj == 2 * b * s * h**2
    assert lay.mlp == 16 * b * s * h**2  # two matrices of h × 4h
    assert lay.total == 24 * b * s * h**2 + 4 * b * s**2 * h
    assert flops.logits_forward(gpt3_175b, b, s) == 2 * b * s * h * V


def test_causal_halves_exactly_the_attention_core(gpt3_175b, llama3_8b):
    for m in (gpt3_175b, llama3_8b):
        full = flops.layer_forward(m, 3, 4096, causal=False)
        causal = flops.layer_forward(m, 3, 4096, causal=True)
        assert causal.dense == full.dense
        assert causal.scores == full.scores / 2 and causal.attn_v == full.attn_v / 2
        assert full.total - causal.total == full.attention_core / 2


def test_swiglu_three_matrices_and_gqa(llama3_8b):
    b, s, h, f = 1, 8192, 4096, 14336
    lay = flops.layer_forward(llama3_8b, b, s, causal=True)
    assert lay.mlp == 3 * 2 * b * s * h * f
    assert lay.kv == 2 * 2 * b * s * h * (8 * 128)  # 8 KV heads of 128
    assert lay.q == 2 * b * s * h * h


def test_kaplan_per_token_with_causal_attention(gpt3_175b):
    # Kaplan et al. 2020 Table 1 / formulas.md §1.3: training ≈ 6N + 6·n_layer·n_ctx·d_model per token,
    # N the matrix parameters (12·l·h² plus the tied V·h head; the forward counts 2N + 2·l·n_ctx·d).
    n_matmul = 12 * L * H**2 + V * H
    got = flops.step(gpt3_175b, b=1, s=S, causal=True)
    assert got.train_flops_per_token == pytest.approx(6 * n_matmul + 6 * L * S * H, rel=1e-12)


def test_palm_per_token_non_causal(gpt3_175b):
    # PaLM App. B: model FLOPs per token 6N + 12·L·H·Q·T (H·Q = d_model here).
    n_matmul = 12 * L * H**2 + V * H
    got = flops.step(gpt3_175b, b=1, s=S, causal=False)
    assert got.train_flops_per_token == pytest.approx(6 * n_matmul + 12 * L * H * S, rel=1e-12)


def test_six_n_approximation_for_large_models(gpt3_175b, new_model):
    # 6N (Kaplan) is within a few percent for large models at their training context. Llama 3.1 405B
    # (config.json of meta-llama/Llama-3.1-405B): 126 layers, h 16384, 128 heads, 8 KV heads, f 53248.
    llama405 = new_model(
        n_layers=126, hidden_size=16384, n_heads=128, n_kv_heads=8, ffn_hidden_size=53248, vocab_size=128256
    )
    for m, s in ((gpt3_175b, 2048), (llama405, 8192)):
        six_n = 6 * params.count(m).total
        per_token = flops.step(m, b=1, s=s, causal=True).train_flops_per_token
        assert abs(per_token / six_n - 1) < 0.05, per_token / six_n


@given(
    b=st.integers(1, 8),
    s=st.sampled_from([128, 1024, 4096]),
    n_micro=st.integers(1, 16),
    causal=st.booleans(),
)
def test_step_invariants(llama3_8b, b, s, n_micro, causal):
    none, sel, full = (flops.step(llama3_8b, b, s, n_micro, causal, r) for r in ("none", "selective", "full"))
    assert none.model_flops == sel.model_flops == full.model_flops == none.hardware_flops
    assert none.hardware_flops < sel.hardware_flops < full.hardware_flops
    one = flops.step(llama3_8b, 1, s, 1, causal)
    assert math.isclose(none.model_flops, b * n_micro * one.model_flops, rel_tol=1e-12)
    assert none.tokens == b * s * n_micro
    # full recompute adds exactly one forward of the blocks (not of the logits): 4/3 at most
    assert full.hardware_flops / full.model_flops < 4 / 3


def test_for_scenario(new_scenario, shapes):
    sc = new_scenario(
        shapes["llama3_8b"],
        training={
            "seq_len": 4096,
            "micro_batch_size": 2,
            "global_batch_size": 64,
            "attention_flops": "causal",
        },
    )
    got = flops.for_scenario(sc)
    m = sc.model
    assert got == flops.step(m, 2, 4096, 32, causal=True, recompute="none")
    assert got.tokens == sc.tokens_per_step


def test_packed_documents_scale_the_attention_core_only():
    # 4 documents of 1,024 tokens packed into a 4,096-token sequence, masked per document: the attention
    # core covers 4 × 1,024² score pairs instead of 4,096², a quarter; the GEMMs are unchanged.
    from simulator.config.loader import scenario_from_dict
    from simulator.workload import flops as wflops

    def sc(doc, flash=True):
        training = {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 8,
                    "kernels": {"flash_attention": flash}, **({"document_tokens": doc} if doc else {})}
        return scenario_from_dict({"name": "p", "model": "llama-3-8b", "cluster": {"topology": "dgx-h100", "nodes": 1},
                                   "training": training, "parallel": {"framework": "fsdp"}})

    full, packed = wflops.for_scenario(sc(None)), wflops.for_scenario(sc(1024))
    lay = wflops.dense_layer_forward(sc(None).model, 1, 4096, causal=False)
    n_seq, layers = 8, 32
    assert wflops.attention_span(sc(1024).model, 4096, 1024) == (0.25, 0.0, 1024, 0)
    assert full.model_flops - packed.model_flops == pytest.approx(3 * n_seq * layers * 0.75 * lay.attention_core)
    # unfused attention computes the whole matrix and masks it: nothing saved
    assert wflops.attention_span(sc(1024).model, 4096, 1024, fused=False) == (1.0, 0.0, 4096, 0)


def test_window_share_by_hand():
    # 128-key window over 4,096 tokens: query i sees min(i, 128) keys, 128·4096 − 128²/2 = 516,096 pairs
    # of the causal 4,096²/2 = 8,388,608: 0.0615234375.
    assert flops.window_share(4096, 128) == pytest.approx(516096 / 8388608, rel=1e-15)
    assert flops.window_share(4096, None) == 1.0
    assert flops.window_share(4096, 4096) == 1.0  # a window as long as the sequence masks nothing


def test_sliding_window_blocks_shorten_the_attention_core():
    # GPT-OSS: 36 blocks, every 2nd full attention, the others a 128-token window (config.json
    # layer_types). At 4,096 tokens 18 blocks keep 1 and 18 keep 0.0615234375 of the causal pairs: the
    # block average is 18/36 = 0.5 in full blocks (over 4,096 keys) and 18 × 0.0615234375/36 =
    # 0.03076171875 in 128-key windows, 0.53076171875 in all.
    from simulator.config.loader import scenario_from_dict

    def sc(model, flash=True):
        training = {"seq_len": 4096, "micro_batch_size": 1, "global_batch_size": 8, "precision": "bf16",
                    "attention_flops": "causal", "kernels": {"flash_attention": flash}}
        return scenario_from_dict({"name": "w", "model": model, "cluster": {"topology": "dgx-h100", "nodes": 1},
                                   "training": training, "parallel": {"framework": "ddp", "ep": 8}})

    oss = sc("gpt-oss-120b")
    assert oss.model.windowed_layers == 18
    span = flops.attention_span(oss.model, 4096)
    assert (span.full, span.keys, span.window) == (0.5, 4096, 128)
    assert span.windowed == pytest.approx(0.03076171875, rel=1e-12)
    assert span.fraction == pytest.approx(0.53076171875, rel=1e-12)
    # the same model without windows: the difference is 18 blocks' (1 − r) of the causal core, × 3 for
    # forward and backward, × 8 sequences; the core per block is 2 · 2 · 4096² · (64 · 64) / 2
    full = sc({**oss.model.model_dump(), "sliding_window": None, "full_attention_interval": None})
    core = 2 * 2 * 4096**2 * 64 * 64 / 2
    saved = flops.for_scenario(full).model_flops - flops.for_scenario(oss).model_flops
    assert saved == pytest.approx(3 * 8 * 18 * (1 - 516096 / 8388608) * core, rel=1e-12)
    # unfused attention computes the whole matrix and masks it: nothing saved
    unfused = sc("gpt-oss-120b", flash=False)
    assert flops.for_scenario(unfused).model_flops == flops.for_scenario(full).model_flops


def test_full_attention_interval_needs_a_window():
    from simulator.config.model import ModelConfig

    with pytest.raises(ValueError, match="set model.sliding_window"):
        ModelConfig(n_layers=4, hidden_size=64, n_heads=4, ffn_hidden_size=128, vocab_size=100,
                    full_attention_interval=2)
    every = ModelConfig(n_layers=6, hidden_size=64, n_heads=4, ffn_hidden_size=128, vocab_size=100, sliding_window=8)
    gemma3 = every.model_copy(update={"full_attention_interval": 6})
    assert (every.windowed_layers, gemma3.windowed_layers) == (6, 5)
