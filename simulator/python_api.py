"""The Python API for notebooks and scripts: ``simulator.simulate`` and ``simulator.sweep``.

    import simulator
    r = simulator.simulate("scenarios/olmo-2-7b-8xh100.yaml", parallel__zero_stage=2)
    r.step_time_s, r.mfu, r.fits, r.to_dict()          # the figures of `dtsim run --json`
    df = simulator.sweep("scenarios/olmo-2-7b-8xh100.yaml", {"parallel.zero_stage": [1, 2, 3]})

``dtsim run`` evaluates through ``run_scenario`` and ``dtsim sweep`` through the same
``simulator.sweep.runner.run_sweep``, so the numbers are the CLI's. Overrides are keyword arguments
whose ``__`` stands for the dot of a ``--set`` path (``training__micro_batch_size=4``), or dotted
names passed as a mapping (``**{"training.micro_batch_size": 4}``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simulator.config.scenario import Scenario
    from simulator.report.step_report import StepReport
    from simulator.runcost.plan import RunReport
    from simulator.validation.intervals import Interval


def _override_strings(overrides: dict[str, Any]) -> list[str]:
    return [f"{key.replace('__', '.')}={json.dumps(value)}" for key, value in overrides.items()]


def _raw_and_dir(scenario: Any) -> tuple[dict, Path]:
    from simulator.config.loader import load_raw
    from simulator.config.scenario import Scenario
    from simulator.errors import InputError

    if isinstance(scenario, Scenario):
        # what the user (and the loader's resolution) set, not every framework's defaults: a dump of
        # all fields would carry e.g. DDP's bucket_cap_mb into a DeepSpeed scenario, which validation
        # refuses as another framework's key
        return scenario.model_dump(mode="python", exclude_unset=True), Path.cwd()
    if isinstance(scenario, dict):
        return scenario, Path.cwd()
    if isinstance(scenario, str | Path):
        path = Path(scenario)
        return load_raw(path), path.parent
    raise InputError(f"expected a Scenario, a mapping or a YAML path, got {type(scenario).__name__}", "scenario")


def load(scenario: Scenario | dict | str | Path, **overrides: Any) -> Scenario:
    """A validated ``Scenario`` from a Scenario, a raw mapping or a YAML path, with overrides applied."""
    from simulator.config.loader import scenario_from_dict
    from simulator.config.scenario import Scenario

    if isinstance(scenario, Scenario) and not overrides:
        return scenario
    raw, base_dir = _raw_and_dir(scenario)
    return scenario_from_dict(raw, base_dir, _override_strings(overrides))


@dataclass(frozen=True)
class Result:
    """One simulated scenario: the step, the whole run (None without a token budget or step count),
    and the prediction interval of the step time."""

    scenario: Scenario
    step: StepReport
    run: RunReport | None
    interval: Interval

    @property
    def step_time_s(self) -> float:
        return self.step.step_time_s

    @property
    def tokens_per_s(self) -> float:
        return self.step.tokens_per_s

    @property
    def mfu(self) -> float:
        return self.step.mfu

    @property
    def fits(self) -> bool:
        return self.step.fits

    def to_dict(self) -> dict[str, Any]:
        """The JSON object ``dtsim run --json`` prints."""
        return {**self.step.to_dict(), "step_time_interval_s": self.interval.as_list(),
                "step_time_interval": {"coverage": self.interval.coverage, "group": self.interval.group,
                                       "n_runs": self.interval.n_runs},
                "run": self.run.as_dict() if self.run else None}


def run_scenario(scenario: Scenario, profile: Any = None, exact: bool = False) -> tuple[Result, list[str]]:
    """Evaluate a validated scenario (with an optional ``user_calibration.Profile``): the result and
    warnings about the profile. ``dtsim run`` calls this; ``exact`` simulates every micro-batch
    (no steady-state extrapolation) and keeps the per-span trace."""
    from simulator.study import evaluate
    from simulator.validation.intervals import step_time_interval

    warnings = []
    eff = profile.efficiency(scenario) if profile is not None else None
    arch = scenario.cluster.gpu_spec.arch
    if profile is not None and eff is None:
        warnings.append(f"{profile.path} has no fitted values for {arch}; the bundled efficiencies are used")
    ev = evaluate(scenario, efficiency=eff, exact=exact)
    table = profile.intervals if eff is not None and profile.intervals else None  # None: the bundled table
    interval = step_time_interval(ev.step.step_time_s, arch, ev.step.layout["framework"], data=table,
                                  moe=scenario.model.moe is not None)
    return Result(scenario, ev.step, ev.run, interval), warnings


def simulate(scenario: Scenario | dict | str | Path, *, efficiency: str | Path | None = None,
             **overrides: Any) -> Result:
    """Simulate one optimizer step and the run of ``scenario`` (a ``Scenario``, a raw mapping as in a
    scenario file, or a YAML path), with ``--set``-style ``overrides`` and optionally an efficiency
    profile from ``dtsim calibrate``. Raises ``simulator.errors.InputError`` on bad input."""
    from simulator.user_calibration import load_profile

    profile = load_profile(efficiency) if efficiency is not None else None
    result, _ = run_scenario(load(scenario, **overrides), profile)
    return result


def sweep(scenario: Scenario | dict | str | Path, grid: dict[str, list[Any] | str], *, workers: int = 1,
          objective: str | None = None, **overrides: Any) -> Any:
    """Simulate every point of ``grid`` (dotted path → list of values, or ``"start:stop:log:N"``)
    over ``scenario`` with ``overrides``; one row per point (the columns of ``dtsim sweep --out``), as a
    pandas DataFrame when pandas is installed (``pip install 'dtsim[pandas]'``), else a list of dicts.
    ``objective`` (step_time, cost, tokens_per_s, wall_clock) sorts the feasible rows best first."""
    from simulator.config.loader import prepare_raw, scenario_from_dict
    from simulator.errors import InputError
    from simulator.sweep.analysis import OBJECTIVES
    from simulator.sweep.grid import parse_grid, points, sweep_id
    from simulator.sweep.runner import run_sweep
    from simulator.sweep.store import ResultStore

    if objective is not None and objective not in OBJECTIVES:  # before the grid runs, not after
        raise InputError(f"unknown objective {objective!r}; valid: {', '.join(OBJECTIVES)}", "objective")
    if not isinstance(workers, int) or workers < 1:
        raise InputError(f"workers must be a positive integer, got {workers!r}", "workers")
    raw, base_dir = _raw_and_dir(scenario)
    sets = _override_strings(overrides)
    base_raw = prepare_raw(raw, base_dir, sets) if sets else raw
    scenario_from_dict(base_raw, base_dir)  # a broken base is bad input, not a sweep of invalid rows
    parsed = parse_grid([], {k.replace("__", "."): v for k, v in grid.items()})
    all_points = points(parsed)
    sid = sweep_id(base_raw, all_points)
    rows = run_sweep(base_raw, base_dir, all_points, ResultStore(None, sid, False), workers=workers,
                     extra={"sweep_id": sid})
    if objective is not None:
        column, larger = OBJECTIVES[objective]
        ok = [r for r in rows if r["status"] == "ok" and r.get(column) is not None]
        ok.sort(key=lambda r: (-r[column] if larger else r[column], r["point"]))
        rows = ok + [r for r in rows if r not in ok]
    try:
        import pandas
    except ImportError:
        return rows
    return pandas.DataFrame(rows)
