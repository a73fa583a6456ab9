"""The non-Ampere runs under a larger host time: does one host scale fit the x86 and the Grace hosts?

The host layer (``simulator.workload.host``, ``simulator.workload.moe_host``) prices eager blocks at a
plain-PyTorch lower bound, scaled by the architecture's fitted ``host_dispatch_scale`` (A100 platform only,
1.56; 1.0 elsewhere) and by the topology's ``host.dispatch_scale`` (Grace 2.75, TransformerEngine issue
#2053). This study multiplies the topology factor of every expressible Hopper and Blackwell run by each
``--scales`` value and prints, per run, the signed errors; then the summed |error| (points) and the
calibration objective (mean of ``min(|error|, 0.25)``, ``calibration.objective``) of Hopper, of Blackwell on
x86 hosts (DGX-B200, DGX-B300) and on Grace hosts, and of Blackwell with the Grace hosts left unscaled; and
the MAPE over every expressible run (the others simulated once, unscaled), with every host scaled and with
the x86 hosts only.
docs/accuracy-history.md item 38 reports it (scales 1, 1.5, 2, 2.5, 3: not adopted).

Run: ``python benchmarks/host_scale_study.py`` (about 25 minutes on 2 cores; ``--gpus B200,B300`` for a
subset, ``--scales 1,2``).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from multiprocessing import get_context

from simulator.errors import InputError
from simulator.validation import calibration as cal
from simulator.validation.suite import load_runs, scenario_for, try_run

HOPPER = ("H100", "H200", "H800")
BLACKWELL = ("B200", "B300", "GB200", "GB300")


def _errors(args: tuple) -> tuple:
    """(run id, GPU, the host's base factor, signed error per scale; ``None`` where not simulated)."""
    run, scales = args
    try:
        base = scenario_for(run).cluster.topology.host.dispatch_scale
    except InputError:  # refused by dtsim at validation: reported by ``dtsim validate``, not studied here
        return run.id, run.gpu, 1.0, [None] * len(scales)
    errs = []
    for s in scales:
        o = try_run(replace(run, overrides=tuple(run.overrides) + (f"cluster.topology.host.dispatch_scale={base * s}",)))
        errs.append(None if o.report is None else o.error)
    return run.id, run.gpu, base, errs


def group_line(name: str, errs: list[list[float]]) -> str:
    """One group's summed |error| (points) and calibration objective per scale (also expert_gemm_host_study)."""
    cols = list(zip(*errs, strict=True))
    points = " / ".join(f"{sum(abs(e) for e in c) * 100:,.0f}" for c in cols)
    capped = " / ".join(f"{cal.objective(list(c)):.4f}" for c in cols)
    return f"{name:28} {len(errs):4} runs  |error| points {points}   objective {capped}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scales", default="1,1.5,2,2.5,3", help="host-time factors, comma-separated")
    ap.add_argument("--gpus", default=",".join(HOPPER + BLACKWELL), help="GPUs of the runs, comma-separated")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    scales = [float(x) for x in a.scales.split(",")]
    gpus = set(a.gpus.split(","))
    runs = [r for r in load_runs() if r.scenario is not None]
    with get_context("spawn").Pool(a.workers) as pool:
        studied = pool.map(_errors, [(run, scales) for run in runs if run.gpu in gpus])
        # every other expressible run once, unscaled: the denominator of the all-runs figure
        others = pool.map(_errors, [(run, scales[:1]) for run in runs if run.gpu not in gpus])
    results = [r for r in studied if None not in r[3]]
    print(f"scales {scales}")
    for rid, gpu, base, errs in sorted(results):
        print(f"{rid:66} {gpu:6} {base:5.2f} " + " ".join(f"{e * 100:+7.1f}" for e in errs))
    groups = {"Hopper (x86)": lambda r: r[1] in HOPPER, "Blackwell, x86 hosts": lambda r: r[1] in BLACKWELL and r[2] == 1.0,
              "Blackwell, Grace hosts": lambda r: r[1] in BLACKWELL and r[2] != 1.0}
    for name, pick in groups.items():
        rows = [r for r in results if pick(r)]
        if rows:
            print(group_line(name, [r[3] for r in rows]))
    blackwell = [r for r in results if r[1] in BLACKWELL]
    if blackwell:
        print(group_line("Blackwell, x86 only scaled", [[e if r[2] == 1.0 else r[3][0] for e in r[3]] for r in blackwell]))
    rest = [abs(r[3][0]) for r in others if r[3][0] is not None]
    n = len(rest) + len(results)
    for name, x86_only in (("all runs, every host scaled", False), ("all runs, x86 hosts only", True)):
        mapes = [(sum(rest) + sum(abs(r[3][i] if (r[2] == 1.0 or not x86_only) else r[3][0]) for r in results)) / n
                 for i in range(len(scales))]
        print(f"{name:28} {n:4} runs  MAPE " + " / ".join(f"{m:.2%}" for m in mapes))


if __name__ == "__main__":
    main()
