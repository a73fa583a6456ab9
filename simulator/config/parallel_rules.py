"""Cross-field checks of a ``parallel`` section: the pipeline schedule, virtual stages and layout, and
Megatron's distributed optimizer with what depends on it (parameter gather, precision-aware optimizer).
``ParallelConfig`` runs them after its own field checks; the checks that need the model or the cluster
are in ``simulator.parallel.checks``."""

from __future__ import annotations

from typing import Any


def check_schedule_and_optimizer(p: Any) -> None:
    """Raise ``ValueError`` naming the field and the fix when ``p`` (a ``ParallelConfig``) combines a schedule,
    virtual stages, layout or optimizer option with a setting it does not work with."""
    if p.virtual_stages > 1 and p.pipeline_schedule != "interleaved":
        raise ValueError(
            f"parallel.virtual_stages ({p.virtual_stages}) needs parallel.pipeline_schedule: interleaved "
            f"(got {p.pipeline_schedule!r})"
        )
    if p.pipeline_schedule == "interleaved" and p.pp < 2:
        raise ValueError("parallel.pipeline_schedule interleaved needs parallel.pp >= 2")
    if p.defer_embedding_wgrad_compute and p.pp < 2:
        raise ValueError("parallel.defer_embedding_wgrad_compute defers the output layer's weight gradients "
                         "to the pipeline flush and needs parallel.pp >= 2 (Megatron-Core refuses it without "
                         "pipeline parallelism); remove it or set parallel.pp")
    if "wgrad_deferral_limit" in p.model_fields_set and not p.defer_embedding_wgrad_compute:
        raise ValueError("parallel.wgrad_deferral_limit applies with parallel.defer_embedding_wgrad_compute: "
                         "true; set that too or remove the limit")
    if p.pipeline_layout is not None:
        from simulator.parallel.pipeline_split import layout_stages

        try:
            n = len(layout_stages(p.pipeline_layout))
        except ValueError as exc:
            raise ValueError(f"parallel.pipeline_layout: {exc}") from None
        v = p.virtual_stages if p.pipeline_schedule == "interleaved" else 1
        if n != p.pp * v:
            raise ValueError(
                f"parallel.pipeline_layout has {n} stages but pp x virtual_stages = {p.pp} x {v} = "
                f"{p.pp * v}; give one '|'-separated stage per virtual stage (or set "
                f"parallel.virtual_stages: {n // p.pp if n % p.pp == 0 else 'n/pp'})")
    if p.fp8_param_gather and p.framework == "deepspeed":
        raise ValueError("parallel.fp8_param_gather is a Megatron (framework ddp) / FSDP option; DeepSpeed "
                         "gathers parameters in their dtype: remove it or use framework ddp or fsdp")
    if p.overlap_param_gather and not p.distributed_optimizer:
        raise ValueError("parallel.overlap_param_gather needs parallel.distributed_optimizer: true (Megatron "
                         "gathers the parameters its distributed optimizer sharded)")
    if p.precision_aware_optimizer and not p.distributed_optimizer:
        raise ValueError("parallel.precision_aware_optimizer steps the distributed optimizer's shards (Megatron-Core "
                         "refuses it without): set parallel.distributed_optimizer: true or remove it")
    if p.optimizer_moments_dtype != "fp32" and not p.precision_aware_optimizer:
        raise ValueError("parallel.optimizer_moments_dtype bf16 needs parallel.precision_aware_optimizer: true "
                         "(Megatron-Core's exp_avg_dtype acts only under the precision-aware optimizer)")
    if p.distributed_optimizer and p.framework != "ddp":
        raise ValueError(
            "parallel.distributed_optimizer (Megatron) applies to framework ddp; with deepspeed use "
            "zero_stage: 1, with fsdp a sharding_strategy"
        )
