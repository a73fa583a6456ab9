"""Mixture-of-experts (and MLA) blocks: exact parameter counts, active parameters and FLOPs.

Module structure of the reference implementations (Hugging Face ``MixtralSparseMoeBlock``,
``Qwen3MoeSparseMoeBlock``, ``DeepseekV3MoE``, ``GptOssMLP``, ``OlmoeSparseMoeBlock``;
Megatron-Core ``MoELayer``):

* router: ``nn.Linear(h, E)`` (``E·h`` weights, ``+E`` with a router bias: GPT-OSS);
* each routed expert is an MLP of the model's kind and width ``f_e``: ``k_mlp·h·f_e`` weights
  (``+ (k_mlp−1)·f_e + h`` biases with ``linear_bias``: GPT-OSS ``gate_up_proj_bias``,
  ``down_proj_bias``);
* LatentMoE (NVIDIA Nemotron 3 Super; Megatron-Core ``moe_latent_size`` ``l``): a down projection
  ``fc1_latent_proj`` (``h·l``) after the router and an up projection ``fc2_latent_proj`` (``l·h``) after
  the combine; the routed experts take and return ``l``-wide tokens (``k_mlp·l·f_e`` weights each);
* ``n_s`` shared experts of width ``f_s``, each ``k_mlp·h·f_s`` (DeepSeek-V3 builds them as one
  MLP of width ``n_s·f_s``: the same count);
* the attention, norms, embeddings and head are those of the dense model
  (``simulator.workload.params``), or MLA (``simulator.workload.mla``).

Active parameters (what one token uses) = total − the ``(E − top_k)`` routed experts it skips in
every MoE block. This is the convention of the Mixtral, Qwen3-MoE, DeepSeek-V3 and OLMoE model cards
(embedding and output head included); OpenAI's GPT-OSS card counts the unembedding but not the
embedding (``active_non_embedding`` + ``lm_head``).

FLOPs: routed experts do ``top_k`` expert MLPs per token, shared experts ``n_s``, the router one
``h × E`` GEMM (Megatron-LM ``num_floating_point_operations`` counts the expert and shared-expert
GEMMs the same way; it leaves out the router's ``2·h·E`` per token, which we count because it is a
matrix product).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

from simulator.config.model import ModelConfig
from simulator.workload import hybrid, mla
from simulator.workload import params as wparams


@dataclass(frozen=True)
class BlockParams:
    """One block's parameters by how they are stored.

    ``tp_sharded`` splits over the tensor-parallel group, ``replicated`` stays whole on every TP
    rank; ``experts`` (all ``E`` routed experts) split over expert-parallel × expert-tensor-parallel
    ranks (``expert_each`` per expert); ``mlp`` is the dense MLP, or router + shared experts.
    """

    attention: int
    mlp: int
    norms: int
    experts: int
    expert_each: int
    tp_sharded: int
    replicated: int
    active: int

    @property
    def total(self) -> int:
        return self.attention + self.mlp + self.norms + self.experts


def _is_moe(model: ModelConfig, i: int) -> bool:
    return model.is_moe_block(i)


def _mlp_params(model: ModelConfig, width: int, h: int | None = None) -> tuple[int, int, int]:
    """(weights, column-parallel biases, row-parallel bias) of one MLP of ``width`` taking and returning
    ``h``-wide tokens (the model's hidden size unless given: a LatentMoE expert's latent width)."""
    h, k = h or model.hidden_size, model.mlp_matrices
    bias = model.linear_bias
    return k * h * width, ((k - 1) * width if bias else 0), (h if bias else 0)


def block(model: ModelConfig, moe_layer: bool) -> BlockParams:
    """Parameters of one block: dense (``moe_layer=False``) or MoE (formulas: module docstring)."""
    dense = wparams.dense_layer(model)
    h = model.hidden_size
    if model.is_hybrid:  # the block's other layers (hybrid.average_block); an MoE block's E layer has its pre-norm
        mix = hybrid.average_block(model, moe_layer)
        if not moe_layer:
            return BlockParams(mix.attention, mix.mlp, mix.norms, 0, 0, mix.sharded, mix.replicated, mix.total)
        attention, norms = mix.attention, mix.norms + wparams.norm_params(model, h)
        attn_sharded, attn_repl = mix.sharded, mix.replicated - mix.norms
    elif model.is_mla:
        att = mla.params(model)
        attention = att.sharded + att.replicated - att.norms
        norms = 2 * wparams.norm_params(model, h) + att.norms
        attn_sharded, attn_repl = att.sharded, att.replicated - att.norms
    else:
        bias_row = h if model.linear_bias else 0
        attention, norms = dense.attention, dense.norms
        attn_sharded, attn_repl = dense.attention - bias_row, bias_row
    if not moe_layer or model.moe is None:
        w, cb, rb = _mlp_params(model, model.ffn_hidden_size)
        total_mlp = w + cb + rb
        return BlockParams(attention, total_mlp, norms, 0, 0, attn_sharded + w + cb, attn_repl + rb + norms,
                           attention + total_mlp + norms)
    m = model.moe
    router = m.n_experts * h + (m.n_experts if m.router_bias else 0)
    w, cb, rb = _mlp_params(model, m.expert_ffn_hidden_size, m.routed_width(h))
    each = w + cb + rb
    sw, scb, srb = _mlp_params(model, m.shared_width)
    shared = m.n_shared_experts * (sw + scb + srb)
    latent = latent_proj_params(model)
    mlp_part = router + shared + latent
    return BlockParams(
        attention=attention,
        mlp=mlp_part,
        norms=norms,
        experts=m.n_experts * each,
        expert_each=each,
        tp_sharded=attn_sharded + m.n_shared_experts * (sw + scb),
        replicated=attn_repl + norms + router + latent + m.n_shared_experts * srb,
        active=attention + mlp_part + norms + m.top_k * each,
    )


def latent_proj_params(model: ModelConfig) -> int:
    """LatentMoE's down and up projections of one MoE layer, ``2·h·l`` (``model.moe.latent_size`` ``l``; 0
    without). Megatron-Core's ``fc1_latent_proj`` / ``fc2_latent_proj`` act on every token of the rank after
    the router and before the dispatch, and after the combine: counted whole on each tensor-parallel rank
    (replicated), as the router is."""
    m = model.moe
    return 2 * model.hidden_size * m.latent_size if m is not None and m.latent_size else 0


def blocks(model: ModelConfig) -> list[BlockParams]:
    """Every block's parameters, first to last."""
    dense, moe_blk = block(model, False), block(model, True)
    return [moe_blk if _is_moe(model, i) else dense for i in range(model.n_layers)]


