"""Per-kernel workload of a training step on one GPU: GEMMs, attention and memory-bound passes.

The compute model (``simulator.hardware``) turns each :class:`Op` into seconds with a roofline:
``max(flops / achievable FLOP/s, bytes / achievable HBM B/s)``. This module only counts.

Conventions (each a reason, not a measurement):

* Tensor parallelism follows Megatron-LM (Shoeybi et al. 2019): QKV and MLP-up are column-parallel
  (output width ÷ t), out-projection and MLP-down row-parallel (input width ÷ t); norms and residual
  adds are replicated on every TP rank, or split over them under sequence parallelism
  (``region_tokens``). The TP collectives are communication, built by ``simulator.parallel``, not ops here.
* QKV is one fused GEMM and SwiGLU's gate and up are one fused GEMM, as in Megatron-LM.
* Linear biases: ``simulator.workload.bias`` (whose linears run decides their kernels). Dropout
  (``model.dropout``) costs a kernel on the unfused attention path only (FlashAttention and the
  fused bias-dropout-add apply it inside their kernels).
* A memory-bound op moves ``passes × elements × precision_bytes``: one pass per tensor read or
  written. Norm: read x, write y (2). Residual add: read 2, write 1 (3). A fused add+norm kernel
  (``kernels.fused_norm_residual``; Apex/TE ``fused_add_rmsnorm``) reads x and the residual and writes
  the sum and the normalized output (4 instead of 5); each block's input norm is fused with the
  previous block's output residual add.
* GEMM bytes: read A (m·k) and B (k·n), write C (m·n), each once (a large tiled GEMM re-reads
  operands from L2, not HBM).
* The attention kernel is always causal: a decoder never computes the masked half with FlashAttention
  (Dao 2023, FA2 ``causal=True`` skips masked tiles; formulas.md §1.1 "divided by 2 if causal").
  Unfused attention computes the whole ``s × s`` matrix, then masks it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from simulator.config.model import ModelConfig
from simulator.workload import op_sac
from simulator.workload.attention_core import attention_core_ops
from simulator.workload.bias import bias_ops, block_linear
from simulator.workload.flops import Recompute
from simulator.workload.fp8_casts import fp8_cast, fp8_cast_backward
from simulator.workload.loss import cross_entropy_op
from simulator.workload.op import ADD_FLOPS, Op, OpKind, gemm, memory_op

__all__ = ["Op", "OpKind", "gemm", "memory_op", "layer_ops", "head_ops", "backward_ops", "recompute_ops"]

#: FLOPs per element of the memory-bound kernels (order of magnitude only: they are bandwidth-bound,
#: so these never decide a roofline time). Norm: mean/variance or mean-square, scale, shift.
_NORM_FLOPS, _ACT_FLOPS, _ROPE_FLOPS = 5.0, 8.0, 3.0
#: Backward factors: FlashAttention backward ≈ 2.5× forward FLOPs (5 matmuls vs 2, it recomputes QKᵀ;
#: FA benchmarks/benchmark_flash_attention.py); memory-bound backward ≈ 2× forward traffic
#: (reads the saved input and the output gradient, writes the input gradient, plus reductions).
ATTENTION_BWD_FLOPS = 2.5
ATTENTION_BWD_BYTES = 2.0
MEMORY_BWD = 2.0


class Kernels(Protocol):
    """The kernel switches of ``training.kernels`` this module reads (``compile``, ``fp8_recipe`` and
    ``fp8_te_modules`` are read with ``getattr`` defaults ``False`` / ``"delayed"`` / ``"fused"``)."""

    flash_attention: bool
    fused_norm_residual: bool


# --- Eager PyTorch kernel lists -------------------------------------------------------------------
# Without fused kernels (``fused_norm_residual: false`` and ``compile: false``) an op is the chain of
# ATen kernels its PyTorch code issues; each kernel reads and writes its tensors in full. Passes are in
# units of ``elements × precision_bytes`` (an fp32 intermediate of a 16-bit tensor counts 2).
#: RMSNorm as torch code (Llama reference / ``torch.nn.RMSNorm`` eager composite): ``x.float()``
#: (read 2, write 4 B), ``pow(2)`` (4, 4), ``mean(-1)`` (4, ~0), ``+eps``/``rsqrt`` (tiny), ``x * r``
#: (4, 4), ``type_as`` (4, 2), ``* weight`` (2, 2): 8 kernels, 36 B per element = 18 passes of 2 B.
EAGER_RMSNORM_LAUNCHES, EAGER_RMSNORM_PASSES = 8, 18
#: Rotary embedding as torch code (Llama reference ``apply_rotary_emb``) per tensor: ``float()``
#: (2, 4), complex multiply by the frequencies (8, 8), ``type_as`` (4, 2): 3 kernels, 28 B = 14
#: passes; q and k together 6 kernels. Fused (Megatron/TE fused RoPE, Inductor): 1 kernel, 2 passes.
EAGER_ROPE_LAUNCHES_PER_TENSOR, EAGER_ROPE_PASSES = 3, 14
#: YaRN RoPE under Megatron-Core: its fused RoPE takes plain ``rope`` only (Megatron-Bridge
#: ``utils/fusions.py`` ``validate_rope_fusion_compatibility``: "apply_rope_fusion is only compatible with
#: RoPE position embeddings", turning fusion off for ``yarn``), so ``_apply_rotary_pos_emb_bshd`` runs in
#: eager PyTorch per tensor: ``t * cos_`` (2 passes), ``_rotate_half`` (``neg`` of one half, 1; ``cat``, 2),
#: ``* sin_`` (2), the add (3) and the final ``cat`` with the empty pass-through part (2): 12 passes and 6
#: kernels, plus 6 small ones building ``cos``/``sin`` times ``mscale`` over the ``s × d`` frequencies.
#: Backward: the two products' gradients (2 + 2), ``neg`` (1), the ``chunk``'s gradient ``cat`` (2) and
#: the sum of the two paths (3): 10 passes, 5 kernels.
MEGATRON_ROPE_LAUNCHES_PER_TENSOR, MEGATRON_ROPE_PASSES = 12, 12
MEGATRON_ROPE_BWD_LAUNCHES_PER_TENSOR, MEGATRON_ROPE_BWD_PASSES = 5, 10
#: SwiGLU as torch code ``silu(gate) * up``: silu (read f, write f) + multiply (read 2f, write f):
#: 2 kernels, 5 passes of ``b·s·f`` (fused: 1 kernel, 3 passes).
EAGER_SWIGLU_LAUNCHES, EAGER_SWIGLU_PASSES = 2, 5
#: Backward kernel counts (autograd): a fused norm 2 (dx, then the dγ/dβ column reduction); the
#: embedding's dense backward 3 (sort, segment reduce, scatter). FlashAttention's: ``attention_core``.
NORM_BWD_LAUNCHES, EMBEDDING_BWD_LAUNCHES = 2, 3

def _norm(name: str, elements: float, pb: int, eager_rms: bool) -> Op:
    """One norm: a fused kernel (2 passes), or eager RMSNorm's chain (``EAGER_RMSNORM_*``)."""
    if eager_rms:
        return replace(memory_op(name, elements, EAGER_RMSNORM_PASSES, pb, _NORM_FLOPS),
                       launches=EAGER_RMSNORM_LAUNCHES, bwd_launches=2 * EAGER_RMSNORM_LAUNCHES)
    return replace(memory_op(name, elements, 2, pb, _NORM_FLOPS), bwd_launches=NORM_BWD_LAUNCHES)


