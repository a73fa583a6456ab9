"""Multi-token prediction (MTP) modules: the work they add outside the transformer blocks.

DeepSeek-V3 report §2.2 (arXiv:2412.19437) and Megatron-Core ``MultiTokenPredictionLayer``
(``megatron/core/transformer/multi_token_prediction.py``): MTP module ``k`` takes the hidden state of
depth ``k−1`` and the embedding of the token ``k`` places ahead, RMS-normalises each (``hnorm``,
``enorm``), concatenates them and projects ``2h → h`` (``eh_proj``, a column-parallel linear), runs one
transformer block of the decoder's last block spec (an MoE block in DeepSeek-V3), then the shared
final norm, output head and cross-entropy for its own targets. The embedding and the output head are
shared with the main model, so the module's own parameters are the block's, ``eh_proj``'s ``2h·h`` and
the two norms' ``2h``.

Here the block is one more block unit of the last (virtual) pipeline stage
(``simulator.parallel.pipeline_split``) and everything else runs with the head: per module, the
embedding gather of the shifted tokens, the two norms and ``eh_proj`` before, and the head's norm,
logits and cross-entropy again. The module's block runs before its head as in Megatron; putting its
``eh_proj`` with the head (after the block) leaves the stage's work unchanged.
"""

from __future__ import annotations

from typing import Any

from simulator.workload import ops as wops


def head_ops(model: Any, b: int, s: int, tp: int, pb: int, head: list) -> list:
    """Forward ops of the ``model.mtp_layers`` modules outside their blocks; ``head`` is the main
    model's forward head ops after the embedding (final norm, logits, cross-entropy)."""
    h, tokens = model.hidden_size, b * s
    one = [
        wops.memory_op("mtp_embedding", tokens * h, 2, pb, 0.0),
        wops.memory_op("mtp_enorm", tokens * h, 2, pb, wops._NORM_FLOPS),
        wops.memory_op("mtp_hnorm", tokens * h, 2, pb, wops._NORM_FLOPS),
        wops.gemm("mtp_eh_proj", tokens, h // tp, 2 * h, pb),
        *head,
    ]
    return one * model.mtp_layers


def params(model: Any, tp: int) -> float:
    """Parameters of the modules outside their blocks, per TP rank: ``eh_proj`` (``2h·h/t``) and the
    two norms (``2h``)."""
    h = model.hidden_size
    return float(model.mtp_layers * (2 * h * h / tp + 2 * h))
