"""Per-kernel workload of a training step on one GPU: GEMMs, attention and memory-bound passes.

The compute model (``simulator.hardware``) turns each :class:`Op` into seconds with a roofline:
``max(flops / achievable FLOP/s, bytes / achievable HBM B/s)``. This module only counts.

Conventions (each a reason, not a measurement):

* Tensor parallelism follows Megatron-LM (Shoeybi et al. 2019): QKV and MLP-up are column-parallel
  (output width ÷ t), out-projection and MLP-down row-parallel (input width ÷ t); norms, residual
  adds and the embedding output are replicated on every TP rank (no sequence parallelism). The TP
  all-reduces are communication, built by ``simulator.parallel``, not ops here.
* QKV is one fused GEMM and SwiGLU's gate and up are one fused GEMM, as in Megatron-LM.
* Bias adds are fused into GEMM epilogues / the activation kernel (Megatron's bias-GeLU fusion) and
  cost nothing extra; there is no dropout (modern LLM pre-training sets it to 0).
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

from dataclasses import dataclass, replace
from typing import Literal, Protocol

from simulator.config.model import ModelConfig
from simulator.workload.flops import Recompute

OpKind = Literal["gemm", "attention", "memory"]

#: FLOPs per element of the memory-bound kernels (order of magnitude only: they are bandwidth-bound,
#: so these never decide a roofline time). Norm: mean/variance or mean-square, scale, shift.
_NORM_FLOPS, _ADD_FLOPS, _ACT_FLOPS, _ROPE_FLOPS, _SOFTMAX_FLOPS = 5.0, 1.0, 8.0, 3.0, 3.0
#: fp32 softmax statistics (log-sum-exp) FlashAttention writes per row per head (Dao et al. 2022).
_LSE_BYTES = 4
#: Backward factors: FlashAttention backward ≈ 2.5× forward FLOPs (5 matmuls vs 2, it recomputes QKᵀ;
#: FA benchmarks/benchmark_flash_attention.py); memory-bound backward ≈ 2× forward traffic
#: (reads the saved input and the output gradient, writes the input gradient, plus reductions).
ATTENTION_BWD_FLOPS = 2.5
ATTENTION_BWD_BYTES = 2.0
MEMORY_BWD = 2.0


class Kernels(Protocol):
    """The kernel switches of ``training.kernels`` this module reads."""

    flash_attention: bool
    fused_norm_residual: bool


@dataclass(frozen=True)
class Op:
    """One kernel on one GPU. ``flops`` in FLOP, ``bytes`` in HBM bytes read + written.

    GEMMs carry their shape ``C (m × n) = A (m × k) · B (k × n)``, ``batch`` independent products
    (attention heads × sequences for the unfused attention core). ``recompute`` marks an op that
    activation checkpointing runs again before the backward pass.
    """

    name: str
    kind: OpKind
    flops: float
    bytes: float
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    recompute: bool = False

    @property
    def shape(self) -> tuple[int, int, int] | None:
        return (self.m, self.n, self.k) if self.kind == "gemm" else None


def gemm(name: str, m: int, n: int, k: int, precision_bytes: int, batch: int = 1) -> Op:
    """A (batched) GEMM: ``2·m·n·k·batch`` FLOPs, ``(m·k + k·n + m·n)·batch·precision_bytes`` bytes."""
    return Op(
        name=name,
        kind="gemm",
        flops=2.0 * m * n * k * batch,
        bytes=float((m * k + k * n + m * n) * batch * precision_bytes),
        m=m,
        n=n,
        k=k,
        batch=batch,
    )


def memory_op(
    name: str, elements: float, passes: float, precision_bytes: int, flops_per_element: float
) -> Op:
    """A bandwidth-bound elementwise kernel: ``passes·elements·precision_bytes`` bytes."""
    return Op(
        name=name,
        kind="memory",
        flops=flops_per_element * elements,
        bytes=passes * elements * precision_bytes,
    )


def _add_norm(name: str, tokens_h: float, fused: bool, pb: int) -> list[Op]:
    """Residual add followed by a norm: fused 4 passes, else add (3) + norm (2)."""
    if fused:
        return [memory_op(f"{name}_add_norm", tokens_h, 4, pb, _ADD_FLOPS + _NORM_FLOPS)]
    return [
        memory_op(f"{name}_residual_add", tokens_h, 3, pb, _ADD_FLOPS),
        memory_op(f"{name}_norm", tokens_h, 2, pb, _NORM_FLOPS),
    ]


def _attention_ops(model: ModelConfig, b: int, s: int, tp: int, pb: int, flash: bool) -> list[Op]:
    """The attention core of one block on one TP rank (``a/t`` query heads, ``g_kv/t`` KV heads)."""
    heads = model.n_heads // tp
    d = model.d_head
    q_el = b * s * model.q_dim / tp
    kv_el = b * s * model.kv_dim / tp
    if flash:
        # FA forward: 4·b·s²·a·d_h, /2 causal (FA benchmark `flops` helper); reads Q, K, V, writes O + LSE.
        flops = 4.0 * b * s * s * heads * d / 2
        io = (2 * q_el + 2 * kv_el) * pb + b * heads * s * _LSE_BYTES
        return [Op("attention", "attention", flops, float(io))]
    # Unfused (e.g. Megatron's fused scale-mask-softmax between two batched GEMMs): full s×s matrix.
    scores_el = b * heads * s * s
    return [
        gemm("attn_scores", s, s, d, pb, batch=b * heads),
        memory_op("attn_softmax", scores_el, 2, pb, _SOFTMAX_FLOPS),
        gemm("attn_v", s, d, s, pb, batch=b * heads),
    ]


def layer_ops(
    model: ModelConfig,
    b: int,
    s: int,
    tp: int,
    precision_bytes: int,
    kernels: Kernels,
    recompute: Recompute = "none",
) -> list[Op]:
    """Forward kernels of ONE transformer block on one GPU, in execution order.

    GEMM and attention FLOPs sum to ``flops.layer_forward(model, b, s, causal=True).total / tp`` with
    FlashAttention, and to the non-causal total ``/ tp`` without it (the unfused kernel computes the
    masked half too). ``recompute`` marks the ops that checkpointing re-runs: all of them (full) or the
    attention core (selective; with FlashAttention nothing is stored for it, so nothing is marked,
    since the FA backward already recomputes QKᵀ).
    """
    pb = precision_bytes
    h, f, t = model.hidden_size, model.ffn_hidden_size, tp
    tokens = b * s
    fused = kernels.fused_norm_residual
    ops: list[Op] = []
    if fused:  # the previous block's output residual add, fused with this block's input norm
        ops += _add_norm("input", tokens * h, True, pb)
    else:
        ops.append(memory_op("input_norm", tokens * h, 2, pb, _NORM_FLOPS))
    ops.append(gemm("qkv", tokens, (model.q_dim + 2 * model.kv_dim) // t, h, pb))
    qk_el = tokens * (model.q_dim + model.kv_dim) / t
    if model.qk_norm:
        ops.append(memory_op("qk_norm", qk_el, 2, pb, _NORM_FLOPS))
    if model.position_embedding == "rope":
        ops.append(memory_op("rotary", qk_el, 2, pb, _ROPE_FLOPS))
    core = _attention_ops(model, b, s, t, pb, kernels.flash_attention)
    if recompute == "selective" and not kernels.flash_attention:
        core = [replace(op, recompute=True) for op in core]
    ops += core
    ops.append(gemm("out_proj", tokens, h, model.q_dim // t, pb))
    ops += _add_norm("post_attn", tokens * h, fused, pb)
    up = (model.mlp_matrices - 1) * f // t
    ops.append(gemm("mlp_up", tokens, up, h, pb))
    # GELU: read f, write f; SwiGLU: read gate and up (2f), write f.
    ops.append(memory_op(f"mlp_{model.mlp}", tokens * f / t, model.mlp_matrices, pb, _ACT_FLOPS))
    ops.append(gemm("mlp_down", tokens, h, f // t, pb))
    if not fused:
        ops.append(memory_op("output_residual_add", tokens * h, 3, pb, _ADD_FLOPS))
    if recompute == "full":
        ops = [replace(op, recompute=True) for op in ops]
    return ops


def _backward(op: Op) -> list[Op]:
    if op.kind == "gemm":
        m, n, k = op.m, op.n, op.k
        # dgrad dA (m×k) = dC (m×n)·Bᵀ; wgrad dB (k×n) = Aᵀ·dC: each 2mnk FLOPs and the same three
        # operand sizes, hence the forward's bytes.
        return [
            replace(op, name=f"{op.name}.dgrad", m=m, n=k, k=n, recompute=False),
            replace(op, name=f"{op.name}.wgrad", m=k, n=n, k=m, recompute=False),
        ]
    if op.kind == "attention":
        return [
            replace(
                op,
                name=f"{op.name}.bwd",
                flops=ATTENTION_BWD_FLOPS * op.flops,
                bytes=ATTENTION_BWD_BYTES * op.bytes,
                recompute=False,
            )
        ]
    return [
        replace(
            op,
            name=f"{op.name}.bwd",
            flops=MEMORY_BWD * op.flops,
            bytes=MEMORY_BWD * op.bytes,
            recompute=False,
        )
    ]


def recompute_ops(fwd_ops: list[Op]) -> list[Op]:
    """The forward ops activation checkpointing re-runs before the backward, in forward order."""
    return [replace(op, name=f"recompute.{op.name}") for op in fwd_ops if op.recompute]


def backward_ops(fwd_ops: list[Op]) -> list[Op]:
    """Backward kernels for a list of forward ops: the recomputed forward ops first, then the
    backward of each op in reverse order.

    GEMM: dgrad + wgrad, each the forward FLOPs (backward = 2× forward; formulas.md §1.2).
    FlashAttention: ``2.5×`` forward FLOPs (formulas.md §1.1), ``2×`` bytes (reads Q, K, V, O, dO,
    LSE; writes dQ, dK, dV). Memory-bound ops: ``2×`` bytes and FLOPs.
    """
    out = recompute_ops(fwd_ops)
    for op in reversed(fwd_ops):
        out += _backward(op)
    return out


def head_ops(model: ModelConfig, b: int, s: int, tp: int, precision_bytes: int) -> list[Op]:
    """Forward kernels outside the blocks: embedding gather (+ learned positions), final norm,
    logits GEMM (vocab-parallel, ``V/t`` columns) and cross-entropy.

    Embedding: read ``b·s`` rows of ``h``, write them (2 passes; +2 for adding learned positions).
    Cross-entropy over ``b·s × V/t`` logits: read for the max, read for the exp-sum, write the
    softmax that the backward turns into the logits gradient (3 passes; Megatron
    ``vocab_parallel_cross_entropy``). Its FLOPs (≈ ``3·b·s·V``) are not in ``flops.step``.
    """
    pb = precision_bytes
    h, tokens = model.hidden_size, b * s
    emb_passes = 4 if model.position_embedding == "learned" else 2
    logits_el = tokens * model.vocab_size / tp
    ops = [memory_op("embedding", tokens * h, emb_passes, pb, 0.0)]
    if model.embedding_norm:
        ops.append(memory_op("embedding_norm", tokens * h, 2, pb, _NORM_FLOPS))
    ops += [
        memory_op("final_norm", tokens * h, 2, pb, _NORM_FLOPS),
        gemm("logits", tokens, model.vocab_size // tp, h, pb),
        memory_op("cross_entropy", logits_el, 3, pb, _SOFTMAX_FLOPS),
    ]
    return ops


#: Adam bytes per parameter. Fused (DeepSpeed FusedAdam / torch ``fused=True``, one multi-tensor pass):
#: read fp32 master, m, v, grad (16 B), write master, m, v (12 B) and the 16-bit copy (2 B) = 30 B.
#: Unfused (torch ``optim/adam.py::_single_tensor_adam``): one kernel per line of the update, below.
_ADAM_FUSED_BYTES = 4 * 4 + 3 * 4 + 2
_ADAM_UNFUSED_PASSES: tuple[tuple[str, int, int], ...] = (
    # (kernel, bytes read, bytes written) per parameter; fp32 state and gradient.
    ("adam_exp_avg_lerp", 8, 4),  # m.lerp_(g, 1-β1)
    ("adam_exp_avg_sq_mul", 4, 4),  # v.mul_(β2)
    ("adam_exp_avg_sq_addcmul", 8, 4),  # v.addcmul_(g, g, 1-β2)
    ("adam_sqrt", 4, 4),  # v.sqrt()
    ("adam_div", 4, 4),  # / sqrt(bias_correction2)
    ("adam_add_eps", 4, 4),  # .add_(eps)
    ("adam_addcdiv", 12, 4),  # p.addcdiv_(m, denom, -lr/bc1)
    ("adam_cast_params", 4, 2),  # fp32 master -> 16-bit working copy
)
#: Adam arithmetic per parameter (moments, bias correction, sqrt, divide, update): O(10) (formulas.md §1.2).
ADAM_FLOPS_PER_PARAM = 12.0


def optimizer_ops(n_params_local: float, fused_adam: bool) -> list[Op]:
    """Adam step over the ``n_params_local`` parameters this GPU updates (memory-bound).

    Fused: one op of ``30`` B/param. Unfused: 8 elementwise kernels, ``78`` B/param in total
    (table ``_ADAM_UNFUSED_PASSES``). FLOPs ``≈ 12`` per parameter either way.
    """
    n = float(n_params_local)
    if fused_adam:
        return [Op("adam", "memory", ADAM_FLOPS_PER_PARAM * n, _ADAM_FUSED_BYTES * n)]
    per_kernel = ADAM_FLOPS_PER_PARAM / len(_ADAM_UNFUSED_PASSES)
    return [Op(name, "memory", per_kernel * n, (rd + wr) * n) for name, rd, wr in _ADAM_UNFUSED_PASSES]
