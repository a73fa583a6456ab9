"""Layout checks that need the model, the training setup and the cluster together.

``ParallelConfig`` checks its own keys against each other; these checks combine it with the rest of
the scenario. Each raises ``InputError`` naming the offending key (the CLI turns it into exit 2).
"""

from __future__ import annotations

from typing import Any

from simulator.errors import InputError
from simulator.parallel import pipeline_split
from simulator.parallel.build import check_pipeline, n_micro
from simulator.workload import hybrid


def check_layout(scenario: Any) -> None:
    """Raise ``InputError`` for a layout the frameworks would reject or dtsim does not simulate.

    * ``tp`` must divide the GPUs of a node (or be a multiple of it): Megatron places TP groups on
      consecutive ranks, so a TP degree of 3 on 8-GPU nodes would straddle nodes irregularly;
    * ``pp`` ≤ layers (also checked by the schema); ``virtual_stages`` must divide the layers per
      stage (Megatron: ``num_layers_per_virtual_pipeline_stage`` is an integer; torchtitan, framework
      fsdp, splits unevenly and only needs a layer per virtual stage), and the interleaved
      schedule needs the micro-batches per step divisible by ``pp`` (Megatron-LM schedules.py);
    * ``cp`` must divide the GPUs with tp and pp, and ``2·cp`` must divide ``seq_len`` (load-balanced
      causal context parallelism splits the sequence into ``2·cp`` chunks, Megatron-Core
      ``get_batch_on_this_cp_rank``); CP is simulated for ddp (Megatron) and fsdp (torchtitan) with
      FlashAttention, without HYBRID_SHARD and without TP communication overlap.
    """
    p, m, tr = scenario.parallel, scenario.model, scenario.training
    per_node = scenario.cluster.topology.gpus_per_node
    n = scenario.n_gpus
    if p.tp <= per_node and per_node % p.tp and n > p.tp:
        raise InputError(
            f"tp={p.tp} does not divide the {per_node} GPUs of a node; TP groups would straddle nodes "
            f"unevenly: use a divisor of {per_node}", "parallel.tp")
    if p.pp > m.n_layers:
        raise InputError(f"pp={p.pp} exceeds the model's {m.n_layers} layers", "parallel.pp")
    _check_activation_offload(scenario)
    _check_recompute_modules(scenario)
    if p.pp > 1 and p.framework == "deepspeed" and p.pipeline_schedule != "1f1b":
        raise InputError(
            f"DeepSpeed's pipeline engine runs only its 1F1B TrainSchedule, not {p.pipeline_schedule!r}; use "
            "framework ddp (Megatron, with distributed_optimizer for ZeRO-1) or fsdp (torchtitan)",
            "parallel.pipeline_schedule")
    if p.pipeline_schedule == "interleaved":
        v = p.virtual_stages
        if p.framework == "fsdp" and m.n_layers < p.pp * v:
            raise InputError(
                f"pp={p.pp} x virtual_stages={v} = {p.pp * v} virtual stages exceed the {m.n_layers} layers",
                "parallel.virtual_stages")
        if p.framework != "fsdp" and not pipeline_split.is_custom(p) and m.n_layers % (p.pp * v):
            raise InputError(
                f"virtual_stages={v} must divide the layers per stage: {m.n_layers} layers / pp={p.pp} / "
                f"v={v} is not an integer (Megatron needs equal chunks); or place the embedding and loss as "
                "layer slots (account_for_embedding_in_pipeline_split, account_for_loss_in_pipeline_split) or "
                "set decoder_first/last_pipeline_num_layers", "parallel.virtual_stages")
        if n_micro(scenario) % p.pp:
            raise InputError(
                f"the interleaved schedule needs the micro-batches per step ({n_micro(scenario)} = "
                f"global_batch_size / (micro_batch_size x dp)) divisible by pp={p.pp}", "parallel.virtual_stages")
    if pipeline_split.is_custom(p):
        v = p.virtual_stages if p.pipeline_schedule == "interleaved" else 1
        why = "needs parallel.pp >= 2" if p.pp < 2 else pipeline_split.split_error(m.n_layers, p.pp, v, p, m.mtp_layers)
        if why:
            key = "parallel.pipeline_layout" if getattr(p, "pipeline_layout", None) else "parallel.pp"
            raise InputError(f"uneven pipeline placement: {why}", key)
    if getattr(p, "use_tp_pp_dp_mapping", False) and m.moe is not None:
        raise InputError("the tp-cp-pp-dp rank order is not modelled for an MoE model (its expert groups are placed "
                         "in Megatron-Core's default tp-cp-ep-dp-pp order only): remove it or use a dense model",
                         "parallel.use_tp_pp_dp_mapping")
    if getattr(p, "moe_a2a_overlap", False):
        if p.framework != "ddp":
            raise InputError("parallel.moe_a2a_overlap is Megatron-Core's combined 1F1B schedule: it needs "
                             "parallel.framework: ddp", "parallel.moe_a2a_overlap")
        if tr.activation_checkpointing == "full":
            raise InputError("parallel.moe_a2a_overlap with full activation recomputation is not simulated; set "
                             "training.activation_checkpointing to none or selective, or moe_a2a_overlap: false",
                             "parallel.moe_a2a_overlap")
        if p.cp > 1:
            raise InputError("parallel.moe_a2a_overlap with context parallelism (cp > 1) is not simulated yet; set "
                             "parallel.cp: 1 or moe_a2a_overlap: false", "parallel.moe_a2a_overlap")
        if p.pp > 1 and p.pipeline_schedule == "gpipe":
            raise InputError("parallel.moe_a2a_overlap pairs 1F1B's forwards and backwards; the gpipe schedule has "
                             "no such pairs: use 1f1b or interleaved", "parallel.moe_a2a_overlap")
    if p.cp > 1:
        if n % (p.tp * p.cp * p.pp):
            raise InputError(
                f"tp x cp x pp = {p.tp} x {p.cp} x {p.pp} does not divide the {n} GPUs", "parallel.cp")
        if tr.seq_len % (2 * p.cp):
            raise InputError(
                f"cp={p.cp} needs training.seq_len ({tr.seq_len}) divisible by 2 x cp = {2 * p.cp} "
                "(load-balanced causal context parallelism)", "parallel.cp")
    check_pipeline(p)


