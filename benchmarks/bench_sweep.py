"""Sweep throughput (issue 14's table): a 1,000-point sweep of OLMo 2 7B on 8-128 H100 with 2 workers,
and ``--layouts auto`` for Llama 3.1 405B on 16,384 H100.

* grid: ZeRO stage (4) × reduce bucket size (25, log-spaced 1e7-1e9) × nodes (5: 1-16) × micro-batch
  (2) = 1,000 points, the issue's sweep (stage × bucket × micro-batch × nodes, timed there at 83 s) —
  target ≤ 15 s;
* layouts: every valid (tp, cp, pp, micro-batch, schedule, virtual stages) layout of Llama 3.1 405B
  (FSDP + TP + PP, full checkpointing, 2,048 × 8,192 tokens) on 2,048 DGX H100 — target ≤ 60 s.

Each sweep runs in a fresh process pool (workers build their own clusters and collective plans, as
``dtsim sweep`` does). Printed: min and median wall time of ``--repeat`` runs (the layouts sweep
runs ``--layout-repeat`` times, 1 by default: it is the long one). ``--quick`` (CI) runs 40 grid
points 5 times and skips the layouts sweep.

    python benchmarks/bench_sweep.py [--quick] [--workers N] [--repeat N]
"""

from __future__ import annotations

import os

# One BLAS thread per process, set before numpy loads, as ``dtsim`` does (simulator.cli.main).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from simulator.config.loader import load_raw, scenario_from_dict  # noqa: E402
from simulator.parallel.layouts import enumerate_layouts  # noqa: E402
from simulator.sweep.grid import parse_grid, points, sweep_id  # noqa: E402
from simulator.sweep.runner import run_sweep  # noqa: E402
from simulator.sweep.store import ResultStore  # noqa: E402

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "olmo-2-7b-8xh100.yaml"
FULL = [
    "parallel.zero_stage=0,1,2,3",
    "parallel.reduce_bucket_size=1e7:1e9:log:25",
    "cluster.nodes=1,2,4,8,16",
    "training.micro_batch_size=1,2",
]
QUICK = ["parallel.zero_stage=1,2,3", "parallel.reduce_bucket_size=1e7:1e9:log:5", "cluster.nodes=4,8",
         "training.micro_batch_size=2", "training.activation_checkpointing=none,full"]
GRID_TARGET_S, LAYOUT_TARGET_S = 15.0, 60.0
LLAMA_405B = {
    "name": "llama-3.1-405b-16384xh100",
    "model": "llama-3.1-405b",
    "cluster": {"topology": "dgx-h100", "nodes": 2048},
    "training": {"seq_len": 8192, "micro_batch_size": 1, "global_batch_size": 2048,
                 "activation_checkpointing": "full"},
    "parallel": {"framework": "fsdp", "tp": 8, "pp": 16},
}


def _cpu() -> float:
    """User + system seconds of this process and its reaped children (the pool's workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(raw: dict, base_dir: Path, all_points: list[dict], workers: int) -> tuple[float, int, float]:
    """Wall seconds, feasible points and CPU seconds (all processes) of one sweep."""
    store = ResultStore(None, sweep_id(raw, all_points))
    start, cpu = time.perf_counter(), _cpu()
    rows = run_sweep(raw, base_dir, all_points, store, workers=workers)
    return time.perf_counter() - start, sum(r["status"] == "ok" for r in rows), _cpu() - cpu


def report(label: str, runs: list[tuple[float, int, float]], n: int, target: float | None) -> None:
    times = [t for t, _, _ in runs]
    verdict = "" if target is None else (f" | target ≤ {target:.0f} s " + ("ok" if min(times) <= target else "MISSES"))
    print(f"| {label}: {n} points ({runs[0][1]} feasible) | min {min(times):.1f} s | median "
          f"{statistics.median(times):.1f} s | CPU {min(c for _, _, c in runs):.1f} s (all processes) "
          f"| {n / min(times):.1f} points/s ({len(times)} runs){verdict} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--layout-repeat", type=int, default=1)
    args = parser.parse_args()
    raw = load_raw(SCENARIO)
    grid_points = points(parse_grid(QUICK if args.quick else FULL))
    runs = [timed(raw, SCENARIO.parent, grid_points, args.workers) for _ in range(max(5, args.repeat))]
    report(f"OLMo 2 7B grid sweep, {args.workers} workers", runs, len(grid_points), None if args.quick else GRID_TARGET_S)
    if args.quick:
        return
    layouts = enumerate_layouts(scenario_from_dict(LLAMA_405B))
    runs = [timed(LLAMA_405B, SCENARIO.parent, layouts, args.workers) for _ in range(max(1, args.layout_repeat))]
    report(f"`--layouts auto`, Llama 3.1 405B on 16,384 H100, {args.workers} workers", runs, len(layouts),
           LAYOUT_TARGET_S)


if __name__ == "__main__":
    main()
