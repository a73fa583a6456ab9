"""One configuration measured on an x86 DGX and on a Grace superchip: measured against simulated ratio.

Megatron-Bridge's performance tables (``docs/performance-summary.md``) print, per container release, the same
preset of one model on DGX-B200 and DGX-GB200, or DGX-B300 and DGX-GB300: the same software, layout, batch and
precision on the same GPU silicon, hosted by an x86 Xeon on the DGX and by a Grace CPU on the superchip. The
ratio of the two measured throughputs cancels what the pair shares (the model's kernels, the software state)
and leaves what differs: board power (B200 1,000 W against GB200 1,200 W; B300 1,100 W against GB300 1,400 W)
and the host CPU. This script finds every such pair in the corpus (superseded rows included, simulated from
their ``pending_scenario``), simulates both rows out of fold and prints the measured and simulated ratios with
each row's signed error and host-bound seconds. ``--grace-scale F ...`` repeats the Grace side with its host
scales (``cluster.topology.host.dispatch_scale`` and ``te_dispatch_scale`` of the gb200-nvl72 / gb300-nvl72
topologies) multiplied by each ``F``.

    python benchmarks/platform_pairs.py [--grace-scale 0.75 0.55]
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from collections import defaultdict

from simulator.config.topology import load_topology
from simulator.validation.calibrated import out_of_fold_efficiency
from simulator.validation.suite import Run, load_runs, simulate_run

#: A Megatron-Bridge table row: system, GPUs, precision, then global batch, micro-batch, sequence and the
#: layout columns (FSDP, TP, PP, CP, VP, EP), as ``source_detail`` quotes it.
ROW = re.compile(r"\| DGX-([A-Z0-9]+) \| (\d+) \| ([A-Z0-9-]+) \|((?:[^|]*\|){9})")
#: x86 DGX system -> its Grace superchip sibling of the same GPU silicon.
SIBLING = {"B200": "GB200", "B300": "GB300"}
TOPOLOGY = {"GB200": "gb200-nvl72", "GB300": "gb300-nvl72"}


def pairs(runs: list[Run]) -> list[tuple[Run, Run]]:
    """(x86 run, Grace run) of the same container, table, precision, GPU count and printed layout, both with a
    scenario (a superseded row's ``pending_scenario`` counts)."""
    keyed: dict[tuple, dict[str, Run]] = defaultdict(dict)
    for run in runs:
        simulable = run.scenario is not None or "pending_scenario" in run.extra
        m = ROW.search(str(run.extra.get("source_detail", ""))) if run.id.startswith("mbridge") else None
        if m is None or not simulable:
            continue
        table = re.search(r"Model: (\S+) table", str(run.extra.get("source_detail")))
        container = run.id.split("-")[0]
        layout = tuple(c.strip() for c in m.group(4).split("|")[:-1])
        keyed[(container, table.group(1) if table else "", m.group(2), m.group(3), layout)][m.group(1)] = run
    return [(by[x86], by[grace]) for by in keyed.values() for x86, grace in SIBLING.items()
            if x86 in by and grace in by]


def simulated(run: Run, scale: float = 1.0, gpu: str = "") -> tuple[float, float]:
    """(tokens/s per GPU, host-bound seconds) of ``run`` out of fold; ``scale`` multiplies a Grace host's scales."""
    if run.scenario is None:  # superseded: counted once elsewhere, simulated here from its pending scenario
        run = dataclasses.replace(run, scenario=run.extra["pending_scenario"], not_expressible=None)
    if scale != 1.0:
        host = load_topology(TOPOLOGY[gpu]).host
        run = dataclasses.replace(run, overrides=tuple(run.overrides) + (
            f"cluster.topology.host.dispatch_scale={host.dispatch_scale * scale:.4f}",
            f"cluster.topology.host.te_dispatch_scale={host.te_dispatch_scale * scale:.4f}"))
    report = simulate_run(run, out_of_fold_efficiency(run))
    return report.tokens_per_s_per_gpu, report.breakdown["host_bound_s"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grace-scale", type=float, nargs="*", default=[], metavar="F",
                    help="also simulate the Grace side with its host scales times F")
    args = ap.parse_args(argv)
    scales = [1.0, *args.grace_scale]
    print("| x86 row | Grace | measured x86 / Grace | "
          + " | ".join(f"simulated (Grace host x{f:g}), errors, Grace host-bound s" for f in scales) + " |")
    print("|---|---|---:|" + "---|" * len(scales))
    for x86, grace in pairs(list(load_runs())):
        meas_x, meas_g = x86.measured_tokens_per_s_per_gpu, grace.measured_tokens_per_s_per_gpu
        sim_x, _ = simulated(x86)
        cells = []
        for f in scales:
            sim_g, bound = simulated(grace, f, grace.gpu)
            cells.append(f"{sim_x / sim_g:.3f} ({sim_x / meas_x - 1:+.1%}, {sim_g / meas_g - 1:+.1%}), {bound:.2f}")
        print(f"| {x86.id} | {grace.gpu} | {meas_x / meas_g:.3f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
