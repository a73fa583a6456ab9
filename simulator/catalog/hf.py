"""Import a Hugging Face ``config.json`` from a local file, without network access or transformers.

Supported families and their key names (as written by each family's ``configuration_*.py``):

- Llama / Mistral / OLMo 2 / Qwen2 / Qwen3-style: ``num_hidden_layers``, ``hidden_size``,
  ``num_attention_heads``, ``num_key_value_heads``, ``intermediate_size``, ``vocab_size``,
  ``tie_word_embeddings``, ``head_dim``, ``hidden_act`` (silu ⇒ SwiGLU); OLMo 2 adds QK-norm, dense
  Qwen3 (``qwen3``) per-head QK-norm; Qwen2 (``qwen2``, Qwen2 / Qwen2.5) biases q, k and v
  (``qkv_bias``; ``Qwen2Attention`` has no key for it); ``sliding_window`` (unless
  ``use_sliding_window`` is false) and ``layer_types`` give the sliding-window blocks
  (``_sliding_window``); ``rope_scaling`` of type ``yarn`` gives ``rope_scaling: yarn`` (GPT-OSS;
  Megatron-Core runs it unfused).
- MPT: ``n_layers``, ``d_model``, ``n_heads``, ``expansion_ratio``, ``vocab_size``, ``no_bias``,
  ``attn_config.alibi``; MPT always ties the embedding.
- GPT-NeoX: Llama-style names with ``hidden_act`` gelu, biases and LayerNorm, rotary positions.
- Mixture-of-experts (``_moe``): Mixtral (``num_local_experts``, ``num_experts_per_tok``,
  experts of ``intermediate_size``), Qwen3-MoE (``num_experts``, ``moe_intermediate_size``,
  ``decoder_sparse_step``, per-head QK-norm), OLMoE (``num_experts``, experts of
  ``intermediate_size``, full-width QK-norm), GPT-OSS (``num_local_experts``,
  ``num_experts_per_tok`` or ``experts_per_token``, biases on attention, router and experts) and
  DeepSeek-V2/V3 (``n_routed_experts``, ``n_shared_experts``, ``moe_intermediate_size``,
  ``first_k_dense_replace``, ``moe_layer_freq`` and the MLA keys ``q_lora_rank``, ``kv_lora_rank``,
  ``qk_nope_head_dim``, ``qk_rope_head_dim``, ``v_head_dim``; the MTP module is not counted), and GLM-4.5
  (``glm4_moe``: DeepSeek-V3's expert keys on GQA attention, ``attention_bias`` on q, k and v only,
  ``use_qk_norm`` per head; the MTP layer, which transformers does not build, is not counted).
- Gemma 3 (``gemma3_text``, or ``gemma3``'s ``text_config``, ``_gemma3``): Llama-style names with
  ``Gemma3TextConfig``'s defaults, GeGLU, four norms a block, per-head QK-norm and its window pattern;
  Gemma 2's logit softcapping is not modelled.
- Nemotron-H and Nemotron 3 Nano (``nemotron_h``, ``_nemotron_h``): ``hybrid_override_pattern`` and the Mamba-2 keys
  ``mamba_num_heads``, ``mamba_head_dim``, ``ssm_state_size``, ``n_groups``, ``conv_kernel``, ``chunk_size``.
- GPT-2: ``n_layer``, ``n_embd``, ``n_head``, ``n_inner`` (None ⇒ 4·n_embd), ``n_positions``;
  learned positions, tied head, biases.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.errors import InputError
from simulator.inputs import read_json


def _gpt2(cfg: dict[str, Any]) -> dict[str, Any]:
    h = cfg["n_embd"]
    return {
        "n_layers": cfg["n_layer"],
        "hidden_size": h,
        "n_heads": cfg["n_head"],
        "ffn_hidden_size": cfg.get("n_inner") or 4 * h,
        "vocab_size": cfg["vocab_size"],
        "mlp": "gelu",
        "tied_embeddings": cfg.get("tie_word_embeddings", True),
        "norm": "layernorm",
        "linear_bias": True,
        "position_embedding": "learned",
        "max_position_embeddings": cfg.get("n_positions", 1024),
    }


def _mpt(cfg: dict[str, Any]) -> dict[str, Any]:
    h = cfg["d_model"]
    alibi = (cfg.get("attn_config") or {}).get("alibi", True)
    return {
        "n_layers": cfg["n_layers"],
        "hidden_size": h,
        "n_heads": cfg["n_heads"],
        "n_kv_heads": (cfg.get("attn_config") or {}).get("kv_n_heads"),
        "ffn_hidden_size": int(cfg.get("expansion_ratio", 4) * h),
        "vocab_size": cfg["vocab_size"],
        "mlp": "gelu",
        "tied_embeddings": True,
        "norm": "layernorm",
        "linear_bias": not cfg.get("no_bias", True),
        "position_embedding": "alibi" if alibi else "learned",
        "max_position_embeddings": cfg.get("max_seq_len", 2048),
    }


#: Families read with Llama-style key names. Their config classes default ``tie_word_embeddings``
#: to False (LlamaConfig, MistralConfig, Olmo2Config, Qwen2Config, Qwen3Config, GPTNeoXConfig).
LLAMA_LIKE = ("llama", "mistral", "olmo2", "qwen2", "qwen3", "gpt_neox")


def _llama_like(cfg: dict[str, Any]) -> dict[str, Any]:
    model_type = cfg.get("model_type", "llama")
    act = cfg.get("hidden_act", cfg.get("hidden_activation", "silu"))
    neox = model_type == "gpt_neox"
    out = {
        "n_layers": cfg["num_hidden_layers"],
        "hidden_size": cfg["hidden_size"],
        "n_heads": cfg["num_attention_heads"],
        "n_kv_heads": cfg.get("num_key_value_heads"),
        "head_dim": cfg.get("head_dim"),
        "ffn_hidden_size": cfg.get("intermediate_size") or 4 * cfg["hidden_size"],
        "vocab_size": cfg["vocab_size"],
        "mlp": "swiglu" if act in ("silu", "swish") and not neox else ("relu" if act == "relu" else "gelu"),
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "norm": "layernorm" if neox else "rmsnorm",
        "linear_bias": neox or bool(cfg.get("attention_bias", False)),
        # Qwen2's attention always biases q, k and v (and nothing else): transformers' Qwen2Attention
        "qkv_bias": model_type == "qwen2",
        # OLMo 2 normalises the whole q and k projections, Qwen3 each head (Qwen3Attention's q_norm / k_norm
        # over head_dim)
        "qk_norm": model_type in ("olmo2", "qwen3"),
        "qk_norm_per_head": model_type == "qwen3",
        "position_embedding": "rope",
        "max_position_embeddings": cfg.get("max_position_embeddings"),
        **_sliding_window(cfg),
        **({"swiglu_limit": cfg["swiglu_limit"]} if cfg.get("swiglu_limit") else {}),
        **({"rope_scaling": "yarn"} if _rope_type(cfg) == "yarn" else {}),
    }
    return out


def _rope_type(cfg: dict[str, Any]) -> str | None:
    """``rope_scaling``'s type: ``rope_type`` (transformers >= 4.45) or the older ``type`` key."""
    scaling = cfg.get("rope_scaling") or {}
    return scaling.get("rope_type") or scaling.get("type")


