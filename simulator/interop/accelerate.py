"""Scenario → Hugging Face Accelerate config YAML (``accelerate launch --config_file``).

Keys as ``accelerate config`` writes them (Accelerate docs, "FSDP vs DeepSpeed" and the FSDP /
DeepSpeed usage guides): ``compute_environment``, ``distributed_type`` (``FSDP``, ``DEEPSPEED``,
``MULTI_GPU``), ``mixed_precision``, ``num_machines``, ``num_processes``, ``machine_rank``;
``fsdp_config``: ``fsdp_sharding_strategy``, ``fsdp_backward_prefetch``, ``fsdp_forward_prefetch``,
``fsdp_offload_params``, ``fsdp_auto_wrap_policy``, ``fsdp_state_dict_type``,
``fsdp_use_orig_params``, ``fsdp_activation_checkpointing``; ``deepspeed_config``: ``zero_stage``,
``gradient_accumulation_steps``, ``offload_optimizer_device``, ``offload_param_device``,
``zero3_init_flag``.
"""

from __future__ import annotations

import yaml

from simulator.config.scenario import Scenario
from simulator.interop.common import Exported


def export_yaml(s: Scenario) -> Exported:
    tr, par = s.training, s.parallel
    notes: list[str] = []
    per_node = s.cluster.topology.gpus_per_node
    mixed = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}.get(tr.precision, "no")
    config: dict = {"compute_environment": "LOCAL_MACHINE"}
    if par.framework == "fsdp":
        config["distributed_type"] = "FSDP"
        config["fsdp_config"] = {
            "fsdp_sharding_strategy": par.sharding_strategy.upper(),
            "fsdp_backward_prefetch": "NO_PREFETCH" if par.backward_prefetch == "none"
            else par.backward_prefetch.upper(),
            "fsdp_forward_prefetch": par.forward_prefetch,
            "fsdp_offload_params": par.offload_param != "none",
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_use_orig_params": True,
            "fsdp_activation_checkpointing": tr.activation_checkpointing != "none",
            "fsdp_version": par.fsdp_version,
        }
        if tr.activation_checkpointing in ("selective", "selective_op"):
            notes.append(f"{tr.activation_checkpointing} recomputation: Accelerate's switch checkpoints whole blocks (full)")
        if not par.fsdp_no_sync and s.grad_accum_steps > 1:
            notes.append("gradients reduced every micro-batch (parallel.fsdp_no_sync false): pass "
                         "GradientAccumulationPlugin(sync_each_batch=True), Accelerate's default skips the sync")
    elif par.framework == "deepspeed":
        config["distributed_type"] = "DEEPSPEED"
        config["deepspeed_config"] = {
            "zero_stage": par.zero_stage,
            "gradient_accumulation_steps": s.grad_accum_steps,
            "offload_optimizer_device": par.offload_optimizer,
            "offload_param_device": par.offload_param,
            "zero3_init_flag": par.zero_stage == 3,
        }
        notes.append("bucket sizes and ZeRO-3 prefetch: pass the ds_config.json of `dtsim export --to deepspeed` "
                     "as deepspeed_config.deepspeed_config_file to set them")
    else:
        config["distributed_type"] = "MULTI_GPU"
        if par.distributed_optimizer:
            notes.append("parallel.distributed_optimizer: not an Accelerate DDP option")
    if par.tp > 1 or par.pp > 1 or par.cp > 1 or par.ep > 1:
        notes.append(f"tp={par.tp}, pp={par.pp}, cp={par.cp}, ep={par.ep}: not set through this file")
    config.update(mixed_precision=mixed, num_machines=-(-s.n_gpus // per_node), num_processes=s.n_gpus,
                  machine_rank=0, main_training_function="main")
    head = [f"# Accelerate config for {s.name} (written by dtsim export): micro-batch {tr.micro_batch_size} x "
            f"{s.dp} data-parallel ranks x {s.grad_accum_steps} accumulation steps = global batch "
            f"{tr.global_batch_size}, seq_len {tr.seq_len}"]
    head += [f"# not expressed: {n}" for n in notes]
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    return Exported("\n".join(head) + "\n" + body, tuple(notes))


_STRATEGIES = {"FULL_SHARD": "full_shard", "SHARD_GRAD_OP": "shard_grad_op", "NO_SHARD": "no_shard",
               "HYBRID_SHARD": "hybrid_shard", 1: "full_shard", 2: "shard_grad_op", 3: "no_shard", 4: "hybrid_shard"}
_PREFETCH = {"BACKWARD_PRE": "backward_pre", "BACKWARD_POST": "backward_post", "NO_PREFETCH": "none"}
_IGNORED_TOP = {"compute_environment", "machine_rank", "main_training_function", "debug", "downcast_bf16",
                "rdzv_backend", "same_network", "tpu_env", "tpu_use_cluster", "tpu_use_sudo", "use_cpu", "gpu_ids",
                "main_process_ip", "main_process_port", "dynamo_config", "enable_cpu_affinity"}
_IGNORED_FSDP = {"fsdp_auto_wrap_policy", "fsdp_state_dict_type", "fsdp_use_orig_params",
                 "fsdp_cpu_ram_efficient_loading", "fsdp_sync_module_states", "fsdp_transformer_layer_cls_to_wrap",
                 "fsdp_min_num_params"}
_IGNORED_DS = {"zero3_init_flag", "zero3_save_16bit_model", "deepspeed_multinode_launcher"}


def import_yaml(text: str):
    """Accelerate config YAML → scenario fragment (the batch and model come from elsewhere)."""
    from simulator.config.yamlio import parse_yaml
    from simulator.errors import InputError
    from simulator.interop.common import Imported, as_float, as_int

    field = "accelerate"
    doc = parse_yaml(text, "the Accelerate config", field)  # one line for malformed YAML or a key given twice
    if not isinstance(doc, dict) or "distributed_type" not in doc:
        raise InputError("an Accelerate config is a mapping with distributed_type", field)
    out = Imported()
    read = {"distributed_type", "mixed_precision", "num_machines", "num_processes", "fsdp_config",
            "deepspeed_config"}
    for key in doc:
        if key in _IGNORED_TOP:
            out.ignore(key, "launcher setting: no effect on the simulated step")
        elif key not in read:
            raise InputError(f"unknown Accelerate config key {key!r}", field)
    kind = doc["distributed_type"]
    mixed = str(doc.get("mixed_precision", "no"))
    precision = {"no": "fp32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8"}.get(mixed)
    if precision is None:
        raise InputError(f"mixed_precision {mixed!r} must be no, fp16, bf16 or fp8", f"{field} mixed_precision")
    out.set("training.precision", precision)
    if kind == "FSDP":
        fsdp = doc.get("fsdp_config") or {}
        out.set("parallel.framework", "fsdp")
        # Accelerate's accumulate() skips the gradient sync on all but the last micro-batch unless the
        # script asks for GradientAccumulationPlugin(sync_each_batch=True); the config file cannot say
        out.set("parallel.fsdp_no_sync", True)
        for key, value in fsdp.items():
            if key in _IGNORED_FSDP:
                out.ignore(f"fsdp_config.{key}", "wrapping, state-dict or initialisation setting")
            elif key == "fsdp_sharding_strategy":
                if value not in _STRATEGIES:
                    raise InputError(f"{value!r} must be FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD",
                                     f"{field} fsdp_config.{key}")
                out.set("parallel.sharding_strategy", _STRATEGIES[value])
            elif key in ("fsdp_backward_prefetch", "fsdp_backward_prefetch_policy"):
                if value not in _PREFETCH:
                    raise InputError(f"{value!r} must be BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH",
                                     f"{field} fsdp_config.{key}")
                out.set("parallel.backward_prefetch", _PREFETCH[value])
            elif key == "fsdp_version":
                if value not in (1, 2):
                    raise InputError(f"{value!r} must be 1 (FullyShardedDataParallel) or 2 (fully_shard)",
                                     f"{field} fsdp_config.{key}")
                out.set("parallel.fsdp_version", value)
            elif key == "fsdp_forward_prefetch":
                out.set("parallel.forward_prefetch", bool(value))
            elif key == "fsdp_reshard_after_forward":
                out.set("parallel.sharding_strategy", "full_shard" if value else "shard_grad_op")
            elif key in ("fsdp_offload_params", "fsdp_cpu_offload"):
                if value:
                    raise InputError("FSDP CPU offload is not modelled by dtsim; remove it or use DeepSpeed offload",
                                     f"{field} fsdp_config.{key}")
            elif key == "fsdp_activation_checkpointing":
                out.set("training.activation_checkpointing", "full" if value else "none")
            else:
                raise InputError(f"unknown key fsdp_config.{key}", field)
    elif kind == "DEEPSPEED":
        ds = doc.get("deepspeed_config") or {}
        out.set("parallel.framework", "deepspeed")
        for key, value in ds.items():
            if key in _IGNORED_DS:
                out.ignore(f"deepspeed_config.{key}", "no effect on the simulated step")
            elif key == "zero_stage":
                out.set("parallel.zero_stage", as_int(value, f"{field} deepspeed_config.zero_stage"))
            elif key == "gradient_clipping":  # DeepSpeed clips when > 0 (its default 0.0 does not)
                out.set("training.grad_clipping", as_float(value, f"{field} deepspeed_config.gradient_clipping") > 0)
            elif key == "gradient_accumulation_steps":
                out.accumulation = as_int(value, f"{field} deepspeed_config.gradient_accumulation_steps")
            elif key in ("offload_optimizer_device", "offload_param_device"):
                target = key.removesuffix("_device")
                out.set(f"parallel.{target}", str(value))
            elif key == "deepspeed_config_file":
                raise InputError("the DeepSpeed settings are in a ds_config.json: import that file with "
                                 "dtsim import deepspeed", f"{field} deepspeed_config.deepspeed_config_file")
            else:
                raise InputError(f"unknown key deepspeed_config.{key}", field)
    elif kind in ("MULTI_GPU", "NO"):
        out.set("parallel.framework", "ddp")
    else:
        raise InputError(f"distributed_type {kind!r}: dtsim models FSDP, DEEPSPEED and MULTI_GPU (DDP)",
                         f"{field} distributed_type")
    if "num_machines" in doc:
        out.set("cluster.nodes", as_int(doc["num_machines"], f"{field} num_machines"))
    if "num_processes" in doc:
        out.world_size = as_int(doc["num_processes"], f"{field} num_processes")
    return out
