"""Calibrate the compute-efficiency parameters per GPU architecture, with 2-fold cross-validation.

Inputs (fixed, versioned): the bundled suite ``simulator/validation/runs.yaml`` — its expressible
pure data-parallel runs, split once into ``train`` / ``test`` (``split`` field; rule in the file
header) — and the simulator itself. For each GPU architecture with training runs:

1. fit the four parameters of ``simulator.validation.calibration`` on the ``train`` runs (stored);
2. evaluate them on the ``test`` runs: the held-out error, the honest figure;
3. fit again on ``test`` and evaluate on ``train`` (the second fold), so that every run gets one
   cross-validated residual; these residuals feed the prediction intervals.

Outputs: the generated block of ``simulator/hardware/efficiency.yaml`` (the parameters, the runs
they were fitted on and the errors they achieve) and ``simulator/validation/intervals.yaml``
(cross-validated log residuals per ``arch/framework``, ``arch`` and ``all``).

Run: ``python benchmarks/calibrate.py`` (writes; ~5 min on 2 cores), ``--check`` (refit and exit 1
when the stored values differ), ``--dry-run`` (print only).
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import yaml

from simulator.validation import calibration as cal
from simulator.validation.intervals import group_stats
from simulator.validation.suite import load_runs, scenario_for

ROOT = Path(__file__).resolve().parents[1]
EFFICIENCY = ROOT / "simulator" / "hardware" / "efficiency.yaml"
INTERVALS = ROOT / "simulator" / "validation" / "intervals.yaml"
BEGIN = "# >>> calibrated: written by benchmarks/calibrate.py from simulator/validation/runs.yaml; do not edit"
END = "# <<< calibrated"


def calibrate() -> tuple[dict, dict]:
    """(efficiency block as a dict, intervals data) from the bundled suite."""
    runs = load_runs()
    train, test = cal.cases_by_arch(runs, "train"), cal.cases_by_arch(runs, "test")
    block: dict = {}
    provenance: dict = {}
    residuals: dict[str, list[float]] = {}
    for arch in sorted(train):
        fit_a = cal.fit(train[arch])
        fit_b = cal.fit(test.get(arch, [])) if test.get(arch) else None
        train_err = cal.errors(train[arch], fit_a.params)
        held_err = cal.errors(test.get(arch, []), fit_a.params)
        second = cal.errors(train[arch], fit_b.params) if fit_b else []
        block[arch] = fit_a.params
        provenance[arch] = {
            "fitted_on": [r.id for r, _ in train[arch]],
            "held_out": [r.id for r, _ in test.get(arch, [])],
            "train_objective": round(fit_a.objective, 6),
            "train_mape": round(cal.mape(train_err), 4),
            "held_out_mape": round(cal.mape(held_err), 4),
            "held_out_worst": round(max((abs(e) for e in held_err), default=0.0), 4),
            "second_fold_params": fit_b.params if fit_b else None,
            "second_fold_held_out_mape": round(cal.mape(second), 4) if fit_b else None,
            "evaluations": fit_a.evaluations,
        }
        cv = list(zip(test.get(arch, []), held_err, strict=True))
        cv += list(zip(train[arch], second, strict=True)) if fit_b else []
        for (run, _), err in cv:
            framework = scenario_for(run).parallel.framework
            r = round(math.log1p(err), 6)
            for key in (f"{arch}/{framework}", arch, "all"):
                residuals.setdefault(key, []).append(r)
    block["calibration"] = {
        "script": "benchmarks/calibrate.py",
        "suite": "simulator/validation/runs.yaml (expressible pure data-parallel runs; split train/test)",
        "objective": f"mean of min(|error|, {cal.CAP}) of tokens/s per GPU over the train runs of one architecture",
        "search": f"steepest descent on a {cal.STEP} grid from {cal.values(tuple(cal.START[p] for p in cal.PARAMS))}",
        "network": "not refitted here: network efficiencies are fitted by the network layer against nccl-tests",
        **provenance,
    }
    intervals = {
        "source": "benchmarks/calibrate.py: 2-fold cross-validated residuals ln(predicted/measured tokens/s)",
        "groups": {k: {**group_stats(v), "residuals": v} for k, v in sorted(residuals.items())},
    }
    return block, intervals


def render_block(block: dict) -> str:
    body = yaml.safe_dump(block, sort_keys=False, width=110, default_flow_style=None)
    return f"{BEGIN}\n{body}{END}\n"


def stored_block(text: str) -> dict:
    match = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    return yaml.safe_load(match.group(1)) if match else {}


def write(block: dict, intervals: dict) -> None:
    text = EFFICIENCY.read_text()
    new = render_block(block)
    if BEGIN in text:
        text = re.sub(re.escape(BEGIN) + r".*?" + re.escape(END) + r"\n", lambda _: new, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n" + new
    EFFICIENCY.write_text(text)
    INTERVALS.write_text("# written by benchmarks/calibrate.py; do not edit\n"
                         + yaml.safe_dump(intervals, sort_keys=False, width=110, default_flow_style=None))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="refit; exit 1 when stored parameters differ")
    ap.add_argument("--dry-run", action="store_true", help="print the result without writing")
    args = ap.parse_args(argv)
    block, intervals = calibrate()
    print(render_block(block))
    if args.check:
        stored = stored_block(EFFICIENCY.read_text())
        same = all(stored.get(a) == block[a] for a in block if a != "calibration")
        print("stored parameters reproduced" if same else "stored parameters DIFFER: rerun benchmarks/calibrate.py")
        return 0 if same else 1
    if not args.dry_run:
        write(block, intervals)
        print(f"wrote {EFFICIENCY.relative_to(ROOT)} and {INTERVALS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