def _sliding_window(cfg: dict[str, Any]) -> dict[str, Any]:
    """``sliding_window`` and ``full_attention_interval`` from ``sliding_window`` (null, or disabled by
    Qwen2's ``use_sliding_window: false``: none) and ``layer_types`` (GPT-OSS: "sliding_attention" /
    "full_attention" per block; absent: every block windowed, as Mistral 7B v0.1). A pattern other than
    every k-th block full cannot be expressed."""
    window = cfg.get("sliding_window") if cfg.get("use_sliding_window", True) else None
    if not window:
        return {}
    types = cfg.get("layer_types") or []
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    if not types or not full:
        return {"sliding_window": window}
    if len(full) == len(types):
        return {}
    k = full[0] + 1
    if full != list(range(k - 1, len(types), k)):
        raise KeyError("layer_types (only every k-th block full attention can be expressed; write "
                       "model.sliding_window and model.full_attention_interval)")
    return {"sliding_window": window, "full_attention_interval": k}


#: ``Gemma3TextConfig``'s defaults (transformers ``configuration_gemma3.py``) for the keys the 4B-27B
#: checkpoints' ``text_config`` leaves out (google/gemma-3-4b-it sets only the hidden and MLP sizes, the
#: layers, the window and the RoPE scaling).
GEMMA3_DEFAULTS = {"vocab_size": 262208, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                   "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072,
                   "tie_word_embeddings": True, "attention_bias": False, "sliding_window": 4096}