def _sandwich_norm(name: str, elements: float, pb: int, eager_rms: bool) -> Op:
    """A sandwich norm (``model.sandwich_norm``): a norm the reference blocks' host time does not hold, so its
    calls come on top (``Op.extra_host_calls``, ``host.attach``)."""
    op = _norm(name, elements, pb, eager_rms)
    return replace(op, extra_host_calls=op.launches)


def region_tokens(tokens: float, tp: int, sequence_parallel: bool) -> float:
    """Tokens a rank holds outside the tensor-parallel GEMMs, where the residual adds and norms run:
    ``tokens / tp`` under sequence parallelism (Korthikanti et al. 2022, arXiv:2205.05198 §4.2.2), else
    all of them (every TP rank repeats the work)."""
    return tokens / tp if sequence_parallel and tp > 1 else tokens


def _add_norm(name: str, tokens_h: float, fused: bool, pb: int, eager_rms: bool = False) -> list[Op]:
    """Residual add followed by a norm: fused 4 passes, else add (3) + norm (2, or eager RMSNorm)."""
    if fused:
        return [replace(memory_op(f"{name}_add_norm", tokens_h, 4, pb, ADD_FLOPS + _NORM_FLOPS),
                        bwd_launches=NORM_BWD_LAUNCHES)]
    return [
        memory_op(f"{name}_residual_add", tokens_h, 3, pb, ADD_FLOPS),
        _norm(f"{name}_norm", tokens_h, pb, eager_rms),
    ]


