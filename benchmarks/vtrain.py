"""Every vTrain measurement simulated: 1,440 single-node and 109 multi-node Megatron-DeepSpeed steps on A100.

The measurements and the scenario each becomes are in ``simulator.validation.vtrain`` (source: Bang et al.,
MICRO-57 2024, arXiv:2312.12391). ``dtsim validate`` shows 83 of them (``vtrain.corpus_runs``); this
script prints the error of all, with the calibrated parameters as stored: MAPE and mean signed error
(predicted / measured − 1 of tokens/s per GPU; positive = dtsim too fast) by part and by group. The
single-node 2- and 4-GPU runs are the host layer's fitting runs (``benchmarks/calibrate_host.py``); the
8-GPU and multi-node runs took part in no fit.

Run: ``python benchmarks/vtrain.py`` (about 30 s on 2 cores); ``--workers N`` processes.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from multiprocessing import Pool

from simulator.validation import vtrain
from simulator.validation.suite import simulate_run


def error(row: vtrain.Row) -> float:
    """Signed throughput error of one measured run."""
    return simulate_run(vtrain.as_run(row)).tokens_per_s_per_gpu / row.tokens_per_s_per_gpu - 1.0


def table(title: str, groups: dict[str, list[float]]) -> None:
    print(f"\n{title}\n| group | runs | MAPE | mean signed |\n|---|---:|---:|---:|")
    for key, errs in groups.items():
        print(f"| {key} | {len(errs)} | {sum(abs(e) for e in errs) / len(errs):.1%} | {sum(errs) / len(errs):+.1%} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2, help="processes (default 2)")
    args = ap.parse_args(argv)
    rows = vtrain.rows("single") + vtrain.rows("multi")
    t0 = time.perf_counter()
    with Pool(args.workers) as pool:
        errs = pool.map(error, rows, chunksize=8)
    print(f"{len(rows)} runs simulated in {time.perf_counter() - t0:.0f} s")
    parts: dict[str, list[float]] = defaultdict(list)
    single: dict[str, list[float]] = defaultdict(list)
    multi: dict[str, list[float]] = defaultdict(list)
    for r, e in zip(rows, errs, strict=True):
        if r.kind == "multi":
            parts["multi-node (64-512 GPUs, no fit)"].append(e)
            multi[f"hidden {r.hidden}, {r.layers} layers"].append(e)
            multi[f"TP {r.tp}"].append(e)
            continue
        parts["single node, 2-4 GPUs (host fit)" if r.gpus < vtrain.GPUS_PER_NODE
              else "single node, 8 GPUs (held out)"].append(e)
        single[f"TP {r.tp}, PP {r.pp}"].append(e)
        single[f"micro-batch {r.micro_batch}"].append(e)
        single[f"hidden {r.hidden}"].append(e)
    parts["all"] = list(errs)
    table("by part", parts)
    table("single node, by group", dict(sorted(single.items())))
    table("multi-node, by group", dict(sorted(multi.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
