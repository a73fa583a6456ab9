"""The output layer's weight gradients deferred to the pipeline flush (Megatron-Core
``defer_embedding_wgrad_compute``, ``parallel.defer_embedding_wgrad_compute``).

The last pipeline stage holds the output layer (the logits GEMM, ``h × V/t`` per TP rank), so in the
steady state it does more work per micro-batch than the other stages and sets the pace of the 1F1B
schedule. Its backward has two GEMMs of equal size: the data gradient, which the earlier stages wait
for, and the weight gradient, which only the optimizer needs. With the option on, Megatron-Core's
output layer keeps the weight-gradient inputs of its first ``wgrad_deferral_limit`` backward calls
(0: all; ``tensor_parallel/layers.py``, the ``grad_output_buffer``) and runs their GEMMs after the
rank's last backward, before the gradients are finalised (``pipeline_parallel/schedules.py``,
``finish_embedding_wgrad_compute`` ahead of ``finalize_model_grads_func``): in the pipeline flush,
where the last stage waits for the earlier stages' final backward passes. The work is the same; it
moves from the critical path into the flush (what does not fit there lengthens the step).

Megatron-Core requires pipeline parallelism for it (``model_parallel_config.py``: "Cannot defer
embedding wgrad compute when pipeline model parallel is not used") and gradient-accumulation fusion
(the drain accumulates straight into ``main_grad``). Its data-parallel hooks have no special case for
the deferral: the output layer's backward hook fires at its usual time and its bucket is reduced as
without it (Megatron-LM issue #1012: "finish_embedding_wgrad_compute appears after grad all-reduce");
the optimizer step follows the drain. With multi-token prediction the output layer runs once per depth
and the limit counts those calls: not simulated (``parallel.checks``).

Here: for the last virtual stage, the head's backward of the deferred micro-batches runs without
its ``logits.wgrad`` op, and after the stage's last scheduled item one ``drain`` task runs the
deferred GEMMs on the same compute stream, ahead of the optimizer step issued after it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from simulator.parallel.ir import GraphBuilder

#: The op the output layer's weight gradient is (``workload.ops``: the head's ``logits`` linear).
WGRAD_OP = "logits.wgrad"


def deferred_count(parallel: Any, n_micro: int) -> int:
    """Micro-batches whose output-layer weight gradient waits for the flush: the first
    ``wgrad_deferral_limit`` (all with 0), none without the option."""
    if not parallel.defer_embedding_wgrad_compute:
        return 0
    limit = parallel.wgrad_deferral_limit
    return n_micro if limit == 0 else min(limit, n_micro)


def split_head(work: Any) -> tuple[Any, tuple]:
    """``work`` whose head backward leaves out the output layer's weight-gradient GEMM, and that GEMM (the
    one op named ``WGRAD_OP``: a head without it would defer nothing, so that is an error)."""
    wgrad = tuple(op for op in work.head_bwd if op.name == WGRAD_OP)
    if len(wgrad) != 1:
        raise ValueError(f"the head's backward has {len(wgrad)} {WGRAD_OP} ops, not one")
    return dataclasses.replace(work, head_bwd=tuple(op for op in work.head_bwd if op.name != WGRAD_OP)), wgrad


def drain(b: GraphBuilder, wgrad: tuple, count: int) -> int:
    """The deferred weight-gradient GEMMs ``wgrad`` of ``count`` micro-batches as one compute task, issued
    after everything the stage issued (its compute stream runs in issue order); returns the task."""
    return b.compute("drain output-layer wgrads", "backward", wgrad * count)
