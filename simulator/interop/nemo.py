"""NeMo (1.x ``megatron_gpt_config.yaml`` / NeMo-Framework-Launcher ``conf/training/gpt3/*.yaml``)
recipe → scenario fragment.

Key names are NeMo's (``examples/nlp/language_modeling/conf/megatron_gpt_config.yaml``):
``trainer.devices``, ``trainer.num_nodes``, ``trainer.precision`` (``bf16``, ``bf16-mixed``, ``16``,
``32``), ``trainer.max_steps``; ``model.micro_batch_size``, ``global_batch_size``,
``tensor_model_parallel_size``, ``pipeline_model_parallel_size``,
``virtual_pipeline_model_parallel_size``, ``context_parallel_size``, ``encoder_seq_length``,
``max_position_embeddings``, ``num_layers``, ``hidden_size``, ``ffn_hidden_size``,
``num_attention_heads``, ``num_query_groups``, ``kv_channels``, ``normalization``, ``bias``,
``activation`` (``gelu``, ``swiglu``, ``fast-swiglu``, ``geglu``, ``fast-geglu``), ``position_embedding_type``,
``share_embeddings_and_output_weights``, ``hidden_dropout``, ``sequence_parallel``,
``activations_checkpoint_granularity``, ``ub_tp_comm_overlap``, ``use_flash_attention``, ``fp8``,
``optim.name`` (``distributed_fused_adam`` or ``mcore_distributed_optim`` = Megatron distributed optimizer; ``optim.overlap_param_sync`` = ``parallel.overlap_param_gather``),
``defer_embedding_wgrad_compute`` and ``wgrad_deferral_limit`` (the same ``parallel`` keys). NeMo trains with
Megatron-Core: dtsim framework ``ddp``. The vocabulary comes from the tokenizer, not the recipe:
give ``--set model.vocab_size=N``.
"""

from __future__ import annotations

from simulator.config.yamlio import parse_yaml
from simulator.errors import InputError
from simulator.interop.common import (
    DTYPES,
    Imported,
    as_float,
    as_int,
    set_recompute_layers,
    set_wgrad_deferral,
)

FIELD = "nemo"

