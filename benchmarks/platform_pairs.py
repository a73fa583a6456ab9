"""One configuration measured on an x86 DGX and on a Grace superchip: measured against simulated ratio.

Megatron-Bridge's performance tables (``docs/performance-summary.md``) print, per container release, the same
preset of one model on DGX-B200 and DGX-GB200, or DGX-B300 and DGX-GB300: the same software, layout, batch and
precision on the same GPU silicon, hosted by an x86 Xeon on the DGX and by a Grace CPU on the superchip. The
ratio of the two measured throughputs cancels what the pair shares (the model's kernels, most of the software
state) and leaves what differs: board power (B200 1,000 W against GB200 1,200 W; B300 1,100 W against GB300
1,400 W), the host CPU, and what the recipes set per system or the systems' fabrics change, which the last
column lists (CUDA-graph scopes; beyond 8 GPUs a DGX job crosses InfiniBand where an NVL72 rack keeps 72 GPUs
in one NVLink domain). This script finds every such pair in the corpus (superseded rows included, simulated
from their ``pending_scenario``), simulates both rows out of fold and prints the measured and simulated ratios
with each row's signed error and host-bound seconds. ``--grace-scale F ...`` repeats the Grace side with its
host scales (``cluster.topology.host.dispatch_scale`` and ``te_dispatch_scale``) multiplied by each ``F``.

    python benchmarks/platform_pairs.py [--grace-scale 0.75 0.55]
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections import defaultdict

from simulator.validation.calibrated import out_of_fold_efficiency
from simulator.validation.suite import Run, load_runs, scenario_for, simulate_run
from simulator.workload.host import dispatch_overrides

#: x86 DGX system -> its Grace superchip sibling of the same GPU silicon.
SIBLING = {"B200": "GB200", "B300": "GB300"}


def table_row(detail: str) -> tuple[str, tuple[str, ...]] | None:
    """(system, printed layout) of a Megatron-Bridge table row as ``source_detail`` quotes it, or None. Two
    formats: 25.xx's "DGX-GB300 table; row: | LLAMA3_8B | 8 | FP8-CS | ... | tokens/s | TFLOP/s |" and 26.xx's
    "Model: ... table; row: | DGX-GB300 | 8 | MXFP8 | ... | tokens/s | TFLOP/s |" (26.06 and later print no
    FSDP column). The layout is every cell but the system, the model and the two measured figures."""
    if "row:" not in detail:
        return None
    cells = [c.strip() for c in detail.split("row:", 1)[1].split("|;", 1)[0].strip().strip("|").split("|")]
    lead = re.match(r"DGX-(\w+) table", detail)
    if lead:  # 25.xx: the system before "table", the model the first cell
        return lead.group(1), tuple(cells[1:-2])
    if cells and cells[0].startswith("DGX-"):
        return cells[0].removeprefix("DGX-"), tuple(cells[1:-2])
    return None


def pairs(runs: list[Run]) -> list[tuple[Run, Run]]:
    """(x86 run, Grace run) of the same container release, model and variant (the run id after its system) and
    printed layout, both with a scenario (a superseded row's ``pending_scenario`` counts)."""
    keyed: dict[tuple, dict[str, Run]] = defaultdict(dict)
    for run in runs:
        row = table_row(str(run.extra.get("source_detail", ""))) if run.id.startswith("mbridge") else None
        if row is None or (run.scenario is None and "pending_scenario" not in run.extra):
            continue
        container, _, variant = run.id.split("-", 2)
        keyed[(container, variant, row[1])][row[0]] = run
    return [(by[x86], by[grace]) for by in keyed.values() for x86, grace in SIBLING.items()
            if x86 in by and grace in by]


def simulated(run: Run, scale: float = 1.0) -> tuple[float, float]:
    """(tokens/s per GPU, host-bound seconds) of ``run`` out of fold; ``scale`` multiplies its host's scales."""
    if run.scenario is None:  # superseded: counted once elsewhere, simulated here from its pending scenario
        run = dataclasses.replace(run, scenario=run.extra["pending_scenario"], not_expressible=None)
    if scale != 1.0:
        host = scenario_for(run).cluster.topology.host
        run = dataclasses.replace(run, overrides=tuple(run.overrides)
                                  + dispatch_overrides(host, host.dispatch_scale * scale))
    report = simulate_run(run, out_of_fold_efficiency(run))
    return report.tokens_per_s_per_gpu, report.breakdown["host_bound_s"]


def differences(x86: Run, grace: Run) -> str:
    """What the pair's scenarios set differently beyond the system (training and parallel settings), and
    whether the x86 job crosses nodes where the Grace one stays in its rack's NVLink domain."""
    a, b = (r.scenario or r.extra["pending_scenario"] for r in (x86, grace))
    out = [f"{part}.{k}" for part in ("training", "parallel")
           for k in sorted(set(a.get(part, {})) | set(b.get(part, {})))
           if a.get(part, {}).get(k) != b.get(part, {}).get(k)]
    if a["cluster"].get("nodes", 1) > 1:
        out.append("x86 job over InfiniBand")
    return ", ".join(out) or "none"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grace-scale", type=float, nargs="*", default=[], metavar="F",
                    help="also simulate the Grace side with its host scales times F")
    args = ap.parse_args(argv)
    scales = [1.0, *args.grace_scale]
    print("| x86 row | Grace | measured x86 / Grace | "
          + " | ".join(f"simulated (Grace host x{f:g}), errors, Grace host-bound s" for f in scales)
          + " | settings that differ |")
    print("|---|---|---:|" + "---|" * (len(scales) + 1))
    for x86, grace in pairs(list(load_runs())):
        meas_x, meas_g = x86.measured_tokens_per_s_per_gpu, grace.measured_tokens_per_s_per_gpu
        sim_x, _ = simulated(x86)
        cells = []
        for f in scales:
            sim_g, bound = simulated(grace, f)
            cells.append(f"{sim_x / sim_g:.3f} ({sim_x / meas_x - 1:+.1%}, {sim_g / meas_g - 1:+.1%}), {bound:.2f}")
        print(f"| {x86.id} | {grace.gpu} | {meas_x / meas_g:.3f} | " + " | ".join(cells)
              + f" | {differences(x86, grace)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
