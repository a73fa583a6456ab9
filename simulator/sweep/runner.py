"""Run the points of a grid: locally on a process pool or as Ray tasks, results into a ResultStore.

Each point is independent (a full simulation of base scenario + overrides), so results do not depend
on the backend, the worker count or the completion order: rows are keyed and sorted by point index.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from simulator.errors import InputError
from simulator.study import Reuse
from simulator.sweep.evaluate import evaluate_chunk, evaluate_point
from simulator.sweep.grid import Grid, points
from simulator.sweep.store import ResultStore

#: Seconds between atomic flushes while a sweep runs (the final flush always happens).
FLUSH_EVERY_S = 1.0
#: Seconds between a worker's checks that its parent is alive.
PARENT_POLL_S = 0.5
#: Points per task: a task shares one Reuse memo, so larger chunks reuse more; smaller ones balance
#: the workers and report progress more often.
CHUNK = 8

Chunk = list[tuple[int, dict[str, Any]]]


def _chunks(tasks: Chunk, size: int) -> list[Chunk]:
    return [tasks[i : i + size] for i in range(0, len(tasks), size)]


def _exit_with_parent(parent: int) -> None:
    """Worker initializer: a worker whose parent dies (``kill -9`` of ``dtsim sweep``) exits too. On
    Linux the kernel signals it (``prctl(PR_SET_PDEATHSIG)``); everywhere a daemon thread sees the
    parent change and exits within a second."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


def _local(chunks: list[Chunk], base_raw: dict, base_dir: str, workers: int,
           extra: dict[str, Any]) -> Iterable[list[dict]]:
    if workers <= 1:
        reuse = Reuse()  # one memo for the whole sweep; rows still stream out one by one
        for chunk in chunks:
            for index, point in chunk:
                yield [evaluate_point(base_raw, base_dir, index, point, extra, reuse)]
        return
    with ProcessPoolExecutor(max_workers=workers, initializer=_exit_with_parent, initargs=(os.getpid(),)) as pool:
        futures = [pool.submit(evaluate_chunk, base_raw, base_dir, chunk, extra) for chunk in chunks]
        for future in as_completed(futures):
            yield future.result()


def _ray(chunks: list[Chunk], base_raw: dict, base_dir: str, address: str | None,
         extra: dict[str, Any]) -> Iterable[list[dict]]:
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
        remote = ray.remote(evaluate_chunk)
        pending = [remote.remote(base_raw, base_dir, chunk, extra) for chunk in chunks]
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            yield ray.get(ready[0])
    finally:
        if started:  # leave no Ray instance behind that this call started
            ray.shutdown()


def run_sweep(
    base_raw: dict,
    base_dir: Path,
    all_points: Grid | list[dict[str, Any]],
    store: ResultStore,
    *,
    workers: int = 1,
    backend: str = "local",
    address: str | None = None,
    extra: dict[str, Any] | None = None,
    on_row: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Evaluate every point (a grid's product, or an explicit list of override dicts) not already in
    ``store``; flush incrementally; return all rows in point order."""
    if isinstance(all_points, dict):
        all_points = points(all_points)
    done = store.done()
    tasks = [(i, p) for i, p in enumerate(all_points) if i not in done]
    chunks = _chunks(tasks, CHUNK)
    extra = extra or {}
    if backend == "local":
        stream = _local(chunks, base_raw, str(base_dir), workers, extra)
    elif backend == "ray":
        stream = _ray(chunks, base_raw, str(base_dir), address, extra)
    else:
        raise InputError(f"unknown backend {backend!r}; valid: local, ray", "--backend")
    last = time.monotonic()
    try:
        for rows in stream:
            for row in rows:
                store.add(row)
                if on_row:
                    on_row(row)
            if time.monotonic() - last >= FLUSH_EVERY_S:
                store.flush()
                last = time.monotonic()
    finally:  # interrupted (Ctrl-C) or done: every finished row reaches the file, atomically
        store.flush()
    return [store.rows[k] for k in sorted(store.rows)]