_MODEL_READ = {
    "micro_batch_size", "global_batch_size", "tensor_model_parallel_size", "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size", "context_parallel_size", "encoder_seq_length", "max_position_embeddings",
    "num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "kv_channels",
    "normalization", "bias", "activation", "position_embedding_type", "share_embeddings_and_output_weights",
    "hidden_dropout", "attention_dropout", "ffn_dropout", "sequence_parallel", "activations_checkpoint_granularity",
    "activations_checkpoint_method", "activations_checkpoint_num_layers", "ub_tp_comm_overlap",
    "use_flash_attention", "fp8", "optim", "cpu_offloading", "make_vocab_size_divisible_by", "precision",
    "qk_layernorm", "transformer_engine", "defer_embedding_wgrad_compute", "wgrad_deferral_limit",
    "use_tp_pp_dp_mapping",
}
_HYPER = "optimizer, initialisation or loss-scaling hyper-parameter: no effect on step time"
_DATA = "data or tokenizer: dtsim assumes the input pipeline never stalls the step"
_NUMERICS = "numerics or fusion switch dtsim does not distinguish (same FLOPs and bytes)"
_OUTSIDE = "logging, checkpointing, profiling or process setup: outside the simulated step"
_MODEL_IGNORED = {
    **dict.fromkeys(("init_method_std", "use_scaled_init_method", "native_amp_init_scale",
                     "native_amp_growth_interval", "hysteresis", "seed", "rampup_batch_size",
                     "do_layer_norm_weight_decay"), _HYPER),
    **dict.fromkeys(("tokenizer", "data", "pre_process", "post_process"), _DATA),
    **dict.fromkeys(("mcore_gpt", "layernorm_epsilon", "persist_layer_norm", "headscale", "transformer_block_type",
                     "openai_gelu", "normalize_attention_scores", "rotary_percentage", "rotary_base",
                     "attention_type", "apply_query_key_layer_scaling", "fp32_residual_connection",
                     "fp16_lm_cross_entropy", "megatron_amp_O2", "grad_allreduce_chunk_size_mb", "grad_div_ar_fusion",
                     "gradient_accumulation_fusion", "bias_activation_fusion", "bias_dropout_add_fusion",
                     "masked_softmax_fusion", "get_attention_mask_from_fusion", "apply_rope_fusion",
                     "onnx_safe", "gradient_as_bucket_view", "sync_batch_comm", "fp8_e4m3",
                     "fp8_hybrid", "fp8_margin", "fp8_interval", "fp8_amax_history_len", "fp8_amax_compute_algo",
                     "reduce_amax", "use_emha", "ub_tp_comm_overlap_cfg", "overlap_p2p_comm", "batch_p2p_comm",
                     "deterministic_mode", "cross_entropy_loss_fusion", "seq_len_interpolation_factor",
                     "num_micro_batches_with_partial_activation_checkpoints",
                     "activations_checkpoint_layers_per_pipeline", "sharp", "tp_comm_atomic_ag",
                     "tp_comm_atomic_rs", "tp_comm_bulk_wgrad", "tp_comm_bulk_dgrad",
                     "tp_comm_overlap_ag", "tp_comm_overlap_rs", "tp_comm_split_ag", "tp_comm_split_rs"),
                    _NUMERICS),
    **dict.fromkeys(("resume_from_checkpoint", "use_cpu_initialization", "apex_transformer_log_level", "mem_profile",
                     "nsys_profile", "gc_interval", "dist_ckpt_format", "dist_ckpt_load_on_device",
                     "dist_ckpt_parallel_save", "restore_from_path", "hf_model_id"), _OUTSIDE),
}
_TRAINER_READ = {"devices", "num_nodes", "precision", "max_steps", "accumulate_grad_batches", "gradient_clip_val"}
_TRAINER_IGNORED = {"accelerator", "logger", "enable_checkpointing", "use_distributed_sampler", "max_epochs",
                    "max_time", "log_every_n_steps", "val_check_interval", "limit_val_batches", "limit_test_batches",
                    "benchmark", "enable_model_summary", "strategy", "callbacks",
                    "num_sanity_val_steps"}
_TOP_IGNORED = {"name", "restore_from_path", "exp_manager", "defaults", "hydra", "run", "cluster", "env_vars"}


def import_recipe(text: str) -> Imported:
    """NeMo recipe YAML text → scenario fragment + ignored keys."""
    doc = parse_yaml(text, "the NeMo recipe", FIELD)  # one line for malformed YAML or a key given twice
    if not isinstance(doc, dict) or not isinstance(doc.get("model"), dict):
        raise InputError("a NeMo recipe is a mapping with a model: section (and usually trainer:)", FIELD)
    out = Imported()
    for key in doc:
        if key in _TOP_IGNORED:
            out.ignore(key, _OUTSIDE)
        elif key not in ("trainer", "model"):
            raise InputError(f"unknown top-level key {key!r}; a NeMo recipe has trainer, model, exp_manager", FIELD)
    trainer, model = doc.get("trainer") or {}, doc["model"]
    for key in trainer:
        if key in _TRAINER_IGNORED:
            out.ignore(f"trainer.{key}", _OUTSIDE)
        elif key not in _TRAINER_READ:
            raise InputError(f"unknown key trainer.{key}", FIELD)
    for key in model:
        if key in _MODEL_IGNORED:
            out.ignore(f"model.{key}", _MODEL_IGNORED[key])
        elif key not in _MODEL_READ:
            raise InputError(f"unknown key model.{key} (not a megatron_gpt_config.yaml key dtsim knows)", FIELD)
    _shape(model, out)
    _training(trainer, model, out)
    _parallel(trainer, model, out)
    return out


def _get_int(section: dict, key: str, where: str) -> int | None:
    value = section.get(key)
    if value is None:
        return None
    if isinstance(value, str) and value.startswith("${"):
        raise InputError(f"{value} is an interpolation; resolve it (the launcher's --cfg job --resolve) first",
                         f"{FIELD} {where}.{key}")
    return as_int(value, f"{FIELD} {where}.{key}")


