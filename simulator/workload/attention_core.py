"""The attention core of a transformer block on one TP rank: the fused (FlashAttention-style) kernel, or
the unfused path of two batched GEMMs around a softmax (Megatron's fused scale-mask-softmax or its fp32
PyTorch fallback, or Hugging Face's eager chain), its dropout and the context copy back to the
token-major layout.

``workload.ops.layer_ops`` places these ops in a block; ``workload.activations`` asks
``fused_softmax_available`` what the fallback saves.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.config.model import ModelConfig
from simulator.workload.op import Op, gemm, memory_op

#: FLOPs per element of a softmax (order of magnitude only: it is bandwidth-bound); also the
#: cross-entropy's and the router's (``workload.ops``, ``workload.moe_ops``).
SOFTMAX_FLOPS = 3.0
#: fp32 softmax statistics (log-sum-exp) FlashAttention writes per row per head (Dao et al. 2022).
LSE_BYTES = 4
#: FlashAttention-2 backward = 3 kernels (``dot(dO, O)`` preprocess, the main backward, the dQ
#: fp32→16-bit conversion; FA2 ``flash_bwd_launch_template.h``).
FA_BWD_LAUNCHES = 3
#: Dropout mask bytes per element (PyTorch ``native_dropout`` returns a bool mask; Korthikanti et al.
#: 2022 §4.1 count 1-byte masks, as ``workload.activations`` does).
DROPOUT_MASK_BYTES = 1
#: Bytes per element of Transformer Engine's casts around FP8 attention (``fp8_cast``): read the 16-bit tensor
#: (2 B), write its FP8 copy (1 B).
FP8_CAST_BYTES = 3
# Attention dropout on the unfused path (Megatron ``CoreAttention``: ``attention_dropout`` of the
# softmax output; FlashAttention applies dropout inside its kernel): forward reads p, writes p and the
# mask; backward reads the gradient and the mask, writes p: ``(2p + 1)`` bytes per score each way.
# The unfused path also copies its context ``[b, heads, s, d] → [s, b, heads·d]`` (Megatron
# ``permute(...).contiguous()``, HF ``transpose(1, 2).contiguous()``): 2 passes forward and backward.

# --- Megatron's fused scale-mask-softmax and its PyTorch fallback (unfused attention core) ---------
# ``FusedScaleMaskSoftmax`` runs its CUDA kernel only when the shapes suit its warp layout: Megatron-LM
# / Megatron-DeepSpeed ``fused_softmax.py`` require ``16 < sk <= 16384`` (Megatron-DeepSpeed 2023: 2048),
# ``sq % 4 == 0`` and ``b·np % 4 == 0`` (``attn_batches``: sequences × heads on this TP rank). Otherwise
# it runs ``forward_torch_softmax``: ``input.float()``, ``* scale``, ``mask_func`` (``masked_fill_``),
# ``torch.nn.Softmax`` in fp32, ``.half()`` (softmax in fp32 is forced with query-key layer scaling, the
# GPT default). Per score element, forward ``(p+4) + 8 + (8+1) + 8 + (4+p)`` bytes, backward (autograd
# through the same five ops) ``(p+4) + 12 + (8+1) + 8 + (4+p)``; five kernels each way instead of one.
SOFTMAX_FUSED_MAX_SK = 16384
SOFTMAX_FALLBACK_FWD_BYTES, SOFTMAX_FALLBACK_BWD_BYTES, SOFTMAX_FALLBACK_LAUNCHES = 33, 37, 5
#: Host calls of the fallback beyond the reference blocks' ``masked_fill`` + ``softmax``
#: (``workload.host``): ``.float()``, ``* scale`` and ``.half()``.
SOFTMAX_FALLBACK_EXTRA_CALLS = 3


# --- Hugging Face transformers' eager attention (``attn_implementation="eager"``) --------------------
# ``eager_attention_forward`` (Llama and the models written after it; transformers 4.34's
# ``LlamaAttention.forward`` the same): ``matmul(q, kᵀ) * scaling`` (or ``/ sqrt(d)``), ``+ causal_mask``
# (a ``[b, 1, s, s]`` tensor broadcast over the heads, its reads cached), ``softmax(dtype=float32)``,
# ``.to(q.dtype)``, ``dropout`` (p = 0 returns its input: ATen ``_dropout``), ``matmul(·, v)``. Per score
# element beyond the two GEMMs, forward: scale ``2p``, mask add ``2p``, softmax ``p + 4`` (fp32 out),
# cast ``4 + p`` → ``6p + 8`` bytes in four kernels; backward (autograd): cast ``p + 4``, softmax
# ``4 + 4 + p`` (its saved fp32 output and fp32 gradient in, the 16-bit input's dtype out), scale ``2p``;
# the add passes its gradient through → ``4p + 12`` in three kernels. Megatron's fused kernel moves ``2p``
# forward and ``3p`` backward in one each. Baichuan's remote code (ALiBi: a per-head ``[heads, s, s]``
# mask, then ``torch.max`` against the dtype's minimum, softmax in the 16-bit dtype) moves ``9p`` forward
# and ``8p`` backward, 18 and 16 bytes at ``p = 2`` against the chain's 20 and 20: priced the same.
#: The chain's fp32 bytes per score element, forward and backward; its 16-bit passes add ``6p`` and ``4p``.
HF_EAGER_FWD_BYTES, HF_EAGER_BWD_BYTES = 8, 12
HF_EAGER_LAUNCHES, HF_EAGER_BWD_LAUNCHES = 4, 3
#: Host calls of the chain beyond the reference blocks' ``masked_fill`` + ``softmax`` (``workload.host``):
#: the scale and the cast.
HF_EAGER_EXTRA_CALLS = 2


def fused_softmax_available(b: int, heads: int, s: int) -> bool:
    """Whether Megatron's fused scale-mask-softmax kernel takes ``b`` sequences of ``heads`` heads (on
    this TP rank) at sequence length ``s`` (self-attention, ``sq = sk = s``); the comment block above."""
    return 16 < s <= SOFTMAX_FUSED_MAX_SK and s % 4 == 0 and (b * heads) % 4 == 0


def _softmax(scores_el: float, pb: int, fused: bool, hf_eager: bool = False) -> Op:
    """The softmax of the unfused core: the fused kernel (read and write the scores), the fp32
    PyTorch fallback chain or Hugging Face's eager chain (comment blocks above)."""
    if hf_eager:
        return Op("attn_softmax_hf_eager", "memory", SOFTMAX_FLOPS * scores_el, scores_el * (HF_EAGER_FWD_BYTES + 6 * pb),
                  launches=HF_EAGER_LAUNCHES, bwd_launches=HF_EAGER_BWD_LAUNCHES,
                  bwd_bytes=scores_el * (HF_EAGER_BWD_BYTES + 4 * pb), extra_host_calls=HF_EAGER_EXTRA_CALLS)
    if fused:
        return memory_op("attn_softmax", scores_el, 2, pb, SOFTMAX_FLOPS)
    return Op("attn_softmax_fp32_fallback", "memory", SOFTMAX_FLOPS * scores_el,
              scores_el * (SOFTMAX_FALLBACK_FWD_BYTES + 2 * pb), launches=SOFTMAX_FALLBACK_LAUNCHES,
              bwd_launches=SOFTMAX_FALLBACK_LAUNCHES, bwd_bytes=scores_el * (SOFTMAX_FALLBACK_BWD_BYTES + 2 * pb),
              extra_host_calls=SOFTMAX_FALLBACK_EXTRA_CALLS)


