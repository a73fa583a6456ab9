"""The memory validation corpus (``memory_runs.yaml``): measured peak memory per GPU against
``workload.memory.breakdown`` (``dtsim validate --memory``).

Error convention: ``error = predicted / measured − 1`` of GiB per GPU (positive: dtsim predicts more
memory than measured). MAPE = mean ``|error|``. A run beyond ``TOLERANCE`` is a miss, reported with
the cause recorded for it (``known_cause``) or "no named cause". Nothing is fitted to these figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from simulator.config.loader import scenario_from_dict
from simulator.errors import InputError
from simulator.workload import memory

#: Per-run tolerance of the memory model (issue 12 item 4: MAPE target ≤ 10 %).
TOLERANCE = 0.10
GiB = 2**30


@dataclass(frozen=True)
class MemoryRun:
    """A measured peak (``measured_GiB``) or a fit boundary (``outcome``: ``fits`` or ``oom``)."""

    id: str
    source: str
    detail: str
    scenario: dict[str, Any]
    measured_GiB: float | None = None
    outcome: str | None = None
    assumed: str | None = None
    known_cause: str | None = None
    #: ``--set`` overrides on the scenario (``model.moe.imbalance=1.0``), as the throughput corpus's ``set``.
    set: tuple[str, ...] = ()


def _text(text: str | None) -> dict[str, Any]:
    if text is None:
        text = resources.files(__package__).joinpath("memory_runs.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def load(text: str | None = None) -> tuple[dict[str, str], tuple[MemoryRun, ...]]:
    """(sources, measured runs) of the bundled ``memory_runs.yaml`` (or of ``text``, same format)."""
    data = _text(text)
    return dict(data["sources"]), tuple(MemoryRun(**r) for r in data["runs"])


def load_boundaries(text: str | None = None) -> tuple[MemoryRun, ...]:
    """The fit boundaries (runs that trained or ran out of memory) of the corpus."""
    return tuple(MemoryRun(**r) for r in _text(text).get("boundaries", []))


def boundary_row(run: MemoryRun, sources: dict[str, str]) -> dict[str, Any]:
    """Whether dtsim's fits verdict agrees with the reported outcome."""
    out: dict[str, Any] = {"id": run.id, "source": sources.get(run.source, run.source), "detail": run.detail,
                           "outcome": run.outcome}
    try:
        scenario = scenario_from_dict({"name": run.id, **run.scenario}, overrides=list(run.set))
    except InputError as exc:
        out["skipped"] = f"refused by dtsim: {exc}"
        return out
    bd = memory.breakdown(scenario)
    out.update(predicted_GiB=bd.total_bytes / GiB, hbm_GiB=bd.hbm_bytes / GiB,
               predicted="fits" if bd.fits else "oom")
    out["agree"] = out["predicted"] == run.outcome
    if not out["agree"]:
        out["cause"] = run.known_cause or "no named cause"
    return out


def row(run: MemoryRun, sources: dict[str, str]) -> dict[str, Any]:
    """Measured vs predicted for one run; ``skipped`` with the reason if dtsim refuses the scenario."""
    out: dict[str, Any] = {"id": run.id, "source": sources.get(run.source, run.source), "detail": run.detail,
                           "measured_GiB": run.measured_GiB, "assumed": run.assumed}
    try:
        scenario = scenario_from_dict({"name": run.id, **run.scenario}, overrides=list(run.set))
    except InputError as exc:
        out["skipped"] = f"refused by dtsim: {exc}"
        return out
    predicted = memory.breakdown(scenario).total_bytes / GiB
    out.update(predicted_GiB=predicted, error=predicted / run.measured_GiB - 1)
    if abs(out["error"]) > TOLERANCE:
        out["cause"] = run.known_cause or "no named cause"
    return out


def summarize(rows: list[dict[str, Any]], boundaries: list[dict[str, Any]] = ()) -> dict[str, Any]:
    judged = [b for b in boundaries if "agree" in b]
    done = [r for r in rows if "error" in r]
    misses = sorted((r for r in done if "cause" in r), key=lambda r: (-abs(r["error"]), r["id"]))
    return {
        "runs": len(rows), "simulated": len(done), "skipped": len(rows) - len(done),
        "mape": sum(abs(r["error"]) for r in done) / len(done) if done else None,
        "tolerance": TOLERANCE,
        "misses": [{"id": r["id"], "error": r["error"], "cause": r["cause"]} for r in misses],
        "skipped_runs": [{"id": r["id"], "reason": r["skipped"]} for r in [*rows, *boundaries] if "skipped" in r],
        "boundaries": {"n": len(judged), "agree": sum(b["agree"] for b in judged),
                       "disagree": [{"id": b["id"], "outcome": b["outcome"], "predicted": b["predicted"],
                                     "cause": b["cause"]} for b in judged if not b["agree"]]},
    }
