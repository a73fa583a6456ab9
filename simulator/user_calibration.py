"""Calibrate dtsim on the user's own measurements: ``dtsim calibrate --measured runs.yaml``.

A measurements file lists runs of the user's cluster::

    runs:
      - scenario: my-8xh100.yaml          # path relative to this file (or a mapping)
        set: [training.micro_batch_size=4] # optional overrides
        measured: {step_time_s: 7.9}       # or tokens_per_s (whole job) or tokens_per_s_per_gpu
      - scenario: my-64xh100.yaml
        log: logs/run2.log                 # Megatron-LM, torchtitan or DeepSpeed log (simulator.interop.logs)
        log_format: megatron               # optional (detected); skip: N warm-up lines (optional)
        split: test                        # optional: train / test; default alternates rows

The bundled suite's format (``simulator/validation/runs.yaml``: ``id``, inline ``scenario``,
``measured.tokens_per_s_per_gpu``, ``split``; its expressible pure data-parallel and attention-dominated
runs, ``calibration.fitting_cases``) is read too,
so the bundled calibration can be reproduced with this command.

Procedure: that of the bundled calibration (``simulator.validation.calibration``, used through
``fit`` / ``errors`` only): per GPU architecture, the efficiencies are fitted by bounded steepest
descent on every row, then each fold (a row's ``source_key``, else its ``split``) is held out once and
predicted with the parameters fitted without it, which gives every row one held-out residual
``ln(predicted / measured tokens/s)`` (``calibrate``). The profile holds the parameters, the errors and the
residual groups from which ``dtsim run --efficiency`` draws its prediction interval
(``simulator.validation.intervals``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from simulator.atomic import write_text
from simulator.config.loader import format_validation_error, prepare_raw, read_yaml, scenario_from_dict
from simulator.config.scenario import Scenario
from simulator.errors import InputError
from simulator.hardware.efficiency import Efficiency, for_gpu
from simulator.user_calibration_files import ProfileIntervals, check_params, check_row

PROFILE_VERSION = 1


@dataclass(frozen=True)
class Case:
    """One measured run: a resolved scenario (raw mapping, references expanded), its measured tokens/s
    per GPU, the GPU architecture and framework, and the fold it belongs to."""

    id: str
    raw: dict
    measured_tokens_per_s_per_gpu: float
    arch: str
    framework: str
    split: str
    #: The files the row reads (its scenario, its log): ``--out`` must not overwrite them.
    files: tuple[Path, ...] = ()


def _number(value: Any) -> float | None:
    """A number, or its spelling: YAML 1.1 reads ``1e5`` (no dot) as a string, which the scenario
    fields accept as pydantic does; None for anything else (a bool, a list, a word)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _measured(row: dict, scenario: Scenario, base_dir: Path, where: str) -> float:
    """Measured tokens/s per GPU from a row's ``measured`` mapping or its ``log``."""
    from simulator.interop.logs import read_log

    if "log" in row and "measured" in row:
        raise InputError("give measured: or log:, not both (which one is the run's figure?)", where)
    if "log" in row:
        path = Path(row["log"])
        reading = read_log(path if path.is_absolute() else base_dir / path, row.get("log_format"), row.get("skip"))
        kind, value = reading.quantity, reading.value
        if kind == "samples_per_s":
            kind, value = "tokens_per_s", value * scenario.training.seq_len
    else:
        measured = row.get("measured")
        if isinstance(measured, dict) and "id" in row and "tokens_per_s_per_gpu" in measured:
            measured = {"tokens_per_s_per_gpu": measured["tokens_per_s_per_gpu"]}  # bundled suite rows
        if not isinstance(measured, dict) or len(measured) != 1:
            raise InputError("give measured: {step_time_s: X} (or tokens_per_s, tokens_per_s_per_gpu) or log: PATH",
                             f"{where}.measured")
        kind, value = next(iter(measured.items()))
        value = _number(value)
        if value is None or not 0 < value < math.inf:  # NaN fails both comparisons
            raise InputError(f"must be a positive, finite number, got {measured[kind]!r}", f"{where}.measured.{kind}")
    if kind == "step_time_s":
        return scenario.tokens_per_step / value / scenario.n_gpus
    if kind == "tokens_per_s":
        return value / scenario.n_gpus
    if kind == "tokens_per_s_per_gpu":
        return float(value)
    raise InputError(f"unknown measured key {kind!r}; one of step_time_s, tokens_per_s, tokens_per_s_per_gpu",
                     f"{where}.measured")


