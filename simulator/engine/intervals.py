"""Interval arithmetic on sets of half-open time intervals [start, end), in seconds.

Exposed communication is measured, not derived (ARCHITECTURE.md §1.3): the time a communication
kind is on the link and no compute kernel runs is ``measure(union(comm) − union(compute))``.
"""

from __future__ import annotations

from collections.abc import Iterable

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint, merged intervals covering the same time as the input (empty ones dropped)."""
    items = [i for i in intervals if i[1] > i[0]]
    if not items:
        return []
    items.sort()
    out: list[Interval] = []
    lo, hi = items[0]
    for start, end in items:
        if start <= hi:
            if end > hi:
                hi = end
        else:
            out.append((lo, hi))
            lo, hi = start, end
    out.append((lo, hi))
    return out


def measure(intervals: Iterable[Interval]) -> float:
    """Total length of the union of the intervals, s."""
    return length(union(intervals))


def length(merged: Iterable[Interval]) -> float:
    """Total length of intervals that are already a union (sorted, disjoint), s; equals ``measure``
    of them bit for bit (a union of a union is itself)."""
    return sum([b - a for a, b in merged])


def subtract(a: Iterable[Interval], b: Iterable[Interval], merged: bool = False) -> list[Interval]:
    """The parts of union(a) not covered by union(b); ``merged=True`` says both are already unions
    (sorted and disjoint), which skips re-merging them."""
    out: list[Interval] = []
    append = out.append
    cuts = list(b) if merged else union(b)
    n = len(cuts)
    j = 0
    for start, end in (a if merged else union(a)):
        cur = start
        while j < n and cuts[j][1] <= cur:
            j += 1
        k = j
        while k < n:
            lo, hi = cuts[k]
            if lo >= end:
                break
            if lo > cur:
                append((cur, lo))
            if hi > cur:  # cur = max(cur, hi), as ``max`` picks it
                cur = hi
            if cur >= end:
                break
            k += 1
        if cur < end:
            append((cur, end))
    return out


def exposed(comm: Iterable[Interval], compute: Iterable[Interval]) -> float:
    """Time during which ``comm`` runs and ``compute`` does not, s."""
    return measure(subtract(comm, compute))
