"""Whole-process time of ``dtsim --help`` and ``dtsim run`` of a bundled scenario (issue 14's table).

Each command runs ``--repeat`` times as a fresh ``python -m simulator`` process (interpreter
start-up, imports, the command); printed: min and median wall time, and min CPU time (user + system
of the child, the steadier figure on a shared machine), against the targets ≤ 0.5 s and ≤ 1.0 s.

Run: ``python benchmarks/bench_startup.py [--repeat N] [--quick]`` (``--quick``: 5 runs, CI).
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "olmo-2-7b-8xh100.yaml"
CASES = [
    ("`dtsim --help`", ["--help"], 0.5),
    (f"`dtsim run {SCENARIO.relative_to(ROOT)} --json`", ["run", str(SCENARIO), "--json"], 1.0),
]


def once(args: list[str]) -> tuple[float, float]:
    """Wall and CPU seconds of one ``python -m simulator ARGS`` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "simulator", *args], cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="5 runs (CI smoke run)")
    args = parser.parse_args()
    repeat = 5 if args.quick else max(5, args.repeat)
    once(["--help"])  # warm the file cache: the first process after a checkout reads every .pyc from disk
    for label, argv, target in CASES:
        runs = [once(argv) for _ in range(repeat)]
        walls = [w for w, _ in runs]
        cpu = min(c for _, c in runs)
        verdict = "ok" if min(walls) <= target else "MISSES"
        print(f"| {label}, whole process | min {min(walls):.2f} s | median {statistics.median(walls):.2f} s "
              f"| CPU {cpu:.2f} s | target ≤ {target} s {verdict} |")


if __name__ == "__main__":
    main()