def attention_core_ops(model: ModelConfig, b: int, s: int, tp: int, pb: int, flash: bool,
                       hf_eager: bool = False, fp8: bool = False) -> list[Op]:
    """The attention core of one block on one TP rank (``a/t`` query heads, ``g_kv/t`` KV heads);
    ``hf_eager``: the unfused core as Hugging Face's eager attention runs it; ``fp8``: the fused kernel in FP8
    (``training.kernels.fp8_attention``) after Transformer Engine's cast of its inputs (``fp8_cast``)."""
    heads = model.n_heads // tp
    d = model.d_head
    q_el = b * s * model.q_dim / tp
    kv_el = b * s * model.kv_dim / tp
    if not flash:
        return unfused_core_ops(model, b, s, heads, d, d, pb, hf_eager)
    # FA forward: 4·b·s²·a·d_h, /2 causal (FA benchmark `flops` helper); reads Q, K, V, writes O + LSE.
    flops = 4.0 * b * s * s * heads * d / 2
    io = (2 * q_el + 2 * kv_el) * pb + b * heads * s * LSE_BYTES
    # k: the key/value length each query tile loops over (the compute model's main-loop fill)
    core = Op("attention", "attention", flops, float(io), k=s, bwd_launches=FA_BWD_LAUNCHES)
    return [fp8_cast(q_el, kv_el), core] if fp8 else [core]


def fp8_cast(q_el: float, kv_el: float) -> Op:
    """Transformer Engine's casts around FP8 attention: forward Q, K and V to FP8 in one kernel
    (``combine_and_quantize``, ``backends.FusedAttnFunc``), backward the output gradient (the query's size);
    the output and dQ, dK, dV stay 16-bit (``NVTE_DPA_FP8CS_O_in_F16`` default 1; cuDNN returns the input
    gradients in BF16). ``FP8_CAST_BYTES`` per element each way; the kernel's rate: ``hardware.attention``."""
    cast = memory_op("attention.fp8_quantize", q_el + 2 * kv_el, FP8_CAST_BYTES, 1, 0.0)
    return replace(cast, bwd_bytes=float(FP8_CAST_BYTES * q_el))


def unfused_core_ops(model: ModelConfig, b: int, s: int, heads: int, d_qk: int, d_v: int, pb: int,
                     hf_eager: bool = False) -> list[Op]:
    """The unfused core of ``heads`` heads (e.g. Megatron's fused scale-mask-softmax between two batched
    GEMMs): the full s×s matrix of scores over ``d_qk``-wide queries and keys, its softmax and dropout, the
    product with ``d_v``-wide values and the context copy back to the token-major layout (module constants
    above). ``d_qk`` and ``d_v`` differ in multi-head latent attention (``workload.moe_ops``)."""
    scores_el = b * heads * s * s
    ops = [gemm("attn_scores", s, s, d_qk, pb, batch=b * heads),
           _softmax(scores_el, pb, fused_softmax_available(b, heads, s), hf_eager)]
    if model.dropout > 0:
        drop = scores_el * (2 * pb + DROPOUT_MASK_BYTES)
        ops.append(Op("attn_dropout", "memory", scores_el, drop, bwd_bytes=drop))
    return [*ops, gemm("attn_v", s, d_v, s, pb, batch=b * heads),
            memory_op("attn_context_copy", b * s * heads * d_v, 2, pb, 0.0)]
