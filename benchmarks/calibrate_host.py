"""Calibrate the host layer (the A100 training host's dispatch scale) on host-bound measured steps.

Inputs (fixed, versioned): vTrain's single-node Megatron-DeepSpeed grid
(``simulator/validation/vtrain_single_node.csv``, ``simulator.validation.vtrain``) and the simulator.
The fit (``simulator.validation.host_calibration``) uses its 2- and 4-GPU runs (720) and reports the
held-out 8-GPU runs (720), each by tensor/pipeline layout and micro-batch.

Output (generated; do not edit by hand): the ``host`` block of ``simulator/hardware/efficiency.yaml``
with its provenance. Run the host calibration before ``benchmarks/calibrate.py`` (the compute fit
simulates with the host layer in place).

Run: ``python benchmarks/calibrate_host.py`` (writes, about 2 minutes on 2 cores), ``--check`` (refit;
exit 1 when the stored values differ), ``--dry-run`` (print only).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

import yaml
from calibrate import replace_block  # benchmarks/calibrate.py: the one generated-block writer

from simulator.hardware.efficiency import _table
from simulator.validation import calibration as cal
from simulator.validation import host_calibration as hc

ROOT = Path(__file__).resolve().parents[1]
EFFICIENCY = ROOT / "simulator" / "hardware" / "efficiency.yaml"
BEGIN = "# >>> host: written by benchmarks/calibrate_host.py from simulator/validation/vtrain_single_node.csv; do not edit"
END = "# <<< host"


def by_group(host_cases, errs) -> list[str]:
    """MAPE and mean signed error by (TP, PP) and by micro-batch."""
    groups: dict[str, list[float]] = defaultdict(list)
    for c, e in zip(host_cases, errs, strict=True):
        groups[f"tp{c.row.tp} pp{c.row.pp}"].append(e)
        groups[f"micro-batch {c.row.micro_batch}"].append(e)
    return [f"  {k}: {len(v)} runs, MAPE {cal.mape(v):.1%}, mean {sum(v) / len(v):+.1%}" for k, v in sorted(groups.items())]


def calibrate(log=print) -> dict:
    train, test = hc.train_cases(), hc.held_out_cases()
    t0 = time.perf_counter()
    full = hc.fit(train)
    log(f"fit on {len(train)} runs: {full.params}, objective {full.objective:.4f} "
        f"({full.evaluations} evaluations, {full.moves} moves, {time.perf_counter() - t0:.0f} s)")
    if hc.on_bound(full.params):
        log(f"WARNING: on a bound: {hc.on_bound(full.params)}")
    train_errs = hc.errors(train, full.params)
    test_errs = hc.errors(test, full.params)
    start_errs = hc.errors(test, hc.values(hc.START))
    log(f"fitting runs MAPE {cal.mape(train_errs):.1%}; held-out 8-GPU runs MAPE {cal.mape(test_errs):.1%} "
        f"(at the start values {hc.values(hc.START)}: {cal.mape(start_errs):.1%})")
    for line in by_group(test, test_errs):
        log(line)
    return {"host": {hc.ARCH: full.params},
            "host_calibration": {
                "script": "benchmarks/calibrate_host.py",
                "runs": "vTrain single-node Megatron-DeepSpeed grid (arXiv:2312.12391), 2- and 4-GPU runs",
                "n_runs": len(train), "objective": round(full.objective, 4),
                "search": (f"steepest descent on a {hc.STEP} grid at scales {list(hc.SCALES)} grid steps, inside "
                           f"{[[lo * hc.STEP, hi * hc.STEP] for lo, hi in hc.BOUNDS.values()]}, from {hc.values(hc.START)}"),
                "mape_fitting_runs": round(cal.mape(train_errs), 4),
                "held_out": "the grid's 8-GPU runs", "n_held_out": len(test),
                "mape_held_out": round(cal.mape(test_errs), 4),
                "mape_held_out_at_start": round(cal.mape(start_errs), 4)}}


def render(block: dict) -> str:
    return BEGIN + "\n" + yaml.safe_dump(block, sort_keys=False, width=110, default_flow_style=None) + END + "\n"


def write(block: dict) -> None:
    EFFICIENCY.write_text(replace_block(EFFICIENCY.read_text(), BEGIN, END, render(block)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="refit; exit 1 when the stored parameters differ")
    ap.add_argument("--dry-run", action="store_true", help="print the result without writing")
    args = ap.parse_args(argv)
    block = calibrate()
    if args.check:
        stored = (_table().get("host") or {}).get(hc.ARCH, {})
        if stored != block["host"][hc.ARCH]:
            print(f"MISMATCH: stored {stored}, refit {block['host'][hc.ARCH]}")
            return 1
        print("stored host parameters reproduced")
        return 0
    if not args.dry_run:
        write(block)
        print(f"wrote the host block of {EFFICIENCY.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