def _shape(m: dict, out: Imported) -> None:
    def req(key: str) -> int:
        value = _get_int(m, key, "model")
        if value is None:
            raise InputError("required (the model shape)", f"{FIELD} model.{key}")
        return value

    layers, hidden, heads = req("num_layers"), req("hidden_size"), req("num_attention_heads")
    out.set("model.name", "nemo-import")
    out.set("model.n_layers", layers)
    out.set("model.hidden_size", hidden)
    out.set("model.n_heads", heads)
    out.set("model.ffn_hidden_size", _get_int(m, "ffn_hidden_size", "model") or 4 * hidden)
    groups = _get_int(m, "num_query_groups", "model")
    if groups is not None and groups != heads:
        out.set("model.n_kv_heads", groups)
    kv = _get_int(m, "kv_channels", "model")
    if kv is not None and kv * heads != hidden:
        out.set("model.head_dim", kv)
    activation = str(m.get("activation", "gelu"))
    mlp = {"gelu": "gelu", "relu": "relu", "swiglu": "swiglu", "fast-swiglu": "swiglu", "geglu": "geglu",
           "fast-geglu": "geglu"}.get(activation)
    if mlp is None:
        raise InputError(f"activation {activation!r}: dtsim models gelu, relu, swiglu, fast-swiglu, geglu and "
                         "fast-geglu",
                         f"{FIELD} model.activation")
    out.set("model.mlp", mlp)
    norm = str(m.get("normalization", "layernorm")).lower()
    if norm not in ("layernorm", "rmsnorm", "layernorm1p"):
        raise InputError(f"normalization {norm!r} must be layernorm, layernorm1p or rmsnorm",
                         f"{FIELD} model.normalization")
    out.set("model.norm", "rmsnorm" if norm == "rmsnorm" else "layernorm")
    out.set("model.linear_bias", bool(m.get("bias", True)))
    out.set("model.qk_norm", bool(m.get("qk_layernorm", False)))
    if m.get("qk_layernorm"):  # Megatron-Core norms each head (q_layernorm over the head's width)
        out.set("model.qk_norm_per_head", True)
    pos = str(m.get("position_embedding_type", "learned_absolute"))
    mapping = {"learned_absolute": "learned", "rope": "rope", "alibi": "alibi", "none": "none"}
    if pos not in mapping:
        raise InputError(f"position_embedding_type {pos!r}: dtsim models {', '.join(mapping)}",
                         f"{FIELD} model.position_embedding_type")
    out.set("model.position_embedding", mapping[pos])
    max_pos = _get_int(m, "max_position_embeddings", "model") or _get_int(m, "encoder_seq_length", "model")
    if max_pos is not None:
        out.set("model.max_position_embeddings", max_pos)
    out.set("model.tied_embeddings", bool(m.get("share_embeddings_and_output_weights", True)))
    out.set("model.dropout", as_float(m.get("hidden_dropout", 0.1), f"{FIELD} model.hidden_dropout"))
    for key in ("attention_dropout", "ffn_dropout"):
        if key in m and m[key] != m.get("hidden_dropout", 0.1):
            out.ignore(f"model.{key}", "dtsim has one dropout rate for the model; hidden_dropout is used")
    if "make_vocab_size_divisible_by" in m:
        out.ignore("model.make_vocab_size_divisible_by", "the vocabulary comes from the tokenizer: "
                   "give --set model.vocab_size=N (padded)")


