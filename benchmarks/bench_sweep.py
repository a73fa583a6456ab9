"""Sweep throughput: points per second for a 1,000-point sweep of a 7B model on 8–64 GPUs.

Target (issue 6): the 1,000 points in under 60 s on a 2-core machine. ``--quick`` runs 40 points
(the CI smoke run); the figure printed is what to compare.

    python benchmarks/bench_sweep.py [--quick] [--workers N]
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from simulator.config.loader import load_raw
from simulator.sweep.grid import parse_grid, points, sweep_id
from simulator.sweep.runner import run_sweep
from simulator.sweep.store import ResultStore

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "olmo-2-7b-8xh100.yaml"
FULL = [
    "parallel.zero_stage=0,1,2,3",
    "parallel.reduce_bucket_size=1e7:1e9:log:10",
    "cluster.nodes=1,2,4,8",
    "training.micro_batch_size=1,2",
    "training.activation_checkpointing=none,selective,full",
]
QUICK = ["parallel.zero_stage=1,2,3", "parallel.reduce_bucket_size=1e7:1e9:log:5", "cluster.nodes=4,8",
         "training.micro_batch_size=2", "training.activation_checkpointing=none,full"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    raw = load_raw(SCENARIO)
    grid = parse_grid(QUICK if args.quick else FULL)
    n = len(points(grid))
    store = ResultStore(None, sweep_id(raw, grid))
    start = time.perf_counter()
    rows = run_sweep(raw, SCENARIO.parent, grid, store, workers=args.workers)
    elapsed = time.perf_counter() - start
    ok = sum(r["status"] == "ok" for r in rows)
    print(f"sweep of {n} points ({ok} feasible) with {args.workers} workers: {elapsed:.1f} s, "
          f"{n / elapsed:.1f} points/s (target: 1,000 points < 60 s on 2 cores)")


if __name__ == "__main__":
    main()