def load_cases(path: str | Path) -> list[Case]:
    """The rows of a measurements file as cases (every scenario validated; bad rows are InputErrors)."""
    from simulator.validation import calibration
    from simulator.validation.publications import publication

    path = Path(path)
    doc = read_yaml(path, "--measured")
    rows = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not rows:
        raise InputError(f"{path} must hold runs: [a list of rows with scenario and measured or log]", "--measured")
    cases = []
    for i, row in enumerate(rows):
        where = f"runs[{i}]"
        if not isinstance(row, dict) or "scenario" not in row:
            raise InputError("each row needs scenario: (a path or a mapping)", where)
        bundled = "id" in row and "parallelism" in row  # the bundled suite's format (its own schema)
        if not bundled:
            check_row(row, where, path)
        if bundled and (row["scenario"] is None or row.get("calibration_excluded")):
            continue
        spec, sets = row["scenario"], list(row.get("set") or [])
        files = [path.parent / row["log"]] if isinstance(row.get("log"), str) else []
        if isinstance(spec, str):
            scenario_path = Path(spec) if Path(spec).is_absolute() else path.parent / spec
            raw, base = read_yaml(scenario_path, f"{where}.scenario"), scenario_path.parent
            files.append(scenario_path)
        elif isinstance(spec, dict):
            raw, base = {"name": row.get("id", f"row{i}"), **spec}, path.parent
        else:
            raise InputError("must be a scenario path or mapping", f"{where}.scenario")
        resolved = prepare_raw(raw, base, sets)
        scenario = scenario_from_dict(resolved)
        if bundled and not calibration.fits_on(row["parallelism"], scenario):  # the bundled fit's runs only
            continue
        label = str(row.get("id") or f"{scenario.name}#{i}")
        # The fold a row is held out with: its publication (a bundled row's as benchmarks/calibrate.py
        # reads it from its source, so the folds are the same), else its split (train / test; rows
        # alternate by default).
        split = (publication(row["source"]) if bundled and row.get("source") else None) \
            or row.get("source_key") or row.get("split") or ("train" if len(cases) % 2 == 0 else "test")
        if "source_key" not in row and split not in ("train", "test"):
            raise InputError(f"split must be train or test, got {split!r}", f"{where}.split")
        cases.append(Case(label, resolved, _measured(row, scenario, path.parent, where),
                          scenario.cluster.gpu_spec.arch, scenario.parallel.framework, split, tuple(files)))
    if not cases:
        raise InputError(f"{path} has no usable rows", "--measured")
    return cases


def _runs(cases: list[Case]) -> list[Any]:
    """Cases as the fitting cases (run, GPU) ``simulator.validation.calibration`` fits on."""
    from simulator.validation.calibration import Case as FitCase
    from simulator.validation.suite import Run

    out = []
    for c in cases:
        run = Run(id=c.id, source="user", gpu=c.arch, framework=c.framework, parallelism="pure_dp",
                  measured={"tokens_per_s_per_gpu": c.measured_tokens_per_s_per_gpu}, scenario=c.raw,
                  split=c.split)
        out.append(FitCase(run, scenario_from_dict({"name": c.id, **c.raw}).cluster.gpu_spec))
    return out


def fit_params(cases: list[Case]) -> tuple[dict[str, float], int]:
    """The narrow interface to the bundled procedure: (fitted parameters, simulations run). Folds are
    fitted the same way, from the same start, as ``calibration.leave_one_source_out`` does."""
    from simulator.validation import calibration as cal
    from simulator.validation.calibrated import other_fits

    arch = cases[0].arch
    result = cal.fit(_runs(cases), arch, held=cal.held_for(arch, other_fits(arch)))
    return dict(result.params), result.evaluations


def errors(cases: list[Case], params: dict[str, float]) -> list[float]:
    """Signed errors predicted / measured − 1 of tokens/s per GPU under ``params``."""
    from simulator.validation import calibration as cal

    return cal.errors(_runs(cases), params) if cases else []


@dataclass
class ArchResult:
    params: dict[str, float]
    train: list[str]
    test: list[str]
    fit_mape: float
    cv_mape: float | None
    cv_residuals: dict[str, float] = field(default_factory=dict)
    evaluations: int = 0
    #: Signed error (predicted / measured − 1) of every row under the stored parameters.
    row_errors: dict[str, float] = field(default_factory=dict)


def check_identified(results: dict[str, ArchResult]) -> None:
    """Refuse a fit that moved nothing: when every run of an architecture stays more than the capped
    objective's ``CAP`` (25%) from dtsim's prediction at the fitted point, each run's loss is flat (a
    structural miss the efficiencies cannot explain), so the descent stays at its start and the
    "fitted" profile is the planning default, not the user's cluster."""
    from simulator.validation.calibration import CAP

    for arch, res in results.items():
        if res.row_errors and all(abs(e) > CAP for e in res.row_errors.values()):
            worst = ", ".join(f"{k} {100 * e:+.0f}%" for k, e in sorted(res.row_errors.items()))
            raise InputError(f"{arch}: every run is more than {100 * CAP:.0f}% from dtsim's prediction ({worst}), "
                             "so no efficiency was fitted and no profile is written; check each run's scenario "
                             "(GPU, layout, precision, recomputation) and its measured figure", "--measured")


