"""Bytes each rank sends per step, by communication kind, from the graph alone (no timing).

Ring-equivalent per-rank volume (formulas.md §3.1-3.2): all_reduce ``2·(n−1)/n·S``; all_gather and
reduce_scatter ``(n−1)/n·S`` (S = full concatenated size); broadcast/reduce ``S``; all_to_all
``(n−1)/n·S``. This is the quantity of the volume table in formulas.md §4.2.
"""

from __future__ import annotations

from simulator.parallel.ir import CollectiveTask, StepGraph
from simulator.parallel.mesh import RankMesh

_FACTOR = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}


def per_rank_factor(op: str, n: int) -> float:
    if n <= 1:
        return 0.0
    if op in _FACTOR:
        return _FACTOR[op] * (n - 1) / n
    return 1.0


def bytes_per_rank(graph: StepGraph, mesh: RankMesh, device: int | None = None) -> dict[str, float]:
    """Per-rank bytes on the wire per step, keyed by communication kind (of one pipeline stage's
    representative when ``device`` is given; with pp = 1 there is only device 0)."""
    out: dict[str, float] = {}
    factors: dict[tuple[str, str], float] = {}
    for t in graph.collectives():
        if device is not None and t.device != device:
            continue
        factor = factors.get((t.op, t.group))
        if factor is None:
            factor = factors[t.op, t.group] = per_rank_factor(t.op, mesh.size(t.group))
        out[t.kind] = out.get(t.kind, 0.0) + t.count * t.nbytes * factor
    return out


def calls_per_rank(graph: StepGraph, device: int | None = None) -> dict[str, int]:
    """Collective calls per step by communication kind (each pays the collective's latency)."""
    out: dict[str, int] = {}
    for t in graph.collectives():
        if device is None or t.device == device:
            out[t.kind] = out.get(t.kind, 0) + t.count * max(1, len(t.parts))
    return out


def per_rank(graph: StepGraph, mesh: RankMesh, device: int | None = None) -> tuple[dict[str, float], dict[str, int]]:
    """``bytes_per_rank`` and ``calls_per_rank`` together, in one pass over the graph's collectives
    (the same sums in the same order)."""
    nbytes: dict[str, float] = {}
    calls: dict[str, int] = {}
    factors: dict[tuple[str, str], float] = {}
    for t in graph.tasks:
        if not isinstance(t, CollectiveTask) or (device is not None and t.device != device):
            continue
        factor = factors.get((t.op, t.group))
        if factor is None:
            factor = factors[t.op, t.group] = per_rank_factor(t.op, mesh.size(t.group))
        kind = t.kind
        nbytes[kind] = nbytes.get(kind, 0.0) + t.count * t.nbytes * factor
        calls[kind] = calls.get(kind, 0) + t.count * max(1, len(t.parts))
    return nbytes, calls
