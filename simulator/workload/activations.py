"""Activation memory of a training step (one model: ``workload.memory`` composes it with the model
states and buffers): bytes one block keeps for its backward, the output layer's buffers, and what each
pipeline stage holds for its in-flight micro-batches. Sources: Korthikanti et al. 2022 (Sec. 4,
Table 2), Narayanan et al. SC'21, Megatron ``theoretical_memory_usage.py`` (formulas.md §2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from simulator.config.model import ModelConfig
from simulator.config.scenario import Scenario
from simulator.parallel import deferred_wgrad, pipeline_order, pipeline_split
from simulator.workload import hybrid, op_sac, recompute
from simulator.workload import loss as wloss
from simulator.workload.attention_core import fused_softmax_available
from simulator.workload.flops import Recompute
from simulator.workload.fp8_casts import SAVED_INPUT_BYTES, SAVES_FP8_INPUTS
from simulator.workload.loss import LOGPROB_BYTES  # noqa: F401  (re-exported for workload.memory)

#: Linears whose input is split over tensor-parallel ranks (Megatron row-parallel): each rank's GEMM
#: output is the full hidden width of partial sums.
_ROW_PARALLEL = ("o", "down", "fc2")

#: Bytes of a dropout mask element (Korthikanti et al. 2022 Sec. 4.1 store masks as 1-byte tensors).
MASK_BYTES = 1
#: Bytes of FlashAttention's per-row softmax statistic (fp32 log-sum-exp; Dao et al. 2022 Alg. 1).
SOFTMAX_STAT_BYTES = 4
#: Bytes per score that Megatron's PyTorch softmax fallback (``workload.attention_core.fused_softmax_available``
#: false) keeps for its backward: ``torch.softmax`` saves its fp32 output.
SOFTMAX_FALLBACK_SAVED_BYTES = 4
@dataclass(frozen=True)
class ActivationBytes:
    """Activation memory of the in-flight micro-batches on the most-loaded pipeline stage.

    ``per_layer`` is what one block stores for one micro-batch under the recompute mode;
    ``layers = per_layer · blocks_on_stage · in_flight`` (``in_flight`` in whole-stage units); ``recompute_transient`` is what a
    recompute rebuilds for one block, live during that block's backward (full recomputation: the block's
    full activations; ``selective_op`` and Megatron-Core's ``moe`` / ``shared_experts`` modules: what they
    dropped); ``logits`` the output layer and
    cross-entropy buffers (last stage).
    """

    per_layer: float
    layers: float
    recompute_transient: float
    embedding: float
    logits: float
    in_flight: float
    total_bytes: float
    #: Activations held in host memory (``training.activation_offload_layers``), not in ``total_bytes``.
    offloaded: float = 0.0


def is_16bit(scenario: Scenario) -> bool:
    return scenario.training.precision in ("bf16", "fp16", "fp8")


def out_proj_input_bytes(pb: int, lin: int, flash_attention: bool) -> int:
    """Bytes per element of the attention output as stored: the out projection keeps it (``lin``
    bytes), and a fused attention kernel keeps it too for its own backward (FlashAttention's
    ``D = rowsum(dO ∘ O)``): one 16-bit tensor serves both unless the projection keeps an FP8 copy,
    which then comes on top."""
    if lin == pb:
        return pb
    return lin + (pb if flash_attention else 0)


def linear_input_bytes(scenario: Scenario, pb: int) -> float:
    """Bytes per element of a linear layer's saved input: 1 under a Transformer Engine FP8 recipe
    (``fp8_casts.SAVES_FP8_INPUTS``; NVFP4's ``SAVED_INPUT_BYTES``), else the training dtype's ``pb``."""
    recipe = scenario.training.active_fp8_recipe
    return SAVED_INPUT_BYTES.get(recipe, 1) if recipe in SAVES_FP8_INPUTS else pb


def layer_activation_bytes(
    model: ModelConfig,
    b: int,
    s: int,
    tp: int = 1,
    *,
    sequence_parallel: bool = False,
    flash_attention: bool = True,
    hf_eager: bool = False,
    recompute: Recompute = "none",
    precision_bytes: int = 2,
    dropout: bool = False,
    fp8_inputs: bool = False,
    fp8_input_bytes: float = 1.0,
    gathered_inputs: bool = False,
    mlp_recompute: bool = False,
    adapters: tuple[str, ...] | None = None,
    act_input_bytes: float | None = None,
    qkv_bytes: float | None = None,
) -> float:
    """Bytes one transformer block keeps for the backward, one micro-batch (Korthikanti et al. 2022,
    "Reducing Activation Recomputation in Large Transformer Models", Sec. 4 and Table 2).

    Generalised to GQA, any ``f``, SwiGLU and FlashAttention (``p`` = precision bytes, 2 in the paper):

    * norm/dropout region (÷t only with sequence parallelism): two norm inputs ``2p·sbh``, the
      attention and MLP inputs ``2p·sbh``, two dropout masks ``2·sbh`` → ``10·sbh`` at p = 2 (Gemma's
      sandwich norms, ``model.sandwich_norm``, keep two more inputs, the attention and MLP outputs:
      ``4p·sbh`` of norm inputs);
    * tensor-parallel region (÷t): Q, K, V ``p·sb·(a·d_h + 2·g_kv·d_h)``, out-proj input
      ``p·sb·a·d_h``, activation input ``p·sb·(k_mlp−1)·f`` and output ``p·sb·f`` → ``24·sbh`` for
      MHA + GELU-4h (SwiGLU stores gate and up: ``3f`` instead of ``2f``); QK-norm adds its
      inputs ``p·sb·(a·d_h + g_kv·d_h)`` (RoPE needs no input for its backward, only sin/cos);
    * attention core (÷t), unfused: softmax output ``p·a·s²b``, dropout mask ``a·s²b`` and output
      ``p·a·s²b`` → ``5·a·s²·b`` (``hf_eager``, Hugging Face's eager chain, and Megatron's PyTorch
      fallback: the fp32 softmax output and its 16-bit copy); FlashAttention stores none of it, only the fp32 log-sum-exp
      ``4·a·s·b`` (dropout is regenerated from the RNG state); selective recomputation drops it, the
      log-sum-exp too (Megatron-Core checkpoints the fused core as well and keeps only its inputs, Q, K
      and V, which the QKV region already counts).

    ``gathered_inputs`` (sequence parallelism through PyTorch DTensor, torchtitan's
    ``PrepareModuleInput`` from ``Shard(1)`` to ``Replicate()`` before the attention and the feed-forward):
    the column-parallel linears save the all-gathered input for their weight gradient, so the attention
    and MLP inputs stay ``2·sbh`` each, not ÷t; Megatron's ``LinearWithGradAccumulationAndAsyncCommunication``
    saves the rank's sequence shard and gathers it again in the backward (Korthikanti §4.2.2).

    Total without parallelism, MHA, GELU-4h, dropout, p = 2: ``s·b·h·(34 + 5·a·s/h)``; with TP
    ``s·b·h·(10 + 24/t + 5as/(ht))``; selective ``s·b·h·(10 + 24/t)``. Full recomputation keeps only
    the block input, ``p·sbh`` (÷t with SP); see :func:`activations` for the transient.

    ``fp8_inputs`` (Transformer Engine FP8 recipes, ``fp8_casts.SAVES_FP8_INPUTS``): the linear inputs
    are kept quantized, ``fp8_input_bytes`` (1 B; NVFP4 0.5625) instead of ``p``: the attention and MLP
    inputs (the norm outputs) and the
    MLP-down input (the activation output); the out projection's FP8 copy of the attention output comes
    on top of the 16-bit output a fused attention kernel keeps (``out_proj_input_bytes``).

    ``adapters`` (LoRA, ``training.lora``: the modules carrying adapters; None in full training): a frozen linear
    has no weight gradient, so it keeps no input (Transformer Engine's ``BasicLinear``: the input "is returned
    [None] if loss gradient w.r.t. the weight tensor is not required"; its module path likewise,
    ``backward_needs_input = weight.requires_grad``); an adapter keeps its own 16-bit input (``p``): the norm
    outputs beside qkv and fc1, the attention output (the fused kernel's copy) beside proj, the activation output
    beside fc2. ``act_input_bytes``: bytes per element of the stored activation input (Megatron-Core's
    ``activation_func_fp8_input_store``: 1; default ``p``); ``qkv_bytes``: of the stored Q, K and V (FP8
    attention: 1; default ``p``).

    ``mlp_recompute`` (Megatron-Core's ``mlp`` recompute module, ``recompute.modules``): the checkpointed
    MLP keeps only its input, the pre-MLP norm's input, which the norm/dropout region counts already;
    its norm output (the MLP input, ``lin·sbh``), the tensor-parallel ``mlp`` tensors and, with sandwich
    norms, the input of the norm on its output (``p·sbh``) are not kept.
    """
    p, t, mask = precision_bytes, tp, (MASK_BYTES if dropout else 0)
    sbh = s * b * model.hidden_size
    region_div = t if sequence_parallel else 1
    if recompute == "full":
        return p * sbh / region_div
    if recompute == "selective_op":
        return op_sac_layer_bytes(model, b, s, t, sequence_parallel=sequence_parallel, precision_bytes=p)
    lin = fp8_input_bytes if fp8_inputs else p  # bytes per element of a saved linear-layer input
    kept_core_out = flash_attention and recompute != "selective"  # the fused kernel's copy of its output
    if adapters is None:  # each linear keeps its input for its weight gradient
        qkv_in = fc1_in = fc2_in = lin
        out = out_proj_input_bytes(p, lin, kept_core_out)  # the attention output as stored
    else:  # LoRA: only an adapter keeps (its 16-bit) input
        qkv_in, fc1_in, fc2_in = (p if name in adapters else 0 for name in ("qkv", "fc1", "fc2"))
        out = p if kept_core_out or "proj" in adapters else 0
    inputs = qkv_in + (0 if mlp_recompute else fc1_in)  # the attention's and the MLP's norm outputs
    # the norms' inputs; a checkpointed MLP re-runs the sandwich norm on its output (mark_mlp)
    norm_inputs = model.block_norms - (1 if mlp_recompute and model.sandwich_norm else 0)
    replicated = sbh * (norm_inputs * p + 2 * mask + (0 if gathered_inputs else inputs))
    gathered = inputs * sbh if gathered_inputs else 0.0  # kept whole on every rank
    qkv_out = s * b * ((qkv_bytes or p) * (model.q_dim + 2 * model.kv_dim) + out * model.q_dim)
    if model.qk_norm:
        qkv_out += p * s * b * (model.q_dim + model.kv_dim)
    act_in = act_input_bytes or p
    mlp = 0.0 if mlp_recompute else s * b * model.ffn_hidden_size * (act_in * (model.mlp_matrices - 1) + fc2_in)
    heads_s2b = model.n_heads * s * s * b
    if recompute == "selective":
        core = 0.0
    elif flash_attention:
        core = SOFTMAX_STAT_BYTES * model.n_heads * s * b
    elif fused_softmax_available(b, model.n_heads // t, s) and not hf_eager:
        core = heads_s2b * (p + (mask + p if dropout else 0))
    else:  # Megatron's PyTorch softmax fallback and Hugging Face's eager chain keep the softmax's fp32
        # output, the next op its 16-bit copy
        core = heads_s2b * (SOFTMAX_FALLBACK_SAVED_BYTES + (mask + p if dropout else p))
    return replicated / region_div + gathered + (qkv_out + mlp + core) / t


def op_sac_layer_bytes(model: ModelConfig, b: int, s: int, tp: int = 1, *, sequence_parallel: bool = False,
                       precision_bytes: int = 2) -> float:
    """Bytes one block keeps under torchtitan's op-level selective checkpointing (``op_sac``), one
    micro-batch: the block input ``p·sbh`` (÷t with SP), the outputs of the odd-numbered GEMMs (a
    column-parallel one is ``width/t`` wide; a row-parallel one, o or down, is the full ``h`` of
    partial sums per rank, plus with SP the saved reduce-scatter output ``p·sbh/t``), the SDPA output
    ``p·sb·a·d_h/t`` and its fp32 log-sum-exp ``4·(a/t)·s·b``."""
    p, t = precision_bytes, tp
    tokens = s * b
    region_div = t if sequence_parallel else 1
    total = p * tokens * model.hidden_size / region_div
    for name in op_sac.saved_linears(model):
        if name in _ROW_PARALLEL:
            total += p * tokens * model.hidden_size
            if sequence_parallel and t > 1:
                total += p * tokens * model.hidden_size / t
        else:
            total += p * tokens * op_sac.out_width(model, name) / t
    total += p * tokens * model.q_dim / t + SOFTMAX_STAT_BYTES * (model.n_heads // t) * tokens
    return total


def logits_activation_bytes(
    model: ModelConfig, b: int, s: int, tp: int = 1, precision_bytes: int = 2, cross_entropy: str = "fused",
    sequence_parallel: bool = False, gathered_inputs: bool = False,
) -> float:
    """Output-layer buffers of one micro-batch: the final-norm input and output ``2p·sbh`` (÷t with
    sequence parallelism, where the final norm runs on the rank's ``s/t`` tokens; the output, the output
    layer's input, whole with ``gathered_inputs``: :func:`layer_activation_bytes`) and the vocab-parallel
    loss buffers ``c·sbV/t``, ``c`` from ``loss.IMPLEMENTATIONS`` (Megatron's fused kernel: ``p + 4``, cf.
    ``theoretical_memory_usage.py``: ``4·sbh·(1 + V/h)``, all of it ÷t with SP)."""
    p, sbh = precision_bytes, s * b * model.hidden_size
    per_logit = wloss.IMPLEMENTATIONS[cross_entropy].peak_bytes(p)
    div = tp if sequence_parallel else 1
    norm = p * sbh / div + p * sbh / (1 if gathered_inputs else div)
    return norm + per_logit * s * b * model.vocab_size / tp


def deferred_wgrad_bytes(model: ModelConfig, b: int, s: int, tp: int, precision_bytes: int, sequence_parallel: bool,
                         count: int) -> float:
    """What the last pipeline stage holds for ``count`` deferred output-layer weight gradients
    (``parallel.defer_embedding_wgrad_compute``) until its flush: per micro-batch the layer's output
    gradient ``p·sbV/t`` and its input ``p·sbh`` (÷t with sequence parallelism: Megatron-Core's
    ``ColumnParallelLinear`` keeps the rank's slice, which the drain all-gathers again;
    ``grad_output_buffer``, ``embedding_activation_buffer``)."""
    return count * precision_bytes * s * b * (model.vocab_size / tp + model.hidden_size / (tp if sequence_parallel else 1))


def pipeline_blocks(scenario: Scenario) -> tuple[str, int, list[int]]:
    """(schedule, virtual stages, blocks per GPU stage) of the scenario's pipeline."""
    schedule, v, chunks = _chunk_blocks(scenario)
    return schedule, v, [sum(c) for c in chunks]


def _chunk_blocks(scenario: Scenario) -> tuple[str, int, list[list[int]]]:
    """(schedule, virtual stages, blocks of each model chunk of each GPU stage)."""
    par = scenario.parallel
    schedule = par.pipeline_schedule if par.pp > 1 else "1f1b"
    v = par.virtual_stages if schedule == "interleaved" else 1
    return schedule, v, pipeline_split.gpu_stage_chunks(scenario.model.n_layers, par.pp, v, par,
                                                        scenario.model.mtp_layers)


def _in_flight(schedule: str, stage: int, pp: int, n_micro: int, v: int, chunk_blocks: list[int]) -> float:
    """``pipeline_order.in_flight``, without walking millions of micro-batches: GPipe holds all
    ``m``; 1F1B and interleaved 1F1B reach their peak within the warm-up (fewer than ``2·p·v``
    chunk-forwards), so any ``m`` beyond ``4·p·v`` (kept a multiple of ``p``) gives the same peak."""
    if schedule == "gpipe":
        return float(n_micro)
    cap = 4 * pp * v
    return pipeline_order.in_flight(schedule, stage, pp, min(n_micro, cap), v, chunk_blocks)


def stage_activations(scenario: Scenario) -> list[ActivationBytes]:
    """Activation bytes on every GPU pipeline stage, per :func:`layer_activation_bytes`.

    A stage holding ``n_s`` blocks with ``k_s`` micro-batches in flight stores
    ``per_layer · n_s · k_s``; ``k_s`` is counted on the schedule's own order
    (``pipeline_order.in_flight``): GPipe ``m``; 1F1B ``min(p−s, m)`` (Narayanan et al. SC'21 §2.2;
    Megatron ``theoretical_memory_usage.py``); interleaved ``L·(1 + (p−1)/(p·v))`` layers on stage 0
    (Korthikanti et al. 2022 §4.2.3), each live chunk-forward counting its own chunk's blocks (a last
    stage's MTP chunk, a ``pipeline_layout``'s uneven chunks). Blocks per stage from ``pipeline_split`` (Megatron's
    placements). Sequence parallelism divides the norm/dropout region by ``t``; context parallelism
    makes every term one of the rank's ``s/cp`` tokens (Korthikanti's formulas with ``s → s/cp``).
    Full recomputation stores the block inputs and, while recomputing one block for its backward,
    that block's full activations (Korthikanti Table 2 note); Megatron-Core's ``moe`` and
    ``shared_experts`` recompute modules hold one MoE layer's or its shared experts' tensors again
    (``moe_memory.recompute_transient``); with ``training.recompute_layers`` only
    ``n`` of a stage's blocks do (``simulator.workload.recompute.stage_counts``), the other ``n_s − n``
    keep a block's activations without recomputation, and ``per_layer`` is their mean. The first stage adds the embedding's
    dropout mask ``sbh`` (÷t with SP) per in-flight micro-batch when dropout is on; the last stage the
    logits buffers of one micro-batch, and those its deferred weight gradients hold
    (:func:`deferred_wgrad_bytes`).
    """
    m, tr, par = scenario.model, scenario.training, scenario.parallel
    b, s, t, pp = tr.micro_batch_size, tr.seq_len // par.cp, par.tp, par.pp
    pb = 2 if is_16bit(scenario) else 4
    dropout = m.dropout > 0
    sp = par.sequence_parallel and t > 1
    lin = linear_input_bytes(scenario, pb)
    common = dict(flash_attention=tr.kernels.flash_attention, hf_eager=tr.kernels.attention == "hf_eager",
                  precision_bytes=pb, dropout=dropout,
                  sequence_parallel=sp, fp8_inputs=lin < pb, fp8_input_bytes=lin,
                  gathered_inputs=sp and par.framework == "fsdp",  # DTensor TP (torchtitan)
                  adapters=None if tr.lora is None else tuple(tr.lora.modules),
                  act_input_bytes=1 if tr.kernels.activation_fp8_input_store else None,
                  qkv_bytes=1 if tr.kernels.fp8_attention else None)
    # the mlp module's saving is modelled for dense models; an MoE / MLA model's few dense blocks keep
    # their MLP's tensors here (an overestimate)
    dense_mlp = recompute.mlp(tr) and m.moe is None and not m.is_mla
    mode = recompute.attention_mode(tr, par.framework)
    per_layer = layer_activation_bytes(m, b, s, t, recompute=mode, mlp_recompute=dense_mlp, **common)
    from simulator.workload import moe_memory  # imports this module

    kept = layer_activation_bytes(m, b, s, t, recompute="none", **common)  # a block without recomputation
    if m.is_hybrid:  # the pattern's average block (workload.hybrid), its MoE layers as MLP layers here
        mask = MASK_BYTES if dropout else 0
        kinds = dict(region_div=t if sp else 1, p=pb, lin=lin, mask=mask)
        per_layer = hybrid.activation_bytes(m, per_layer, b, s, t, recompute=mode, mlp_recompute=dense_mlp, **kinds)
        kept = hybrid.activation_bytes(m, kept, b, s, t, recompute="none", mlp_recompute=False, **kinds)
    if m.moe is not None or m.is_mla:  # routed tokens / MLA tensors instead of the dense ones
        per_layer += moe_memory.activation_delta_per_layer(scenario, pb)
    transient = 0.0
    if tr.activation_checkpointing == "selective_op":  # what the recompute rebuilds for one block
        transient = max(0.0, kept - per_layer)
    if tr.activation_checkpointing == "selective":  # the moe / shared_experts modules rebuild one block's
        transient = moe_memory.recompute_transient(scenario, pb)
    if tr.activation_checkpointing == "full":
        transient = kept
        if m.moe is not None or m.is_mla:  # the block being recomputed holds its routed tokens too
            transient += max(0.0, moe_memory.moe_block_extra(scenario, pb) + moe_memory.mla_block_extra(scenario, pb))
    schedule, v, chunks = _chunk_blocks(scenario)
    blocks = [sum(c) for c in chunks]
    n_micro = scenario.grad_accum_steps
    logits = logits_activation_bytes(m, b, s, t, pb, wloss.kind(scenario), sequence_parallel=sp,
                                     gathered_inputs=common["gathered_inputs"])
    logits += deferred_wgrad_bytes(m, b, s, t, pb, sp, deferred_wgrad.deferred_count(par, n_micro))
    # training.recompute_layers: only these blocks of a stage store the checkpoint input; the others
    # keep a block's activations without recomputation (simulator.workload.recompute).
    partial = tr.activation_checkpointing == "full" and tr.recompute_layers is not None
    recomputed = recompute.stage_counts(scenario) if partial else blocks
    rows = []
    for st in range(pp):
        k = _in_flight(schedule, st, pp, n_micro, v, chunks[st]) if pp > 1 else 1
        stored = (per_layer * recomputed[st] + kept * (blocks[st] - recomputed[st])) * k
        # training.activation_offload_layers: those blocks' activations wait in host memory, but one
        # (the block being copied out at the end of the forward, or prefetched for the backward)
        offloaded = per_layer * max(0, min(tr.activation_offload_layers, blocks[st]) - 1) * k
        layers = stored - offloaded
        # the embedding's dropout runs after its scatter to the sequence-parallel region under SP
        embedding = MASK_BYTES * s * b * m.hidden_size / (t if sp else 1) * math.ceil(k) if (st == 0 and dropout) else 0.0
        head = logits if st == pp - 1 else 0.0
        rows.append(ActivationBytes(per_layer=stored / (blocks[st] * k) if blocks[st] else per_layer,
                                    layers=layers, recompute_transient=transient,
                                    embedding=embedding, logits=head, in_flight=k,
                                    total_bytes=layers + transient + embedding + head, offloaded=offloaded))
    return rows


def activations(scenario: Scenario) -> ActivationBytes:
    """Activations of the pipeline stage that stores the most (:func:`stage_activations`)."""
    return max(stage_activations(scenario), key=lambda a: a.total_bytes)