#: ``Gemma3TextConfig``'s ``sliding_window_pattern``: every 6th block attends fully.
GEMMA3_PATTERN = 6


def _gemma3(cfg: dict[str, Any]) -> dict[str, Any]:
    """Gemma 3's text model (``gemma3_text``, or the ``text_config`` of a ``gemma3`` checkpoint, whose
    SigLIP vision tower is not counted): a GeGLU MLP (``gelu_pytorch_tanh``), four RMSNorms a block
    (``sandwich_norm``), a per-head QK-norm, and every ``sliding_window_pattern``-th block attending fully
    (``layer_types`` where given). The embedding's scaling by ``sqrt(hidden_size)`` is one elementwise
    pass, left out."""
    given = cfg.get("text_config") or cfg
    text = {**GEMMA3_DEFAULTS, **given}
    if text.get("attn_logit_softcapping") or text.get("final_logit_softcapping"):
        raise InputError("attn_logit_softcapping / final_logit_softcapping: logit softcapping is not modelled; "
                         "set them to null or write the model as a mapping in the scenario", "model.hf_config")
    out = _llama_like({**text, "model_type": "llama"})
    out |= {"mlp": "geglu", "sandwich_norm": True, "qk_norm": True, "qk_norm_per_head": True}
    # the pattern key as transformers has written it (``_sliding_window_pattern`` from 4.5x), else the default
    pattern = given.get("sliding_window_pattern") or given.get("_sliding_window_pattern") or GEMMA3_PATTERN
    if out.get("sliding_window") and "full_attention_interval" not in out and not text.get("layer_types"):
        out["full_attention_interval"] = pattern
    return out


MOE_TYPES = ("mixtral", "qwen3_moe", "olmoe", "gpt_oss", "deepseek_v2", "deepseek_v3", "glm4_moe")


