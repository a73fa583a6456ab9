"""Megatron's tensor-parallel collectives on the compute stream's critical path (not overlapped): a
block's two all-reduces per pass (reduce-scatter + all-gather pairs under sequence parallelism) and
those of the embedding and the output layer. Overlapped TP (``tp_comm_overlap``, Megatron's
asynchronous backward) is ``simulator.parallel.tp_overlap``; ``simulator.parallel.schedule`` places
both in the step.
"""

from __future__ import annotations

from collections.abc import Hashable

from simulator.parallel import tp_overlap
from simulator.parallel.ir import COMPUTE, GraphBuilder
from simulator.parallel.work import StepWork

Unit = Hashable  # "E", "H" or a block index (as simulator.parallel.schedule)


def block_tp(b: GraphBuilder, work: StepWork, name: str, after: int, g: int, layer: int, count: int = 2) -> list[int]:
    """Megatron TP: two all-reduces of ``b·s·h`` per block and pass (after attention and after the
    MLP), on the critical path: they run in the compute stream's order (Shoeybi et al. 2019). With
    sequence parallelism each is a reduce-scatter plus an all-gather of the same buffer (Korthikanti
    et al. 2022 §4.2.2). Overlapped TP (``tp_comm_overlap``) is ``simulator.parallel.tp_overlap``.
    ``count`` = 1 for an MoE block: only its attention is tensor-parallel; the routed experts take the
    sequence-parallel tokens as they are and communicate over the expert-TP group, not TP
    (Megatron-Core ``MoEAlltoAllTokenDispatcher``: "use expt_tp_group as tensor parallel group in
    this module", permute → A2A(EP) → AG(expert TP); those collectives are ``expert._a2a``'s); 2 with
    shared experts, a tensor-parallel MLP (``expert_tp.plain_tp_calls``).
    Returns the issued task ids."""
    if not work.sequence_parallel and work.tp_allreduce_bytes <= 0:
        return []  # no tensor parallelism: the all-reduce would be skipped (zero bytes)
    ops = ("reduce_scatter", "all_gather") if work.sequence_parallel else ("all_reduce",)
    out = []
    for op in ops:
        label = "allreduce" if op == "all_reduce" else op
        nbytes = tp_overlap.gather_bytes(work) if op == "all_gather" else work.tp_allreduce_bytes
        tid = b.collective(f"tp {label} {name}", "tp", op, "tp", nbytes, count=count,
                           stream=COMPUTE, deps=(after,), micro_batch=g, layer=layer)
        if tid is not None:
            out.append(tid)
    return out


#: Tensor-parallel collectives of the embedding and the output layer (Megatron-Core
#: ``VocabParallelEmbedding`` and ``ColumnParallelLinear`` for the output): (unit, pass) → without
#: sequence parallelism, with it. The vocab-parallel embedding sums its partial lookups
#: (``reduce_from_tensor_model_parallel_region``; under SP ``reduce_scatter_to_sequence_parallel_region``,
#: whose backward all-gathers the gradient); the output layer's input is copied to the TP region
#: (backward: all-reduce of the input gradient) or, under SP, all-gathered (backward: reduce-scatter).
#: Each moves ``b·s·h`` elements like a block's. The vocab-parallel cross-entropy's three all-reduces
#: of ``b·s`` floats are latency only and left out.
EDGE_TP: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...]]] = {
    ("E", "fwd"): (("all_reduce",), ("reduce_scatter",)),
    ("E", "bwd"): ((), ("all_gather",)),
    ("H", "fwd"): ((), ("all_gather",)),
    ("H", "bwd"): (("all_reduce",), ("reduce_scatter",)),
}


def edge_tp(b: GraphBuilder, work: StepWork, unit: Unit, phase: str, name: str, after: int, g: int) -> None:
    """``EDGE_TP``'s collectives of the embedding or output layer ``unit`` after its ``phase`` compute, on
    the compute stream's critical path as a block's (:func:`block_tp`)."""
    # only the stage (and model chunk) that holds the embedding or the output layer: the others' E and H
    # units run no ops
    present = work.embed_fwd if unit == "E" else work.head_fwd
    if work.tp_allreduce_bytes <= 0 or not present:
        return
    for op in EDGE_TP[(unit, phase)][bool(work.sequence_parallel)]:
        label = "allreduce" if op == "all_reduce" else op  # as block_tp labels them
        b.collective(f"tp {label} {name}", "tp", op, "tp", work.tp_allreduce_bytes, stream=COMPUTE, deps=(after,),
                     micro_batch=g)