def count(model: ModelConfig) -> wparams.ParamCounts:
    """Exact total and active parameter counts of an MoE and/or MLA model."""
    blks = blocks(model)
    base = wparams.dense_count(model)  # embeddings, head and norms outside the blocks are the same
    outside = base.embedding + base.lm_head + base.final_norm + base.embedding_norm
    # a hybrid's blocks are averages (hybrid.average_block) whose sums are whole numbers
    total = outside + round(sum(bk.total for bk in blks))
    active = outside + round(sum(bk.active for bk in blks))
    h = model.hidden_size
    widest = max(model.ffn_hidden_size, model.moe.expert_ffn_hidden_size if model.moe else 0)
    largest = max(base.embedding, h * widest, h * model.q_dim if not model.is_mla else 0)
    return wparams.ParamCounts(
        total=total,
        embedding=base.embedding,
        lm_head=base.lm_head,
        non_embedding=total - base.embedding - base.lm_head,
        per_layer=max(bk.total for bk in blks),
        final_norm=base.final_norm,
        embedding_norm=base.embedding_norm,
        largest_layer=largest,
        active=active,
    )


@dataclass(frozen=True)
class LocalParams:
    """Parameters one GPU holds of one block: the TP-split part and its expert shard."""

    dense: float
    experts: float

    @property
    def total(self) -> float:
        return self.dense + self.experts


def block_local(model: ModelConfig, moe_layer: bool, tp: int = 1, ep: int = 1, etp: int = 1) -> LocalParams:
    """One block on one GPU: ``tp_sharded/tp + replicated`` plus ``E/ep`` experts each split over
    ``etp`` expert-tensor-parallel ranks (Megatron-Core ``--expert-model-parallel-size``,
    ``--expert-tensor-parallel-size``)."""
    bk = block(model, moe_layer)
    experts = bk.experts / ep / etp if bk.experts else 0.0
    return LocalParams(dense=bk.tp_sharded / tp + bk.replicated, experts=experts)


