"""Parameter all-gathers issued ahead of use, bounded by a prefetch depth (ZeRO-3 and FSDP).

A gather for the unit at position ``q`` of a pass (forward ``E, 0..L-1, H`` or backward) is issued,
in CPU order, at the hook of position ``q − depth`` and may start on the GPU only once the compute
of position ``q − depth − 1`` has finished (its parameters are freed then, which is what bounds
the memory: FSDP's rate limiter with ``limit_all_gathers`` allows 2 gathered units, i.e. depth 1,
formulas.md §4.3; DeepSpeed bounds by ``stage3_prefetch_bucket_size`` / ``max_live_parameters``).
``depth = None`` means unbounded (FSDP without the limiter: the CPU runs ahead).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from simulator.parallel.ir import GraphBuilder
from simulator.parallel.schedule import Unit


class Prefetcher:
    """Issues gathers for one pass. ``issue(b, unit, deps)`` appends the gather and returns its id."""

    def __init__(self, order: Sequence[Unit], depth: int | None, issue: Callable[[GraphBuilder, Unit, list], int | None]):
        self.order = list(order)
        self.pos = {u: i for i, u in enumerate(self.order)}
        self.depth = depth
        self._issue = issue
        self.gathers: dict[Unit, int | None] = {}
        self.computes: dict[int, int] = {}

    def computed(self, unit: Unit, task: int) -> None:
        """Record that ``unit``'s compute is task ``task`` (frees its params for later gathers)."""
        if unit in self.pos:
            self.computes[self.pos[unit]] = task

    def ensure(self, b: GraphBuilder, unit: Unit, ahead: bool = True) -> int | None:
        """Issue the gathers of ``unit`` and (``ahead``) of the next ``depth`` units; return ``unit``'s."""
        p = self.pos[unit]
        last = p if not ahead or self.depth is None else p + self.depth
        if ahead and self.depth is None:
            last = len(self.order) - 1
        for q in range(p, min(last, len(self.order) - 1) + 1):
            u = self.order[q]
            if u in self.gathers:
                continue
            deps = []
            if self.depth is not None and q - self.depth - 1 >= 0:
                deps.append(self.computes.get(q - self.depth - 1))
            self.gathers[u] = self._issue(b, u, deps)
        return self.gathers.get(unit)
