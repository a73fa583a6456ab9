"""Scenario → PyTorch FSDP keyword block (``FullyShardedDataParallel`` and the FSDP2 ``fully_shard``
equivalent), argument names from ``torch.distributed.fsdp`` (``ShardingStrategy``,
``BackwardPrefetch``, ``MixedPrecision``, ``limit_all_gathers``, ``forward_prefetch``;
FSDP2: ``reshard_after_forward``, ``MixedPrecisionPolicy``)."""

from __future__ import annotations

from simulator.config.scenario import Scenario
from simulator.interop.common import TORCH_DTYPE, Exported

_STAGE_STRATEGY = {3: "full_shard", 2: "shard_grad_op", 1: "shard_grad_op", 0: "no_shard"}


def export_block(s: Scenario) -> Exported:
    """Python source: the FSDP keyword arguments for ``s`` and the training-loop numbers around them."""
    tr, par = s.training, s.parallel
    notes: list[str] = []
    if par.framework == "fsdp":
        strategy, prefetch = par.sharding_strategy, par.backward_prefetch
        forward, limit = par.forward_prefetch, par.limit_all_gathers
        param = par.param_dtype or ("fp32" if tr.precision in ("fp32", "tf32") else tr.precision)
        reduce = par.reduce_dtype or param
        reshard = par.reshard_after_forward
    else:
        strategy = _STAGE_STRATEGY[par.effective_zero_stage]
        prefetch, forward, limit, reshard = "backward_pre", False, True, None
        param = "fp32" if tr.precision in ("fp32", "tf32") else tr.precision
        reduce = param
        notes.append(f"{par.framework} ZeRO-{par.effective_zero_stage} mapped to {strategy.upper()} "
                     "(FSDP has no optimizer-only sharding)" if par.effective_zero_stage == 1 else
                     f"{par.framework} mapped to {strategy.upper()}")
    if param == "fp8":
        param = "bf16"
        notes.append("fp8: FSDP gathers bf16; FP8 GEMMs come from torchao/Transformer Engine")
    if par.tp > 1 or par.pp > 1 or par.cp > 1 or par.ep > 1:
        notes.append(f"tp={par.tp}, pp={par.pp}, cp={par.cp}, ep={par.ep}: apply with a DeviceMesh (torchtitan "
                     "export) before FSDP")
    reshard2 = reshard if reshard is not None else strategy in ("full_shard", "hybrid_shard")
    sync = ("gradients reduce-scattered once, in the last micro-batch (pipeline)" if par.pp > 1 else
            "model.no_sync() on all but the last" if par.fsdp_no_sync else
            "gradients reduce-scattered after every micro-batch: no model.no_sync()")
    lines = [
        f"# PyTorch FSDP settings for {s.name} (written by dtsim export): {s.n_gpus} GPUs, micro-batch "
        f"{tr.micro_batch_size} x {s.dp} data-parallel ranks x {s.grad_accum_steps} accumulation steps ({sync}) "
        f"= global batch {tr.global_batch_size} x {tr.seq_len} tokens, activation checkpointing "
        f"{tr.activation_checkpointing}",
        *[f"# not expressed: {n}" for n in notes],
        "import torch",
        "from torch.distributed.fsdp import BackwardPrefetch, CPUOffload, FullyShardedDataParallel, MixedPrecision, "
        "ShardingStrategy",
        "",
        "fsdp_kwargs = dict(",
        f"    sharding_strategy=ShardingStrategy.{strategy.upper()},",
        f"    backward_prefetch={'None' if prefetch == 'none' else 'BackwardPrefetch.' + prefetch.upper()},",
        f"    forward_prefetch={forward},",
        f"    limit_all_gathers={limit},",
        f"    mixed_precision=MixedPrecision(param_dtype=torch.{TORCH_DTYPE[param]}, "
        f"reduce_dtype=torch.{TORCH_DTYPE[reduce]}),",
        f"    cpu_offload=CPUOffload(offload_params={par.offload_param != 'none'}),",
        ")",
        "# model = FullyShardedDataParallel(model, auto_wrap_policy=<transformer block policy>, **fsdp_kwargs)",
        "",
        "# FSDP2 (torch.distributed.fsdp.fully_shard), per transformer block and then the root:",
        f"# fully_shard(block, reshard_after_forward={reshard2}, mp_policy=MixedPrecisionPolicy("
        f"param_dtype=torch.{TORCH_DTYPE[param]}, reduce_dtype=torch.{TORCH_DTYPE[reduce]}))",
    ]
    return Exported("\n".join(lines) + "\n", tuple(notes))
