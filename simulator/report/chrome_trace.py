"""Chrome trace (Trace Event Format) of one simulated step: opens in Perfetto and chrome://tracing.

One track (thread) per stream, each span a complete ("X") event named after its task, with the
collective's bytes, algorithm and group in ``args``. Times in microseconds, as the format requires.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from simulator.atomic import write_text

_STREAM_ORDER = ("compute", "comm_tp", "comm_cp", "comm", "comm_replica", "p2p", "pcie_d2h", "pcie_h2d", "cpu")


def trace_events(spans: Iterable[Any], process_name: str = "rank 0") -> dict[str, Any]:
    """Spans (objects with name, stream, category, kind, start_s, end_s, args, device) → trace JSON.

    One process per representative GPU (pipeline stage), one thread per stream.
    """
    spans = list(spans)
    streams = sorted({s.stream for s in spans},
                     key=lambda s: (_STREAM_ORDER.index(s) if s in _STREAM_ORDER else len(_STREAM_ORDER), s))
    tid = {name: i for i, name in enumerate(streams)}
    devices = sorted({getattr(s, "device", 0) for s in spans})
    events: list[dict[str, Any]] = []
    for dev in devices:
        label = process_name if len(devices) == 1 else f"{process_name} stage {dev}"
        events.append({"ph": "M", "pid": dev, "tid": 0, "name": "process_name", "args": {"name": label}})
        used = sorted({tid[s.stream] for s in spans if getattr(s, "device", 0) == dev})
        for name, i in tid.items():
            if i not in used:
                continue
            events.append({"ph": "M", "pid": dev, "tid": i, "name": "thread_name", "args": {"name": name}})
            events.append({"ph": "M", "pid": dev, "tid": i, "name": "thread_sort_index", "args": {"sort_index": i}})
    for s in sorted(spans, key=lambda s: (s.start_s, getattr(s, "device", 0), tid[s.stream])):
        events.append({
            "ph": "X", "pid": getattr(s, "device", 0), "tid": tid[s.stream], "name": s.name,
            "cat": f"{s.category},{s.kind}", "ts": s.start_s * 1e6, "dur": (s.end_s - s.start_s) * 1e6,
            "args": _args(s.args),
        })
        events.extend(_sub_spans(s, tid[s.stream]))
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def _args(args: dict[str, Any]) -> dict[str, Any]:
    """A span's annotations as plain JSON values (the rows of a split collective are made on demand:
    ``engine.costing.PartRows``)."""
    out = dict(args)
    parts = out.get("parts")
    if parts is not None and not isinstance(parts, list):
        out["parts"] = list(parts)
    return out


def _sub_spans(s: Any, thread: int) -> list[dict[str, Any]]:
    """A task of several back-to-back calls (``args["parts"]``, e.g. ZeRO-3's per-module gathers of a
    block) as nested events, laid end to end over the span in proportion to their priced times."""
    parts = s.args.get("parts") if isinstance(s.args, dict) else None
    if not parts:
        return []
    total = sum(p["time_s"] for p in parts) or 1.0
    scale = (s.end_s - s.start_s) / total
    out, t = [], s.start_s
    for p in parts:
        dur = p["time_s"] * scale
        out.append({"ph": "X", "pid": getattr(s, "device", 0), "tid": thread, "name": p["name"],
                    # its own category: a sum over the trace by category counts the parent span once
                    "cat": f"{s.category},{s.kind},part", "ts": t * 1e6, "dur": dur * 1e6, "args": {"bytes": p["bytes"]}})
        t += dur
    return out


def write_chrome_trace(spans: Iterable[Any], path: str | Path, process_name: str = "rank 0") -> None:
    write_text(path, json.dumps(trace_events(spans, process_name), default=float))
