"""Speed of one simulated step (issue 14's table): wall and CPU time of ``api.simulate`` in-process.

Rows (imports excluded, each after one warm-up run, min and median of ``--repeat`` runs):

* Llama 3 70B, DeepSpeed ZeRO-3, 1,024 H100, 8 micro-batches — target ≤ 25 ms;
* Llama 2 70B, TP = 8 + SP, ZeRO-1, 64 H100, 128 micro-batches — target ≤ 50 ms;
* Llama 2 7B, ZeRO-3, 8 A100, global batch 1,024 — target ≤ 25 ms;
* the 16,384 / 8 GPU ratio of the Llama 3 70B step — target ≤ 1.3.

The repeats run in one process, as a sweep worker or an API loop does: the cluster graph and the
collective plans of a cluster are built on the first run and reused (``simulator.model_cache``);
the "cold" column is that first run. The machine may be shared: CPU time (``process_time``) is
the steadier figure, wall time what a user waits.

Run: ``python benchmarks/bench_step.py [--repeat N] [--quick]`` (``--quick``: 5 repeats, CI).
"""

from __future__ import annotations

import os

# One BLAS thread, set before numpy loads, as ``dtsim`` does (simulator.cli.main): otherwise OpenBLAS
# starts a second thread whose spinning shows as CPU time on the large clusters' rows.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import cases  # noqa: E402

from simulator.api import simulate  # noqa: E402

TARGETS_MS = {"llama3-70b-zero3-1024": 25.0, "llama2-70b-tp8-sp-zero1-64": 50.0, "llama2-7b-zero3-8xa100": 25.0}
RATIO_TARGET = 1.3


def measure(scenario, repeat: int) -> dict[str, float]:
    """Cold wall time (s) of the first run, then min / median wall and min CPU time (s) of ``repeat`` runs."""
    return measure_alternating([scenario], repeat)[0]


def measure_alternating(scenarios: list, repeat: int) -> list[dict[str, float]]:
    """``measure`` for several scenarios with their runs interleaved (a, b, a, b, ...), so that a ratio
    of two of them compares runs made in the same seconds of a shared machine."""
    out, reports = [], []
    for scenario in scenarios:
        t0 = time.perf_counter()
        reports.append(simulate(scenario))
        out.append({"cold": time.perf_counter() - t0, "walls": [], "cpus": []})
    for _ in range(repeat):
        for scenario, m in zip(scenarios, out, strict=True):
            w, c = time.perf_counter(), time.process_time()
            simulate(scenario)
            m["cpus"].append(time.process_time() - c)
            m["walls"].append(time.perf_counter() - w)
    return [{"cold": m["cold"], "min": min(m["walls"]), "median": statistics.median(m["walls"]), "cpu": min(m["cpus"]),
             "step_s": r.step_time_s, "tasks": r.layout["tasks"]} for m, r in zip(out, reports, strict=True)]


def row(name: str, label: str, m: dict[str, float], target_ms: float | None) -> None:
    verdict = "" if target_ms is None else ("  ok" if m["min"] * 1e3 <= target_ms else "  MISSES")
    target = "" if target_ms is None else f" | target ≤ {target_ms:.0f} ms{verdict}"
    print(f"| {label} | min {m['min'] * 1e3:8.1f} ms | median {m['median'] * 1e3:8.1f} ms | CPU {m['cpu'] * 1e3:8.1f} ms "
          f"| cold {m['cold'] * 1e3:8.1f} ms{target} |  ({name}: simulated step {m['step_s']:.3f} s, {m['tasks']:,} tasks)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="5 repeats (CI smoke run)")
    args = parser.parse_args()
    repeat = 5 if args.quick else max(5, args.repeat)
    simulate(cases.llama3_70b_zero3(8))  # one-time catalog and import costs count for no row
    rows = [
        ("llama3-70b-zero3-1024", "Llama 3 70B, ZeRO-3, 1,024 H100, 8 micro-batches", cases.llama3_70b_zero3(1024)),
        ("llama2-70b-tp8-sp-zero1-64", "Llama 2 70B, TP=8 + SP, ZeRO-1, 64 H100, 128 micro-batches",
         cases.llama2_70b_tp8_sp_zero1()),
        ("llama2-7b-zero3-8xa100", "Llama 2 7B, ZeRO-3, 8 A100, global batch 1,024", cases.llama2_7b_zero3_a100()),
    ]
    for name, label, scenario in rows:
        row(name, label, measure(scenario, repeat), TARGETS_MS[name])
    small, large = measure_alternating([cases.llama3_70b_zero3(8), cases.llama3_70b_zero3(16384)], repeat)
    row("llama3-70b-zero3-8", "Llama 3 70B, ZeRO-3, 8 H100", small, None)
    row("llama3-70b-zero3-16384", "Llama 3 70B, ZeRO-3, 16,384 H100", large, None)
    ratio, cold_ratio = large["min"] / small["min"], large["cold"] / small["cold"]
    verdict = "ok" if ratio <= RATIO_TARGET else "MISSES"
    print(f"| 16,384 / 8 GPU cost ratio of the same step | {ratio:.2f} (CPU {large['cpu'] / small['cpu']:.2f}, "
          f"cold {cold_ratio:.2f}) | target ≤ {RATIO_TARGET} {verdict} |")


if __name__ == "__main__":
    main()
