"""How much of dtsim's accuracy rests on how its compute efficiencies are fitted? The calibration, varied.

``benchmarks/calibrate.py`` fits two shares per GPU architecture (``simulator.validation.calibration``) on the
pure data-parallel and attention-dominated runs, every run weighing alike in the objective, and
``dtsim validate`` predicts every run with them (a fitting run with the fit that held its publication out).
This study refits under other choices, in this process (nothing is written), and prints for each the fitted
parameters, the fitting runs' leave-one-source-out MAPE per architecture and ``dtsim validate``'s figures
computed with that calibration: all runs, pure data parallel, its held-out split, per GPU.

Variants (``--variants``, comma-separated):

* ``stored``: the calibration as stored in ``simulator/hardware/efficiency.yaml`` (no refit);
* ``source``: every publication weighs alike in the objective (the mean over publications of the mean capped
  error of their runs), so that one publication with many rows does not set an architecture's shares;
* ``without:GLOB``: the runs whose id matches ``GLOB`` take no part in any fit (they stay validation rows,
  predicted with the full fit), e.g. ``without:llmfoundry-*-h100-*`` (llm-foundry's 2023 H100 sweep).

docs/accuracy-history.md item 45 reports ``stored,source,without:llmfoundry-*-h100-*,without:llmfoundry-*``
(none adopted). Run: ``python benchmarks/calibration_variants.py`` (about 10 minutes per refitted variant on
2 cores, 5 for ``stored``).
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from unittest.mock import patch

from simulator.hardware import efficiency
from simulator.validation import calibrated
from simulator.validation import calibration as cal
from simulator.validation.suite import load_runs, try_run
from simulator.validation.summary import row, summarize

sys.path.insert(0, str(Path(__file__).resolve().parent))
import calibrate  # noqa: E402  (benchmarks/calibrate.py: the stored calibration's own procedure)


def publication_weighted(errs: Sequence[float], publications: Sequence[str]) -> float:
    """The mean over publications of ``calibration.objective`` over each one's runs (``errs[i]`` is a run of
    ``publications[i]``), where ``calibration.objective`` weighs every run alike."""
    by: dict[str, list[float]] = {}
    for pub, e in zip(publications, errs, strict=True):
        by.setdefault(pub, []).append(e)
    return sum(cal.objective(v) for v in by.values()) / len(by)


def source_objective_fit(cases, arch, start=None, scales=cal.SCALES, box=None, held=None) -> cal.Fit:
    """``calibration.fit`` (same signature, search and start) with the ``publication_weighted`` objective."""
    pubs = [cal.source_key(c.run) for c in cases]
    point, best, evals, moves = cal.descend(lambda p: publication_weighted(cal.errors(cases, cal.values(p)), pubs),
                                            start or cal.start_point(arch, held), scales, box or cal.bounds(arch, held))
    return cal.Fit(cal.values(point), best, evals, moves)


def refit(variant: str) -> dict:
    """The calibrated block (parameters, provenance, folds) ``benchmarks/calibrate.py`` writes, refitted
    under ``variant``."""
    if variant == "source":
        with patch.object(cal, "fit", source_objective_fit):
            return calibrate.calibrate(log=lambda s: None)[0]
    glob = variant.removeprefix("without:")
    original: Callable = cal.fitting_cases

    def fitting_cases(runs):
        return original([r for r in runs if not fnmatch.fnmatchcase(r.id, glob)])

    with patch.object(cal, "fitting_cases", fitting_cases):
        return calibrate.calibrate(log=lambda s: None)[0]


def validate(block: dict | None) -> dict:
    """``dtsim validate``'s summary with the calibrated ``block`` in place of the stored one (None: stored)."""
    table = dict(efficiency._table())
    table.update(block or {})
    with patch.object(efficiency, "_table", lambda: table), patch.object(calibrated, "_table", lambda: table):
        return summarize([row(try_run(run)) for run in load_runs()])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="stored,source,without:llmfoundry-*-h100-*,without:llmfoundry-*",
                    help="stored, source or without:GLOB, comma-separated")
    variants = ap.parse_args().variants.split(",")
    if bad := [v for v in variants if v not in ("stored", "source") and not v.startswith("without:")]:
        ap.error(f"--variants: unknown {', '.join(bad)}; use stored, source or without:GLOB")
    for variant in variants:
        block = None if variant == "stored" else refit(variant)
        shown = block or calibrate.stored_block(calibrate.EFFICIENCY.read_text())
        s = validate(block)
        print(f"{variant}: all runs {100 * s['mape']:.2f}% over {s['simulated']}, pure data parallel "
              f"{100 * s['pure_dp']['mape']:.2f}% over {s['pure_dp']['n']} (held-out "
              f"{100 * s['held_out_pure_dp']['mape']:.2f}% over {s['held_out_pure_dp']['n']})", flush=True)
        for arch, prov in shown["calibration"].items():
            if isinstance(prov, dict) and "folds" in prov:
                params = ", ".join(f"{shown[arch][n]:.2f}" for n in cal.PARAMS[:2])
                print(f"  {arch}: shares {params} on {len(prov['fitted_on'])} runs, leave-one-source-out "
                      f"{100 * prov['out_of_fold_mape']:.1f}%")
        print("  by GPU: " + ", ".join(f"{g} {100 * v['mape']:.1f}% ({v['n']})" for g, v in s["by_gpu"].items()),
              flush=True)


if __name__ == "__main__":
    main()
