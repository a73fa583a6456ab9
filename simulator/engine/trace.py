"""Recorded spans of one simulated step: what ran on which stream, when."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Span:
    """One task's execution on one stream, [start_s, end_s). Slotted, not frozen (a frozen
    dataclass's ``__init__`` costs five times more, once per task); never mutated once recorded.

    ``category`` is "compute", "comm", "copy" or "host"; ``kind`` the report bucket (forward,
    backward, recompute, optimizer, param_allgather, grad_reduce, post_step_gather, offload, ...).
    """

    task_id: int
    name: str
    stream: str
    category: str
    kind: str
    start_s: float
    end_s: float
    args: dict[str, Any] = field(default_factory=dict)
    device: int = 0

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Trace:
    """All spans of one step, in completion order; ``end_s`` is the step time."""

    spans: tuple[Span, ...]

    @property
    def end_s(self) -> float:
        return max([s.end_s for s in self.spans], default=0.0)

    @property
    def devices(self) -> list[int]:
        return sorted({s.device for s in self.spans})

    def on_device(self, device: int) -> Trace:
        """The spans of one representative GPU (pipeline stage)."""
        return Trace(tuple(s for s in self.spans if s.device == device))

    def intervals(self, *, category: str | None = None, kind: str | None = None) -> list[tuple[float, float]]:
        return [
            (s.start_s, s.end_s)
            for s in self.spans
            if (category is None or s.category == category) and (kind is None or s.kind == kind)
        ]
