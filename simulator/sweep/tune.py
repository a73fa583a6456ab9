"""Bucket-size tuning: the bucket sizes that minimise simulated step time for the scenario's framework.

Keys per framework (their defaults from formulas.md §4): DDP ``bucket_cap_mb`` (25 MiB), Megatron-Core's
DDP (the distributed optimizer) ``ddp_bucket_size`` (``max(4e7, 1e6·dp·cp)`` elements); DeepSpeed
stages 0–2 ``reduce_bucket_size`` (5e8 elements); stage 3
``reduce_bucket_size`` and ``stage3_prefetch_bucket_size`` (5e7). FSDP communicates one all-gather and
one reduce-scatter per wrapped unit and has no bucket size.

Search: per key, a log-spaced coarse grid over the range, then a finer grid between the neighbours of
the best value; keys are tuned one after another (coordinate descent, one pass). Every evaluated
point is kept, so the reported optimum is no worse than any point tried. Points that do not fit in
memory are not candidates; a scenario that does not fit with its default buckets is still tuned (the
buckets' own buffers may be what does not fit), and one that fits at no point tried is a result too.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.config.scenario import Scenario
from simulator.errors import InputError

#: key → (low, high) of the searched range, in the key's own unit.
RANGES: dict[str, tuple[float, float]] = {
    "bucket_cap_mb": (1.0, 1024.0),
    "ddp_bucket_size": (1e6, 2e9),
    "reduce_bucket_size": (1e6, 2e9),
    "stage3_prefetch_bucket_size": (1e6, 2e9),
}


def bucket_keys(scenario: Scenario) -> list[str]:
    p = scenario.parallel
    if p.megatron_ddp:
        return ["ddp_bucket_size"]
    if p.framework == "ddp":
        return ["bucket_cap_mb"]
    if p.framework == "fsdp":
        raise InputError(
            "FSDP has no bucket size: it issues one all-gather and one reduce-scatter per wrapped unit; "
            "tune the wrapping or prefetch instead",
            "parallel.framework",
        )
    if p.zero_stage == 3:
        return ["reduce_bucket_size", "stage3_prefetch_bucket_size"]
    # allgather_bucket_size matters only without all_gather_into_tensor (formulas.md §4.2), which
    # every current PyTorch has, so stages 0–2 tune the reduction bucket alone.
    return ["reduce_bucket_size"]


def _current(scenario: Scenario, key: str) -> float:
    """The scenario's value of ``key``, Megatron-Core's default bucket where ``ddp_bucket_size`` is unset."""
    p = scenario.parallel
    if key == "ddp_bucket_size":
        return p.megatron_bucket_elements(scenario.dp * p.cp)  # Megatron-Core's DDP group is dp x cp
    return getattr(p, key)


def _log_grid(lo: float, hi: float, n: int) -> list[float]:
    a, b = math.log10(lo), math.log10(hi)
    return [float(f"{10 ** (a + (b - a) * i / (n - 1)):.6g}") for i in range(n)]


@dataclass
class TuneResult:
    keys: list[str]
    default: dict[str, float]
    #: None where the default buckets do not fit in memory
    default_step_time_s: float | None
    #: None (both) where no point tried fits
    best: dict[str, float] | None
    best_step_time_s: float | None
    tried: list[tuple[dict[str, float], float | None]] = field(default_factory=list)

    @property
    def gain(self) -> float | None:
        """Relative step-time saving of the best setting over the framework default (None unless both fit)."""
        if self.default_step_time_s is None or self.best_step_time_s is None:
            return None
        return 1.0 - self.best_step_time_s / self.default_step_time_s


def tune(scenario: Scenario, step_time: Callable[[dict[str, float]], float | None], coarse: int = 9,
         fine: int = 5) -> TuneResult:
    """``step_time(settings)`` simulates the scenario with ``parallel.<key> = value`` overrides and
    returns the step time, or None when the point does not fit in memory."""
    keys = bucket_keys(scenario)
    default = {k: float(_current(scenario, k)) for k in keys}
    tried: list[tuple[dict[str, float], float | None]] = []
    cache: dict[tuple, float | None] = {}

    def measure(settings: dict[str, float]) -> float | None:
        key = tuple(sorted(settings.items()))
        if key not in cache:
            cache[key] = step_time(settings)
            tried.append((dict(settings), cache[key]))
        return cache[key]

    default_time = measure(default)
    current, current_time = dict(default), math.inf if default_time is None else default_time
    for key in keys:
        lo, hi = RANGES[key]
        candidates = sorted(set(_log_grid(lo, hi, coarse)) | {current[key]})
        results = [(v, measure({**current, key: v})) for v in candidates]
        feasible = [(v, t) for v, t in results if t is not None]
        if not feasible:  # no value of this key fits with the others as they are: keep it
            continue
        v_best, _ = min(feasible, key=lambda vt: (vt[1], vt[0]))
        i = candidates.index(v_best)
        left, right = candidates[max(i - 1, 0)], candidates[min(i + 1, len(candidates) - 1)]
        if right > left:
            for v in _log_grid(left, right, fine + 2)[1:-1]:
                measure({**current, key: v})
        best_settings, best_time = min(
            ((s, t) for s, t in tried if t is not None and all(s[k] == current[k] for k in keys if k != key)),
            key=lambda st: st[1],
        )
        if best_time < current_time:
            current, current_time = dict(best_settings), best_time
    fitting = [(s, t) for s, t in tried if t is not None]
    if not fitting:
        return TuneResult(keys, default, None, None, None, tried)
    overall = min(fitting, key=lambda st: st[1])
    return TuneResult(keys, default, default_time, overall[0], overall[1], tried)