#: Largest cluster the flow fidelity simulates: it shares every link among all concurrent flows, and
#: one 1 GB all-reduce takes 13 s at 1,024 DGX H100 nodes and 35 s at 4,096 (measured on the dev
#: machine), so a whole step above this would run for many minutes.
MAX_FLOW_NODES = 1024


def _check_activation_offload(scenario: Any) -> None:
    """``training.activation_offload_layers``: Megatron-Core's activation offloading (framework ddp, or
    fsdp for Megatron-FSDP), without recomputation (Megatron-Core's ``TransformerConfig`` refuses
    ``cpu_offloading`` with ``recompute_granularity``) and, in dtsim, without pipeline parallelism."""
    tr, p, m = scenario.training, scenario.parallel, scenario.model
    n = tr.activation_offload_layers
    if not n:
        return
    field = "training.activation_offload_layers"
    if n > m.n_layers:
        raise InputError(f"activation_offload_layers {n} exceeds the model's {m.n_layers} blocks", field)
    if p.framework == "deepspeed":
        raise InputError("activation offloading is Megatron-Core's (framework ddp, or fsdp for Megatron-FSDP); "
                         "DeepSpeed's CPU activation checkpointing is not simulated", field)
    if tr.activation_checkpointing != "none":
        raise InputError("activation offloading with recomputation: Megatron-Core refuses cpu_offloading with "
                         "recompute_granularity; set training.activation_checkpointing: none", field)
    if p.pp > 1:
        raise InputError("activation offloading with pipeline parallelism is not simulated; use pp 1", field)


