"""torchtitan job config (TOML) ⇄ scenario.

Section and key names are torchtitan's (``torchtitan/config/job_config.py`` and the bundled
``torchtitan/models/llama3/train_configs/*.toml``): ``[model] name, flavor``; ``[training]
local_batch_size`` (``batch_size`` before 2025), ``global_batch_size`` (−1: local × dp),
``seq_len``, ``steps``, ``mixed_precision_param``, ``mixed_precision_reduce``, ``enable_cpu_offload``;
``[parallelism] data_parallel_replicate_degree``, ``data_parallel_shard_degree`` (−1: the rest),
``fsdp_reshard_after_forward`` (``default`` / ``always`` / ``never``), ``tensor_parallel_degree``,
``enable_async_tensor_parallel``, ``pipeline_parallel_degree``, ``pipeline_parallel_schedule``,
``pipeline_parallel_microbatch_size``, ``context_parallel_degree``; ``[activation_checkpoint] mode``
(``none`` / ``selective`` / ``full``; ``selective`` with ``selective_ac_option = "op"`` is
``selective_op``, with an integer ``k`` full checkpointing of every ``k``-th block,
``training.recompute_layers``); ``[float8]`` / ``[model] converters = ["float8"]`` (today's
``["quantize.linear.float8"]`` with ``[quantize.linear.float8]``), its ``recipe_name`` (torchao
tensorwise or rowwise: ``training.kernels.fp8_recipe``) and ``enable_fsdp_float8_all_gather``
(``parallel.fp8_param_gather``); ``"mx"`` / ``"quantize.linear.mx"`` (MXFP8); ``[compile] enable`` and
``components`` (``training.kernels.compile``, the loss compiled), and without compile the eager RMSNorm
(``training.kernels.fused_norm_residual: false`` unless ``[model] norm_type = "fused_rmsnorm"``).
torchtitan applies FSDP2 (``fully_shard``): dtsim framework ``fsdp``; replicate × shard > 1 with
both > 1 is HSDP (``hybrid_shard``), shard 1 with replicate > 1 is DDP (``ddp``). Its tensor
parallelism always runs the norms sequence-parallel (``parallel.sequence_parallel`` with ``tp > 1``).
"""

from __future__ import annotations

import tomllib
from typing import Any

from simulator.errors import InputError
from simulator.interop.common import DTYPES, Imported, as_int

FIELD = "torchtitan"

#: torchtitan (model name, flavor) → dtsim catalog model (torchtitan's llama3 flavors are Llama 3.1).
FLAVORS = {("llama3", "8B"): "llama-3.1-8b", ("llama3", "70B"): "llama-3.1-70b", ("llama3", "405B"): "llama-3.1-405b",
           ("llama2", "7B"): "llama-2-7b", ("llama2", "13B"): "llama-2-13b", ("llama2", "70B"): "llama-2-70b"}
