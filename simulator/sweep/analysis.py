"""Answers from sweep rows: the best feasible point for an objective, and the Pareto front of
expected wall-clock vs cost (no other feasible point is both faster and cheaper)."""

from __future__ import annotations

from typing import Any

#: objective name → (row column, True if larger is better)
OBJECTIVES: dict[str, tuple[str, bool]] = {
    "step_time": ("step_time_s", False),
    "tokens_per_s": ("tokens_per_s", True),
    "cost": ("cost_usd", False),
    "wall_clock": ("wall_clock_s", False),
}


def _num(value: Any) -> float | None:
    """Rows read back from CSV hold strings; treat '' and None as missing."""
    if value is None or value == "":
        return None
    return float(value)


def feasible(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("status") == "ok"]


def best(rows: list[dict[str, Any]], objective: str) -> dict[str, Any] | None:
    """The feasible row with the best objective value; ties go to the lowest point index."""
    column, larger = OBJECTIVES[objective]
    scored = [(r, _num(r.get(column))) for r in feasible(rows)]
    scored = [(r, v) for r, v in scored if v is not None]
    if not scored:
        return None
    return min(scored, key=lambda rv: ((-rv[1] if larger else rv[1]), int(rv[0]["point"])))[0]


def pareto_front(rows: list[dict[str, Any]], x: str = "wall_clock_s", y: str = "cost_usd") -> list[dict[str, Any]]:
    """Feasible rows not dominated in (x, y), both minimised; sorted by x."""
    pts = [(r, _num(r.get(x)), _num(r.get(y))) for r in feasible(rows)]
    pts = sorted(((r, a, b) for r, a, b in pts if a is not None and b is not None), key=lambda t: (t[1], t[2]))
    front, best_y = [], float("inf")
    for r, _, b in pts:
        if b < best_y:
            front.append(r)
            best_y = b
    return front
