"""The stored calibration (``efficiency.yaml``'s calibrated block, written by ``benchmarks/calibrate.py``)
as validation and user calibration read it: the leave-one-source-out folds, the efficiency a run's
publication was held out of, and the other architectures' fits a ``TRANSFERRED`` parameter takes."""

from __future__ import annotations

from typing import Any

from simulator.hardware.efficiency import Efficiency, _table
from simulator.validation.calibration import PARAMS, Fit, efficiency_with
from simulator.validation.publications import source_key
from simulator.validation.suite import Run, scenario_for


def stored_folds() -> list[dict[str, Any]]:
    """Every stored leave-one-source-out fold: architecture, held-out publication, the parameters
    fitted without it, its held-out run ids and their MAPE."""
    calib = _table().get("calibration", {})
    out = []
    for arch in sorted(k for k, v in calib.items() if isinstance(v, dict) and "folds" in v):
        for source, fold in calib[arch]["folds"].items():
            out.append({"arch": arch, "source": source, "params": fold["params"],
                        "held_out": list(fold["held_out"]), "mape": fold["mape"]})
    return out


def out_of_fold_efficiency(run: Run) -> Efficiency | None:
    """The efficiency fitted without ``run``'s publication (its stored fold), or ``None`` (the stored
    full fit applies) when that publication took no part in calibrating the run's GPU architecture."""
    gpu = scenario_for(run).cluster.gpu_spec
    folds = (_table().get("calibration", {}).get(gpu.arch) or {}).get("folds") or {}
    fold = folds.get(source_key(run))
    return efficiency_with(gpu, fold["params"]) if fold else None


def other_fits(arch: str) -> dict[str, Fit]:
    """The stored full fits of the calibrated architectures other than ``arch``, by architecture
    (``calibration.held_for`` takes a ``TRANSFERRED`` parameter's value from them)."""
    table = _table()
    archs = sorted(a for a in table.get("calibration", {}) if isinstance(table["calibration"][a], dict)
                   and "fitted_on" in table["calibration"][a] and a != arch)
    return {a: Fit({n: table[a][n] for n in PARAMS}, float("nan"), 0, 0) for a in archs}
