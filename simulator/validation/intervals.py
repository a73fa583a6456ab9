"""Prediction intervals for step time from the cross-validated residuals of the calibration.

The residual of a run is ``r = ln(measured step time / predicted step time)``
(= ``ln(predicted tokens/s / measured tokens/s)``), taken from the fold in which that run was held
out (2-fold cross-validation by benchmarks/calibrate.py, which writes ``intervals.yaml``). Per group
the file stores the residuals' mean ``mu`` and sample standard deviation ``sigma``; the central
``coverage`` interval of a predicted step time ``T`` is

    [T · exp(mu − z·sigma), T · exp(mu + z·sigma)],   z = Φ⁻¹((1 + coverage) / 2)

(normal model of the log residual; z = 1.2816 for 80 %). Groups, most specific first:
``<arch>/<framework>`` (e.g. ``hopper/fsdp``), then ``<arch>``, then ``all``; a group is used only
with at least ``MIN_RUNS`` residuals, so small groups pool into the next level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from statistics import NormalDist
from typing import Any

from simulator import yamlio

#: Fewest residuals a group needs before its own spread is used.
MIN_RUNS = 5


@dataclass(frozen=True)
class Interval:
    """A central interval of step time and where its spread came from."""

    low_s: float
    high_s: float
    coverage: float
    group: str
    n_runs: int

    def as_list(self) -> list[float]:
        return [self.low_s, self.high_s]


def load_residuals(text: str | None = None) -> dict[str, Any]:
    """The bundled ``intervals.yaml`` (or ``text`` in the same format)."""
    if text is None:
        text = resources.files(__package__).joinpath("intervals.yaml").read_text()
    return yamlio.safe_load(text)


def group_stats(residuals: list[float]) -> dict[str, float]:
    """``{n, mu, sigma}`` of log residuals (sigma: sample standard deviation, 0 for one run)."""
    n = len(residuals)
    mu = sum(residuals) / n
    sigma = math.sqrt(sum((r - mu) ** 2 for r in residuals) / (n - 1)) if n > 1 else 0.0
    return {"n": n, "mu": round(mu, 6), "sigma": round(sigma, 6)}


def choose_group(data: dict[str, Any], arch: str, framework: str) -> str:
    """The most specific group with at least ``MIN_RUNS`` residuals (``all`` as the last resort)."""
    groups = data["groups"]
    for key in (f"{arch}/{framework}", arch):
        if key in groups and groups[key]["n"] >= MIN_RUNS:
            return key
    return "all"


def step_time_interval(step_time_s: float, arch: str, framework: str, coverage: float = 0.8,
                       data: dict[str, Any] | None = None) -> Interval:
    """Central ``coverage`` interval of the real step time given the predicted ``step_time_s``,
    for a GPU architecture (``GPUSpec.arch``) and dtsim framework (``fsdp``, ``deepspeed``, ``ddp``)."""
    if not 0 < coverage < 1:
        raise ValueError(f"coverage must be in (0, 1), got {coverage}")
    data = data if data is not None else load_residuals()
    key = choose_group(data, arch, framework)
    g = data["groups"][key]
    z = NormalDist().inv_cdf((1 + coverage) / 2)
    low = step_time_s * math.exp(g["mu"] - z * g["sigma"])
    high = step_time_s * math.exp(g["mu"] + z * g["sigma"])
    return Interval(low, high, coverage, key, int(g["n"]))


def interval_for_report(report: Any, arch: str, coverage: float = 0.8) -> Interval:
    """Interval for a ``StepReport`` (uses ``report.step_time_s`` and ``report.layout['framework']``)."""
    return step_time_interval(report.step_time_s, arch, report.layout["framework"], coverage)
