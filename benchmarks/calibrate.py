"""Calibrate the compute-efficiency parameters per GPU architecture, with leave-one-source-out CV.

Inputs (fixed, versioned): the runs ``simulator.validation.suite.load_runs()`` returns — their
expressible, not ``calibration_excluded``, pure data-parallel or attention-dominated runs
(``cal.fitting_cases``) — and the simulator itself. For each
GPU architecture with such runs (``simulator.validation.calibration``):

1. fit the parameters not ``cal.MEASURED`` (the GEMM and attention shares; the overlap slowdown is
   measured: ``--profile`` prints why) on all of them (stored in ``efficiency.yaml``); a
   ``cal.TRANSFERRED`` one (Blackwell's attention share) is held at the fit of the architecture it names
   (Hopper's);
2. hold out every publication once: refit on the other publications and predict the held-out runs
   (the out-of-fold error, the honest figure; every fold is printed and written); an architecture's
   only publication is predicted with the other architectures' mean parameters
   (``calibration.transferred``);
3. the out-of-fold errors are what ``dtsim validate`` reports for these runs; with every other validated
   run's they feed the prediction intervals of ``dtsim run`` (``dtsim validate --intervals``).

Outputs (generated; do not edit by hand): the calibrated block of ``simulator/hardware/efficiency.yaml``
(parameters, provenance, folds) and ``docs/calibration.md`` (the folds and the out-of-fold MAPE by group).

Run: ``python benchmarks/calibrate.py`` (writes), ``--check`` (refit and exit 1 when the stored
values differ), ``--dry-run`` (print only), ``--profile`` (the overlap slowdown's objective profile).
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import yaml

from simulator.validation import calibration as cal
from simulator.validation.suite import load_runs, scenario_for

ROOT = Path(__file__).resolve().parents[1]
EFFICIENCY = ROOT / "simulator" / "hardware" / "efficiency.yaml"
DOC = ROOT / "docs" / "calibration.md"
BEGIN = "# >>> calibrated: written by benchmarks/calibrate.py from simulator/validation/runs.yaml; do not edit"
END = "# <<< calibrated"
#: Overlap-slowdown values (grid units) of ``--profile``.
PROFILE_GRID = (5, 20, 35, 50, 80)
#: Values (grid units) of ``--profile`` for a TRANSFERRED parameter (Blackwell's attention share).
TRANSFERRED_GRID = (50, 56, 58, 60, 67)


def _framework(run) -> str:
    return scenario_for(run).parallel.framework


def calibrate(log=print) -> tuple[dict, str]:
    """(efficiency block as a dict, markdown report) from ``load_runs()``."""
    runs = load_runs()
    by_arch = cal.fitting_cases(runs)
    block: dict = {}
    provenance: dict = {}
    oof: list[tuple[str, str, str, str, float]] = []  # (arch, framework, source, run id, error)
    all_folds: list[cal.Fold] = []
    # every architecture's full fit first: a fold that holds out an architecture's only publication
    # takes the others' parameters (calibration.transferred)
    fulls: dict[str, cal.Fit] = {}
    in_samples: dict[str, list[float]] = {}
    # the architectures with TRANSFERRED parameters last: they hold those at the named fits (held_for)
    for arch in sorted(by_arch, key=lambda a: (a in cal.TRANSFERRED, a)):
        cases = by_arch[arch]
        t0 = time.perf_counter()
        full = fulls[arch] = cal.fit(cases, arch, held=cal.held_for(arch, fulls))
        in_sample = in_samples[arch] = cal.errors(cases, full.params)
        log(f"{arch}: fitted {full.params} on {len(cases)} runs: objective {full.objective:.4f}, "
            f"in-sample MAPE {cal.mape(in_sample):.1%} ({full.evaluations} evaluations, "
            f"{time.perf_counter() - t0:.0f} s)")
    for arch in sorted(by_arch):
        cases, full, in_sample = by_arch[arch], fulls[arch], in_samples[arch]
        others = {a: f for a, f in sorted(fulls.items()) if a != arch}
        folds = cal.leave_one_source_out(arch, cases, full, others)
        for f in folds:
            log(f"  fold held out {f.source}: fitted {f.params}; held-out MAPE {cal.mape(f.errors):.1%} over "
                + ", ".join(f"{i} {100 * e:+.1f}%" for i, e in zip(f.run_ids, f.errors, strict=True)))
            for run_id, err in zip(f.run_ids, f.errors, strict=True):
                run = next(c.run for c in cases if c.run.id == run_id)
                fw = _framework(run)
                oof.append((arch, fw, f.source, run_id, err))
        all_folds += folds
        errs = [e for f in folds for e in f.errors]
        block[arch] = full.params
        provenance[arch] = {
            "fitted_on": [c.run.id for c in cases],
            "objective": round(full.objective, 6),
            "in_sample_mape": round(cal.mape(in_sample), 4),
            "out_of_fold_mape": round(cal.mape(errs), 4),
            "out_of_fold_worst": round(max((abs(e) for e in errs), default=0.0), 4),
            "on_bound": cal.on_bound(full.params, arch),
            "evaluations": full.evaluations,
            "folds": {f.source: {"params": f.params, "held_out": list(f.run_ids),
                                 "mape": round(cal.mape(f.errors), 4)} for f in folds},
        }
        log(f"{arch}: leave-one-source-out MAPE {cal.mape(errs):.1%} over {len(errs)} runs; "
            f"parameters on a bound: {cal.on_bound(full.params, arch) or 'none'}")
    block["calibration"] = {
        "script": "benchmarks/calibrate.py",
        "suite": ("load_runs(): expressible runs not calibration_excluded, pure data parallel or with the "
                  f"attention core >= {cal.ATTENTION_DOMINATED} of the block FLOPs"),
        "objective": f"mean of min(|error|, {cal.CAP}) of tokens/s per GPU over the runs of one architecture",
        "search": (f"steepest descent over every one-step neighbour (diagonals included) on a {cal.STEP} grid "
                   f"at scales {list(cal.SCALES)} from "
                   f"{cal.values(tuple(cal.START[p] for p in cal.PARAMS))}; every fold the same search from the same start"),
        "measured": {arch: {n: round(k * cal.STEP, 4) for n, k in m.items()} for arch, m in cal.MEASURED.items()},
        "measured_why": "not fitted: the fitting runs do not identify it (simulator/validation/calibration.py MEASURED)",
        "transferred": {arch: {n: list(src) for n, src in names.items()} for arch, names in cal.TRANSFERRED.items()},
        "transferred_why": ("not identified by the architecture's fitting runs either: held at the fit of the "
                            "architecture named, whose fitting runs run the same kernels "
                            "(simulator/validation/calibration.py TRANSFERRED)"),
        "cross_validation": ("leave one source (publication) out; an architecture's only source is predicted "
                             "with the mean of the other architectures' fitted parameters (a TRANSFERRED one at "
                             "its named architecture's)"),
        "network": "not refitted here: network efficiencies are fitted by the network layer against nccl-tests",
        **provenance,
    }
    return block, render_doc(block, all_folds, oof)


def _held(arch: str, name: str) -> str:
    """Why a parameter of ``arch`` is not fitted, for the table."""
    sources = cal.TRANSFERRED.get(arch, {}).get(name)
    return f"{', '.join(sources)}'s fit" if sources else "measured"


def render_doc(block: dict, folds: list[cal.Fold], oof: list[tuple[str, str, str, str, float]]) -> str:
    lines = ["# Calibration of the compute model", "",
             "Generated by `python benchmarks/calibrate.py`; do not edit by hand. Method and bounds: "
             "`simulator/validation/calibration.py`. Two parameters per GPU architecture are fitted (`hbm_fraction` is "
             "measured, not fitted; so is the overlap slowdown, which the fitting runs do not identify: `MEASURED` there, "
             "`python benchmarks/calibrate.py --profile` prints its objective profile; and Blackwell's attention share, "
             "which its runs do not identify either, is held at Hopper's fit, the architecture whose fitting runs run "
             "the same attention kernels: `TRANSFERRED`) on the "
             "expressible pure data-parallel runs of the validation suite and its attention-dominated runs (the attention "
             "core at least half of a block's FLOPs, whatever their layout: the only runs that identify the attention "
             "share); every publication is held out once "
             "(leave-one-source-out) and its runs predicted with the parameters fitted without it (an "
             "architecture whose runs all come from one publication with the mean of the other "
             "architectures' fitted parameters: nothing of its own is left to fit). Error = "
             "predicted / measured − 1 of tokens/s per GPU. The host layer's one number (the A100 platform's "
             "`host_dispatch_scale`) is fitted before, on host-bound runs (`python benchmarks/calibrate_host.py`, "
             "docs/compute.md), and the vTrain runs it uses take no part here.", "",
             "## Fitted parameters", "",
             "| architecture | " + " | ".join(cal.PARAMS) + " | on a bound | in-sample MAPE | out-of-fold MAPE |",
             "|---" * (len(cal.PARAMS) + 4) + "|"]
    for arch, p in block["calibration"].items():
        if not isinstance(p, dict) or "fitted_on" not in p:
            continue
        box = cal.bounds(arch)
        vals = " | ".join(f"{block[arch][n]:.2f} ({box[n][0] * cal.STEP:.2f}–{box[n][1] * cal.STEP:.2f})"
                          if n in cal.fitted(arch) else f"{block[arch][n]:.2f} ({_held(arch, n)})" for n in cal.PARAMS)
        lines.append(f"| {arch} | {vals} | {', '.join(p['on_bound']) or 'none'} | {100 * p['in_sample_mape']:.1f}% "
                     f"| {100 * p['out_of_fold_mape']:.1f}% |")
    lines += ["", "## Folds", "", "| architecture | held-out source | parameters fitted without it | run | error |",
              "|---|---|---|---|---|"]
    for f in folds:
        params = ", ".join(f"{v:.2f}" for v in f.params.values())
        for i, (run_id, err) in enumerate(zip(f.run_ids, f.errors, strict=True)):
            lines.append(f"| {f.arch if i == 0 else ''} | {f.source if i == 0 else ''} | {params if i == 0 else ''} "
                         f"| {run_id} | {100 * err:+.1f}% |")
    lines += ["", "## Out-of-fold MAPE by group", "", "| group | runs | MAPE |", "|---|---|---|"]
    groups: dict[str, list[float]] = {}
    for arch, fw, _source, _rid, err in oof:
        for key in ("all", f"GPU arch: {arch}", f"framework: {fw}", f"{arch}/{fw}"):
            groups.setdefault(key, []).append(err)
    for key, errs in groups.items():
        lines.append(f"| {key} | {len(errs)} | {100 * cal.mape(errs):.1f}% |")
    lines.append("")
    return "\n".join(lines)


def render_block(block: dict) -> str:
    body = yaml.safe_dump(block, sort_keys=False, width=110, default_flow_style=None)
    return f"{BEGIN}\n{body}{END}\n"


def stored_block(text: str) -> dict:
    match = re.search(re.escape(BEGIN) + r"\n(.*?)" + re.escape(END), text, re.S)
    return yaml.safe_load(match.group(1)) if match else {}


def replace_block(text: str, begin: str, end: str, new: str) -> str:
    """``text`` with its generated block (the lines from ``begin`` to ``end``) replaced by ``new``, or
    ``new`` appended when it has none."""
    if begin in text:
        return re.sub(re.escape(begin) + r".*?" + re.escape(end) + r"\n", lambda _: new, text, flags=re.S)
    return text.rstrip("\n") + "\n" + new


def write(block: dict, doc: str) -> None:
    EFFICIENCY.write_text(replace_block(EFFICIENCY.read_text(), BEGIN, END, render_block(block)))
    DOC.write_text(doc)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="refit; exit 1 when stored parameters differ")
    ap.add_argument("--dry-run", action="store_true", help="print the result without writing")
    ap.add_argument("--profile", action="store_true",
                    help="print the objective profile of the overlap slowdown per architecture (why it is MEASURED) "
                         "and of each TRANSFERRED parameter (why it is not fitted)")
    args = ap.parse_args(argv)
    if args.profile:
        for arch, cases in sorted(cal.fitting_cases(load_runs()).items()):
            for f in cal.profile(cases, arch, "compute_slowdown_during_comm", PROFILE_GRID):
                print(f"{arch}: {f.params}: objective {f.objective:.4f}", flush=True)
            for name in cal.TRANSFERRED.get(arch, {}):
                for f in cal.profile(cases, arch, name, TRANSFERRED_GRID):
                    print(f"{arch} ({name} profile): {f.params}: objective {f.objective:.4f}", flush=True)
        return 0
    t0 = time.perf_counter()
    block, doc = calibrate(log=lambda s: print(s, flush=True))
    print(render_block(block))
    print(f"calibration took {time.perf_counter() - t0:.0f} s")
    if args.check:
        stored = stored_block(EFFICIENCY.read_text())
        same = all(stored.get(a) == block[a] for a in block if a != "calibration")
        print("stored parameters reproduced" if same else "stored parameters DIFFER: rerun benchmarks/calibrate.py")
        return 0 if same else 1
    if not args.dry_run:
        write(block, doc)
        print(f"wrote {EFFICIENCY.relative_to(ROOT)} and {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
