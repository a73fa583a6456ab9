"""Context parallelism: the sequence split over ``cp`` ranks, K/V exchanged around a ring.

Megatron-Core ``context_parallel_size`` with the default ``cp_comm_type="p2p"`` (ring attention;
Liu et al. 2023, Megatron-Core docs "context parallel"), load-balanced for causal masks (each rank
holds 2 of ``2·cp`` sequence chunks, so every rank does ``1/cp`` of the attention work):

* every op but the attention core runs on the rank's ``s/cp`` tokens (``StepWork`` is built that
  way); the attention core does ``1/cp`` of the full causal work (``work.from_scenario``);
* forward: the rank's K and V chunks travel around the ring while attention computes on the chunk
  it has: ``(cp−1)/cp`` of the sequence's K and V per rank, as an all-gather of
  ``2·b·s·kv_dim/t`` elements (``StepWork.cp_kv_bytes``) on its own stream, concurrent with the
  attention kernel; what follows attention waits for it;
* backward: K, V again and the gradients dK, dV back around the ring: an all-gather plus a
  reduce-scatter of the same buffer, concurrent with the attention backward (2× the forward
  volume, as in Megatron's ``AttnFuncWithCPAndKVP2P.backward``);
* gradients are reduced over the data × context parallel group (Megatron's
  ``with_context_parallel=True``; ``RankMesh`` ``dp`` groups include the cp ranks).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from simulator.parallel.ir import GraphBuilder

#: The CP ring's NCCL stream.
CP_COMM = "comm_cp"


@lru_cache(maxsize=256)
def split_at_attention(ops: tuple) -> tuple[tuple, tuple, tuple]:
    """(ops before the attention core, the attention core, ops after it); no core: (ops, (), ())."""
    idx = [i for i, op in enumerate(ops) if getattr(op, "kind", "") == "attention"]
    if not idx:
        return ops, (), ()
    i = idx[0]
    return tuple(ops[:i]), (ops[i],), tuple(ops[i + 1:])


def forward_block(b: GraphBuilder, work: Any, ops: tuple, kind: str, name: str, deps: list, g: int,
                  layer: int) -> int:
    """A block's forward (or recompute) with the K/V ring beside the attention core; returns the
    last compute task."""
    pre, attn, post = split_at_attention(ops)
    if not attn:
        return b.compute(name, kind, ops, deps=deps, micro_batch=g, layer=layer)
    t_pre = b.compute(f"{name}.pre", kind, pre, deps=deps, micro_batch=g, layer=layer)
    ring = b.collective(f"cp kv allgather {name}", "cp", "all_gather", "cp", work.cp_kv_bytes, stream=CP_COMM,
                        deps=(t_pre,), micro_batch=g, layer=layer)
    b.compute(f"{name}.attn", kind, attn, micro_batch=g, layer=layer)
    return b.compute(f"{name}.post", kind, post, deps=(ring,), micro_batch=g, layer=layer)


def backward_piece(b: GraphBuilder, work: Any, ops: tuple, name: str, deps: list, g: int, layer: int) -> int:
    """A backward piece; the one holding the attention backward gets the K/V ring and the dK/dV
    ring beside it. Returns the last compute task."""
    pre, attn, post = split_at_attention(ops)
    if not attn:
        return b.compute(name, "backward", ops, deps=deps, micro_batch=g, layer=layer)
    t_pre = b.compute(f"{name}.pre", "backward", pre, deps=deps, micro_batch=g, layer=layer)
    b.collective(f"cp kv allgather {name}", "cp", "all_gather", "cp", work.cp_kv_bytes, stream=CP_COMM,
                 deps=(t_pre,), micro_batch=g, layer=layer)
    grads = b.collective(f"cp dkv reducescatter {name}", "cp", "reduce_scatter", "cp", work.cp_kv_bytes,
                         stream=CP_COMM, deps=(t_pre,), micro_batch=g, layer=layer)
    b.compute(f"{name}.attn", "backward", attn, micro_batch=g, layer=layer)
    return b.compute(f"{name}.post", "backward", post, deps=(grads,), micro_batch=g, layer=layer)
