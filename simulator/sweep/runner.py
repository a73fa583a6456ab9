"""Run the points of a grid: locally on a process pool or as Ray tasks, results into a ResultStore.

Each point is independent (a full simulation of base scenario + overrides), so results do not depend
on the backend, the worker count or the completion order: rows are keyed and sorted by point index.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from simulator.errors import InputError
from simulator.sweep.evaluate import evaluate_point
from simulator.sweep.grid import Grid, points
from simulator.sweep.store import ResultStore

#: Seconds between atomic flushes while a sweep runs (the final flush always happens).
FLUSH_EVERY_S = 1.0


def _local(tasks: list[tuple[int, dict[str, Any]]], base_raw: dict, base_dir: str, workers: int,
           extra: dict[str, Any]) -> Iterable[dict]:
    if workers <= 1:
        for index, assign in tasks:
            yield evaluate_point(base_raw, base_dir, index, assign, extra)
        return
    with ProcessPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(evaluate_point, base_raw, base_dir, i, a, extra) for i, a in tasks]
        for future in as_completed(futures):
            yield future.result()


def _ray(tasks: list[tuple[int, dict[str, Any]]], base_raw: dict, base_dir: str, address: str | None,
         extra: dict[str, Any]) -> Iterable[dict]:
    try:
        import ray
    except ImportError:
        raise InputError("the ray backend needs ray: pip install 'dtsim[ray]'", "--backend") from None
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False)
        except Exception as exc:  # noqa: BLE001 - ray raises several types for an unreachable cluster
            raise InputError(f"cannot reach the Ray cluster at {address!r}: {exc}", "--address") from None
    try:
        remote = ray.remote(evaluate_point)
        pending = [remote.remote(base_raw, base_dir, i, a, extra) for i, a in tasks]
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            yield ray.get(ready[0])
    finally:
        if started:  # leave no Ray instance behind that this call started
            ray.shutdown()


def run_sweep(
    base_raw: dict,
    base_dir: Path,
    grid: Grid,
    store: ResultStore,
    *,
    workers: int = 1,
    backend: str = "local",
    address: str | None = None,
    extra: dict[str, Any] | None = None,
    on_row: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Evaluate every point not already in ``store``; flush incrementally; return all rows in order."""
    all_points = points(grid)
    done = store.done()
    tasks = [(i, p) for i, p in enumerate(all_points) if i not in done]
    extra = extra or {}
    if backend == "local":
        stream = _local(tasks, base_raw, str(base_dir), workers, extra)
    elif backend == "ray":
        stream = _ray(tasks, base_raw, str(base_dir), address, extra)
    else:
        raise InputError(f"unknown backend {backend!r}; valid: local, ray", "--backend")
    last = time.monotonic()
    for row in stream:
        store.add(row)
        if on_row:
            on_row(row)
        if time.monotonic() - last >= FLUSH_EVERY_S:
            store.flush()
            last = time.monotonic()
    store.flush()
    return [store.rows[k] for k in sorted(store.rows)]
