"""Step time and throughput from training logs, for ``dtsim calibrate --measured``.

Lines read (the format strings of each framework's logger):

* Megatron-LM (``megatron/training/training.py`` ``training_log``):
  ``iteration  100/ 1000 | ... | elapsed time per iteration (ms): 5123.4 | ...`` → step time;
* torchtitan (``torchtitan/components/metrics.py``): ``step: 10  loss: ...  tps: 3,456  ...`` where
  ``tps`` is tokens per second per device → tokens/s per GPU;
* DeepSpeed (``deepspeed/utils/timer.py`` ``ThroughputTimer``, with ``wall_clock_breakdown`` or
  ``steps_per_print``): ``epoch=0/micro_step=80/global_step=10, RunningAvgSamplesPerSec=..,
  CurrSamplesPerSec=12.3, ...`` where samples are whole global batches' sequences → tokens/s of the
  job (× sequence length).

The first ``skip`` values are warm-up (compilation, allocator growth, NCCL setup) and are dropped
(default: the first tenth, at least one when there are three or more); the median of the rest is the
measurement, robust to checkpoint and evaluation stalls.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from simulator.errors import InputError
from simulator.inputs import read_text as read_file

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_PATTERNS = {
    "megatron": re.compile(r"elapsed time per iteration \(ms\):\s*([0-9.]+)"),
    "torchtitan": re.compile(r"\btps:\s*([0-9][0-9,]*(?:\.[0-9]+)?)"),
    "deepspeed": re.compile(r"CurrSamplesPerSec=([0-9.eE+-]+)"),
}
#: What each format's number is.
QUANTITY = {"megatron": "step_time_s", "torchtitan": "tokens_per_s_per_gpu", "deepspeed": "samples_per_s"}


@dataclass(frozen=True)
class LogReading:
    """The measurement a log gives: ``quantity`` (``step_time_s``, ``tokens_per_s_per_gpu`` or
    ``samples_per_s``), its median ``value`` over ``n_used`` lines after ``n_skipped`` warm-up lines."""

    format: str
    quantity: str
    value: float
    n_used: int
    n_skipped: int


def detect(text: str) -> str:
    """The log format whose lines appear (the one with most matching lines)."""
    counts = {fmt: len(p.findall(text)) for fmt, p in _PATTERNS.items()}
    best = max(counts, key=lambda f: counts[f])
    if counts[best] == 0:
        raise InputError("no Megatron-LM 'elapsed time per iteration (ms):', torchtitan 'tps:' or DeepSpeed "
                         "'CurrSamplesPerSec=' lines found", "log")
    return best


def read_log(path: str | Path, fmt: str | None = None, skip: int | None = None) -> LogReading:
    """Read one log file (``fmt``: megatron, torchtitan, deepspeed, or None to detect)."""
    text = _ANSI.sub("", read_file(path, "log", "log", errors="replace"))
    return read_text(text, fmt, skip, str(path))


def read_text(text: str, fmt: str | None = None, skip: int | None = None, label: str = "log") -> LogReading:
    fmt = fmt or detect(text)
    if fmt not in _PATTERNS:
        raise InputError(f"unknown log_format {fmt!r}; one of {', '.join(_PATTERNS)}", "log_format")
    values = [float(v.replace(",", "")) for v in _PATTERNS[fmt].findall(text)]
    if not values:
        raise InputError(f"{label} has no {fmt} throughput lines", "log")
    if skip is None:
        skip = max(1, len(values) // 10) if len(values) >= 3 else 0
    if skip >= len(values):
        raise InputError(f"{label}: skip {skip} leaves none of its {len(values)} lines", "skip")
    kept = values[skip:]
    value = statistics.median(kept)
    if fmt == "megatron":
        value /= 1000.0
    if value <= 0:
        raise InputError(f"{label}: the median {fmt} reading is {value}, not positive", "log")
    return LogReading(fmt, QUANTITY[fmt], value, len(kept), skip)
