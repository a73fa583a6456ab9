"""Enumerate the valid parallel layouts of a scenario's GPU count (``dtsim sweep --layouts auto``).

A layout is (tp, pp, dp, micro-batch size, pipeline schedule, virtual stages), returned as dotted
override paths so the sweep applies it to the raw scenario before validation. Rules, each one a
reason a framework would refuse the layout or a placement practitioners avoid:

* ``tp`` divides the GPUs of a node (TP stays inside the NVLink domain: Narayanan et al. SC'21
  §3.3 takeaway #1) and divides the attention and KV heads (Megatron splits heads). A node is the
  NVLink domain: 8 GPUs on a DGX/HGX, the whole rack on GB200/GB300 NVL72 (``node_unit: rack``), so
  there TP (and expert parallelism, ``TopologyConfig.nvlink_domain_gpus``) up to 72 stays on NVLink;
* ``pp`` divides ``GPUs / tp`` and is at most the number of layers; ``dp = GPUs / (tp · pp)``;
* the micro-batch ``b`` divides ``global_batch / dp`` (so ``G = global_batch / (b · dp)`` is an
  integer);
* ``pp > 1``: the 1F1B schedule, plus interleaved 1F1B with every ``v > 1`` that divides the layers
  per stage when ``G`` is divisible by ``pp`` (Megatron-LM's interleaving condition);
* DeepSpeed ZeRO-2/3 excludes ``pp > 1`` (DeepSpeed's pipeline engine refuses it), and DeepSpeed
  pipelines are 1F1B only (no interleaving);
* context parallelism ``cp`` where dtsim simulates it (framework ddp/Megatron or fsdp/torchtitan,
  FlashAttention, not HYBRID_SHARD, not TP communication overlap): every ``cp`` dividing
  ``GPUs / tp`` with ``2·cp`` dividing ``seq_len`` (load-balanced causal CP, Megatron-Core
  ``get_batch_on_this_cp_rank``) and at least ``MIN_CP_TOKENS`` tokens per rank;
  ``dp = GPUs / (tp · cp · pp)``. Elsewhere cp stays at the scenario's value.
* MoE models: every ``ep`` dividing the experts and the GPUs of a stage, with ``etp`` 1 or ``tp``
  (:func:`expand_layouts`).

Ranking is the sweep's: it simulates each layout and orders by its objective. The list here is
ordered by (tp, pp, micro-batch, v), deterministic for resumable sweeps.
"""

from __future__ import annotations

from typing import Any

#: Fewest tokens per context-parallel rank enumerated: below it the ring's per-step K/V exchange and
#: kernel launches outweigh the attention saved (published CP runs keep >= 4k tokens per rank, e.g.
#: Llama 3 405B at 131,072 tokens with cp = 16: 8,192; NeMo Llama 3 8B at 8,192 with cp = 2).
MIN_CP_TOKENS = 4096

#: Micro-batch sizes tried when the caller gives none (Megatron's published runs use 1-8).
DEFAULT_MICRO_BATCHES = (1, 2, 4, 8)
#: Largest number of virtual stages tried (each one more p2p transfer per micro-batch and chunk).
DEFAULT_MAX_VIRTUAL = 8


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def enumerate_layouts(scenario: Any, micro_batch_sizes: tuple[int, ...] | None = None,
                      max_virtual_stages: int = DEFAULT_MAX_VIRTUAL) -> list[dict[str, Any]]:
    """Valid layouts of ``scenario`` (a validated ``Scenario``) as dotted-path override dicts with
    keys ``parallel.tp``, ``parallel.pp``, ``training.micro_batch_size``,
    ``parallel.pipeline_schedule`` and ``parallel.virtual_stages``."""
    model, tr, par = scenario.model, scenario.training, scenario.parallel
    n = scenario.n_gpus
    per_node = scenario.cluster.topology.gpus_per_node
    bs = micro_batch_sizes or DEFAULT_MICRO_BATCHES
    no_pipeline = par.framework == "deepspeed" and par.zero_stage >= 2
    with_cp = (par.framework in ("ddp", "fsdp") and tr.kernels.flash_attention
               and not (par.framework == "fsdp" and par.sharding_strategy == "hybrid_shard"))
    out: list[dict[str, Any]] = []
    for tp in _divisors(min(per_node, n)):
        if per_node % tp or model.n_heads % tp or model.kv_heads % tp:
            continue
        if with_cp and not (par.tp_comm_overlap and tp > 1 and not par.sequence_parallel):
            cps = [c for c in _divisors(n // tp)
                   if c == 1 or (tr.seq_len % (2 * c) == 0 and tr.seq_len // c >= MIN_CP_TOKENS)]
        else:
            cps = [par.cp] if n % (tp * par.cp) == 0 else []
        for cp in cps:
            out += _layouts(scenario, tp, cp, bs, no_pipeline, max_virtual_stages, with_cp)
    if model.moe is not None:
        out = expand_layouts(out, scenario)
    return out


def _layouts(scenario: Any, tp: int, cp: int, bs: tuple[int, ...], no_pipeline: bool, max_virtual_stages: int,
             with_cp: bool) -> list[dict[str, Any]]:
    model, tr, par = scenario.model, scenario.training, scenario.parallel
    n = scenario.n_gpus
    out: list[dict[str, Any]] = []
    for pp in _divisors(n // (tp * cp)):
        if pp > model.n_layers or (pp > 1 and no_pipeline):
            continue
        dp = n // (tp * cp * pp)
        for b in sorted(set(bs)):
            if tr.global_batch_size % (b * dp):
                continue
            n_micro = tr.global_batch_size // (b * dp)
            base = {"parallel.tp": tp, "parallel.pp": pp, "training.micro_batch_size": b}
            if with_cp:
                base["parallel.cp"] = cp
            out.append({**base, "parallel.pipeline_schedule": "1f1b", "parallel.virtual_stages": 1})
            if pp == 1 or model.n_layers % pp or n_micro % pp or par.framework == "deepspeed":
                continue
            per_stage = model.n_layers // pp
            for v in _divisors(per_stage):
                if 1 < v <= max_virtual_stages:
                    out.append({**base, "parallel.pipeline_schedule": "interleaved", "parallel.virtual_stages": v})
    return out


def expand_layouts(layouts: list[dict[str, Any]], scenario: Any) -> list[dict[str, Any]]:
    """Each dense layout × every valid (ep, etp) of an MoE model: ``ep`` divides the experts and
    ``ep·etp`` the GPUs of a pipeline stage; ``etp`` is 1 or the layout's ``tp`` (Megatron-Core's
    two common choices) and divides the expert width. TP > 1 turns sequence parallelism on
    (Megatron-Core requires it with MoE)."""
    moe = scenario.model.moe
    n = scenario.n_gpus
    out: list[dict[str, Any]] = []
    for lay in layouts:
        tp, pp = lay["parallel.tp"], lay["parallel.pp"]
        stage = n // pp
        for etp in sorted({1, tp}):
            if moe.expert_ffn_hidden_size % etp:
                continue
            for ep in range(1, moe.n_experts + 1):
                if moe.n_experts % ep or stage % (ep * etp):
                    continue
                extra = {"parallel.ep": ep, "parallel.etp": etp}
                if tp > 1:
                    extra["parallel.sequence_parallel"] = True
                out.append({**lay, **extra})
    return out
