"""Where an MoE block's tensor-parallel collectives go: beside the attention's GEMMs, or on the compute stream.

An MoE block's attention is a dense block's (the same Transformer Engine linear modules); only its MLP
slot differs. So under ``parallel.tp_comm_overlap`` its attention runs the dense block's userbuffers plan
(``tp_overlap.sp_forward_block`` / ``sp_backward_piece``), and without it Megatron's default asynchronous
TP backward (``tp_overlap.async_backward_piece``). What the block does not place, and the shared experts'
collectives (a tensor-parallel MLP that no GEMM pairing covers), ``tp_plain.block_tp`` issues on the
compute stream (``simulator.parallel.schedule``). The decision is taken once per work
(``expert.attach``: ``MoEWork.tp_placed_fwd`` / ``tp_placed_bwd``), not per block and micro-batch.
"""

from __future__ import annotations

from typing import Any

from simulator.parallel import tp_overlap


def tp_placed(work: Any, phase: str) -> bool:
    """Whether the MoE block places its attention's tensor-parallel collectives itself in ``phase``
    ("fwd" or "bwd"), beside the GEMMs that produce or consume them, instead of leaving them to
    ``tp_plain.block_tp`` on the compute stream (:func:`placement`)."""
    return work.moe.tp_placed_fwd if phase == "fwd" else work.moe.tp_placed_bwd


def placement(work: Any, pre: tuple, bwd_pre: tuple) -> tuple[bool, bool]:
    """(forward, backward) of :func:`tp_placed`: under ``parallel.tp_comm_overlap`` (Transformer Engine
    userbuffers, ``tp_overlap.sp_forward_block`` / ``sp_backward_piece``, both passes), and in the
    backward under Megatron's default asynchronous TP backward (``tp_overlap.async_backward_piece``),
    as for a dense block (module docstring). MLA's projections and unnamed test ops keep the plain plan."""
    if work.tp_allreduce_bytes <= 0 or not work.sequence_parallel:
        return False, False
    fwd = work.tp_comm_overlap and tp_overlap.sp_recognised(pre)
    bwd = (work.tp_comm_overlap or work.tp_async_backward) and tp_overlap.sp_recognised(bwd_pre, ".dgrad")
    return bool(fwd), bool(bwd)


def plain_tp_calls(work: Any, phase: str) -> int:
    """How many of ``tp_plain.block_tp``'s collective pairs (reduce-scatter and all-gather of ``b·s·h``
    under sequence parallelism, an all-reduce without) the schedule issues on the compute stream for an
    MoE block in ``phase`` ("fwd" or "bwd"): the attention's unless the block placed them
    (:func:`tp_placed`), and the shared experts', a tensor-parallel MLP on the gathered tokens
    (Megatron-Core ``SharedExpertMLP``: column-parallel fc1, row-parallel fc2, like a dense block's MLP)
    that no GEMM pairing covers; the backward also re-runs the forward's under full recomputation, and the
    shared experts' as often as recompute modules re-run them (``MoEWork.shared_reruns``)."""
    shared = _shared_calls(work)
    fwd = int(not tp_placed(work, "fwd")) + shared
    if phase == "fwd":
        return fwd
    again = fwd if work.moe.recompute else shared * work.moe.shared_reruns
    return int(not tp_placed(work, "bwd")) + shared + again


def combined_tp_calls(work: Any, phase: str) -> int:
    """``plain_tp_calls`` of a block that ``expert.combined_block`` pairs with another micro-batch's
    (``parallel.moe_a2a_overlap``): it keeps the attention's collectives on the compute stream, and the
    shared experts' as any MoE block, in each pass ("fwd" or "bwd"), the backward's re-runs included."""
    shared = _shared_calls(work)
    return 1 + shared + (shared * work.moe.shared_reruns if phase == "bwd" else 0)


def _shared_calls(work: Any) -> int:
    """The shared experts' collective pairs per pass: one tensor-parallel MLP's, or none."""
    return int(bool(work.moe.shared))
