"""Scenario → torchtitan job config (TOML) (the file ``torchtitan.import_toml`` reads back; section and
key names as documented in ``simulator.interop.torchtitan``)."""

from __future__ import annotations

from typing import Any

from simulator.config.scenario import TORCHAO_RECIPES, Scenario
from simulator.interop.common import TORCH_DTYPE, Exported
from simulator.interop.torchtitan import FLAVORS, SCHEDULES


def _flavor(s: Scenario) -> tuple[str, str] | None:
    """The torchtitan (name, flavor) whose catalog shape equals the scenario's model, if any."""
    from simulator import catalog

    shape = ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "ffn_hidden_size", "vocab_size", "mlp")
    for key, name in FLAVORS.items():
        ref = catalog.get_model(name)
        if all(getattr(ref, k) == getattr(s.model, k) for k in shape):
            return key
    return None


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def export_toml(s: Scenario) -> Exported:
    """The torchtitan job config for ``s``."""
    tr, par, m = s.training, s.parallel, s.model
    notes: list[str] = []
    dp = s.n_gpus // (par.tp * par.pp * par.cp)
    sections: dict[str, dict[str, Any]] = {"job": {"description": s.name}}
    flavor = _flavor(s)
    if flavor is None:
        notes.append(f"model {m.name}: no torchtitan flavor has this shape; register one (n_layers={m.n_layers}, "
                     f"dim={m.hidden_size}, n_heads={m.n_heads}, n_kv_heads={m.kv_heads}, "
                     f"vocab_size={m.vocab_size}) and set [model] flavor")
        sections["model"] = {"name": "llama3"}
    else:
        sections["model"] = {"name": flavor[0], "flavor": flavor[1]}
    if tr.precision == "fp8" and tr.kernels.fp8_recipe == "mxfp8":
        sections["model"]["converters"] = ["mx"]
        sections["mx"] = {"recipe_name": "mxfp8_cublas"}
    elif tr.precision == "fp8":
        sections["model"]["converters"] = ["float8"]
        recipe = tr.kernels.fp8_recipe
        sections["float8"] = {"recipe_name": recipe if recipe in TORCHAO_RECIPES else "tensorwise"}
        if recipe not in TORCHAO_RECIPES:
            notes.append(f"training.kernels.fp8_recipe {tr.kernels.fp8_recipe}: torchtitan's float8 is torchao's, "
                         "written as tensorwise scaling")
        if par.fp8_param_gather:
            sections["float8"]["enable_fsdp_float8_all_gather"] = True
    if not tr.kernels.compile and tr.kernels.fused_norm_residual:
        notes.append("training.kernels.fused_norm_residual without compile: torchtitan's eager RMSNorm is unfused "
                     "PyTorch code (its Triton norm_type fused_rmsnorm is not in every version); enable [compile]")
    training: dict[str, Any] = {}
    if par.pp > 1:
        training["local_batch_size"] = tr.global_batch_size // dp
    else:
        training["local_batch_size"] = tr.micro_batch_size
    training["global_batch_size"] = tr.global_batch_size
    training["seq_len"] = tr.seq_len
    if tr.steps is not None:
        training["steps"] = tr.steps
    elif tr.total_tokens is not None:
        training["steps"] = int(-(-tr.total_tokens // s.tokens_per_step))
    if tr.precision in ("fp16", "tf32"):
        notes.append(f"training.precision {tr.precision}: torchtitan trains in bfloat16 or float32")
    training["mixed_precision_param"] = "float32" if tr.precision in ("fp32", "tf32") else "bfloat16"
    parallelism: dict[str, Any] = {}
    if par.framework == "fsdp" and par.fsdp_no_sync and s.grad_accum_steps > 1 and par.pp == 1:
        notes.append("parallel.fsdp_no_sync: torchtitan reduce-scatters after every micro-batch")
    if par.framework == "ddp":
        parallelism.update(data_parallel_replicate_degree=dp, data_parallel_shard_degree=1)
        if par.distributed_optimizer:
            notes.append("parallel.distributed_optimizer: torchtitan has no sharded-optimizer DDP")
    elif par.framework == "fsdp" and par.sharding_strategy == "hybrid_shard":
        shard = max(1, min(dp, s.cluster.topology.gpus_per_node // (par.tp * par.cp)))
        while dp % shard:
            shard -= 1
        parallelism.update(data_parallel_replicate_degree=dp // shard, data_parallel_shard_degree=shard)
    else:
        parallelism.update(data_parallel_replicate_degree=1, data_parallel_shard_degree=dp)
        if par.framework == "deepspeed":
            notes.append(f"DeepSpeed ZeRO-{par.zero_stage}: exported as FSDP2 "
                         + ("full sharding" if par.zero_stage == 3 else "(reshard_after_forward never)"))
    if par.framework == "fsdp":
        training["mixed_precision_reduce"] = TORCH_DTYPE[par.reduce_dtype or "fp32"]
    reshard = None
    if par.framework == "fsdp" and par.sharding_strategy == "shard_grad_op" or \
            par.framework == "deepspeed" and par.zero_stage in (1, 2):
        reshard = "never"
    elif par.framework == "fsdp" and par.reshard_after_forward and par.pp > 1:
        reshard = "always"
    if reshard:
        parallelism["fsdp_reshard_after_forward"] = reshard
    parallelism["tensor_parallel_degree"] = par.tp
    if par.tp_comm_overlap:
        parallelism["enable_async_tensor_parallel"] = True
    parallelism["pipeline_parallel_degree"] = par.pp
    if par.pp > 1:
        schedule = {v: k for k, v in SCHEDULES.items()}[par.pipeline_schedule]
        parallelism["pipeline_parallel_schedule"] = schedule
        parallelism["pipeline_parallel_microbatch_size"] = tr.micro_batch_size
        if par.virtual_stages not in (1, 2):
            notes.append(f"parallel.virtual_stages {par.virtual_stages}: torchtitan's Interleaved1F1B default "
                         "is 2 stages per rank; set pipeline_parallel_layers_per_stage")
    parallelism["context_parallel_degree"] = par.cp
    if not tr.grad_clipping:
        notes.append("training.grad_clipping false: torchtitan clips by global norm every step (max_norm)")
    if par.ep > 1:
        notes.append(f"parallel.ep={par.ep}: torchtitan's expert_parallel_degree not written (MoE flavors are not "
                     "mapped by this export)")
    if par.offload_optimizer != "none" or par.offload_param != "none":
        notes.append("offload: not exported (torchtitan's enable_cpu_offload offloads everything)")
    sections["training"] = training
    sections["parallelism"] = parallelism
    if tr.activation_checkpointing == "selective_op":
        sections["activation_checkpoint"] = {"mode": "selective", "selective_ac_option": "op"}
    elif tr.activation_checkpointing == "full" and tr.recompute_layers is not None:
        per_stage = s.model.n_layers // par.pp
        k = max(1, per_stage // tr.recompute_layers)
        if per_stage // k != tr.recompute_layers:
            notes.append(f"training.recompute_layers {tr.recompute_layers}: torchtitan checkpoints every k-th block; "
                         f"every {k}-th gives {per_stage // k} of {per_stage}")
        sections["activation_checkpoint"] = {"mode": "selective", "selective_ac_option": str(k)}
    elif tr.activation_checkpointing == "selective":
        # Megatron's attention-core recomputation has no torchtitan policy (its "selective" is per-layer
        # or op-level); with FlashAttention it keeps what no recomputation keeps, less the log-sum-exp
        notes.append("training.activation_checkpointing selective (attention core): no torchtitan policy; "
                     "written as none")
        sections["activation_checkpoint"] = {"mode": "none"}
    else:
        sections["activation_checkpoint"] = {"mode": tr.activation_checkpointing}
    if tr.kernels.compile:
        components = ["model", "loss"] if tr.kernels.cross_entropy == "compiled" else ["model"]
        sections["compile"] = {"enable": True, "components": components}
    lines = [f"# torchtitan job config for {s.name} (written by dtsim export); add [optimizer], [checkpoint], "
             "dataset and tokenizer settings"]
    lines += [f"# not expressed: {n}" for n in notes]
    for name, body in sections.items():
        lines.append(f"\n[{name}]")
        for key, value in body.items():
            rendered = "[" + ", ".join(_toml_value(v) for v in value) + "]" if isinstance(value, list) \
                else _toml_value(value)
            lines.append(f"{key} = {rendered}")
    return Exported("\n".join(lines) + "\n", tuple(notes))
