"""``dtsim calibrate --measured runs.yaml [--out profile.yaml] [--json]``: refit the compute
efficiencies on the user's measured runs (``simulator.user_calibration``) and write an efficiency
profile for ``dtsim run --efficiency``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from simulator.cli_common import handle_errors, print_json, stdout
from simulator.cli_output import check_output
from simulator.errors import InputError
from simulator.validation.intervals import COVERAGE, z_for


def calibrate_command(
    measured: Annotated[list[Path], typer.Option("--measured", help="YAML of runs: scenario + measured step "
                                                 "time, tokens/s or a training log (repeatable)")],
    out: Annotated[Path | None, typer.Option("--out", help="efficiency profile to write")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="print the result as JSON")] = False,
) -> None:
    """Fit the per-architecture compute efficiencies on your own measured runs (bounded, each fold held
    out once, as the bundled calibration) and report the errors and the new prediction intervals."""
    _calibrate(measured, out, json_out)


def _band(group: dict, coverage: float = COVERAGE) -> tuple[float, float]:
    z = z_for({}, coverage)  # a profile's table has no held-out scores: the normal quantile
    return math.exp(group["mu"] - z * group["sigma"]), math.exp(group["mu"] + z * group["sigma"])


@handle_errors
def _calibrate(measured: list[Path], out: Path | None, json_out: bool) -> None:
    from simulator import user_calibration as uc

    cases = [c for path in measured for c in uc.load_cases(path)]  # reads only: nothing written yet
    check_output(out, "--out", inputs=[*measured, *(f for c in cases for f in c.files)])
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise InputError(f"run {dup!r} appears in more than one --measured row; give each run once", "--measured")
    results = uc.calibrate(cases)
    uc.check_identified(results)  # before anything is written
    profile = uc.profile_dict(results, cases, ", ".join(map(str, measured)))
    if out is not None:
        uc.write_profile(profile, out)
    groups = profile["intervals"]["groups"]
    bands = {k: _band(g) for k, g in groups.items() if g["n"] > 1}
    if json_out:
        print_json({"profile": profile, "interval_80_factors": {k: list(v) for k, v in bands.items()},
                    "out": str(out) if out else None})
        return
    for arch, res in results.items():
        table = Table(title=f"{arch}: fitted on {len(res.train)} run(s); {len(res.test)} fold(s) held out in turn")
        table.add_column("parameter")
        table.add_column("fitted", justify="right")
        for name, value in res.params.items():
            table.add_row(name, f"{value:.2f}")
        stdout.print(table)
        rows = Table(title=f"{arch}: measured vs predicted tokens/s per GPU")
        for col in ("run", "fold", "measured", "predicted", "error", "cross-validated error"):
            rows.add_column(col, justify="left" if col in ("run", "fold") else "right")
        for case_id, row in profile["calibration"][arch]["rows"].items():
            measured_tps = row["measured_tokens_per_s_per_gpu"]
            cv_err = row["cv_error"]
            rows.add_row(case_id, str(row["fold"]), f"{measured_tps:,.0f}",
                         f"{measured_tps * (1 + res.row_errors[case_id]):,.0f}", f"{100 * row['error']:+.1f}%",
                         "" if cv_err is None else f"{100 * cv_err:+.1f}%")
        stdout.print(rows)
        cv = "n/a (no held-out rows)" if res.cv_mape is None else f"{100 * res.cv_mape:.1f}%"
        stdout.print(f"{arch}: MAPE on the fitted rows {100 * res.fit_mape:.1f}%, cross-validated MAPE {cv} "
                     f"({res.evaluations} simulated parameter points)", highlight=False)
    for key, (lo, hi) in sorted(bands.items()):
        stdout.print(f"80% interval of step time, group {key} ({groups[key]['n']} runs): "
                     f"predicted x {lo:.3f} to x {hi:.3f}", highlight=False)
    if out is not None:
        stdout.print(f"profile written to {out}; use: dtsim run SCENARIO --efficiency {out}", highlight=False)
