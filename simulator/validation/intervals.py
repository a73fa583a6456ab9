"""Prediction intervals for step time from the out-of-sample residuals of the whole validation suite.

The residual of a validated run is ``r = ln(measured step time / predicted step time)``
(= ``ln(predicted tokens/s / measured tokens/s)`` = ``ln(1 + error)``), out of sample as far as the efficiency
fit goes: a run of the calibration set is predicted with the fold that held its publication out, every other
run is not in the fit (``suite.try_run``). ``dtsim validate --intervals`` writes them (``build``) to
``intervals.yaml``.

Groups, most specific first: ``<arch>/<framework>/<dense|moe>`` (e.g. ``hopper/ddp/moe``), then
``<arch>/<framework>``, ``<arch>`` and ``all``; a group is used only with at least ``MIN_RUNS`` residuals,
so small groups pool into the next level. Per group the file stores the residuals, their mean ``mu`` and
sample standard deviation ``sigma``, and the central ``coverage`` interval of a predicted step time ``T`` is

    [T · exp(mu − z·sigma), T · exp(mu + z·sigma)].

``z`` is taken from leave-one-publication-out scores (the jackknife / cross-conformal construction of Barber
et al. 2021, "Predictive inference with the jackknife+", Ann. Statist. 49:486, with publications as the left-out
units): each run's score is ``|r − mu′| / sigma′``, ``mu′, sigma′`` the stats of its group over the *other*
publications' runs, and ``z`` at coverage ``c`` is the ``⌈(n + 1)·c⌉``-th smallest of the ``n`` scores
(``conformal_z``; every run weighs alike, so the large publications weigh most). The interval is then as wide
as it had to be for runs whose publication the table had not seen; runs of one publication share a software
state and a cluster, which the within-group spread alone misses (a normal ``z`` = Φ⁻¹((1 + c)/2), 1.2816 at
80 %, from the calibration runs alone, covered 63 % of the validated runs). It is an empirical calibration, not
a finite-sample guarantee: the deployed intervals use every run's stats. ``coverage_check`` measures it with
``z`` too taken without the checked run's publication. Tables without scores (``dtsim calibrate`` profiles, from
their own folds' residuals, ``arch/framework`` groups) use the normal ``z``, which understates a new cluster's
spread the same way.
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
    """The ``⌈(n + 1)·coverage⌉``-th smallest of ``n`` held-out scores, the conformal quantile (Barber et al.
    2021, §2); infinite when that rank is beyond ``n`` (too few scores for the coverage asked)."""
    ordered = sorted(scores)
    k = math.ceil((len(ordered) + 1) * coverage)
    return ordered[k - 1] if k <= len(ordered) else math.inf


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
    """The residuals of every group (``group_keys``) the runs fall in."""
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


def _score(r: Residual, g: dict[str, float]) -> float:
    """``|r − mu′| / sigma′``; with no spread (``sigma′ = 0``) 0 on the mean, else infinite."""
    d = abs(r.residual - g["mu"])
    return d / g["sigma"] if g["sigma"] > 0 else (0.0 if d == 0 else math.inf)


def _scored(residuals: Sequence[Residual]) -> list[tuple[Residual, float]]:
    """Each run with its ``_score`` against its held-out group stats (``_held_out``), in ``_held_out``'s order."""
    return [(r, _score(r, g)) for r, g in _held_out(residuals)]


def held_out_scores(residuals: Sequence[Residual]) -> list[float]:
    """The runs' held-out scores (``_scored``)."""
    return [score for _, score in _scored(residuals)]


def build(residuals: Sequence[Residual], source: str) -> dict[str, Any]:
    """The ``intervals.yaml`` table of ``residuals``: every group's residuals and stats, and the held-out scores."""
    rounded = [Residual(r.publication, r.arch, r.framework, r.moe, round(r.residual, 6)) for r in residuals]
    groups = _groups(rounded)
    return {"source": source,
            "scores": sorted(round(s, 6) for s in held_out_scores(rounded)),
            "groups": {k: {**group_stats(v), "residuals": v} for k, v in sorted(groups.items())}}


def coverage_check(residuals: Sequence[Residual], coverage: float = COVERAGE) -> dict[str, Any]:
    """How often a run's residual falls inside the ``coverage`` interval built without its publication: its
    held-out group stats and ``z`` from the other publications' runs' held-out scores. Overall, by
    architecture, by architecture and dense / MoE, and by the group ``dtsim run`` would use for it (``group``
    rows: ``choose_group`` over all runs). ``{"z": z of all runs, "groups": {name: {"n", "covered"}}}``."""
    scored = _scored(residuals)
    if not scored:
        return {"z": None, "groups": {}}
    full = _table(_groups(residuals))
    z_without = {pub: conformal_z([s for r, s in scored if r.publication != pub], coverage)
                 for pub in {r.publication for r, _ in scored}}
    tally: dict[str, list[int]] = {}
    for r, score in scored:
        used = "group " + choose_group(full, r.arch, r.framework, r.moe)
        for name in ("all", r.arch, f"{r.arch}/{'moe' if r.moe else 'dense'}", used):
            t = tally.setdefault(name, [0, 0])
            t[0] += 1
            t[1] += score <= z_without[r.publication]
    return {"z": conformal_z([s for _, s in scored], coverage),
            "groups": {k: {"n": n, "covered": c / n} for k, (n, c) in sorted(tally.items())}}
