"""Parameter counts against published totals and hand arithmetic."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from simulator.config.model import ModelConfig
from simulator.workload import params


def model(**fields) -> ModelConfig:
    return ModelConfig.model_validate(fields)


def test_llama3_8b_exact(llama3_8b):
    c = params.count(llama3_8b)
    assert c.total == 8_030_261_248  # safetensors total of meta-llama/Meta-Llama-3-8B
    assert c.embedding == c.lm_head == 128256 * 4096
    # per block: q, o 4096²; k, v 4096·1024; SwiGLU 3·4096·14336; two RMSNorms 2·4096
    assert c.per_layer == 2 * 4096**2 + 2 * 4096 * 1024 + 3 * 4096 * 14336 + 2 * 4096
    assert c.final_norm == 4096
    assert c.non_embedding == 32 * c.per_layer + 4096
    assert c.largest_layer == 128256 * 4096  # the embedding is the largest module


def test_llama2_7b_exact():
    m = model(
        n_layers=32, hidden_size=4096, n_heads=32, ffn_hidden_size=11008, vocab_size=32000, mlp="swiglu"
    )
    assert params.count(m).total == 6_738_415_616  # meta-llama/Llama-2-7b-hf


def test_tinyllama_catalog_entry_exact():
    # TinyLlama 1.1B (its README's table): per block q, o 2048²; k, v 2048·256 (4 query groups of 64);
    # SwiGLU 3·2048·5632; two RMSNorms 2·2048. Untied embedding and head 2·32000·2048, final norm 2048:
    # 22 · 44,044,288 + 131,072,000 + 2048 = 1,100,048,384 (the README's "1.1B")
    from simulator.catalog import get_model

    c = params.count(get_model("tinyllama-1.1b"))
    assert c.per_layer == 2 * 2048**2 + 2 * 2048 * 256 + 3 * 2048 * 5632 + 2 * 2048 == 44_044_288
    assert c.total == 1_100_048_384


def test_llama32_and_mistral_catalog_entries_exact():
    # Llama 3.2 1B: q, o 2048·2048 (32 heads of 64); k, v 2048·512; SwiGLU 3·2048·8192; two norms;
    # tied 128256·2048 embedding, final norm: the safetensors total 1,235,814,400 (model card "1.24B").
    # Llama 3.2 3B: q, o 3072·3072 (24 heads of 128); k, v 3072·1024; SwiGLU 3·3072·8192 (card "3.21B").
    # Mistral 7B v0.1: Llama 3 8B's block, vocab 32000 untied: its safetensors total 7,241,732,096.
    from simulator.catalog import get_model

    c1 = params.count(get_model("llama-3.2-1b"))
    assert c1.per_layer == 2 * 2048**2 + 2 * 2048 * 512 + 3 * 2048 * 8192 + 2 * 2048
    assert c1.total == 16 * c1.per_layer + 128256 * 2048 + 2048 == 1_235_814_400
    c3 = params.count(get_model("llama-3.2-3b"))
    assert c3.per_layer == 2 * 3072**2 + 2 * 3072 * 1024 + 3 * 3072 * 8192 + 2 * 3072
    assert c3.total == 28 * c3.per_layer + 128256 * 3072 + 3072 == 3_212_749_824
    assert params.count(get_model("mistral-7b")).total == 7_241_732_096


def test_qwen3_dense_catalog_entries_by_hand_and_model_cards():
    # Qwen3 dense block: q and o of hidden x (heads x 128), k and v of hidden x (8 x 128), a 128-wide
    # RMSNorm on q and on k (shared by the heads), SwiGLU 3 x hidden x ffn, two RMSNorms. The 0.6B-4B
    # models tie the 151,936-token embedding. Model cards' totals and non-embedding counts (rounded).
    from simulator.catalog import get_model

    cards = {  # name: (layers, hidden, heads, ffn, tied, card total, card non-embedding), in billions as printed
        "qwen3-0.6b": (28, 1024, 16, 3072, True, "0.6", "0.44"),
        "qwen3-1.7b": (28, 2048, 16, 6144, True, "1.7", "1.4"),
        "qwen3-4b": (36, 2560, 32, 9728, True, "4.0", "3.6"),
        "qwen3-8b": (36, 4096, 32, 12288, False, "8.2", "6.95"),
        "qwen3-14b": (40, 5120, 40, 17408, False, "14.8", "13.2"),
        "qwen3-32b": (64, 5120, 64, 25600, False, "32.8", "31.2"),
    }

    def rounds_to(count: int, printed: str) -> bool:  # within half a unit of the card's last digit
        decimals = len(printed.split(".")[1])
        return abs(count / 1e9 - float(printed)) <= 0.5 * 10**-decimals

    for name, (n, h, heads, ffn, tied, total, non_emb) in cards.items():
        c = params.count(get_model(name))
        block = 2 * h * heads * 128 + 2 * h * 8 * 128 + 2 * 128 + 3 * h * ffn + 2 * h
        assert c.per_layer == block, name
        assert c.total == n * block + h + 151936 * h * (1 if tied else 2), name
        assert rounds_to(c.total, total) and rounds_to(c.non_embedding, non_emb), name


def test_qwen25_catalog_entries_bias_on_qkv_only():
    # Qwen2.5 block: q and o hidden x hidden, k and v hidden x (kv heads x 128 or 64), a bias on each of
    # q, k and v (hidden + 2 x kv width) and none on o or the MLP; SwiGLU 3 x hidden x ffn; two RMSNorms.
    # Totals: the safetensors counts of Qwen2.5-0.5B (494,032,768), -7B (7,615,616,512) and -72B
    # (72,706,203,648); the model cards' non-embedding 0.36B, 6.53B and 70.0B.
    from simulator.catalog import get_model

    shapes = {  # name: (layers, hidden, kv width, ffn, vocab, tied, safetensors total)
        "qwen2.5-0.5b": (24, 896, 2 * 64, 4864, 151936, True, 494_032_768),
        "qwen2.5-7b": (28, 3584, 4 * 128, 18944, 152064, False, 7_615_616_512),
        "qwen2.5-72b": (80, 8192, 8 * 128, 29568, 152064, False, 72_706_203_648),
    }
    for name, (n, h, kv, ffn, vocab, tied, total) in shapes.items():
        c = params.count(get_model(name))
        assert c.per_layer == 2 * h * h + 2 * h * kv + (h + 2 * kv) + 3 * h * ffn + 2 * h, name
        assert c.total == n * c.per_layer + h + vocab * h * (1 if tied else 2) == total, name
    assert round(params.count(get_model("qwen2.5-7b")).non_embedding / 1e9, 2) == 6.53
    # qkv_bias is what linear_bias adds to the QKV linear alone: o and MLP biases h + 2·ffn + h more
    m = get_model("qwen2.5-7b")
    full = params.count(m.model_copy(update={"linear_bias": True})).per_layer
    assert full - params.count(m).per_layer == 3584 + 2 * 18944 + 3584


def test_gpt2_small_exact():
    # GPT-2 124M (HF "gpt2"): biases, LayerNorm with bias, learned positions, tied head.
    m = model(
        n_layers=12,
        hidden_size=768,
        n_heads=12,
        ffn_hidden_size=3072,
        vocab_size=50257,
        mlp="gelu",
        norm="layernorm",
        linear_bias=True,
        tied_embeddings=True,
        position_embedding="learned",
        max_position_embeddings=1024,
    )
    c = params.count(m)
    assert c.total == 124_439_808
    assert c.embedding == 50257 * 768 + 1024 * 768
    assert c.lm_head == 0
    # attention 4h² + 4h biases; MLP 2·h·4h + 4h + h; two LayerNorms 2·2h
    assert c.per_layer == (4 * 768**2 + 4 * 768) + (8 * 768**2 + 5 * 768) + 4 * 768


def test_gpt3_175b_near_published(gpt3_175b):
    # Brown et al. 2020 report 175.0B (rounded); the exact count of this shape is 174.6B.
    assert abs(params.count(gpt3_175b).total / 175.0e9 - 1) < 0.003


def test_swiglu_three_matrices_gqa_qk_norm_by_hand():
    base = dict(n_layers=1, hidden_size=8, n_heads=4, n_kv_heads=2, ffn_hidden_size=16, vocab_size=10)
    swiglu = params.layer(model(**base, mlp="swiglu"))
    gelu = params.layer(model(**base, mlp="gelu"))
    assert swiglu.mlp == 3 * 8 * 16 and gelu.mlp == 2 * 8 * 16
    # d_h = 2: q 8·8, k and v 8·4 each, o 8·8
    assert swiglu.attention == 64 + 2 * 32 + 64
    qk = params.layer(model(**base, qk_norm=True))
    assert qk.norms == 2 * 8 + 8 + 4  # RMSNorm over the query width and over the key width


def test_embedding_norm_and_untied_head():
    m = model(
        n_layers=2,
        hidden_size=8,
        n_heads=2,
        ffn_hidden_size=32,
        vocab_size=10,
        mlp="gelu",
        norm="layernorm",
        linear_bias=True,
        embedding_norm=True,
        position_embedding="alibi",
    )
    c = params.count(m)
    assert c.embedding_norm == 16 and c.final_norm == 16
    assert c.total == 80 + 80 + 2 * c.per_layer + 16 + 16


def test_local_tensor_and_pipeline_split_by_hand():
    m = model(n_layers=4, hidden_size=8, n_heads=4, ffn_hidden_size=16, vocab_size=10, mlp="gelu")
    blk = params.layer(m)
    assert blk.replicated == 16  # two RMSNorms; no biases
    assert params.layer_local(m, 2) == (blk.total - 16) // 2 + 16
    # tp = 2, pp = 2: 2 blocks + max(first: embedding/2, last: head/2 + final norm)
    assert params.local(m, 2, 2) == 2 * params.layer_local(m, 2) + max(40, 40 + 8)
    assert params.local(m) == params.count(m).total


def test_tied_head_copy_on_last_stage():
    m = model(n_layers=2, hidden_size=8, n_heads=2, ffn_hidden_size=16, vocab_size=100, tied_embeddings=True)
    # Megatron keeps a copy of the word embedding on the last stage when p > 1.
    assert params.local(m, 1, 2) == params.count(m).per_layer + 800 + 8


@given(layers=st.integers(1, 64), tp=st.sampled_from([1, 2, 4, 8]))
def test_monotone_in_layers_and_sum_identity(shapes, layers, tp):
    for shape in shapes.values():
        m1 = model(**{**shape, "n_layers": layers})
        m2 = model(**{**shape, "n_layers": layers + 1})
        c1, c2 = params.count(m1), params.count(m2)
        assert c2.total - c1.total == c1.per_layer > 0
        assert c1.non_embedding + c1.embedding + c1.lm_head == c1.total
        assert params.local(m1, tp) <= params.local(m1, 1) == c1.total


def test_gemma3_catalog_entries_by_hand_and_the_technical_report():
    # Gemma 3 block: q and o hidden x (heads x head_dim), k and v hidden x (KV heads x head_dim), GeGLU 3 x
    # hidden x ffn, four hidden-width RMSNorms (sandwich) and RMSNorm(head_dim) on q and on k; tied embedding.
    # Totals: the 1B's text-only count 999,885,952 (keras-hub's preset); the 4B's 3,880,099,328 there with
    # a 262,144-token vocabulary, 64 rows of 2,560 fewer than the checkpoint's 262,208. Non-embedding counts:
    # the Gemma 3 technical report's Table 1 (698M, 3,209M, 10,759M, 25,600M).
    from simulator.catalog import get_model

    shapes = {  # name: (layers, hidden, heads, kv heads, head dim, ffn, vocab, report non-embedding in M)
        "gemma-3-1b": (26, 1152, 4, 1, 256, 6912, 262144, 698),
        "gemma-3-4b": (34, 2560, 8, 4, 256, 10240, 262208, 3209),
        "gemma-3-12b": (48, 3840, 16, 8, 256, 15360, 262208, 10759),
        "gemma-3-27b": (62, 5376, 32, 16, 128, 21504, 262208, 25600),
    }
    for name, (n, h, a, g, d, f, vocab, non_emb) in shapes.items():
        c = params.count(get_model(name))
        assert c.per_layer == 2 * h * a * d + 2 * h * g * d + 3 * h * f + 4 * h + 2 * d, name
        assert c.total == n * c.per_layer + h + vocab * h, name
        assert round(c.non_embedding / 1e6) == non_emb, name
    assert params.count(get_model("gemma-3-1b")).total == 999_885_952
    assert params.count(get_model("gemma-3-4b")).total == 3_880_099_328 + 64 * 2560