def _moe(cfg: dict[str, Any]) -> dict[str, Any]:
    """MoE families: the Llama-style keys plus the expert (and MLA) keys of each family."""
    mt = cfg["model_type"]
    out = _llama_like({**cfg, "model_type": "llama"})
    top_k = cfg.get("num_experts_per_tok", cfg.get("experts_per_token"))
    moe: dict[str, Any] = {"top_k": top_k}
    if mt == "mixtral":
        moe |= {"n_experts": cfg["num_local_experts"], "expert_ffn_hidden_size": cfg["intermediate_size"]}
    elif mt == "olmoe":
        moe |= {"n_experts": cfg["num_experts"], "expert_ffn_hidden_size": cfg["intermediate_size"]}
        out["qk_norm"] = True
    elif mt == "gpt_oss":
        moe |= {"n_experts": cfg["num_local_experts"], "expert_ffn_hidden_size": cfg["intermediate_size"],
                "router_bias": True}
        out["linear_bias"] = True
    elif mt == "qwen3_moe":
        step = int(cfg.get("decoder_sparse_step", 1) or 1)
        if cfg.get("mlp_only_layers"):
            raise KeyError("mlp_only_layers (an irregular dense-layer list cannot be expressed; write model.moe)")
        moe |= {"n_experts": cfg["num_experts"], "expert_ffn_hidden_size": cfg["moe_intermediate_size"],
                "first_dense_layers": step - 1, "layer_interval": step}
        out |= {"qk_norm": True, "qk_norm_per_head": True}
    else:  # deepseek_v2, deepseek_v3 and glm4_moe (DeepSeek's expert keys)
        moe |= {"n_experts": cfg["n_routed_experts"], "expert_ffn_hidden_size": cfg["moe_intermediate_size"],
                "n_shared_experts": cfg.get("n_shared_experts") or 0,
                "first_dense_layers": cfg.get("first_k_dense_replace", 0),
                "layer_interval": cfg.get("moe_layer_freq", 1)}
    if mt == "glm4_moe":
        # Glm4MoeAttention: attention_bias biases q, k and v only (o_proj has none); use_qk_norm a per-head
        # RMSNorm over head_dim (transformers modeling_glm4_moe.py)
        qk = bool(cfg.get("use_qk_norm", False))
        out |= {"linear_bias": False, "qkv_bias": bool(cfg.get("attention_bias", False)), "qk_norm": qk,
                "qk_norm_per_head": qk}
    elif mt.startswith("deepseek"):
        out |= {"attention": "mla", "n_kv_heads": None, "head_dim": None}
        out |= {k: cfg[k] for k in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}
        out["q_lora_rank"] = cfg.get("q_lora_rank")
    if top_k is None:
        raise KeyError("num_experts_per_tok")
    out["moe"] = moe
    return out


#: Keys the readers look inside, with the JSON type they must have (``null`` is always accepted).
_SHAPED = {"rope_scaling": dict, "attn_config": dict, "layer_types": list, "mlp_only_layers": list,
           "text_config": dict}


def _nemotron_h(cfg: dict[str, Any]) -> dict[str, Any]:
    """Nemotron-H (``nemotron_h``, transformers' ``NemotronHConfig``): a hybrid of Mamba-2, attention and
    MLP layers in ``hybrid_override_pattern`` (``simulator.workload.hybrid``), a squared-ReLU MLP (two matrices,
    ``mlp_hidden_act`` relu2) and attention without position embeddings (Megatron-Bridge's Nemotron-H bridge
    sets ``position_embedding_type`` none). The convolution's bias is counted (Megatron-Core's ``MambaMixer``
    asserts ``conv_bias``); biases elsewhere are refused. MoE layers (``E``, Nemotron 3 Nano) take
    ``n_routed_experts``, ``num_experts_per_tok``, ``moe_intermediate_size`` and ``n_shared_experts`` of width
    ``moe_shared_expert_intermediate_size`` (squared-ReLU experts), and Nemotron 3 Super's latent width
    ``moe_latent_size`` (``model.moe.latent_size``)."""
    field = "model.hf_config"
    pattern = cfg["hybrid_override_pattern"]
    moe = None
    if "E" in pattern:
        shared = int(cfg.get("n_shared_experts") or 0)
        moe = {"n_experts": cfg["n_routed_experts"], "top_k": cfg["num_experts_per_tok"],
               "expert_ffn_hidden_size": cfg["moe_intermediate_size"], "n_shared_experts": shared}
        if cfg.get("moe_latent_size"):
            moe["latent_size"] = cfg["moe_latent_size"]
        if shared:
            moe["shared_expert_ffn_hidden_size"] = cfg["moe_shared_expert_intermediate_size"] // shared
    biased = [k for k in ("attention_bias", "mlp_bias", "use_bias", "mamba_proj_bias") if cfg.get(k)]
    if biased:
        raise InputError(f"nemotron_h: {biased[0]} true is not modelled (Nemotron-H has no linear biases)", field)
    act = cfg.get("mlp_hidden_act", "relu2")
    if act not in ("relu2", "relu"):  # a squared-ReLU (or ReLU) MLP of two matrices; guessing another would mislead
        raise InputError(f"nemotron_h: mlp_hidden_act {act!r} is not modelled (Nemotron-H uses relu2)", field)
    return {
        "hidden_size": cfg["hidden_size"],
        "n_heads": cfg["num_attention_heads"],
        "n_kv_heads": cfg.get("num_key_value_heads"),
        "head_dim": cfg.get("attention_head_dim") or cfg.get("head_dim"),
        "ffn_hidden_size": cfg["intermediate_size"],
        "vocab_size": cfg["vocab_size"],
        "mlp": "relu",
        "tied_embeddings": bool(cfg.get("tie_word_embeddings", False)),
        "position_embedding": "none",
        "max_position_embeddings": cfg.get("max_position_embeddings"),
        "hybrid_pattern": pattern,
        "mamba": {"n_heads": cfg["mamba_num_heads"], "head_dim": cfg.get("mamba_head_dim", 64),
                  "state_size": cfg.get("ssm_state_size", 128), "n_groups": cfg.get("n_groups", 8),
                  "conv_kernel": cfg.get("conv_kernel", 4), "chunk_size": cfg.get("chunk_size", 128)},
        **({"moe": moe} if moe else {}),
    }


