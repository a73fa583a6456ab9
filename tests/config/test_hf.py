"""Hugging Face config.json import (no network, no transformers)."""

from __future__ import annotations

import json

import pytest

from simulator.catalog.hf import model_dict_from_hf
from simulator.config.model import ModelConfig
from simulator.errors import InputError
from simulator.workload import params

# Keys as published in meta-llama/Meta-Llama-3-8B/config.json.
LLAMA3_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-5,
}
# Keys as in openai-community/gpt2/config.json.
GPT2 = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "n_inner": None,
        "n_positions": 1024, "vocab_size": 50257}
# Keys as in mosaicml/mpt-7b/config.json.
MPT7B = {"model_type": "mpt", "n_layers": 32, "d_model": 4096, "n_heads": 32, "expansion_ratio": 4,
         "vocab_size": 50432, "max_seq_len": 2048, "no_bias": True, "attn_config": {"alibi": True}}


def _load(tmp_path, cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return ModelConfig.model_validate(model_dict_from_hf(path))


def test_llama(tmp_path):
    m = _load(tmp_path, LLAMA3_8B)
    assert (m.n_layers, m.hidden_size, m.n_heads, m.kv_heads, m.ffn_hidden_size) == (32, 4096, 32, 8, 14336)
    assert m.mlp == "swiglu" and not m.tied_embeddings and m.norm == "rmsnorm"


def test_olmo2_has_qk_norm(tmp_path):
    m = _load(tmp_path, {**LLAMA3_8B, "model_type": "olmo2", "num_key_value_heads": 32})
    assert m.qk_norm


def test_qwen2_biases_q_k_v_only(tmp_path):
    # Keys as in Qwen/Qwen2.5-7B/config.json (no attention_bias key: Qwen2Attention always biases q, k, v)
    m = _load(tmp_path, {"model_type": "qwen2", "hidden_act": "silu", "hidden_size": 3584, "intermediate_size": 18944,
                         "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
                         "vocab_size": 152064, "tie_word_embeddings": False, "max_position_embeddings": 131072})
    assert m.qkv_bias and not m.linear_bias


def test_qwen3_dense_has_per_head_qk_norm(tmp_path):
    # Keys as in Qwen/Qwen3-8B/config.json; its block by hand: q, o 4096 x (32 x 128), k, v 4096 x (8 x 128),
    # a 128-wide RMSNorm on q and on k, SwiGLU 3 x 4096 x 12288, two RMSNorms; untied 151,936-token vocabulary
    m = _load(tmp_path, {"model_type": "qwen3", "hidden_act": "silu", "hidden_size": 4096, "intermediate_size": 12288,
                         "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
                         "head_dim": 128, "attention_bias": False, "vocab_size": 151936,
                         "tie_word_embeddings": False, "max_position_embeddings": 40960,
                         "sliding_window": None, "use_sliding_window": False})
    assert m.qk_norm and m.qk_norm_per_head and not m.linear_bias and not m.qkv_bias
    block = 2 * 4096 * 32 * 128 + 2 * 4096 * 8 * 128 + 2 * 128 + 3 * 4096 * 12288 + 2 * 4096
    assert params.count(m).total == 36 * block + 4096 + 2 * 151936 * 4096 == 8_190_735_360  # safetensors count


# google/gemma-3-1b-it/config.json (gemma3_text) and google/gemma-3-4b-it's text_config, which leaves the
# heads, head_dim and vocabulary to Gemma3TextConfig's defaults.
GEMMA3_1B = {"model_type": "gemma3_text", "attention_bias": False, "attn_logit_softcapping": None,
             "final_logit_softcapping": None, "head_dim": 256, "hidden_activation": "gelu_pytorch_tanh",
             "hidden_size": 1152, "intermediate_size": 6912, "max_position_embeddings": 32768,
             "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1, "query_pre_attn_scalar": 256,
             "rope_scaling": None, "sliding_window": 512, "sliding_window_pattern": 6, "vocab_size": 262144}
GEMMA3_4B = {"model_type": "gemma3", "text_config": {
    "hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text", "num_hidden_layers": 34,
    "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024}}


@pytest.mark.parametrize(("cfg", "name"), [(GEMMA3_1B, "gemma-3-1b"), (GEMMA3_4B, "gemma-3-4b")])
def test_gemma3_imports_as_the_catalog_entry(tmp_path, cfg, name):
    from simulator.catalog import get_model

    m, want = _load(tmp_path, cfg), get_model(name)
    assert m.mlp == "geglu" and m.sandwich_norm and m.qk_norm_per_head and m.tied_embeddings
    assert (m.sliding_window, m.full_attention_interval) == (want.sliding_window, 6)
    assert params.count(m) == params.count(want)


def test_gemma3_window_pattern_keys(tmp_path):
    text = GEMMA3_4B["text_config"]
    # layer_types (written by transformers >= 4.5x) win; a period other than the default 6 shows they are read
    types = {**text, "num_hidden_layers": 48, "layer_types": (["sliding_attention"] * 3 + ["full_attention"]) * 12}
    assert _load(tmp_path, {"model_type": "gemma3", "text_config": types}).full_attention_interval == 4
    private = {**text, "_sliding_window_pattern": 4}
    assert _load(tmp_path, {"model_type": "gemma3", "text_config": private}).full_attention_interval == 4
    # no window key: Gemma3TextConfig's sliding_window 4096, every 6th block full
    bare = _load(tmp_path, {"model_type": "gemma3", "text_config": {k: v for k, v in text.items() if k != "sliding_window"}})
    assert (bare.sliding_window, bare.full_attention_interval) == (4096, 6)


def test_gemma3_bad_input_is_one_clear_error(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**GEMMA3_1B, "final_logit_softcapping": 30.0}))
    with pytest.raises(InputError) as err:
        model_dict_from_hf(path)
    assert str(err.value).startswith("model.hf_config: attn_logit_softcapping / final_logit_softcapping: logit")
    assert "wrong type" not in str(err.value)
    path.write_text(json.dumps({**GEMMA3_4B, "text_config": {**GEMMA3_4B["text_config"], "layer_types": "full"}}))
    with pytest.raises(InputError, match="layer_types must be a JSON list"):
        model_dict_from_hf(path)


def test_gpt2(tmp_path):
    m = _load(tmp_path, GPT2)
    assert m.ffn_hidden_size == 4 * 768 and m.tied_embeddings and m.position_embedding == "learned"
    assert m.linear_bias and m.norm == "layernorm" and m.mlp == "gelu"


def test_mpt(tmp_path):
    m = _load(tmp_path, MPT7B)
    assert m.ffn_hidden_size == 16384 and m.position_embedding == "alibi" and not m.linear_bias
    assert m.tied_embeddings


def test_errors(tmp_path):
    with pytest.raises(InputError, match="model.hf_config: file not found"):
        model_dict_from_hf(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        model_dict_from_hf(bad)
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    with pytest.raises(InputError, match="lacks key"):
        model_dict_from_hf(missing)


def test_unsupported_model_type_is_refused(tmp_path):
    # An OPT config read with Llama's key names would be 30% off; refuse instead of guessing.
    opt = {"model_type": "opt", "num_hidden_layers": 24, "hidden_size": 2048, "num_attention_heads": 32,
           "ffn_dim": 8192, "vocab_size": 50272}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(opt))
    with pytest.raises(InputError, match="model_type 'opt' is not supported; supported: .*llama"):
        model_dict_from_hf(path)


def test_tie_defaults_to_false_for_llama_family(tmp_path):
    cfg = {k: v for k, v in LLAMA3_8B.items() if k != "tie_word_embeddings"}
    assert not _load(tmp_path, {**cfg, "model_type": "mistral"}).tied_embeddings
