"""Prediction intervals for step time from the out-of-sample residuals of the whole validation suite.

The residual of a validated run is ``r = ln(measured step time / predicted step time)``
(= ``ln(predicted tokens/s / measured tokens/s)`` = ``ln(1 + error)``), out of sample for every run: a run
of the calibration set is predicted with the fold that held its publication out, every other run was never
fitted on (``suite.try_run``). ``dtsim validate --intervals`` writes them (``build``) to ``intervals.yaml``.

Groups, most specific first: ``<arch>/<framework>/<dense|moe>`` (e.g. ``hopper/ddp/moe``), then
``<arch>/<framework>``, ``<arch>`` and ``all``; a group is used only with at least ``MIN_RUNS`` residuals,
so small groups pool into the next level. Per group the file stores the residuals, their mean ``mu`` and
sample standard deviation ``sigma``, and the central ``coverage`` interval of a predicted step time ``T`` is

    [T · exp(mu − z·sigma), T · exp(mu + z·sigma)].

``z`` is calibrated by publication (split-conformal prediction, Lei et al. 2018, "Distribution-free
predictive inference for regression", JASA 113:1094, §2.2, with publications as the exchangeable units):
each run's score ``|r − mu′| / sigma′`` uses the stats of its group over the *other* publications' runs,
and ``z`` at coverage ``c`` is the ``⌈(n + 1)·c⌉``-th smallest of the ``n`` scores (``conformal_z``). So the
interval is as wide as it had to be for a publication the table had not seen, a new cluster's runs
included; runs of one publication share its software and cluster, which the within-group spread alone
misses (a normal ``z`` = Φ⁻¹((1 + c)/2), 1.2816 at 80 %, covered 63 % of the validated runs when the
intervals came from the calibration set alone). Tables without scores (``dtsim calibrate`` profiles, from
their own folds' residuals, ``arch/framework`` groups) use the normal ``z``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from statistics import NormalDist
from typing import Any

from simulator import yamlio

#: Fewest residuals a group needs before its own spread is used.
MIN_RUNS = 5
#: The coverage ``dtsim run`` reports and ``dtsim validate`` checks.
COVERAGE = 0.8


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


@dataclass(frozen=True)
class Residual:
    """One validated run's out-of-sample log residual with what groups it and which publication it is from."""

    publication: str
    arch: str
    framework: str
    moe: bool
    residual: float


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


def group_keys(arch: str, framework: str, moe: bool = False) -> tuple[str, ...]:
    """The groups of a run, most specific first (module docstring)."""
    return f"{arch}/{framework}/{'moe' if moe else 'dense'}", f"{arch}/{framework}", arch, "all"


def choose_group(data: dict[str, Any], arch: str, framework: str, moe: bool = False) -> str:
    """The most specific group with at least ``MIN_RUNS`` residuals (``all`` as the last resort)."""
    groups = data["groups"]
    for key in group_keys(arch, framework, moe)[:-1]:
        if key in groups and groups[key]["n"] >= MIN_RUNS:
            return key
    return "all"


def conformal_z(scores: Sequence[float], coverage: float) -> float:
    """The ``⌈(n + 1)·coverage⌉``-th smallest of ``n`` held-out scores (the largest when that is beyond
    ``n``): split-conformal prediction's quantile (Lei et al. 2018, §2.2)."""
    ordered = sorted(scores)
    k = math.ceil((len(ordered) + 1) * coverage)
    return ordered[min(max(k, 1), len(ordered)) - 1]


def z_for(data: dict[str, Any], coverage: float) -> float:
    """``z`` of a table at ``coverage``: ``conformal_z`` of its ``scores``, else the normal quantile."""
    scores = data.get("scores")
    return conformal_z(scores, coverage) if scores else NormalDist().inv_cdf((1 + coverage) / 2)