#: Sections with no effect on a simulated step, with the reason.
IGNORED_SECTIONS = {
    "job": "job metadata", "profiling": "profiler settings", "metrics": "logging", "optimizer":
    "optimizer hyper-parameters: no effect on step time", "lr_scheduler": "learning-rate schedule",
    "checkpoint": "checkpointing: dtsim models it in reliability.checkpoint", "comm": "timeouts",
    "validation": "evaluation: outside the training step", "fault_tolerance": "fault tolerance settings",
    "memory_estimation": "torchtitan's own estimator", "experimental": "experimental switches",
}
SCHEDULES = {"1F1B": "1f1b", "GPipe": "gpipe", "Interleaved1F1B": "interleaved"}
_READ = {
    "model": {"name", "flavor", "converters", "tokenizer_path", "hf_assets_path", "norm_type"},
    "training": {"local_batch_size", "batch_size", "global_batch_size", "seq_len", "steps", "mixed_precision_param",
                 "mixed_precision_reduce", "enable_cpu_offload", "max_norm", "dataset", "dataset_path", "gc_freq",
                 "seed", "deterministic", "compile", "warmup_steps",
                 # before 2025 the parallel degrees lived in [training]
                 "data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
                 "enable_async_tensor_parallel", "enable_float8_linear", "enable_compiled_autograd"},
    "parallelism": {"data_parallel_replicate_degree", "data_parallel_shard_degree", "fsdp_reshard_after_forward",
                    "tensor_parallel_degree", "enable_async_tensor_parallel", "pipeline_parallel_degree",
                    "pipeline_parallel_schedule", "pipeline_parallel_microbatch_size", "context_parallel_degree",
                    "pipeline_parallel_split_points", "pipeline_parallel_layers_per_stage", "disable_loss_parallel",
                    "enable_compiled_autograd", "context_parallel_rotate_method", "expert_parallel_degree"},
    "activation_checkpoint": {"mode", "selective_ac_option"},
    "compile": {"enable", "components", "backend"},
    "mx": {"recipe_name", "filter_fqns", "use_fp8_dim1_cast_triton_kernel", "mxfp8_dim1_cast_kernel_choice"},
    "float8": {"enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp", "filter_fqns",
               "recipe_name", "emulate", "force_recompute_fp8_weight_in_bwd", "enable_float8_linear"},
}
_KEY_REASONS = {
    "tokenizer_path": "tokenizer", "hf_assets_path": "tokenizer and weights", "max_norm": "gradient clipping",
    "dataset": "data", "dataset_path": "data", "gc_freq": "Python GC", "seed": "seed", "deterministic":
    "determinism flags", "warmup_steps": "LR warm-up", "backend": "torch.compile backend (inductor assumed)",
    "pipeline_parallel_split_points": "dtsim splits layers evenly (embedding first, logits last)",
    "disable_loss_parallel": "loss parallelism is not modelled", "enable_compiled_autograd": "compiled autograd",
    "context_parallel_rotate_method": "ring rotation method: dtsim models all-gather-free ring attention",
    "precompute_float8_dynamic_scale_for_fsdp": "float8 scale detail", "filter_fqns": "float8 module filter",
    "emulate": "float8 emulation", "force_recompute_fp8_weight_in_bwd":
    "float8 detail", "expert_parallel_degree": "MoE expert parallelism: dense models only here",
    "use_fp8_dim1_cast_triton_kernel": "MX cast kernel choice", "mxfp8_dim1_cast_kernel_choice": "MX cast kernel choice",
}
#: torchao float8 ``recipe_name`` → ``training.kernels.fp8_recipe`` (``rowwise_with_gw_hp``: rowwise, its
#: weight-gradient GEMM in high precision, priced as rowwise).
FLOAT8_RECIPES = {"tensorwise": "tensorwise", "rowwise": "rowwise", "rowwise_with_gw_hp": "rowwise"}
#: The converter names that turn on float8 or MX linears (``[model] converters``; torchtitan renamed
#: them ``quantize.linear.*`` with the ``[quantize.linear.float8]`` / ``[quantize.linear.mx]`` sections).
FLOAT8_CONVERTERS = ("float8", "quantize.linear.float8")
MX_CONVERTERS = ("mx", "quantize.linear.mx")


def _parse(text: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"not valid TOML: {exc}", FIELD) from None


def import_toml(text: str) -> Imported:
    """torchtitan TOML text → scenario fragment + ignored keys. ``Imported.world_size`` is the product
    of the parallel degrees when none is −1; ``batch_per_dp_rank`` stands for the global batch when
    ``global_batch_size`` is −1 or absent (the GPU count decides it)."""
    doc = _parse(text)
    out = Imported()
    quantize = doc.pop("quantize", None)
    if quantize is not None:  # [quantize.linear.float8] / [quantize.linear.mx]: today's names of [float8] / [mx]
        linear = quantize.get("linear") if isinstance(quantize, dict) else None
        if not isinstance(linear, dict) or set(quantize) - {"linear"} or set(linear) - {"float8", "mx"}:
            raise InputError("[quantize] must hold [quantize.linear.float8] or [quantize.linear.mx] only", FIELD)
        for kind, body in linear.items():
            doc[kind] = {**doc.get(kind, {}), **body}
    for section, body in doc.items():
        if section in IGNORED_SECTIONS:
            out.ignore(f"[{section}]", IGNORED_SECTIONS[section])
            continue
        if section not in _READ:
            raise InputError(f"unknown torchtitan section [{section}]; dtsim reads [{'], ['.join(_READ)}] and "
                             f"ignores [{'], ['.join(IGNORED_SECTIONS)}]", FIELD)
        if not isinstance(body, dict):
            raise InputError(f"{section} must be a table", FIELD)
        for key in body:
            if key not in _READ[section]:
                raise InputError(f"unknown key {key} in [{section}]; known: {', '.join(sorted(_READ[section]))}",
                                 f"{FIELD} {section}.{key}")
            if key in _KEY_REASONS:
                out.ignore(f"{section}.{key}", _KEY_REASONS[key])
    tr = doc.get("training", {})
    par = {**{k: v for k, v in tr.items() if k in _READ["parallelism"]}, **doc.get("parallelism", {})}
    _model(doc.get("model", {}), tr, doc.get("float8", {}), doc.get("mx", {}), out)
    _kernels(doc.get("model", {}), tr, doc.get("compile", {}), out)
    _parallel(par, tr, out)
    _batch(tr, par, out)
    ac_section = doc.get("activation_checkpoint", {})
    ac = ac_section.get("mode", "none")
    if ac not in ("none", "selective", "full"):
        raise InputError(f"activation_checkpoint.mode {ac!r} must be none, selective or full", FIELD)
    # torchtitan's default option is "2" (job_config.py ActivationCheckpoint: every 2nd block)
    option = str(ac_section.get("selective_ac_option", "2"))
    if ac == "selective" and option == "op":
        ac = "selective_op"  # torchtitan's op-level policy (simulator.workload.op_sac)
    elif ac == "selective" and option.isdigit():
        ac = "full"  # per-layer: every k-th block fully checkpointed (_apply_ac_to_transformer_block)
        _every_kth_block(int(option), out)
    out.set("training.activation_checkpointing", ac)
    return out