def _linear(name: str, m: int, n: int, k: int, pb: int, launches: int, fp8: str | None,
            eager_cast: bool, producer: str = "", te_linear: bool = False, input_share: float = 1.0) -> list[Op]:
    """A linear-layer GEMM (``launches`` > 1 when eager code keeps its projections separate, e.g.
    torchtitan's ``wq``/``wk``/``wv``), preceded under FP8 by the cast of its input ``m·k``
    (``fp8_casts.fp8_cast``, fused into a ``norm`` or ``act`` producer where the recipe allows; a plain
    ``te_linear`` module casts its input standalone and its weight too); ``input_share`` of that input
    is cast on this rank (sequence parallelism: the local shard, before the all-gather)."""
    op = replace(gemm(name, m, n, k, pb), launches=launches, linear=True)
    if fp8 is None:
        return [op]
    return [fp8_cast(name, m, n, k, fp8, launches, eager_cast, "" if te_linear else producer, te_linear,
                     input_share), op]


def mark_mlp(ops: list[Op]) -> list[Op]:
    """The ops Megatron-Core's ``mlp`` recompute module re-runs (``recompute.modules``): the MLP's GEMMs,
    their FP8 casts and the activation, the sandwich norm on its output (``mlp_out_norm``: Megatron-Bridge's
    Gemma ``linear_fc2`` holds it), and, with fused kernels, the post-attention add + norm op, whose
    norm Transformer Engine's ``linear_fc1`` holds (``TELayerNormColumnParallelLinear``; its add is
    re-run with it, as for the ``layernorm`` module)."""
    return [replace(op, recompute=True) if op.name.startswith(("mlp_", "post_attn_add_norm")) else op
            for op in ops]


def megatron_eager_yarn(model: ModelConfig, kernels: Kernels) -> bool:
    """True when the block's rotary embedding is Megatron-Core's eager YaRN code (``MEGATRON_ROPE_*``): YaRN
    under fused (not compiled) kernels, where Megatron's fused RoPE would otherwise run; MLA blocks apply
    their rotary part in their own kernel (``moe_ops._mla_attention``)."""
    return (model.position_embedding == "rope" and model.rope_scaling == "yarn" and not model.is_mla
            and kernels.fused_norm_residual and not getattr(kernels, "compile", False))


