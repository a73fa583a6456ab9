"""DeepSpeed ``ds_config.json`` ⇄ scenario.

Import is ``simulator.config.deepspeed_import.apply_deepspeed_config`` (the ``dtsim run --deepspeed``
path), wrapped to the importer interface. Export writes the keys of DeepSpeed's configuration
reference (https://www.deepspeed.ai/docs/config-json/): ``train_batch_size``,
``train_micro_batch_size_per_gpu``, ``gradient_accumulation_steps``, ``bf16``/``fp16``
``{"enabled": ...}``, ``communication_data_type`` and the ``zero_optimization`` block (``stage``,
``reduce_bucket_size``, ``allgather_bucket_size``, ``overlap_comm``, ``contiguous_gradients``,
``stage3_prefetch_bucket_size``, ``stage3_max_live_parameters``,
``stage3_param_persistence_threshold``, ``offload_optimizer``/``offload_param`` ``{"device": ...}``,
ZeRO++ ``zero_quantized_weights``, ``zero_quantized_gradients``, ``zero_hpz_partition_size``).
DeepSpeed's ``train_batch_size = micro × accumulation × dp``.
"""

from __future__ import annotations

import json
from pathlib import Path

from simulator.config.deepspeed_import import apply_deepspeed_config
from simulator.config.scenario import Scenario
from simulator.interop.common import Exported, Imported


def import_config(raw_scenario: dict, path: str | Path) -> Imported:
    """Apply ``path`` to a resolved raw scenario (the GPU count must be known for the batch)."""
    raw, warnings = apply_deepspeed_config(raw_scenario, path)
    raw.get("parallel", {}).pop("deepspeed_config", None)  # the scenario written stands alone
    out = Imported(raw=raw)
    reasons = {"keys not modelled by dtsim (ignored): ": "not modelled by dtsim (no effect on the simulated step)",
               "'auto' values kept at scenario values: ": "'auto': the scenario's value is kept"}
    for line in warnings:
        message = line.split(": ", 1)[-1]
        for prefix, reason in reasons.items():
            if message.startswith(prefix):
                for key in message.removeprefix(prefix).split(", "):
                    out.ignore(key, reason)
    return out


def export_config(s: Scenario) -> Exported:
    """The ``ds_config.json`` for ``s`` (ZeRO stage from the scenario's sharding, whatever its framework)."""
    tr, par = s.training, s.parallel
    notes: list[str] = []
    stage = par.effective_zero_stage
    zero: dict = {"stage": stage}
    if par.framework == "deepspeed":
        zero.update(reduce_bucket_size=int(par.reduce_bucket_size), allgather_bucket_size=int(par.allgather_bucket_size),
                    overlap_comm=par.effective_overlap_comm, contiguous_gradients=par.contiguous_gradients)
        if stage == 3:
            zero.update(stage3_prefetch_bucket_size=int(par.stage3_prefetch_bucket_size),
                        stage3_max_live_parameters=int(par.stage3_max_live_parameters),
                        stage3_max_reuse_distance=int(par.stage3_max_reuse_distance),
                        stage3_param_persistence_threshold=int(par.stage3_param_persistence_threshold))
        if par.zero_quantized_weights:
            zero["zero_quantized_weights"] = True
        if par.zero_quantized_gradients:
            zero["zero_quantized_gradients"] = True
        if par.zero_hpz_partition_size > 1:
            zero["zero_hpz_partition_size"] = par.zero_hpz_partition_size
        if par.onebit_adam:
            notes.append("parallel.onebit_adam: set optimizer {type: OneBitAdam} yourself")
    else:
        notes.append(f"{par.framework} settings mapped to ZeRO-{stage} with DeepSpeed's default buckets")
    if par.offload_optimizer != "none":
        zero["offload_optimizer"] = {"device": par.offload_optimizer}
    if par.offload_param != "none":
        zero["offload_param"] = {"device": par.offload_param}
    config: dict = {
        "train_batch_size": tr.global_batch_size,
        "train_micro_batch_size_per_gpu": tr.micro_batch_size,
        "gradient_accumulation_steps": s.grad_accum_steps,
    }
    if tr.grad_clipping:  # DeepSpeed's default 0.0 does not clip
        config["gradient_clipping"] = 1.0
    if tr.precision in ("bf16", "fp16"):
        config[tr.precision] = {"enabled": True}
    elif tr.precision == "fp8":
        config["bf16"] = {"enabled": True}
        notes.append("training.precision fp8: DeepSpeed has no FP8 switch (use Transformer Engine); bf16 written")
    if par.framework == "deepspeed" and par.communication_data_type:
        config["communication_data_type"] = par.communication_data_type
    config["zero_optimization"] = zero
    if par.tp > 1 or par.pp > 1 or par.cp > 1 or par.ep > 1:
        notes.append(f"tp={par.tp}, pp={par.pp}, cp={par.cp}, ep={par.ep}: model parallelism is set in the training script "
                     "(Megatron-DeepSpeed flags), not in ds_config")
    if tr.activation_checkpointing != "none":
        notes.append(f"activation checkpointing ({tr.activation_checkpointing}) is enabled in the model code "
                     "(e.g. gradient_checkpointing_enable), not in ds_config")
    return Exported(json.dumps(config, indent=2) + "\n", tuple(notes))
