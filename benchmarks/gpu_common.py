"""Shared machinery of the GPU kernel benchmarks (``benchmarks/gpu_kernels.py``): the results store,
the ``section`` wrapper that saves after each section, CUDA-event timing and operand makers."""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

import torch

BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
RESULTS: dict = {}
OUT = sys.argv[1] if len(sys.argv) > 1 else "."
DEV = "cuda"


def save() -> None:
    path = os.path.join(OUT, "gpu_kernels.json")
    with open(path + ".tmp", "w") as f:
        json.dump(RESULTS, f, indent=1)
    os.replace(path + ".tmp", path)


def section(name):
    def wrap(fn):
        def run():
            t0 = time.perf_counter()
            try:
                RESULTS[name] = fn()
            except Exception:  # noqa: BLE001 - one failed section must not lose the others
                RESULTS[name] = {"error": traceback.format_exc()}
                print(f"[{name}] FAILED\n{traceback.format_exc()}", flush=True)
            RESULTS.setdefault("_seconds", {})[name] = round(time.perf_counter() - t0, 1)
            print(f"[{name}] {RESULTS['_seconds'][name]} s", flush=True)
            save()
        return run
    return wrap


_FLUSH: list = []


def _flush_buffer():
    """256 MB (over 4x the L2: 60 MB as PyTorch reports it on the H200) zeroed before each timed call, so no operand starts in L2."""
    if not _FLUSH:
        _FLUSH.append(torch.empty(256 << 20, dtype=torch.int8, device=DEV))
    return _FLUSH[0]


def timed(fn, warmup: int = 3, reps: int = 10, flush: bool = True) -> float:
    """Median seconds of ``fn`` over ``reps`` CUDA-event-timed calls (L2 flushed before each)."""
    cache = _flush_buffer() if flush else None
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if cache is not None:
            cache.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    times.sort()
    return times[len(times) // 2]


def reps_for(flop: float) -> int:
    """Enough repeats for ~30 ms of a ~700 TFLOP/s kernel, 5 to 30."""
    return int(min(30, max(5, 0.03 / max(flop / 7e14, 1e-6))))


def rand(*shape, dtype=BF16):
    return torch.randn(*shape, device=DEV, dtype=torch.float32).mul_(0.5).to(dtype)


def to_fp8(x):
    """Per-tensor e4m3 quantisation: (fp8 tensor, float32 scale to undo it)."""
    amax = x.abs().amax().float().clamp(min=1e-12)
    scale = 448.0 / amax
    return (x.float() * scale).to(FP8), (1.0 / scale).reshape(())


def queued(op_at, n: int, repeats: int, sleep_cycles: int) -> float:
    """GPU seconds per op of ``op_at(0) ... op_at(n - 1)`` issued back to back behind a sleep kernel of
    ``sleep_cycles`` (the host queues them all while the GPU sleeps, so the GPU never waits for it):
    the minimum over ``repeats``, from CUDA events around the ops."""
    best = float("inf")
    for _ in range(repeats):
        torch.cuda._sleep(sleep_cycles)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(n):
            op_at(i)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e-3 / n)
    return best


def captured(fn):
    """``fn`` captured in a CUDA graph (after one warm-up run on a side stream, as capture requires); returns
    the graph's ``replay``: its kernels without the host's launch gaps."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay
