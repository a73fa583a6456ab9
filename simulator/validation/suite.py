"""The bundled validation suite (``runs.yaml`` + ``runs_corpus.yaml``): published runs in scenario form,
and simulating one.

``runs.yaml`` holds all 72 entries of the calibration set (shared/reference/published_runs.yaml,
schema_version 1); ``runs_corpus.yaml`` the larger corpus of further published runs (framework benchmark
tables), same schema, each with a ``source_key`` naming its publication. Every run has its source, the
measured figures, the source's FLOP convention and either a dtsim scenario or the reason none can be
written (``not_expressible``). Converting a run is
``scenario_from_dict({"name": id, **scenario}, overrides=set)``: the same path a scenario file takes,
so ``--set`` style overrides get the same validation.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from simulator import yamlio
from simulator.api import simulate
from simulator.config.loader import scenario_from_dict
from simulator.config.scenario import Scenario
from simulator.errors import InputError
from simulator.hardware.efficiency import Efficiency
from simulator.report.step_report import StepReport


@dataclass(frozen=True)
class Run:
    """One published run. ``measured`` keys: ``tokens_per_s_per_gpu`` (always, when expressible),
    optionally ``tflops_per_gpu``, ``mfu``, ``hfu``, ``iteration_time_s`` as the source reports them."""

    id: str
    source: str
    gpu: str
    framework: str
    parallelism: str
    measured: dict[str, float]
    flops_convention: str | None = None
    flops_per_token: float | None = None
    peak_flops_per_gpu: float | None = None
    scenario: dict[str, Any] | None = None
    overrides: tuple[str, ...] = ()
    assumed: str | None = None
    not_expressible: str | None = None
    split: str | None = None
    #: The publication the run comes from (leave-one-source-out cross-validation holds each out once).
    source_key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def expressible(self) -> bool:
        return self.scenario is not None

    @property
    def publication(self) -> str:
        """``source_key`` where the entry has one, else its ``source`` text (one publication per value)."""
        return self.source_key or self.source

    @property
    def measured_tokens_per_s_per_gpu(self) -> float:
        return float(self.measured["tokens_per_s_per_gpu"])


#: The bundled run files, read in this order; ``VTRAIN`` stands for the runs ``simulator.validation.vtrain``
#: builds from its measured tables (one scenario template, not a YAML entry per row).
VTRAIN = "vtrain"
RUN_FILES = ("runs.yaml", "runs_corpus.yaml", VTRAIN)


def load_runs(text: str | None = None, files: Sequence[str] = RUN_FILES) -> tuple[Run, ...]:
    """All runs of the bundled ``runs.yaml``, ``runs_corpus.yaml`` and vTrain tables (or of ``files``
    among them, or of ``text``, YAML of the same format), in file order. Ids are unique across the files
    (``InputError`` otherwise)."""
    out: list[Run] = []
    known = {f for f in Run.__dataclass_fields__ if f not in ("overrides", "extra")}
    for name in [None] if text is not None else files:
        if name == VTRAIN:
            from simulator.validation import vtrain  # it builds ``Run`` objects of this module

            out.extend(vtrain.corpus_runs())
            continue
        t = text if name is None else resources.files(__package__).joinpath(name).read_text()
        for raw in yamlio.safe_load(t)["runs"]:
            kwargs = {k: v for k, v in raw.items() if k in known}
            extra = {k: v for k, v in raw.items() if k not in known and k != "set"}
            out.append(Run(overrides=tuple(raw.get("set") or ()), extra=extra, **kwargs))
    seen: set[str] = set()
    for run in out:
        if run.id in seen:
            raise InputError(f"id {run.id!r} appears twice; give each run a unique id", "runs[].id")
        seen.add(run.id)
    return tuple(out)


def select(runs: Iterable[Run], only: str | None = None) -> list[Run]:
    """Runs whose id matches the glob ``only`` (comma-separated globs allowed); all when ``None``."""
    runs = list(runs)
    if not only:
        return runs
    patterns = [p.strip() for p in only.split(",") if p.strip()]
    return [r for r in runs if any(fnmatch.fnmatchcase(r.id, p) for p in patterns)]


def scenario_for(run: Run) -> Scenario:
    """The validated scenario of an expressible run (raises ``InputError`` on a schema mismatch)."""
    if run.scenario is None:
        raise InputError(f"{run.id}: not expressible: {run.not_expressible}")
    return scenario_from_dict({"name": run.id, **run.scenario}, overrides=list(run.overrides))


def simulate_run(run: Run, efficiency: Efficiency | None = None) -> StepReport:
    """Simulate one run (``efficiency`` replaces the catalogued compute efficiencies, for fitting)."""
    return simulate(scenario_for(run), efficiency=efficiency)


@dataclass(frozen=True)
class Outcome:
    """A run's result: ``report`` when simulated, else ``skipped`` with the reason."""

    run: Run
    report: StepReport | None = None
    skipped: str | None = None

    @property
    def predicted_tokens_per_s_per_gpu(self) -> float:
        assert self.report is not None
        return self.report.tokens_per_s_per_gpu

    @property
    def error(self) -> float:
        """Signed relative error of throughput: predicted / measured − 1 (positive = dtsim too fast)."""
        return self.predicted_tokens_per_s_per_gpu / self.run.measured_tokens_per_s_per_gpu - 1.0


def try_run(run: Run, efficiency: Efficiency | None = None, *, out_of_fold: bool = True) -> Outcome:
    """Simulate, or record why not: not expressible, or refused by dtsim (``InputError``).

    With ``out_of_fold`` (default) and no ``efficiency`` given, a run whose publication took part in
    the calibration of its GPU architecture is simulated with the parameters fitted without that
    publication (its leave-one-source-out fold), so every reported error is out of sample."""
    if not run.expressible:
        return Outcome(run, skipped=f"not expressible: {run.not_expressible}")
    try:
        if efficiency is None and out_of_fold:
            from simulator.validation.calibrated import out_of_fold_efficiency

            efficiency = out_of_fold_efficiency(run)
        return Outcome(run, report=simulate_run(run, efficiency))
    except InputError as exc:
        return Outcome(run, skipped=f"refused by dtsim: {exc}")
