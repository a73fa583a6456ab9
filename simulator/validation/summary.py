"""Rows and summaries of a validation pass: measured vs predicted, signed error, MAPE and bias by group.

Error convention: ``error = predicted / measured − 1`` of throughput (tokens/s per GPU); positive
means dtsim predicts a faster step than measured. TFLOP/s and MFU are converted from the predicted
tokens/s with the *source's* FLOP convention (``flops_per_token`` of the run: the source's reported
TFLOP/s divided by its tokens/s, e.g. Megatron SC'21 Eq. 3 including the recompute forward) and the
source's peak (``peak_flops_per_gpu``), so they compare like with like; their relative error equals
the throughput error. MAPE = mean of ``|error|``; bias = mean of ``error`` (signed: a group whose
bias is near its MAPE is predicted too fast nearly everywhere, one near minus its MAPE too slow).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from simulator.validation.fit_check import overestimates
from simulator.validation.intervals import Residual, coverage_check
from simulator.validation.misses import TOLERANCE, misses, stale
from simulator.validation.suite import Outcome, scenario_for
from simulator.workload.memory import allocated_bytes
from simulator.workload.params import count

#: Labels of the parallelism kinds.
KINDS = {"pure_dp": "pure DP", "tp_pp": "TP/PP"}
#: Model-size classes of the report (upper bound in parameters, label), by total parameters (a
#: mixture-of-experts model counts all its experts): the issue-12 groups "small (≤ 1B) to 405B".
SIZE_CLASSES = ((1e9, "≤ 1B"), (1e10, "1-10B"), (1e11, "10-100B"), (float("inf"), "> 100B"))
#: Labels of the architecture group, by whether the model routes tokens to experts (``row``'s ``moe``).
ARCHITECTURES = {False: "dense", True: "MoE"}


def size_class(params: float) -> str:
    """The ``SIZE_CLASSES`` label of a model with ``params`` parameters (bounds inclusive)."""
    return next(label for bound, label in SIZE_CLASSES if params <= bound)


def row(outcome: Outcome) -> dict[str, Any]:
    """One JSON-ready row: ids and groups, measured and predicted figures, ``error`` or ``skipped``."""
    run = outcome.run
    out: dict[str, Any] = {"id": run.id, "gpu": run.gpu, "framework": run.framework,
                           "parallelism": KINDS.get(run.parallelism, run.parallelism), "split": run.split,
                           "source": run.source, "flops_convention": run.flops_convention}
    if outcome.report is None:
        out["skipped"] = outcome.skipped
        return out
    pred_tok = outcome.predicted_tokens_per_s_per_gpu
    scenario = scenario_for(run)
    params = count(scenario.model).total
    # what groups the run's prediction interval (simulator.validation.intervals)
    out.update(arch=scenario.cluster.gpu_spec.arch, parallel_framework=scenario.parallel.framework,
               moe=scenario.model.moe is not None, publication=run.publication)
    out.update(model_params=params, model_size=size_class(params),
               precision=scenario.training.precision.upper(),
               measured_tokens_per_s_per_gpu=run.measured_tokens_per_s_per_gpu,
               predicted_tokens_per_s_per_gpu=pred_tok, error=outcome.error,
               predicted_step_time_s=outcome.report.step_time_s)
    mem = outcome.report.memory
    if "total_bytes" in mem:  # the run ran: its peak fit (fit_check)
        usable = float(scenario.cluster.gpu_spec.hbm_usable_bytes)
        out["memory_of_usable"] = mem["total_bytes"] / usable
        out["allocated_of_usable"] = allocated_bytes(mem) / usable
    if run.flops_per_token:
        pred_tflops = pred_tok * run.flops_per_token / 1e12
        out["predicted_tflops_per_gpu"] = pred_tflops
        if "tflops_per_gpu" in run.measured:
            out["measured_tflops_per_gpu"] = run.measured["tflops_per_gpu"]
        if run.peak_flops_per_gpu and "mfu" in run.measured:
            out["measured_mfu"] = run.measured["mfu"]
            out["predicted_mfu"] = pred_tflops * 1e12 / run.peak_flops_per_gpu
    return out


def headline(r: dict[str, Any]) -> tuple[str, float, float]:
    """(metric, measured, predicted) in the source's own terms: TFLOP/s if it reports them, else MFU,
    else tokens/s per GPU."""
    if "measured_tflops_per_gpu" in r:
        return "TFLOP/s", r["measured_tflops_per_gpu"], r["predicted_tflops_per_gpu"]
    if "measured_mfu" in r:
        return "MFU", r["measured_mfu"], r["predicted_mfu"]
    return "tokens/s", r["measured_tokens_per_s_per_gpu"], r["predicted_tokens_per_s_per_gpu"]


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def mape(rows: Iterable[dict[str, Any]]) -> float | None:
    return _mean([abs(r["error"]) for r in rows if "error" in r])


def bias(rows: Iterable[dict[str, Any]]) -> float | None:
    """Mean signed error (positive: dtsim too fast on average)."""
    return _mean([r["error"] for r in rows if "error" in r])


def _stats(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {"n": len(rows), "mape": mape(rows), "bias": bias(rows)}


def _by(rows: Sequence[dict[str, Any]], key: str, labels: dict[Any, str] | None = None) -> dict[str, dict[str, Any]]:
    """MAPE and bias of ``rows`` grouped by ``r[key]`` (shown as ``labels[value]``, else ``str(value)``)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if "error" in r:
            groups.setdefault((labels or {}).get(r[key], str(r[key])), []).append(r)
    return {k: _stats(v) for k, v in sorted(groups.items())}