def _training(trainer: dict, m: dict, out: Imported) -> None:
    if "gradient_clip_val" in trainer:  # MegatronGPTModel clips by global norm when it is > 0 (null or 0: off)
        clip = trainer["gradient_clip_val"]
        out.set("training.grad_clipping", clip is not None and as_float(clip, "trainer.gradient_clip_val") > 0)
    seq = _get_int(m, "encoder_seq_length", "model")
    if seq is not None:
        out.set("training.seq_len", seq)
    for key, target in (("micro_batch_size", "micro_batch_size"), ("global_batch_size", "global_batch_size")):
        value = _get_int(m, key, "model")
        if value is not None:
            out.set(f"training.{target}", value)
    precision = str(trainer.get("precision", m.get("precision", 32)))
    if precision not in DTYPES:
        raise InputError(f"precision {precision!r} must be bf16, bf16-mixed, 16, 16-mixed or 32",
                         f"{FIELD} trainer.precision")
    out.set("training.precision", "fp8" if m.get("fp8") else DTYPES[precision])
    granularity = m.get("activations_checkpoint_granularity")
    if granularity not in (None, "selective", "full"):
        raise InputError(f"{granularity!r} must be null, selective or full",
                         f"{FIELD} model.activations_checkpoint_granularity")
    out.set("training.activation_checkpointing", granularity or "none")
    set_recompute_layers(out, granularity, m.get("activations_checkpoint_method"),
                         _get_int(m, "activations_checkpoint_num_layers", "model"),
                         "model.activations_checkpoint_method/num_layers")
    steps = _get_int(trainer, "max_steps", "trainer")
    if steps is not None and steps > 0:
        out.set("training.steps", steps)
    if trainer.get("accumulate_grad_batches", 1) != 1:
        raise InputError("must be 1 with Megatron models (NeMo derives accumulation from global_batch_size)",
                         f"{FIELD} trainer.accumulate_grad_batches")
    out.set("training.kernels.flash_attention", bool(m.get("use_flash_attention", False)))
    if "transformer_engine" in m:  # whose linears run, for their bias kernels (workload.bias)
        out.set("training.kernels.linear", "te" if m["transformer_engine"] else "megatron")


def _parallel(trainer: dict, m: dict, out: Imported) -> None:
    out.set("parallel.framework", "ddp")
    tp = _get_int(m, "tensor_model_parallel_size", "model") or 1
    pp = _get_int(m, "pipeline_model_parallel_size", "model") or 1
    cp = _get_int(m, "context_parallel_size", "model") or 1
    out.set("parallel.tp", tp)
    out.set("parallel.pp", pp)
    out.set("parallel.cp", cp)
    vp = _get_int(m, "virtual_pipeline_model_parallel_size", "model")
    if vp is not None and vp > 1:
        out.set("parallel.virtual_stages", vp)
    out.set("parallel.sequence_parallel", bool(m.get("sequence_parallel", False)))
    out.set("parallel.tp_comm_overlap", bool(m.get("ub_tp_comm_overlap", False)))
    if m.get("use_tp_pp_dp_mapping"):  # the rank order tp-cp-pp-dp (simulator.parallel.mesh)
        out.set("parallel.use_tp_pp_dp_mapping", True)
    set_wgrad_deferral(out, bool(m.get("defer_embedding_wgrad_compute", False)),
                       _get_int(m, "wgrad_deferral_limit", "model"), pp,
                       ("model.defer_embedding_wgrad_compute", "model.wgrad_deferral_limit"))
    optim = m.get("optim")
    optim = optim if isinstance(optim, dict) else {}
    name = optim.get("name")
    # distributed_fused_adam (Apex) and mcore_distributed_optim (Megatron-Core) both shard the optimizer
    distributed = name in ("distributed_fused_adam", "mcore_distributed_optim")
    out.set("parallel.distributed_optimizer", distributed)
    if distributed and optim.get("overlap_param_sync"):
        out.set("parallel.overlap_param_gather", True)
    if "overlap_grad_sync" in optim:
        # the gradient reduction overlapped with the backward (Megatron --overlap-grad-reduce), else one
        # reduction of the whole buffer after it
        out.set("parallel.overlap_grad_reduce", bool(optim["overlap_grad_sync"]))
    if "bucket_cap_mb" in optim:
        out.ignore("model.optim.bucket_cap_mb", "Megatron-Core sizes its own gradient buckets (dtsim's "
                   "parallel.bucket_cap_mb is PyTorch DDP's)")
    if set(optim) - {"name", "overlap_param_sync", "overlap_grad_sync", "bucket_cap_mb"}:
        out.ignore("model.optim (learning rate, betas, schedule, ...)", _HYPER)
    if m.get("cpu_offloading"):
        raise InputError("activation/weight CPU offloading is not modelled by dtsim; remove it",
                         f"{FIELD} model.cpu_offloading")
    devices, nodes = _get_int(trainer, "devices", "trainer"), _get_int(trainer, "num_nodes", "trainer")
    if nodes is not None:
        out.set("cluster.nodes", nodes)
    if devices is not None:
        out.world_size = devices * (nodes or 1)
