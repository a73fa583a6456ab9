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
        }
        if tr.activation_checkpointing == "selective":
            notes.append("selective recomputation: Accelerate's switch checkpoints whole blocks (full)")
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
    if par.tp > 1 or par.pp > 1 or par.cp > 1:
        notes.append(f"tp={par.tp}, pp={par.pp}, cp={par.cp}: not set through this file")
    config.update(mixed_precision=mixed, num_machines=-(-s.n_gpus // per_node), num_processes=s.n_gpus,
                  machine_rank=0, main_training_function="main")
    head = [f"# Accelerate config for {s.name} (written by dtsim export): micro-batch {tr.micro_batch_size} per GPU, "
            f"{s.grad_accum_steps} accumulation steps, seq_len {tr.seq_len}"]
    head += [f"# not expressed: {n}" for n in notes]
    body = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    return Exported("\n".join(head) + "\n" + body, tuple(notes))
