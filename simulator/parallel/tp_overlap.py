"""Tensor-parallel communication overlapped with the GEMMs next to it (``parallel.tp_comm_overlap``).

What the frameworks overlap, and how it is expressed as tasks (no overlap formula: the executor
measures what hides):

* **forward** (and the recomputed forward): the collective after a row-parallel GEMM (out_proj,
  mlp_down) is split into ``k`` chunks pipelined with the GEMM's ``k`` chunks (Megatron-Core
  userbuffers ``--tp-comm-overlap``, Wang et al. ASPLOS'23 "Overlap communication with dependent
  computation via decomposition"; PyTorch async-TP, ``k`` = tp). Two compute and two
  communication tasks give the same critical path as ``k`` chunks: GEMM head (1 chunk) → [comm
  body ((k−1)/k) ‖ GEMM tail (k−1 chunks)] → comm last (1/k): ``g + c/k`` when ``c ≤ g``,
  ``g/k + c`` otherwise, with ``g`` the time of ``k`` GEMMs of ``m/k`` rows;
* **backward**: the all-reduce / reduce-scatter of the input gradient runs while the weight-gradient
  GEMM computes (Megatron's ``async_tensor_model_parallel_allreduce``; the wgrad does not need it),
  and the next unit waits for it.

Without recognisable GEMM names (hand-built test work) the last op of the block is the producer.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Any

from simulator.parallel.ir import TP_COMM, GraphBuilder

FORWARD_PRODUCERS = ("out_proj", "mlp_down")
_SCALED = ("flops", "bytes", "seconds")


def fraction(op: Any, f: float) -> Any:
    """``op`` doing the fraction ``f`` of its work: FLOPs, bytes (and a fake's seconds) scale; a
    GEMM's ``m`` (rows, the dimension chunked) shrinks, so chunk efficiency is the compute model's."""
    names = {fl.name for fl in dataclasses.fields(op)}
    changes = {n: getattr(op, n) * f for n in _SCALED if n in names}
    if "m" in names and getattr(op, "m", 0):
        changes["m"] = max(1, round(op.m * f))
    return dataclasses.replace(op, **changes)


@lru_cache(maxsize=256)
def forward_plan(ops: tuple, k: int) -> tuple[tuple[tuple, tuple], ...]:
    """[(ops up to and with the GEMM head, (GEMM tail,)), ...] per producer, then (rest, ()).
    Cached on the (hashable, shared) ops tuple so the compute model's per-tuple cache hits."""
    idx = [i for i, op in enumerate(ops) if any(op.name.endswith(p) for p in FORWARD_PRODUCERS)] or [len(ops) - 1]
    out, start = [], 0
    for i in idx:
        chunk = fraction(ops[i], 1 / k)
        # The tail is k−1 chunk GEMMs, not one big one: decomposed GEMMs run at the efficiency of
        # their m/k rows (the compute model's size-dependent efficiency prices the decomposition).
        out.append((tuple(ops[start:i]) + (chunk,), (chunk,) * (k - 1)))
        start = i + 1
    out.append((tuple(ops[start:]), ()))
    return tuple(out)


@lru_cache(maxsize=256)
def backward_split(ops: tuple) -> tuple[tuple, tuple]:
    """A backward piece split after its last data-gradient GEMM: (up to the dgrad, the rest)."""
    idx = [i for i, op in enumerate(ops) if op.name.endswith(".dgrad")]
    cut = (idx[-1] + 1) if idx else len(ops)
    return tuple(ops[:cut]), tuple(ops[cut:])


def _comms(b: GraphBuilder, work: Any, name: str, share: float, count: int, deps, g: int, layer: int) -> list[int]:
    ops = ("reduce_scatter", "all_gather") if work.sequence_parallel else ("all_reduce",)
    out = []
    for op in ops:
        tid = b.collective(f"tp {op} {name}", "tp", op, "tp", work.tp_allreduce_bytes * share, count=count,
                           stream=TP_COMM, deps=deps, micro_batch=g, layer=layer)
        if tid is not None:
            out.append(tid)
    return out


def forward_block(b: GraphBuilder, work: Any, ops: tuple, kind: str, name: str, deps: list, g: int,
                  layer: int) -> tuple[int, list[int]]:
    """A block's forward (or recompute) with chunk-pipelined TP collectives. Returns the last compute
    task and the collectives the next unit must wait for."""
    k = max(2, work.tp_degree)
    plan = forward_plan(ops, k)
    producers = len(plan) - 1
    count = max(1, 2 // producers)
    tid = -1
    for i, (head, tail) in enumerate(plan):
        if not tail:  # ops after the last producer
            if head:
                tid = b.compute(f"{name}.{i}", kind, head, deps=deps, micro_batch=g, layer=layer)
                deps = []
            break
        t1 = b.compute(f"{name}.{i}a", kind, head, deps=deps, micro_batch=g, layer=layer)
        _comms(b, work, f"{name}.{i} body", (k - 1) / k, count, (t1,), g, layer)
        tid = b.compute(f"{name}.{i}b", kind, tail, micro_batch=g, layer=layer)
        deps = _comms(b, work, f"{name}.{i} last", 1 / k, count, (tid,), g, layer)
    return tid, list(deps)


def backward_piece(b: GraphBuilder, work: Any, ops: tuple, name: str, deps: list, g: int, layer: int,
                   count: int) -> tuple[int, list[int]]:
    """A backward piece whose input-gradient collective overlaps its weight-gradient GEMMs. Returns
    the piece's last compute task and the collectives the next piece must wait for."""
    grad_in, rest = backward_split(ops)
    t1 = b.compute(f"{name}", "backward", grad_in, deps=deps, micro_batch=g, layer=layer)
    comm = _comms(b, work, name, 1.0, count, (t1,), g, layer)
    tid = b.compute(f"{name} wgrad", "backward", rest, micro_batch=g, layer=layer) if rest else t1
    return tid, comm