def _check_recompute_modules(scenario: Any) -> None:
    """``training.recompute_modules`` that name a part the model lacks (Megatron-Core builds no such module,
    so the flag would be a silent no-op: refused, as a misspelt key is), ``moe`` with the combined 1F1B
    schedule and ``shared_experts`` with the shared experts' overlap, which Megatron-Core's ``TransformerConfig``
    refuses (``"moe" not in recompute_modules`` when ``overlap_moe_expert_parallel_comm``: the layer's recompute
    re-runs the dispatch; "shared_experts recompute cannot work with --moe-shared-expert-overlap")."""
    mods, m = scenario.training.recompute_modules or (), scenario.model
    field = "training.recompute_modules"
    if "mla_up_proj" in mods and not m.is_mla:
        raise InputError("recompute module mla_up_proj re-runs MLA's up projections, but the model has no MLA "
                         "attention; remove it", field)
    for name in ("moe", "shared_experts"):
        if name in mods and m.moe is None:
            raise InputError(f"recompute module {name} re-runs part of an MoE layer, but the model has no MoE "
                             "blocks; remove it", field)
    if "shared_experts" in mods and not m.moe.n_shared_experts:
        raise InputError("recompute module shared_experts re-runs the shared experts, but the model has none "
                         "(model.moe.n_shared_experts 0); remove it", field)
    if "shared_experts" in mods and getattr(scenario.parallel, "moe_shared_expert_overlap", False):
        raise InputError("recompute module shared_experts with parallel.moe_shared_expert_overlap: Megatron-Core "
                         "refuses it (\"shared_experts recompute cannot work with --moe-shared-expert-overlap\"); "
                         "remove one", field)
    if "moe" in mods and getattr(scenario.parallel, "moe_a2a_overlap", False):
        raise InputError("recompute module moe with parallel.moe_a2a_overlap: Megatron-Core refuses it (the MoE "
                         "layer's recompute re-runs the dispatch the overlap schedules); remove one", field)


def check_flow_size(fidelity: str, nodes: int, field: str) -> None:
    if fidelity == "flow" and nodes > MAX_FLOW_NODES:
        raise InputError(f"the flow fidelity simulates at most {MAX_FLOW_NODES:,} nodes (every link's sharing is "
                         f"solved; {nodes:,} nodes would take many minutes); use the analytical fidelity", field)


#: Most micro-batches per step per rank the step engine plays (each is a forward and a backward of
#: every block; 10⁴ already take minutes). Published runs use at most a few hundred.
MAX_MICRO_BATCHES = 10_000


def check_supported(scenario: Any) -> None:
    """``check_layout`` plus what is valid but not simulated (``dtsim validate`` lists these as
    skipped with the message)."""
    check_layout(scenario)
    hybrid.check_simulated(scenario)
    if n_micro(scenario) > MAX_MICRO_BATCHES:
        raise InputError(f"{n_micro(scenario):,} micro-batches per step (global_batch_size / (micro_batch_size x dp)) "
                         f"exceed the {MAX_MICRO_BATCHES:,} the step engine plays; raise training.micro_batch_size "
                         "or use more GPUs", "training.global_batch_size")
    per_node = scenario.cluster.topology.gpus_per_node
    check_flow_size(scenario.cluster.network_fidelity, -(-scenario.n_gpus // per_node), "cluster.network_fidelity")
    p = scenario.parallel
    if p.defer_embedding_wgrad_compute and scenario.model.mtp_layers:
        raise InputError("parallel.defer_embedding_wgrad_compute with multi-token prediction (model.mtp_layers) is not "
                         "simulated: Megatron-Core's limit counts the output layer's calls, one per MTP depth too; "
                         "remove one of them", "parallel.defer_embedding_wgrad_compute")
    if p.cp > 1:
        if p.framework == "deepspeed":
            raise InputError(
                f"context parallelism (cp={p.cp}) is simulated for framework ddp (Megatron) or fsdp (torchtitan); "
                "DeepSpeed's sequence parallelism (Ulysses) is not simulated", "parallel.cp")
        if p.framework == "fsdp" and p.sharding_strategy == "hybrid_shard":
            raise InputError(f"cp={p.cp} with sharding_strategy hybrid_shard is not simulated", "parallel.cp")
        if p.tp_comm_overlap and p.tp > 1 and not p.sequence_parallel:
            raise InputError(f"cp={p.cp} with tp_comm_overlap needs parallel.sequence_parallel: true (Megatron's "
                             "userbuffers overlap requires it)", "parallel.sequence_parallel")
        if not scenario.training.kernels.flash_attention:
            raise InputError(f"cp={p.cp} needs training.kernels.flash_attention (ring attention is fused)",
                             "parallel.cp")
