"""The loss kernel: cross-entropy over the ``b·s × V/t`` logits, its HBM traffic and kernels per
implementation (``training.kernels.cross_entropy``, resolved by ``activations.cross_entropy_kind``).

A GEMM-free pass over a tensor of ``V/t`` elements per token is cheap per element but not per token:
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

Before 5 December 2026 every kind was priced as three 16-bit passes forward and six backward (18 bytes
per logit at ``p`` = 2): Megatron's loss at 40 and PyTorch's eager one at 48 cost twice that and more,
FlashAttention's at 6 a third. The loss's FLOPs (≈ 3 per logit) are not in ``flops.step``.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.workload.attention_core import SOFTMAX_FLOPS
from simulator.workload.op import Op, memory_op

#: Per kind: bytes per logit element forward and backward as functions of the logits' bytes ``p``, and
#: the kernels launched forward and backward (module docstring).
TRAFFIC = {
    "fused": (lambda p: p + 24, lambda p: p + 12, 6, 3),
    "eager": (lambda p: p + 20, lambda p: p + 24, 3, 4),
    "eager_no_upcast": (lambda p: 4 * p, lambda p: 5 * p, 2, 3),
    "compiled": (lambda p: 2 * p, lambda p: 2 * p, 2, 1),
    "flash": (lambda p: p, lambda p: 2 * p, 1, 1),
}


def cross_entropy_op(kind: str, logits_elements: float, precision_bytes: int) -> Op:
    """The loss's forward op over ``logits_elements`` (its backward from ``bwd_bytes`` / ``bwd_launches``)
    for the resolved ``training.kernels.cross_entropy`` ``kind``."""
    fwd, bwd, fwd_launches, bwd_launches = TRAFFIC[kind]
    p = precision_bytes
    return replace(memory_op("cross_entropy", logits_elements, fwd(p) / p, p, SOFTMAX_FLOPS),
                   launches=fwd_launches, bwd_launches=bwd_launches, bwd_bytes=bwd(p) * logits_elements)