def calibrate(cases: list[Case]) -> dict[str, ArchResult]:
    """The bundled procedure (``benchmarks/calibrate.py``) on the user's rows: per architecture, fit
    on every row; then hold out each fold once (a row's ``source_key``, else its ``split``: rows
    alternate train / test by default) and predict it with the parameters fitted without it, so every
    row gets one out-of-fold residual."""
    out: dict[str, ArchResult] = {}
    for arch in sorted({c.arch for c in cases}):
        rows = [c for c in cases if c.arch == arch]
        params, evals = fit_params(rows)
        fit_err = errors(rows, params)
        row_errors = dict(zip([c.id for c in rows], fit_err, strict=True))
        residuals: dict[str, float] = {}
        folds = sorted({c.split for c in rows})
        if len(folds) > 1:
            for fold in folds:
                held = [c for c in rows if c.split == fold]
                rest = [c for c in rows if c.split != fold]
                fold_params, fold_evals = fit_params(rest)
                evals += fold_evals
                for case, err in zip(held, errors(held, fold_params), strict=True):
                    residuals[case.id] = round(math.log1p(err), 6)
        cv = sum(abs(math.expm1(r)) for r in residuals.values()) / len(residuals) if residuals else None
        out[arch] = ArchResult(params, [c.id for c in rows], folds, sum(abs(e) for e in fit_err) / len(fit_err),
                               cv, residuals, evals, row_errors)
    return out


def profile_dict(results: dict[str, ArchResult], cases: list[Case], source: str) -> dict:
    """The efficiency profile: parameters per architecture, how they were fitted, and the residual
    groups (``arch/framework``, ``arch``, ``all``) for prediction intervals."""
    from simulator.validation.intervals import group_stats

    framework = {c.id: c.framework for c in cases}
    groups: dict[str, list[float]] = {}
    for arch, res in results.items():
        for case_id, r in res.cv_residuals.items():
            for key in (f"{arch}/{framework[case_id]}", arch, "all"):
                groups.setdefault(key, []).append(r)
    profile: dict[str, Any] = {"profile_version": PROFILE_VERSION}
    profile.update({arch: res.params for arch, res in results.items()})
    profile["calibration"] = {
        "measured": source,
        "procedure": "simulator.validation.calibration.fit (bounded steepest descent, capped |error| objective) "
                     "per architecture on every row; each fold (source_key, else split) held out once",
        **{arch: {"fitted_on": res.train, "folds": res.test, "fit_mape": round(res.fit_mape, 4),
                  "cv_mape": None if res.cv_mape is None else round(res.cv_mape, 4), "simulations": res.evaluations,
                  "rows": {c.id: {"fold": c.split,
                                  "measured_tokens_per_s_per_gpu": round(c.measured_tokens_per_s_per_gpu, 3),
                                  "error": round(res.row_errors[c.id], 4),
                                  "cv_error": (round(math.expm1(res.cv_residuals[c.id]), 4)
                                               if c.id in res.cv_residuals else None)}
                           for c in cases if c.arch == arch}}
           for arch, res in results.items()},
    }
    profile["intervals"] = {
        "source": f"dtsim calibrate --measured {source}: cross-validated residuals ln(predicted/measured tokens/s)",
        "groups": {k: {**group_stats(v), "residuals": v} for k, v in sorted(groups.items())},
    }
    return profile


@dataclass(frozen=True)
class Profile:
    """A loaded efficiency profile."""

    path: str
    params: dict[str, dict[str, float]]
    intervals: dict | None

    def efficiency(self, scenario: Scenario) -> Efficiency | None:
        """The scenario GPU's efficiency from the profile, or None when the profile lacks its arch."""
        from simulator.validation.calibration import efficiency_with

        gpu = scenario.cluster.gpu_spec
        if gpu.arch not in self.params:
            return None
        return efficiency_with(gpu, self.params[gpu.arch])


def load_profile(path: str | Path) -> Profile:
    """Read a profile written by ``dtsim calibrate`` (one error naming the key when it is not one)."""
    data = read_yaml(path, "--efficiency")
    if not isinstance(data, dict) or data.get("profile_version") != PROFILE_VERSION:
        raise InputError(f"{path} is not an efficiency profile written by dtsim calibrate (profile_version "
                         f"{PROFILE_VERSION})", "--efficiency")
    params = {arch: check_params(arch, values, path) for arch, values in data.items()
              if arch not in ("profile_version", "calibration", "intervals")}
    intervals = data.get("intervals")
    if intervals is not None and not (isinstance(intervals, dict) and intervals.get("groups")):
        intervals = None  # a profile fitted without held-out rows: the bundled intervals apply
    if intervals is not None:
        try:
            intervals = ProfileIntervals.model_validate(intervals).model_dump()
        except ValidationError as exc:
            raise InputError(format_validation_error(exc, ProfileIntervals, "intervals."),
                             f"--efficiency {path}") from None
    return Profile(str(path), params, intervals)


def write_profile(profile: dict, path: Path) -> None:
    header = "# efficiency profile written by dtsim calibrate; use with dtsim run --efficiency\n"
    text = header + yaml.safe_dump(profile, sort_keys=False, width=110, default_flow_style=None)
    write_text(path, text)


def bundled_params(arch: str, gpu: Any) -> dict[str, float]:
    """The bundled (catalogued) values of the fitted parameters, for comparison in reports."""
    from simulator.validation.calibration import PARAMS

    eff = for_gpu(gpu)
    return {p: getattr(eff, p) for p in PARAMS}