def local(model: ModelConfig, tp: int = 1, pp: int = 1, ep: int = 1, etp: int = 1, v: int = 1,
          parallel: Any = None) -> LocalParams:
    """Parameters held by the most-loaded GPU of a ``tp × pp`` (× ``ep × etp``) group: the largest
    :func:`stage_local` over the pipeline stages (``v`` virtual stages each, placed as ``parallel`` asks)."""
    return max((stage_local(model, tp, pp, ep, etp, st, v, parallel) for st in range(pp)), key=lambda x: x.total)


def stage_local(model: ModelConfig, tp: int, pp: int, ep: int, etp: int, stage: int, v: int = 1,
                parallel: Any = None) -> LocalParams:
    """Parameters one GPU of pipeline stage ``stage`` holds: the blocks of its virtual stages, each of its own
    kind (dense or MoE), where the pipeline places them (``pipeline_split.virtual_stage_layers``: virtual
    stage ``j = c·p + s`` holds the next ``layers[j]`` blocks, the MTP modules' blocks, of the last block's
    kind, after the model's); the embedding on stage 0 and the final norm and output layer on the last
    (``params.stage_local`` without blocks); each MTP module's ``eh_proj`` and norms with its block."""
    from simulator.parallel import pipeline_split
    from simulator.workload import mtp

    flags = [_is_moe(model, i) for i in range(model.n_layers)]
    flags += flags[-1:] * model.mtp_layers
    layers = pipeline_split.virtual_stage_layers(model.n_layers, pp, v, parallel, model.mtp_layers)
    starts = [0, *itertools.accumulate(layers)]
    held = [i for j, n in enumerate(layers) if j % pp == stage for i in range(starts[j], starts[j] + n)]
    parts = [block_local(model, flags[i], tp, ep, etp) for i in held]
    mtp_blocks = sum(1 for i in held if i >= model.n_layers)
    own = mtp.params(model, tp) * mtp_blocks / model.mtp_layers if mtp_blocks else 0.0
    outside = wparams.stage_local(model, tp, pp, stage, 0)
    return LocalParams(sum(p.dense for p in parts) + own + outside, sum(p.experts for p in parts))


def layer_forward(model: ModelConfig, b: int, s: int, causal: bool, moe_layer: bool):
    """Forward FLOPs of one block (``flops.LayerFlops``): MLA or standard attention; the dense MLP,
    or router ``2·T·h·E`` + routed experts ``2·k_mlp·T·w·f_e·top_k`` (``w`` the latent width of a LatentMoE,
    else ``h``) + its latent projections ``2·T·2·h·l`` + shared experts ``2·k_mlp·T·h·f_s·n_s`` with
    ``T = b·s``."""
    from simulator.workload import flops

    base = flops.dense_layer_forward(model, b, s, causal)
    if model.is_hybrid:  # the block's other layers; an MoE block's have no MLP (ModelConfig._check_hybrid)
        base = hybrid.class_forward(model, b, s, causal, moe_layer)
    elif model.is_mla:
        f = mla.forward(model, b, s, causal)
        base = flops.LayerFlops(q=f.q, kv=f.kv, scores=f.scores, attn_v=f.attn_v, out_proj=f.out_proj,
                                mlp=base.mlp)
    if not moe_layer or model.moe is None:
        return base
    m, h, t = model.moe, model.hidden_size, b * s
    mlp = (2.0 * t * h * m.n_experts
           + 2.0 * model.mlp_matrices * t * m.routed_width(h) * m.top_k * m.expert_ffn_hidden_size
           + 2.0 * t * latent_proj_params(model) + shared_forward(model, b, s))
    return replace(base, mlp=mlp)


def shared_forward(model: ModelConfig, b: int, s: int) -> float:
    """Forward FLOPs of one MoE block's shared experts, ``2·k_mlp·T·h·f_s·n_s`` with ``T = b·s`` (also
    :func:`layer_forward`'s shared term, and what Megatron-Core's ``shared_experts`` recompute module re-runs)."""
    m = model.moe
    return 2.0 * model.mlp_matrices * b * s * model.hidden_size * m.n_shared_experts * m.shared_width


def layer_groups(model: ModelConfig, b: int, s: int, causal: bool) -> list[tuple[int, object]]:
    """[(number of blocks, their ``LayerFlops``)] for the dense and the MoE blocks."""
    n_moe = model.n_moe_blocks
    out = []
    if model.n_layers - n_moe:
        out.append((model.n_layers - n_moe, layer_forward(model, b, s, causal, False)))
    if n_moe:
        out.append((n_moe, layer_forward(model, b, s, causal, True)))
    return out