def step_time_interval(step_time_s: float, arch: str, framework: str, coverage: float = COVERAGE,
                       data: dict[str, Any] | None = None, moe: bool = False) -> Interval:
    """Central ``coverage`` interval of the real step time given the predicted ``step_time_s``, for a GPU
    architecture (``GPUSpec.arch``), dtsim framework (``fsdp``, ``deepspeed``, ``ddp``) and dense or MoE model."""
    if not 0 < coverage < 1:
        raise ValueError(f"coverage must be in (0, 1), got {coverage}")
    data = data if data is not None else load_residuals()
    key = choose_group(data, arch, framework, moe)
    g = data["groups"][key]
    z = z_for(data, coverage)
    low = step_time_s * math.exp(g["mu"] - z * g["sigma"])
    high = step_time_s * math.exp(g["mu"] + z * g["sigma"])
    return Interval(low, high, coverage, key, int(g["n"]))


def _groups(residuals: Iterable[Residual]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for r in residuals:
        for key in group_keys(r.arch, r.framework, r.moe):
            out.setdefault(key, []).append(r.residual)
    return out


def _table(groups: dict[str, list[float]]) -> dict[str, Any]:
    return {"groups": {k: group_stats(v) for k, v in groups.items()}}


def _held_out(residuals: Sequence[Residual]) -> list[tuple[Residual, dict[str, float]]]:
    """Each run with the stats of its ``choose_group`` over the runs of the other publications (runs of a
    publication that is the only one get none)."""
    by_pub: dict[str, list[Residual]] = {}
    for r in residuals:
        by_pub.setdefault(r.publication, []).append(r)
    out = []
    for pub, own in sorted(by_pub.items()):
        table = _table(_groups(r for r in residuals if r.publication != pub))
        if table["groups"]:
            out += [(r, table["groups"][choose_group(table, r.arch, r.framework, r.moe)]) for r in own]
    return out


def held_out_scores(residuals: Sequence[Residual]) -> list[float]:
    """Each run's ``|r − mu′| / sigma′`` with ``mu′, sigma′`` its held-out group stats (``_held_out``); a run
    whose group there has no spread (``sigma′ = 0``) gets none."""
    return [abs(r.residual - g["mu"]) / g["sigma"] for r, g in _held_out(residuals) if g["sigma"] > 0]


def build(residuals: Sequence[Residual], source: str) -> dict[str, Any]:
    """The ``intervals.yaml`` table of ``residuals``: every group's residuals and stats, and the held-out scores."""
    rounded = [Residual(r.publication, r.arch, r.framework, r.moe, round(r.residual, 6)) for r in residuals]
    groups = _groups(rounded)
    return {"source": source,
            "scores": sorted(round(s, 6) for s in held_out_scores(rounded)),
            "groups": {k: {**group_stats(v), "residuals": v} for k, v in sorted(groups.items())}}


def coverage_check(residuals: Sequence[Residual], coverage: float = COVERAGE) -> dict[str, Any]:
    """How often a run's residual falls inside the ``coverage`` interval built without its publication (its
    held-out group stats, ``z`` from every run's held-out score): overall, by architecture and by architecture
    and dense / MoE. ``{"z": z, "groups": {name: {"n": runs, "covered": share}}}``."""
    scores = held_out_scores(residuals)
    if not scores:
        return {"z": None, "groups": {}}
    z = conformal_z(scores, coverage)
    tally: dict[str, list[int]] = {}
    for r, g in _held_out(residuals):
        for name in ("all", r.arch, f"{r.arch}/{'moe' if r.moe else 'dense'}"):
            t = tally.setdefault(name, [0, 0])
            t[0] += 1
            t[1] += abs(r.residual - g["mu"]) <= z * g["sigma"]
    return {"z": z, "groups": {k: {"n": n, "covered": c / n} for k, (n, c) in sorted(tally.items())}}


def interval_for_report(report: Any, arch: str, coverage: float = COVERAGE, moe: bool = False) -> Interval:
    """Interval for a ``StepReport`` (uses ``report.step_time_s`` and ``report.layout['framework']``)."""
    return step_time_interval(report.step_time_s, arch, report.layout["framework"], coverage, moe=moe)
