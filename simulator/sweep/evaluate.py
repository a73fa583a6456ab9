"""One sweep point: base scenario + overrides → one row (never an exception).

Runs in worker processes (or Ray tasks), so it takes and returns plain data only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simulator.config.loader import scenario_from_dict
from simulator.errors import InputError
from simulator.study import Reuse
from simulator.sweep.grid import assignments
from simulator.sweep.summary import OUTPUT_KEYS, summarize


def evaluate_chunk(base_raw: dict, base_dir: str, chunk: list[tuple[int, dict[str, Any]]],
                   extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Evaluate several points; clusters and collective plans are shared by every point of the
    worker process (``simulator.model_cache``)."""
    return [evaluate_point(base_raw, base_dir, index, point, extra) for index, point in chunk]


def evaluate_point(base_raw: dict, base_dir: str, index: int, point: dict[str, Any],
                   extra: dict[str, Any], reuse: Reuse | None = None) -> dict[str, Any]:
    """Row keys: ``point``, ``sweep_id``, each swept path, ``status`` (ok | infeasible | invalid |
    error), ``reason``, then ``OUTPUT_KEYS`` (None where not computed)."""
    row: dict[str, Any] = {"point": index, "sweep_id": extra.get("sweep_id", ""), **point}
    empty = dict.fromkeys(OUTPUT_KEYS)
    try:
        scenario = scenario_from_dict(base_raw, Path(base_dir), assignments(point))
    except InputError as exc:
        return {**row, "status": "invalid", "reason": str(exc), **empty}
    try:
        outputs, reason = summarize(scenario, reuse)
    except InputError as exc:
        return {**row, "status": "invalid", "reason": str(exc), **empty}
    except Exception as exc:  # noqa: BLE001 - a sweep records a failing point and goes on
        return {**row, "status": "error", "reason": f"{type(exc).__name__}: {exc}", **empty}
    status = "ok" if outputs["fits"] else "infeasible"
    # None, not "", when there is no reason: a CSV cell reads back "" as None.
    return {**row, "status": status, "reason": reason or None, **outputs}