def layer_ops(
    model: ModelConfig,
    b: int,
    s: int,
    tp: int,
    precision_bytes: int,
    kernels: Kernels,
    recompute: Recompute = "none",
    fp8: str | None = None,
    early_stop: bool = False,
    sequence_parallel: bool = False,
    mlp_recompute: bool = False,
    linear: str = "megatron",
) -> list[Op]:
    """Forward kernels of ONE transformer block on one GPU, in execution order.

    GEMM and attention FLOPs sum to ``flops.layer_forward(model, b, s, causal=True).total / tp`` with
    FlashAttention, and to the non-causal total ``/ tp`` without it (the unfused kernel computes the
    masked half too). ``recompute`` marks the ops that checkpointing re-runs: all of them (full) or the
    attention core (selective), fused or not: Megatron-Core wraps whatever core attention runs,
    Transformer Engine's fused and flash kernels included, in ``tensor_parallel.checkpoint``
    (``Attention.checkpoint_core_attention`` = selective granularity with ``core_attn`` among the
    recompute modules, ``_checkpointed_attention_forward``), so one more forward kernel of the core runs
    before its backward, on top of the ``QKᵀ`` the FlashAttention backward recomputes itself;
    ``mlp_recompute`` (the ``mlp`` module) marks the MLP's ops too (``mark_mlp``).

    Kernel styles: ``kernels.compile`` (torch.compile/Inductor) or ``fused_norm_residual`` (Megatron,
    Transformer Engine, Apex fused kernels) give one kernel per norm, rotary and activation; otherwise
    the op is eager PyTorch code: RMSNorm, rotary and SwiGLU become their ATen chains (``EAGER_*``)
    and the projections separate GEMMs (q, k, v where the model has three projections; gate, up). ``fp8`` (a ``fp8_casts`` recipe) adds the
    cast ops of every linear GEMM; the attention core stays 16-bit.

    ``sequence_parallel`` (Megatron's sequence parallelism, Korthikanti et al. 2022, arXiv:2205.05198
    §4.2.2; torchtitan's ``SequenceParallel`` norms): outside the tensor-parallel GEMMs a rank holds
    ``b·s/t`` tokens, so the residual adds and norms run on ``b·s·h/t`` elements, and so does the FP8
    cast of the norm's output, which is taken before the all-gather that feeds the column-parallel
    QKV and MLP-up GEMMs (Transformer Engine and torchtitan gather the FP8 tensor, ``tp_allgather_bytes``).

    ``linear``: the modules that implement the linears (``bias.linear_impl``), for their bias kernels
    (``bias.bias_ops``); eager blocks are PyTorch ``nn.Linear`` modules whatever it says.
    """
    pb = precision_bytes
    h, f, t = model.hidden_size, model.ffn_hidden_size, tp
    tokens = b * s
    region = region_tokens(tokens, t, sequence_parallel)
    gathered = region / tokens  # share of a norm-fed GEMM's input this rank casts before the all-gather
    compiled = bool(getattr(kernels, "compile", False))
    fused = kernels.fused_norm_residual or compiled
    eager_rms = not fused and model.norm == "rmsnorm"
    eager_cast = not compiled
    te_linear = getattr(kernels, "fp8_te_modules", "fused") == "linear"
    ops: list[Op] = []
    if fused:  # the previous block's output residual add, fused with this block's input norm
        ops += _add_norm("input", region * h, True, pb)
    else:
        ops.append(_norm("input_norm", region * h, pb, eager_rms))
    # gemm_epilogue: the linears' bias adds and gradients, and a one-matrix activation (GELU, ReLU), run in
    # their GEMMs' epilogues (flash-attn fused_dense): no bias op, no activation kernel
    epilogue = getattr(kernels, "gemm_epilogue", False)

    bias_linear = block_linear(linear, fused, epilogue, fp8 is not None and te_linear)

    def bias(i: int, n: int) -> list[Op]:
        return bias_ops(i, model, tokens, n, pb, bias_linear)

    qkv_launches = 1 if fused or model.qkv_fused else 3  # eager code keeps Llama's q, k, v apart
    qkv_n = (model.q_dim + 2 * model.kv_dim) // t
    ops += _linear("qkv", tokens, qkv_n, h, pb, qkv_launches, fp8, eager_cast,
                   producer="norm" if fused else "", te_linear=te_linear, input_share=gathered)
    ops += bias(0, qkv_n)
    qk_el = tokens * (model.q_dim + model.kv_dim) / t
    if model.qk_norm:
        if fused:
            ops.append(_norm("qk_norm", qk_el, pb, False))
        else:
            norm = _norm("qk_norm", qk_el, pb, eager_rms)  # q and k normed separately
            ops.append(replace(norm, launches=2 * norm.launches, bwd_launches=2 * norm.bwd_launches))
    if model.position_embedding == "rope":
        if megatron_eager_yarn(model, kernels):  # Megatron-Core's eager YaRN (above)
            ops.append(replace(memory_op("rotary", qk_el, MEGATRON_ROPE_PASSES, pb, _ROPE_FLOPS),
                               launches=2 * MEGATRON_ROPE_LAUNCHES_PER_TENSOR,
                               bwd_launches=2 * MEGATRON_ROPE_BWD_LAUNCHES_PER_TENSOR,
                               bwd_bytes=float(MEGATRON_ROPE_BWD_PASSES * pb * qk_el)))
        elif fused:
            ops.append(memory_op("rotary", qk_el, 2, pb, _ROPE_FLOPS))
        else:
            ops.append(replace(memory_op("rotary", qk_el, EAGER_ROPE_PASSES, pb, _ROPE_FLOPS),
                               launches=2 * EAGER_ROPE_LAUNCHES_PER_TENSOR))
    core = attention_core_ops(model, b, s, t, pb, kernels.flash_attention, kernels.attention == "hf_eager",
                              fp8 is not None and getattr(kernels, "fp8_attention", False))
    if recompute == "selective":
        core = [replace(op, recompute=True) for op in core]
    ops += core
    ops += _linear("out_proj", tokens, h, model.q_dim // t, pb, 1, fp8, eager_cast, te_linear=te_linear)
    ops += bias(1, h)
    if model.sandwich_norm:  # Gemma's norm on the attention output, before the residual add
        ops.append(_sandwich_norm("attn_out_norm", region * h, pb, eager_rms))
    ops += _add_norm("post_attn", region * h, fused, pb, eager_rms)
    up = (model.mlp_matrices - 1) * f // t
    ops += _linear("mlp_up", tokens, up, h, pb, 1 if fused else model.mlp_matrices - 1, fp8, eager_cast,
                   producer="norm" if fused else "", te_linear=te_linear, input_share=gathered)
    ops += bias(2, up)
    # GELU: read f, write f; SwiGLU / GeGLU: read gate and up (2f), write f (eager: silu or tanh-GELU, then
    # multiply; Megatron-Core fuses a gated GELU only for erf's F.gelu, bias_geglu_impl, so Gemma's tanh GELU
    # runs its glu() chain there too); with gemm_epilogue a one-matrix activation (GELU, ReLU) is mlp_up's epilogue.
    if model.gated_mlp and (not fused or (model.mlp == "geglu" and not compiled)):
        ops.append(replace(memory_op(f"mlp_{model.mlp}", tokens * f / t, EAGER_SWIGLU_PASSES, pb, _ACT_FLOPS),
                           launches=EAGER_SWIGLU_LAUNCHES))
    elif not (epilogue and model.mlp_matrices == 2):
        act = memory_op(f"mlp_{model.mlp}", tokens * f / t, model.mlp_matrices, pb, _ACT_FLOPS)
        if fp8 is not None and getattr(kernels, "activation_fp8_input_store", False):
            # the input (k-1 matrices wide) also written in FP8, and dequantized (1 B read, 2 B written) for the backward
            width = (model.mlp_matrices - 1) * tokens * f / t
            act = replace(act, bytes=act.bytes + width, bwd_bytes=MEMORY_BWD * act.bytes + 3 * width)
        ops.append(act)
    # FP8: the down projection's input cast rides on the activation kernel, which the epilogue removes
    ops += _linear("mlp_down", tokens, h, f // t, pb, 1, fp8, eager_cast,
                   producer="act" if fused and not epilogue else "", te_linear=te_linear)
    ops += bias(3, h)
    if model.sandwich_norm:  # Gemma's norm on the MLP output, before the residual add
        ops.append(_sandwich_norm("mlp_out_norm", region * h, pb, eager_rms))
    if not fused:
        ops.append(memory_op("output_residual_add", region * h, 3, pb, ADD_FLOPS))
    if recompute == "full":
        # early stop (PyTorch non-reentrant checkpoint): the recompute ends when the down projection packs
        # its saved input, before that GEMM runs; it and the ops after it are not re-run
        tail = next(i for i, op in enumerate(ops) if op.name == "mlp_down") if early_stop else len(ops)
        ops = [replace(op, recompute=True) if i < tail else op for i, op in enumerate(ops)]
    if recompute == "selective_op":
        ops = op_sac.mark(model, ops, pb)
    if mlp_recompute:
        ops = mark_mlp(ops)
    return ops


def _backward(op: Op) -> list[Op]:
    if op.kind == "gemm":
        m, n, k = op.m, op.n, op.k
        # dgrad dA (m×k) = dC (m×n)·Bᵀ; wgrad dB (k×n) = Aᵀ·dC: each 2mnk FLOPs and the same three
        # operand sizes, hence the forward's bytes. A frozen weight gets no wgrad.
        dgrad = replace(op, name=f"{op.name}.dgrad", m=m, n=k, k=n, recompute=False, backward=True)
        if op.frozen:
            return [dgrad]
        return [dgrad, replace(op, name=f"{op.name}.wgrad", m=k, n=n, k=m, recompute=False, backward=True)]
    if op.fused_backward:
        return []
    launches = op.bwd_launches or op.launches
    if op.kind == "attention":
        return [
            replace(
                op,
                name=f"{op.name}.bwd",
                flops=ATTENTION_BWD_FLOPS * op.flops,
                bytes=ATTENTION_BWD_BYTES * op.bytes,
                recompute=False,
                launches=launches,
                backward=True,
            )
        ]
    if op.name.endswith(".fp8_cast"):
        return [fp8_cast_backward(op, launches)]
    if launches == 0:
        return []
    return [
        replace(
            op,
            name=f"{op.name}.bwd",
            flops=MEMORY_BWD * op.flops,
            bytes=op.bwd_bytes or MEMORY_BWD * op.bytes,
            recompute=False,
            launches=launches,
        )
    ]


def recompute_ops(fwd_ops: list[Op]) -> list[Op]:
    """The forward ops activation checkpointing re-runs before the backward, in forward order."""
    return [replace(op, name=f"recompute.{op.name}") for op in fwd_ops if op.recompute]


def backward_ops(fwd_ops: list[Op]) -> list[Op]:
    """Backward kernels for a list of forward ops: the recomputed forward ops first, then the
    backward of each op in reverse order.

    GEMM: dgrad + wgrad, each the forward FLOPs (backward = 2× forward; formulas.md §1.2); a frozen
    GEMM (``Op.frozen``) dgrad only.
    FlashAttention: ``2.5×`` forward FLOPs (formulas.md §1.1), ``2×`` bytes (reads Q, K, V, O, dO,
    LSE; writes dQ, dK, dV). Memory-bound ops: ``2×`` bytes and FLOPs.
    """
    out = recompute_ops(fwd_ops)
    for op in reversed(fwd_ops):
        out += _backward(op)
    return out


def head_ops(model: ModelConfig, b: int, s: int, tp: int, precision_bytes: int,
             kernels: Kernels | None = None, sequence_parallel: bool = False,
             cross_entropy: str = "fused") -> list[Op]:
    """Forward kernels outside the blocks: embedding gather (+ learned positions), final norm,
    logits GEMM (vocab-parallel, ``V/t`` columns) and cross-entropy.

    Embedding: read ``b·s`` rows of ``h``, write them (2 passes; +2 for adding learned positions).
    Cross-entropy over ``b·s × V/t`` logits as the resolved ``cross_entropy`` kind runs it
    (``simulator.workload.loss``).
    Under ``sequence_parallel`` the norms run on the rank's ``b·s/t`` tokens (``layer_ops``).
    """
    pb = precision_bytes
    h, tokens = model.hidden_size, b * s
    region = region_tokens(tokens, tp, sequence_parallel)
    emb_passes = 4 if model.position_embedding == "learned" else 2
    logits_el = tokens * model.vocab_size / tp
    compiled = bool(getattr(kernels, "compile", False))
    fused = kernels is None or kernels.fused_norm_residual or compiled
    eager_rms = not fused and model.norm == "rmsnorm"
    ops = [replace(memory_op("embedding", tokens * h, emb_passes, pb, 0.0), bwd_launches=EMBEDDING_BWD_LAUNCHES)]
    if model.embedding_norm:
        ops.append(_norm("embedding_norm", region * h, pb, eager_rms))
    ops += [
        _norm("final_norm", region * h, pb, eager_rms),
        gemm("logits", tokens, model.vocab_size // tp, h, pb),
        cross_entropy_op(cross_entropy, logits_el, pb),
    ]
    return ops
