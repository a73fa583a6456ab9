"""Steady-state extrapolation of gradient accumulation and pipeline 1F1B, with an exactness check.

A step with ``n`` micro-batches repeats one pattern: after a warm-up, every micro-batch runs the
same spans as the previous one shifted by a period ``P`` (gradient accumulation: one micro-batch;
interleaved 1F1B: one group of ``p`` micro-batches), then the drain and the optimizer. Playing all
``n`` in the discrete-event engine costs time linear in ``n`` for no new information, so:

1. the step is simulated twice, with ``m`` and ``M = m + step`` micro-batches (``m`` covers the
   warm-up and the drain with at least two steady pairs in between; ``step`` is the schedule's
   period in micro-batches);
2. **check**: in the ``M`` simulation every steady micro-batch ``j`` (``warm ≤ j`` and
   ``j + step ≤ M − 1 − warm``) has the same spans (device, stream, kind, task order) as ``j + step``,
   with start and end offsets from the micro-batch's first start equal within ``TOLERANCE_S``, and
   one period ``P`` (first start of ``j + step`` minus that of ``j``) for every pair; the step time
   of ``M`` exceeds that of ``m`` by ``P``; the reported stage, the tasks outside any micro-batch
   and every non-numeric field are the same in both. Together these say the ``M`` trace is the ``m``
   trace with one period inserted in the steady part;
3. then every figure that sums over the step (times, interval measures, bytes, calls, task counts)
   grows by the same increment per period, and the ``n``-micro-batch value is
   ``v(m) + k·(v(M) − v(m))`` with ``k = (n − m) / step`` (integers stay integers).

**Separated micro-batches** (no pipeline): where every micro-batch after the first issues exactly
the first one's tasks (``parallel.build.copies_every_micro_batch``: ZeRO-2/3 and FSDP reduce in
every micro-batch; both sample graphs are built from one first micro-batch,
``parallel.build.build_copied_samples``) and every task of micro-batch 1 waits, through dependencies and stream order,
for every task of micro-batch 0 (``waits_for_whole``, on the 2-micro-batch graph; the copies repeat
it between every ``g`` and ``g + 1``), a micro-batch runs alone on the rank: nothing of the one
before it is still running when it starts, so its spans relative to its start are a function of
its own tasks only, the same for every micro-batch. The samples are then 1 and 2 micro-batches
(``warm = 0``: the first and the last micro-batch are steady too), under the checks above plus
one on each trace: every micro-batch starts no earlier than the previous one's last span ends, and
the spans outside any micro-batch (optimizer, post-step gathers) start no earlier than the last
micro-batch ends (``_separated``). Steps of ``SEPARATED_MIN`` or more micro-batches use them
(DeepSpeed ZeRO-3 on Llama 3 70B with 8 micro-batches: 3 simulated instead of 8); where any check
fails, the samples of ``m`` and ``m + step`` follow as above.

Where a check fails (the pattern does not settle, GPipe's forward-then-backward order whose
per-micro-batch pattern stretches with ``n``, ``n`` too small to gain anything) the whole step is
simulated, as it is with ``exact=True`` (``dtsim run --exact``) and for a pipeline whose last stage
defers the output layer's weight gradients of its first micro-batches (``parallel.deferred_wgrad``:
those micro-batches differ from the rest, and the flush grows with their number). The extrapolated
step carries no per-span trace: writing a Chrome trace or a timeline picture simulates everything.
``tests/test_steady_state.py`` compares both paths on every bundled scenario and on
pipeline schedules.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: Fewest micro-batches for which separated samples (1 and 2 micro-batches) are used.
SEPARATED_MIN = 4

#: Two spans "match" when their offsets from their micro-batch's first start differ by at most this (s).
TOLERANCE_S = 1e-9


@dataclass
class Played:
    """What one simulation of the step yields for the report."""

    n_micro: int
    graph: Any  # StepGraph
    trace: Any  # Trace, or None when extrapolated
    device: int
    summary: dict[str, Any]
    stages: list[dict[str, Any]]
    bytes_per_rank: dict[str, float]
    calls: dict[str, int]
    tasks: int
    extrapolated: bool = False


def sample_sizes(n_micro: int, pp: int, schedule: str, virtual_stages: int) -> tuple[int, int, int] | None:
    """``(m, step, warm)`` for the two sample simulations, or ``None`` when the whole step must be
    simulated (GPipe; fewer micro-batches than the two samples together)."""
    if pp <= 1:
        warm, step = 1, 1
    elif schedule == "1f1b":
        warm, step = pp, 1
    elif schedule == "interleaved" and virtual_stages > 1:
        warm, step = 2 * pp, pp
    else:
        return None
    m = -(-(2 * warm + 2 * step) // step) * step
    if (n_micro - m) % step or 2 * m + step >= n_micro:
        return None
    return m, step, warm


def _offsets(played: Played, warm: int) -> tuple[dict[int, tuple], dict[int, float]]:
    """Per steady micro-batch: its spans' (device, stream, kind, start offset, end offset) in task
    order, and its first start."""
    tasks = played.graph.tasks
    last = played.n_micro - 1 - warm
    spans: dict[int, list] = {}
    for s in played.trace.spans:
        g = tasks[s.task_id].micro_batch
        if warm <= g <= last:
            spans.setdefault(g, []).append(s)
    pattern: dict[int, tuple] = {}
    first: dict[int, float] = {}
    for g, group in spans.items():
        group.sort(key=lambda s: s.task_id)
        t0 = min(s.start_s for s in group)
        first[g] = t0
        pattern[g] = tuple((s.device, s.stream, s.kind, s.start_s - t0, s.end_s - t0) for s in group)
    return pattern, first


def _same(a: tuple, b: tuple) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b, strict=True):
        if x[:3] != y[:3] or abs(x[3] - y[3]) > TOLERANCE_S or abs(x[4] - y[4]) > TOLERANCE_S:
            return False
    return True


def period(played: Played, warm: int, step: int) -> float | None:
    """The period ``P`` (s) of the steady micro-batches of ``played``, or ``None`` if they do not
    repeat (see the module docstring, check 2)."""
    pattern, first = _offsets(played, warm)
    pairs = [j for j in pattern if j + step in pattern]
    if len(pairs) < min(2, step) or any(not _same(pattern[j], pattern[j + step]) for j in pairs):
        return None
    periods = [first[j + step] - first[j] for j in pairs]
    if max(periods) - min(periods) > TOLERANCE_S:
        return None
    return periods[0]


def _untagged(played: Played) -> int:
    return sum(1 for t in played.graph.tasks if t.micro_batch < 0)


def _combine(a: Any, b: Any, k: int) -> Any:
    """``a + k·(b − a)`` leaf by leaf; raises ``ValueError`` where the structures differ."""
    if isinstance(a, dict):
        if not isinstance(b, dict) or a.keys() != b.keys():
            raise ValueError("different keys")
        return {key: _combine(a[key], b[key], k) for key in a}
    if isinstance(a, list | tuple):
        if type(a) is not type(b) or len(a) != len(b):
            raise ValueError("different lengths")
        return type(a)(_combine(x, y, k) for x, y in zip(a, b, strict=True))
    if isinstance(a, bool) or not isinstance(a, int | float):
        if a != b:
            raise ValueError("different values")
        return a
    return a + k * (b - a)  # exact for integers


def extrapolate(small: Played, large: Played, n_micro: int, step: int, warm: int) -> Played | None:
    """The ``n_micro`` step from the ``m`` and ``M`` samples, or ``None`` where a check fails."""
    if small.device != large.device or _untagged(small) != _untagged(large):
        return None
    p = period(large, warm, step)
    if p is None:
        return None
    step_s = large.summary["step_time_s"] - small.summary["step_time_s"]
    if abs(step_s - p) > TOLERANCE_S * max(1.0, large.summary["step_time_s"]):
        return None
    k = (n_micro - small.n_micro) // step
    try:
        summary = _combine(small.summary, large.summary, k)
        stages = _combine(small.stages, large.stages, k)
        volume = _combine(small.bytes_per_rank, large.bytes_per_rank, k)
        calls = _combine(small.calls, large.calls, k)
    except ValueError:
        return None
    return Played(n_micro, large.graph, None, large.device, summary, stages, volume, calls,
                  small.tasks + k * (large.tasks - small.tasks), extrapolated=True)


def waits_for_whole(graph: Any, g: int) -> bool:
    """Whether every task of micro-batch ``g + 1`` waits, through dependencies and stream order
    (a stream runs its tasks in issue order), for every task of micro-batch ``g`` to end.

    Every task of ``g`` precedes, in its stream's order, the last task of ``g`` on that stream, so
    it suffices that every task of ``g + 1`` waits for each of those (one bit each)."""
    tasks = graph.tasks
    ends: dict[tuple, int] = {}
    for t in tasks:
        if t.micro_batch == g:
            ends[(t.device, t.stream)] = t.id
    if not ends:
        return False
    bit = {tid: 1 << i for i, tid in enumerate(ends.values())}
    full = (1 << len(bit)) - 1
    waits: dict[int, int] = {}  # task id -> the bits of ``bit`` it waits for
    last: dict[tuple, int] = {}
    seen_next = False
    get_w, get_b = waits.get, bit.get
    for t in tasks:
        key = (t.device, t.stream)
        prev = last.get(key)
        last[key] = t.id
        mask = 0 if prev is None else get_w(prev, 0) | get_b(prev, 0)
        for d in t.deps:
            mask |= get_w(d, 0) | get_b(d, 0)
        if mask:
            waits[t.id] = mask
        if t.micro_batch == g + 1:
            seen_next = True
            if mask != full:
                return False
    return seen_next


def _separated(played: Played) -> bool:
    """Whether, in the trace, every micro-batch starts no earlier than every span of the one before
    it ends, and every span outside any micro-batch starts no earlier than the last one ends."""
    tasks = played.graph.tasks
    n = played.n_micro
    lo = [math.inf] * (n + 1)  # index -1: outside any micro-batch
    hi = [-math.inf] * (n + 1)
    for s in played.trace.spans:
        g = tasks[s.task_id].micro_batch
        if s.start_s < lo[g]:
            lo[g] = s.start_s
        if s.end_s > hi[g]:
            hi[g] = s.end_s
    if any(lo[g] == math.inf for g in range(n)):
        return False
    return all(lo[g] >= hi[g - 1] for g in range(1, n)) and lo[-1] >= hi[n - 1]


def play_separated(play: Callable[..., Played], samples: Callable[[tuple[int, ...]], Any], n_micro: int
                   ) -> Played | None:
    """The ``n_micro`` step from samples of 1 and 2 micro-batches when its micro-batches are
    separated (module docstring, "Separated micro-batches"), else ``None``."""
    graphs = samples((1, 2))
    if graphs is None or not waits_for_whole(graphs[1], 0):
        return None
    large = play(2, graphs[1])
    if not _separated(large):
        return None
    small = play(1, graphs[0])
    if not _separated(small):
        return None
    return extrapolate(small, large, n_micro, 1, 0)


def play_step(play: Callable[..., Played], n_micro: int, pp: int, schedule: str, virtual_stages: int,
              exact: bool = False, samples: Callable[[tuple[int, ...]], Any] | None = None) -> Played:
    """``play(n)`` simulates the step with ``n`` micro-batches (``play(n, graph)``: on that step
    graph); this returns the ``n_micro`` step, extrapolated from two samples where the checks pass,
    else simulated whole. ``samples(sizes)``: the step graphs with each of ``sizes`` micro-batches
    where every micro-batch is a copy of the first (``parallel.build.build_copied_samples``), else
    ``None``."""
    if not exact and pp <= 1 and n_micro >= SEPARATED_MIN and samples is not None:
        out = play_separated(play, samples, n_micro)
        if out is not None:
            return out
    sizes = None if exact else sample_sizes(n_micro, pp, schedule, virtual_stages)
    if sizes is not None:
        m, step, warm = sizes
        out = extrapolate(play(m), play(m + step), n_micro, step, warm)
        if out is not None:
            return out
    return play(n_micro)