def _every_kth_block(k: int, out: Imported) -> None:
    """torchtitan's per-layer selective checkpointing wraps every ``k``-th block of a rank in a full
    checkpoint (a counter over the rank's blocks): ``⌊L_rank / k⌋`` of them, ``training.recompute_layers``."""
    if k < 1:
        raise InputError(f"activation_checkpoint.selective_ac_option {k} must be >= 1 (or 'op')", FIELD)
    if k == 1:
        return  # every block
    model = out.get("model")
    if not isinstance(model, str):
        out.ignore(f"activation_checkpoint.selective_ac_option {k}",
                   "every k-th block needs the model's layer count: every block recomputes; give --set "
                   "training.recompute_layers=N (N = layers per pipeline stage / k)")
        return
    from simulator import catalog

    per_stage = catalog.get_model(model).n_layers // (out.get("parallel.pp") or 1)
    out.set("training.recompute_layers", max(1, per_stage // k))


def _kernels(model: dict, tr: dict, compile_: dict, out: Imported) -> None:
    """torch.compile (``[compile] enable``, ``components`` with ``loss``; ``training.compile`` before
    2025) as ``training.kernels.compile`` and the compiled loss; eager torchtitan runs its RMSNorm as
    PyTorch code (``norm_type = "rmsnorm"``; ``fused_rmsnorm`` is its Triton kernel), which dtsim costs as
    unfused norms, as the validation corpus's eager torchtitan rows are."""
    on = bool(compile_.get("enable", tr.get("compile", False)))
    if on:
        out.set("training.kernels.compile", True)
        if "loss" in (compile_.get("components") or ["model", "loss"]):
            out.set("training.kernels.cross_entropy", "compiled")
    elif model.get("norm_type", "rmsnorm") != "fused_rmsnorm":
        out.set("training.kernels.fused_norm_residual", False)


def _model(model: dict, tr: dict, float8: dict, mx: dict, out: Imported) -> None:
    name, flavor = model.get("name"), model.get("flavor")
    if (name, flavor) in FLAVORS:
        out.set("model", FLAVORS[(name, flavor)])
    elif name is not None or flavor is not None:
        out.ignore(f"model.name/flavor {name}/{flavor}", "not in dtsim's catalog: give --model NAME or a config.json")
    precision = DTYPES.get(str(tr.get("mixed_precision_param", "bfloat16")))
    if precision is None:
        raise InputError(f"training.mixed_precision_param {tr['mixed_precision_param']!r} must be bfloat16 or float32",
                         FIELD)
    converters = model.get("converters") or []
    fp8 = any(c in converters for c in FLOAT8_CONVERTERS) or tr.get("enable_float8_linear") \
        or float8.get("enable_float8_linear")
    mxfp8 = any(c in converters for c in MX_CONVERTERS)
    out.set("training.precision", "fp8" if fp8 or mxfp8 else precision)
    if mxfp8:  # torchao's MX linears: MXFP8 GEMMs (Blackwell)
        out.set("training.kernels.fp8_recipe", "mxfp8")
        if mx.get("recipe_name"):
            out.ignore("mx.recipe_name", f"{mx['recipe_name']}: priced as Blackwell MXFP8 GEMMs")
    elif fp8:  # torchao float8 linears, tensorwise unless the recipe says otherwise
        recipe = str(float8.get("recipe_name") or "tensorwise")
        if recipe not in FLOAT8_RECIPES:
            raise InputError(f"float8 recipe_name {recipe!r} must be one of {', '.join(FLOAT8_RECIPES)}", FIELD)
        out.set("training.kernels.fp8_recipe", FLOAT8_RECIPES[recipe])
        if float8.get("enable_fsdp_float8_all_gather"):
            out.set("parallel.fp8_param_gather", True)  # FSDP2 gathers the Float8Linear weights in float8


def _degree(par: dict, key: str, default: int) -> int:
    value = as_int(par.get(key, default), f"{FIELD} parallelism.{key}")
    if value < 1 and not (key == "data_parallel_shard_degree" and value == -1):
        raise InputError(f"must be >= 1 (or -1 for data_parallel_shard_degree), got {value}",
                         f"{FIELD} parallelism.{key}")
    return value


def _parallel(par: dict, tr: dict, out: Imported) -> None:
    replicate = _degree(par, "data_parallel_replicate_degree", 1)
    shard = _degree(par, "data_parallel_shard_degree", -1)
    tp, pp, cp = (_degree(par, k, 1) for k in ("tensor_parallel_degree", "pipeline_parallel_degree",
                                                "context_parallel_degree"))
    out.set("parallel.tp", tp)
    if tp > 1:
        # torchtitan's tensor-parallel plan always shards the norms and the residual stream over the
        # sequence (apply_tp: "attention_norm"/"ffn_norm" SequenceParallel(), the linears' inputs
        # Shard(1)); it has no switch to turn that off.
        out.set("parallel.sequence_parallel", True)
    out.set("parallel.pp", pp)
    out.set("parallel.cp", cp)
    if shard != -1:
        out.world_size = replicate * shard * tp * pp * cp
    if shard == 1 and replicate > 1:
        out.set("parallel.framework", "ddp")
        out.set("parallel.no_sync", True)
    else:
        out.set("parallel.framework", "fsdp")
        out.set("parallel.fsdp_version", 2)  # torchtitan's fully_shard
        strategy = "hybrid_shard" if replicate > 1 else "full_shard"
        reshard = par.get("fsdp_reshard_after_forward", "default")
        if reshard not in ("default", "always", "never"):
            raise InputError(f"parallelism.fsdp_reshard_after_forward {reshard!r} must be default, always or never",
                             FIELD)
        if reshard == "never" and strategy == "full_shard":
            strategy = "shard_grad_op"
        elif reshard == "always" and pp > 1:
            out.set("parallel.reshard_after_forward", True)
        if strategy == "hybrid_shard":
            out.ignore("parallelism.data_parallel_shard_degree",
                       "dtsim's HYBRID_SHARD shards over one node's data-parallel ranks")
        out.set("parallel.sharding_strategy", strategy)
        reduce = DTYPES.get(str(tr.get("mixed_precision_reduce", "float32")))
        if reduce is None:
            raise InputError(f"training.mixed_precision_reduce {tr['mixed_precision_reduce']!r} must be float32 "
                             "or bfloat16", FIELD)
        out.set("parallel.reduce_dtype", reduce)
    if tr.get("enable_cpu_offload"):
        raise InputError("training.enable_cpu_offload: dtsim does not model FSDP2 CPU offload; remove it, or "
                         "use a DeepSpeed scenario with offload_param: cpu", FIELD)
    out.set("parallel.tp_comm_overlap", bool(par.get("enable_async_tensor_parallel", False)))
    if pp > 1:
        schedule = par.get("pipeline_parallel_schedule", "1F1B")
        if schedule not in SCHEDULES:
            raise InputError(f"parallelism.pipeline_parallel_schedule {schedule!r}: dtsim models "
                             f"{', '.join(SCHEDULES)}", FIELD)
        out.set("parallel.pipeline_schedule", SCHEDULES[schedule])
        if schedule == "Interleaved1F1B":
            # torchtitan's looped schedules default to 2 stages per rank.
            out.set("parallel.virtual_stages", 2)
            if "pipeline_parallel_layers_per_stage" in par:
                out.ignore("parallelism.pipeline_parallel_layers_per_stage",
                           "dtsim keeps torchtitan's default of 2 virtual stages per rank; set parallel.virtual_stages")


def _batch(tr: dict, par: dict, out: Imported) -> None:
    local = tr.get("local_batch_size", tr.get("batch_size"))
    if "local_batch_size" in tr and "batch_size" in tr:
        raise InputError("training.batch_size and training.local_batch_size both given; keep local_batch_size", FIELD)
    if "seq_len" in tr:
        out.set("training.seq_len", as_int(tr["seq_len"], f"{FIELD} training.seq_len"))
    pp = as_int(par.get("pipeline_parallel_degree", 1), FIELD)
    micro = par.get("pipeline_parallel_microbatch_size", 1) if pp > 1 else local
    if micro is not None:
        out.set("training.micro_batch_size", as_int(micro, f"{FIELD} training.local_batch_size"))
    glob = as_int(tr.get("global_batch_size", -1), f"{FIELD} training.global_batch_size")
    if glob > 0:
        out.set("training.global_batch_size", glob)
    elif local is not None:
        out.batch_per_dp_rank = as_int(local, f"{FIELD} training.local_batch_size")
    if "steps" in tr:
        out.set("training.steps", as_int(tr["steps"], f"{FIELD} training.steps"))