def _check_shapes(cfg: dict[str, Any], path: Path, field: str) -> None:
    for key, kind in _SHAPED.items():
        value = cfg.get(key)
        if value is not None and not isinstance(value, kind):
            shape = "a JSON object" if kind is dict else "a JSON list"
            raise InputError(f"{path}: {key} must be {shape} (or null), got {value!r}", field)


def model_dict_from_hf(path: Path) -> dict[str, Any]:
    """Read ``config.json`` at ``path`` and return a dict for ``ModelConfig``.

    Raises ``InputError`` naming ``model.hf_config`` for a missing or unreadable file or missing keys.
    """
    field = "model.hf_config"
    cfg = read_json(path, field, "Hugging Face config.json")
    if not isinstance(cfg, dict):
        raise InputError(f"{path} is not a JSON object", field)
    model_type = cfg.get("model_type", "")
    readers: dict[str, Any] = {"gpt2": _gpt2, "mpt": _mpt, **dict.fromkeys(LLAMA_LIKE, _llama_like),
                               "gemma3": _gemma3, "gemma3_text": _gemma3, "nemotron_h": _nemotron_h,
                               **dict.fromkeys(MOE_TYPES, _moe)}
    if not isinstance(model_type, str) or model_type not in readers:
        # Guessing would be silently wrong (an OPT config read as Llama is off by 30%).
        raise InputError(
            f"{path}: model_type {model_type or '(missing)'!r} is not supported; supported: "
            f"{', '.join(sorted(readers))}; or write the model as a mapping in the scenario",
            field,
        )
    _check_shapes(cfg, path, field)
    if isinstance(cfg.get("text_config"), dict):
        _check_shapes(cfg["text_config"], path, field)
    try:
        out = readers[model_type](cfg)
    except InputError:  # a reader's own refusal, already naming what it cannot model
        raise
    except KeyError as exc:
        raise InputError(f"{path} lacks key {exc.args[0]!r} for model_type {model_type or 'unknown'!r}", field) from None
    except (TypeError, ValueError, AttributeError) as exc:
        # A number given as text, a list where a number belongs: the file is not a config.json as
        # transformers writes it.
        raise InputError(f"{path}: a value has the wrong type ({exc}); compare it with the model's published "
                         "config.json", field) from None
    out["name"] = cfg.get("_name_or_path") or Path(path).parent.name or "hf-model"
    out["source"] = f"Hugging Face config.json ({path})"
    return {k: v for k, v in out.items() if v is not None}