def _by_size(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``_by`` model size, in ``SIZE_CLASSES`` order rather than alphabetical."""
    groups = _by(rows, "model_size")
    return {label: groups[label] for _, label in SIZE_CLASSES if label in groups}


def summarize(rows: Sequence[dict[str, Any]], intervals: bool = True) -> dict[str, Any]:
    """Counts, MAPE and bias overall / pure-DP / held-out (``split: test``), by GPU, framework, parallelism
    kind, model size (``SIZE_CLASSES``), training precision and architecture (dense or MoE), the worst five runs, every miss beyond the per-run tolerance with its cause
    (``simulator.validation.misses``), the skipped runs with their reasons, and how often the 80 % prediction
    interval built without a run's publication holds its measured step (``intervals.coverage_check``; None
    with ``intervals`` false: a filtered pass's coverage is not that of the table ``dtsim run`` uses)."""
    done = [r for r in rows if "error" in r]
    pure = [r for r in done if r["parallelism"] == KINDS["pure_dp"]]
    held = [r for r in pure if r["split"] == "test"]
    worst = sorted(done, key=lambda r: -abs(r["error"]))[:5]
    return {
        "runs": len(rows), "simulated": len(done), "skipped": len(rows) - len(done),
        "mape": mape(done), "bias": bias(done),
        "max_abs_error": max((abs(r["error"]) for r in done), default=None),
        "pure_dp": {**_stats(pure), "max_abs_error": max((abs(r["error"]) for r in pure), default=None)},
        "held_out_pure_dp": {**_stats(held), "max_abs_error": max((abs(r["error"]) for r in held), default=None)},
        "by_gpu": _by(done, "gpu"),
        "by_framework": _by(done, "framework"),
        "by_parallelism": _by(done, "parallelism"),
        "by_model_size": _by_size(done),
        "by_precision": _by(done, "precision"),
        "by_architecture": _by(done, "moe", ARCHITECTURES),
        "worst": [{"id": r["id"], "error": r["error"]} for r in worst],
        "tolerance": TOLERANCE,
        "misses": misses(done),
        "stale_causes": stale(done),
        "fit_check": {"runs": sum(1 for r in done if "memory_of_usable" in r), "over": overestimates(done)},
        "skipped_runs": [{"id": r["id"], "reason": r["skipped"]} for r in rows if "skipped" in r],
        "folds": _folds(done),
        "intervals": coverage_check(residuals(done)) if intervals else None,
    }


def residuals(done: Sequence[dict[str, Any]]) -> list[Residual]:
    """The simulated rows' out-of-sample log residuals ``ln(1 + error)`` with their interval groups."""
    return [Residual(r["publication"], r["arch"], r["parallel_framework"], r["moe"], math.log1p(r["error"]))
            for r in done]


def _folds(done: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The stored leave-one-source-out folds whose held-out runs are among ``done``, each with the
    MAPE of those runs in this pass (their errors are out of fold: ``suite.try_run``)."""
    from simulator.validation.calibrated import stored_folds

    errors = {r["id"]: r["error"] for r in done}
    out = []
    for fold in stored_folds():
        held = [errors[i] for i in fold["held_out"] if i in errors]
        if held:
            out.append({**fold, "runs": len(held), "mape": sum(map(abs, held)) / len(held)})
    return out
