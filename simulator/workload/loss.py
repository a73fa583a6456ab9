"""The loss: cross-entropy over the ``b·s × V/t`` logits, per implementation (``training.kernels.cross_entropy``,
``auto`` resolved by :func:`kind`): its bytes per logit at the loss's memory peak (``Loss.peak_bytes``, read by
``simulator.workload.activations``) and its HBM traffic and kernels (``Loss.fwd_bytes`` …, read by the work
builder through :func:`cross_entropy_op`), so that each implementation is described in one place.

HBM traffic. A GEMM-free pass over a tensor of ``V/t`` elements per token is cheap per element but not per token:
at Llama 3's 128,256-entry vocabulary one byte per logit is 128 kB per token, so the implementation's
bytes per logit decide whether the loss is 1 % or 5 % of a small model's step. Bytes per logit element,
``p`` the 16-bit logits' bytes, counted from each implementation's code (one read or write of a tensor
is one pass; a fused kernel's reductions ride on its read):

* ``fused``: Megatron-Core's ``_VocabParallelCrossEntropy`` (``megatron/core/fusions/
  fused_cross_entropy.py``, ``cross_entropy_loss_fusion``, NeMo's and Megatron-Bridge's default). Forward:
  ``calculate_logits_max`` upcasts to fp32 and takes the row max in one fused kernel (read ``p``, write
  4), ``_exp_logits_inplace`` (read 4, write 4), ``exp_logits.sum`` (read 4), the division by the sum in
  place (read 4, write 4): ``p + 24``. Backward: ``_scale_gradients_inplace`` (read 4, write 4) and the
  cast back to the logits' dtype (read 4, write ``p``): ``p + 12``. The target gathers and scatters touch
  one element per token. Kernels: max, gather, exp, sum, concatenation, loss forward; scatter, scale, cast
  backward.
* ``eager``: PyTorch ``F.cross_entropy(logits.float(), labels)`` (torchtitan and the FSDP trainers). Forward:
  the upcast (read ``p``, write 4) and ``log_softmax``, whose kernel for rows longer than shared memory
  (``cunn_SoftMaxForward``) reads the row for the max, for the sum of exponentials and for the output
  (read 3 × 4, write 4): ``p + 20``. Backward: ``nll_loss_backward`` writes a dense zero-filled fp32
  gradient (write 4), ``cunn_SoftMaxBackward`` reads it for its row sum and again with the saved output
  (read 3 × 4, write 4), and the upcast's backward casts down (read 4, write ``p``): ``p + 24``. Kernels:
  upcast, log-softmax, NLL forward; fill, scatter, log-softmax backward, cast backward.
* ``eager_no_upcast``: the same on the 16-bit logits (NeMo AutoModel ``fp32_upcast: false``): ``4p``
  forward, ``5p`` backward; 2 and 3 kernels.
* ``compiled``: torch.compile fuses the log-softmax and the loss (Inductor: a looped reduction reads the
  logits for the max and again for the sum, ``2p``) and in the backward recomputes the softmax from the
  saved logits and statistics (read ``p``, write ``p``): ``2p`` each way; 2 kernels forward, 1 backward.
* ``flash``: FlashAttention's ``flash_attn.losses.cross_entropy.CrossEntropyLoss`` (llm-foundry's MPT
  default): its forward kernel reads each row once, keeping the max and log-sum-exp in registers
  (``p``), its backward kernel reads the logits and writes their gradient (``2p``); 1 kernel each way.
* ``te``: Transformer Engine's Triton loss (``transformer_engine/pytorch/triton/cross_entropy.py``), which
  Megatron-Core runs for ``cross_entropy_loss_fusion`` with ``cross_entropy_fusion_impl te``, Megatron-Bridge's
  recipe and performance-preset default since its first release (Megatron-Bridge PR #595, September 2025;
  ``perf_recipes/_common.py _benchmark_common``). Forward: ``online_softmax_kernel`` reads each row once for
  its max and sum (``p``) and ``cross_entropy_forward_kernel`` touches three fp32 statistics per row.
  Backward: ``cross_entropy_backward_kernel`` reads the logits and writes their gradient in place
  (``2p``): ``p`` and ``2p``, FlashAttention's traffic, in 2 kernels forward and 1 backward. Later TE
  versions keep an fp32 gradient (TransformerEngine PR #3193, 2026), a few bytes per logit more (U).

Before 5 December 2026 every kind was priced as three 16-bit passes forward and six backward (18 bytes
per logit at ``p`` = 2): Megatron's loss at 40 and PyTorch's eager one at 48 cost twice that and more,
FlashAttention's at 6 a third. The loss's FLOPs (≈ 3 per logit) are not in ``flops.step``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, NamedTuple

from simulator.workload.attention_core import SOFTMAX_FLOPS
from simulator.workload.op import Op, memory_op

#: Bytes per logit of the fp32 log-probabilities cross-entropy keeps for its backward (PyTorch
#: ``cross_entropy`` upcasts 16-bit logits; Megatron counts 4 B/logit in ``theoretical_memory_usage``).
LOGPROB_BYTES = 4


class Loss(NamedTuple):
    """One implementation: bytes per logit at the memory peak, forward and backward HBM bytes per logit
    (functions of the 16-bit logits' bytes ``p``), and kernels launched forward and backward."""

    peak_bytes: Callable[[int], float]
    fwd_bytes: Callable[[int], float]
    bwd_bytes: Callable[[int], float]
    fwd_kernels: int
    bwd_kernels: int


#: Memory at the loss's peak, by kind (``p``: 16-bit bytes):
#:
#: * ``fused``: Megatron's ``_VocabParallelCrossEntropy`` keeps the 16-bit logits and the fp32 softmax
#:   it computes in place (``exp`` with ``out=``) and turns into the gradient in place: ``p + 4``
#:   (Megatron ``theoretical_memory_usage.py`` counts the 4 B/logit);
#: * ``eager``: PyTorch ``F.cross_entropy(pred.float(), labels)`` = ``log_softmax`` + ``nll_loss``.
#:   ``log_softmax`` saves its fp32 output; in the backward ``nll_loss_backward`` writes a dense fp32
#:   gradient of the logits' shape and ``_log_softmax_backward_data(grad, result, ...)`` a third fp32
#:   tensor (PyTorch ``tools/autograd/derivatives.yaml``): ``3 · 4`` = 12 B at the backward's peak
#:   (torchtitan ``del pred`` frees the 16-bit logits before ``loss.backward()``; the forward's
#:   16-bit + fp32 copy + fp32 log-probs = ``p + 8`` is lower);
#: * ``eager_no_upcast``: the same on the 16-bit logits (NeMo AutoModel ``MaskedCrossEntropy`` with
#:   ``fp32_upcast: false``): the three tensors in the training dtype, ``3p``;
#: * ``compiled``: torch.compile fuses the upcast, log-softmax, NLL and their backward; what stays is
#:   the saved 16-bit logits and the 16-bit gradient written for the output layer: ``2p`` (D);
#: * ``flash``: FlashAttention's ``flash_attn.losses.cross_entropy.CrossEntropyLoss`` (llm-foundry's MPT
#:   default ``loss_fn: fused_crossentropy``, ``ComposerMPTCausalLM``): its kernel reads the 16-bit
#:   logits in fp32 registers and saves them with one fp32 log-sum-exp per row; the backward recomputes
#:   the softmax from them and writes a 16-bit gradient of the logits' shape: ``2p`` per logit (the
#:   per-row statistic is negligible);
#: * ``te``: Transformer Engine's Triton loss keeps the 16-bit logits, three fp32 statistics per row and
#:   writes the gradient into the logits in place: ``p``.
#:
#: Traffic and kernels: module docstring.
IMPLEMENTATIONS: dict[str, Loss] = {
    "fused": Loss(lambda p: p + LOGPROB_BYTES, lambda p: p + 24, lambda p: p + 12, 6, 3),
    "eager": Loss(lambda p: 3 * 4, lambda p: p + 20, lambda p: p + 24, 3, 4),
    "eager_no_upcast": Loss(lambda p: 3 * p, lambda p: 4 * p, lambda p: 5 * p, 2, 3),
    "compiled": Loss(lambda p: 2 * p, lambda p: 2 * p, lambda p: 2 * p, 2, 1),
    "flash": Loss(lambda p: 2 * p, lambda p: p, lambda p: 2 * p, 1, 1),
    "te": Loss(lambda p: p, lambda p: p, lambda p: 2 * p, 2, 1),
}


def kind(scenario: Any) -> str:
    """``training.kernels.cross_entropy`` with ``auto`` resolved: PyTorch's eager loss under FSDP
    (torchtitan and the FSDP trainers call ``F.cross_entropy``), Megatron's fused kernel otherwise."""
    k = scenario.training.kernels.cross_entropy
    if k == "auto":
        return "eager" if scenario.parallel.framework == "fsdp" else "fused"
    return k


def cross_entropy_op(implementation: str, logits_elements: float, precision_bytes: int) -> Op:
    """The loss's forward op over ``logits_elements`` (its backward from ``bwd_bytes`` / ``bwd_launches``)
    for a resolved ``training.kernels.cross_entropy`` (:func:`kind`)."""
    loss, p = IMPLEMENTATIONS[implementation], precision_bytes
    return replace(memory_op("cross_entropy", logits_elements, loss.fwd_bytes(p) / p, p, SOFTMAX_FLOPS),
                   launches=loss.fwd_kernels, bwd_launches=loss.bwd_kernels,
                   bwd_bytes=loss.bwd_bytes(p) * logits_elements)
